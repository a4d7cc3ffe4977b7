"""The shared builder of every RL stage config (configs/grpo.py, rc_grpo.py, dr_grpo.py, dapo.py, awpo.py): `base`.

`base` holds the paper's values (RC-GRPO Table 10, the GRPO baseline's Table 12) and, where the paper states
none, our choices; docs/paper_vs_code.md lists each, with how "Epochs 400" is read as a run length.

Swapping (one override each; every entry's options sit in its own subsection, defaulted from its
registry, and are validated at start-up):

  --config.rl.advantage.name=rloo                 # rcgrpo_jax.rl.advantages (grpo, rc_grpo, dr_grpo, rloo, ...)
  --config.rl.advantage.grpo.std=sample           # an option of the entry it belongs to
  --config.rl.loss.name=gspo                      # rcgrpo_jax.rl.losses (ppo_clip, gspo)
  --config.rl.loss.ppo_clip.kl_estimator=k2       # KL estimator, aggregation mode, ratio level: loss options
  --config.rl.group_filter.name=dapo              # rcgrpo_jax.rl.filters (none, dapo)
  --config.rl.shaping.name=dapo_overlong          # rcgrpo_jax.rl.shaping (none, dapo_overlong)
  --config.rl.reward=coverage_fraction            # rcgrpo_jax.envs.rewards
  --config.rl.advantage.name=my_module:my_adv     # a formula registered in your own module (imported first); the
                                                  # same for every name above, the KL estimator included

`reference.path` defaults to `model.path` (the stage-1 policy RL starts from). With
`rl.reward_conditioning='auto'` (GRPO's), a checkpoint that has the reward tokens (RCTP-FT) conditions every
rollout on `<|high_reward|>`, the token evaluation uses; on an SFT checkpoint it adds nothing.
"""

from __future__ import annotations

import ml_collections
from ml_collections.config_dict import placeholder

from rcgrpo_jax import judges
from rcgrpo_jax.config_lib import common
from rcgrpo_jax.registry import selection
from rcgrpo_jax.rl import advantages, filters, losses, shaping

KV_BUDGET_GB = 32.0  # per device, of the 0.9 x 141 GB allocator limit (runtime.GPU_ENV): the rest holds the
# train state, the reference, the decode weights and the rollout programs' temporaries (--dry_run)
MAX_ROLLOUT_ROWS = 160


def rollout_rows_for(preset: str, capacity: int, devices: int = 8, budget_gb: float = KV_BUDGET_GB) -> int:
    """Decode rows whose KV cache (rows x `capacity` slots, bf16 K and V of every layer, spread over
    `devices`) fits `budget_gb` per device: a multiple of 8, at most MAX_ROLLOUT_ROWS (Qwen2.5-7B 160,
    LLaMA-3.1-8B 112, Qwen3-8B/4B 96, Qwen3-1.7B 128 at 16896 slots on 8 GPUs)."""
    if preset not in common.PRESETS or preset == "tiny":
        return MAX_ROLLOUT_ROWS
    arch = common.hf_architecture(preset)
    head_dim = arch.get("head_dim") or arch["hidden_size"] // arch["num_attention_heads"]
    per_token = 2 * 2 * arch["num_hidden_layers"] * arch["num_key_value_heads"] * head_dim
    rows = int(budget_gb * 1e9 * devices // (per_token * capacity))
    return max(8, min(MAX_ROLLOUT_ROWS, rows // 8 * 8))


def base(
    stage: str,
    preset: str,
    *,
    estimator: str,
    conditioning: str = "auto",
    policy_loss: str = "ppo_clip",
    tasks_per_step: int = 256,
) -> ml_collections.ConfigDict:
    """The sections of every RL stage with the paper's values; stage files override their own."""
    c = common.base(stage, preset, lr=1e-6, trainer="rl")
    c.reference = ml_collections.ConfigDict({"path": placeholder(str)})  # None = model.path (the stage-1 policy)
    rl = ml_collections.ConfigDict()
    _set_objective(rl, estimator, conditioning, policy_loss)
    _set_rollouts(rl, preset)
    # AWPO's reasoning judge (rcgrpo_jax.judges: rule | model | http), used only by estimators that need
    # "reasoning": --config.rl.judge.name=http --config.rl.judge.http.url=http://judge:8000/v1
    rl.judge = judges.default_config("rule")
    # A control, not a method: the step's advantages permuted at random across all its rollouts (a seeded draw
    # per step) before the loss, so the update has the same size and shape but no tie to the rollouts' reward.
    rl.shuffle_advantages = False
    # Held-out curve: every `heldout.every` steps (and at step 0 and the last) greedy accuracy on the task
    # source's `heldout.split` (the world's 'dev': fresh tasks of the train distribution), logged as
    # heldout/accuracy; 0 = off.
    rl.heldout = ml_collections.ConfigDict({"every": 0, "split": "dev"})
    c.rl = rl
    c.data.kind = "rl"
    c.train.batch_size = tasks_per_step * 5  # rollouts: tasks x group 5
    c.train.grad_accum = -1  # auto: one 16k-token row per batch shard per micro-batch (1280 = 320 x 4 on 8 GPUs)
    c.train.epochs = 400  # passes over the training tasks (Table 10)
    c.checkpoint.every_steps = 1  # a step is minutes of rollouts

    if preset == "tiny":  # the miniature world on the CPU: a couple of minutes from a fresh checkout
        _set_tiny(c)
    return c


def _set_objective(rl: ml_collections.ConfigDict, estimator: str, conditioning: str, policy_loss: str) -> None:
    """`rl`'s objective: the advantage estimator, the policy loss and its KL, the groups, the reward and its
    conditioning, the group filter, the reward shaping, and the updates per step."""
    rl.advantage = selection(advantages.REGISTRY, estimator)  # .name + one option subsection per estimator
    rl.loss = selection(losses.REGISTRY, policy_loss)  # .name + one option subsection per policy loss
    for name in rl.loss.keys():
        if name != "name" and "kl_beta" in rl.loss[name]:
            rl.loss[name].kl_beta = 0.1  # paper: KL beta 0.1 (the k3 estimator, clamped, is ours: not stated)
    rl.loss.ppo_clip.eps_low, rl.loss.ppo_clip.eps_high = 0.2, 0.2  # paper: clip 0.2
    rl.log_kl = True  # compute the reference pass (and log KL) even when kl_beta = 0
    rl.group_size = 5
    rl.reward = "rc_grpo"  # rcgrpo_jax.envs.rewards: state consistency x action coverage
    # Reward tokens in the first user message: sampled (RC-GRPO: per rollout, p_high) | high (every
    # rollout) | none | auto (high when the checkpoint has the reward tokens, else none).
    rl.reward_conditioning = conditioning
    rl.p_high = 0.5  # the success share of the RCTP data
    rl.reward_token_mode = "iid"  # iid (paper) | stratified (both tokens in every group)
    # Which groups train (rcgrpo_jax.rl.filters): none | dapo (groups whose rewards are all equal get no loss;
    # options rl.group_filter.dapo.atol). .name + one option subsection per filter.
    rl.group_filter = selection(filters.GROUP_FILTERS, "none")
    # A change to the task rewards before the filter and the estimator (rcgrpo_jax.rl.shaping): none |
    # dapo_overlong (DAPO's soft overlong punishment on an episode's response length, the tokens the policy
    # sampled: 0 up to max_len - cache_len, a linear ramp to -penalty at max_len; max_len 0 = rl.max_context,
    # our choice: BFCL's multi-turn episodes have no response budget of their own; configs/dapo.py selects it).
    rl.shaping = selection(shaping.REWARD_SHAPING, "none")
    rl.ppo_epochs = 1
    rl.num_minibatches = 4  # optimizer updates per epoch; must divide train.grad_accum


def _set_rollouts(rl: ml_collections.ConfigDict, preset: str) -> None:
    """`rl`'s rollouts: sampling, the context and step budgets, the decode rows (sized for `preset`), and how
    the context follows the chat template."""
    # Sampling. The log-probs of the update, the reference and the recompute are taken at the sampling
    # temperature, so they are the sampler's distribution at any temperature (top-k / top-p need the recompute).
    rl.temperature = 1.0  # ours (the paper states no sampling temperature)
    rl.top_k = 0  # 0 = off
    rl.top_p = 1.0  # 1.0 = off
    rl.recompute_old_logprobs = False  # recompute behaviour log-probs with a forward pass (gap logged)
    rl.max_context = 16384  # tokens per episode
    rl.max_step_tokens = 512  # decode budget of one assistant step
    rl.max_steps_per_turn = placeholder(int)  # None = the environment's cap (BFCL: 20)
    rl.prefill_chunk = 512
    rl.rollout_chunk = (
        80 if preset == "llama3_1_8b" else 160
    )  # rollouts per engine call (bounds the KV cache); 0 = all; a multiple of group_size
    rl.slot_mode = "shrink"  # finished episodes leave the decode batch (shrink) or stay (keep)
    # Continuous batching: the step's rollouts stream through this many decode rows, a freed row refilled
    # with the next waiting group (rollout.scheduler.RowScheduler); 0 = chunks of rollout_chunk, no refill.
    # Sized per model from a KV budget (`rollout_rows_for`): Qwen2.5-7B holds 57 KB of KV per token (4 KV
    # heads), LLaMA-3.1-8B 131 KB, Qwen3-8B/4B 147 KB (36 layers x 8 KV heads x 128), Qwen3-1.7B 115 KB.
    rl.rollout_rows = rollout_rows_for(preset, int(rl.max_context) + max(int(rl.prefill_chunk), 512))
    rl.rollout_slice = (
        8  # decode tokens per call with rollout_rows (a row that ends its step frees early); 0 = whole steps
    )
    # How the context follows the chat template: append (deltas; Qwen2.5, LLaMA-3.1, the tiny templates) |
    # rerender (every step re-rendered, one training sample per step: Qwen3, whose template rewrites past
    # turns) | auto (a render check at episode start picks).
    rl.render_mode = "auto"
    rl.thinking = placeholder(bool)  # the template's enable_thinking (Qwen3); None = the template's default


def _set_tiny(c: ml_collections.ConfigDict) -> None:
    """The tiny preset's RL run: the miniature world on the CPU."""
    rl = c.rl
    c.optim.lr = 2e-4
    c.optim.warmup_ratio = 0.0
    rl.group_size = 4
    c.train.batch_size = 16  # 4 tasks x 4 rollouts: a full recompute of ~800-token rollouts dominates a step
    c.train.grad_accum = 4
    rl.num_minibatches = 2
    c.train.epochs = 100
    c.train.max_steps = 6
    c.train.logprob_chunk = 256
    c.data.buckets = (768, 1024, 1536)
    rl.max_context = 1536
    rl.max_step_tokens = 48
    rl.prefill_chunk = 256
    rl.rollout_chunk = 0
    rl.rollout_rows = 0  # one row per rollout: 16 rollouts need no refill
    c.checkpoint.every_steps = 4
