"""GRPO (stage 2 without reward conditioning), and the shared builder of every RL stage config.

Paper setting (RC-GRPO, Table 12): AdamW lr 1e-6, KL beta 0.1 to the frozen stage-1 policy, group size
5, batch 256, clip 0.2. The paper's batch counts tasks (as verl's train_batch_size counts prompts), so
`train.batch_size` (rollouts) = 256 x 5 = 1280. Not stated by the paper, our choices: 4 PPO
mini-batches per step, 1 PPO epoch, 5 passes over the 720 train tasks, k3 KL, token-mean loss.

  python -m rcgrpo_jax.main --config=configs/grpo.py:tiny --config.model.path=/tmp/sft/hf --workdir=/tmp/grpo
  python -m rcgrpo_jax.main --config=configs/grpo.py:qwen2_5_7b --config.model.path=/ckpt/rctp/hf --workdir=/ckpt/grpo

`reference.path` defaults to `model.path` (the stage-1 policy RL starts from). On an RCTP-FT
checkpoint (it has the reward tokens) GRPO conditions every rollout on `<|high_reward|>`, the token
evaluation uses (`rl.reward_conditioning='auto'`); on an SFT checkpoint it adds nothing.
"""

import os
import sys

import ml_collections
from ml_collections.config_dict import placeholder

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from configs import common  # noqa: E402


def rl_config(
    stage: str, preset: str, *, estimator: str, conditioning: str = "auto", policy_loss: str = "ppo_clip"
) -> ml_collections.ConfigDict:
    """The sections of every RL stage with the paper's values; stage files override their own."""
    from rcgrpo_jax.rl import advantages, losses

    c = common.base(stage, preset, lr=1e-6)
    c.reference = ml_collections.ConfigDict({"path": placeholder(str)})  # None = model.path (the stage-1 policy)
    rl = ml_collections.ConfigDict()
    rl.estimator = estimator  # rcgrpo_jax.rl.advantages registry name
    rl.advantage = advantages.default_config(estimator)  # the estimator's options
    rl.policy_loss = policy_loss  # rcgrpo_jax.rl.losses registry name
    rl.loss = losses.default_config(policy_loss)
    rl.loss.eps_low, rl.loss.eps_high = 0.2, 0.2  # paper: clip 0.2
    rl.loss.kl_beta = 0.1  # paper: KL beta 0.1 (k3 estimator, clamped)
    rl.log_kl = True  # compute the reference pass (and log KL) even when kl_beta = 0
    rl.group_size = 5
    rl.reward = "rc_grpo"  # rcgrpo_jax.envs.rewards: state consistency x action coverage
    # Reward tokens in the first user message: sampled (RC-GRPO: per rollout, p_high) | high (every
    # rollout) | none | auto (high when the checkpoint has the reward tokens, else none).
    rl.reward_conditioning = conditioning
    rl.p_high = 0.5  # the success share of the RCTP data
    rl.reward_token_mode = "iid"  # iid (paper) | stratified (both tokens in every group)
    rl.group_filter = "none"  # none | dapo (groups whose rewards are all equal get no loss)
    rl.filter_atol = 0.0
    rl.ppo_epochs = 1
    rl.num_minibatches = 4  # optimizer updates per epoch; must divide train.grad_accum
    # Sampling: at temperature 1.0 without filters the sampler's log-probs are the training forward's.
    rl.temperature = 1.0
    rl.top_k = 0  # 0 = off
    rl.top_p = 1.0  # 1.0 = off
    rl.recompute_old_logprobs = False  # recompute behaviour log-probs with a forward pass (gap logged)
    rl.max_context = 16384  # tokens per episode
    rl.max_step_tokens = 512  # decode budget of one assistant step
    rl.max_steps_per_turn = placeholder(int)  # None = the environment's cap (BFCL: 20)
    rl.prefill_chunk = 512
    rl.rollout_chunk = 160  # rollouts per engine call (bounds the KV cache); 0 = all; a multiple of group_size
    rl.slot_mode = "shrink"  # finished episodes leave the decode batch (shrink) or stay (keep)
    rl.judge = ml_collections.ConfigDict(
        {  # AWPO's reasoning judge (rcgrpo_jax.train.judge)
            "kind": "rule",
            "path": placeholder(str),
            "max_new_tokens": 16,
            "max_chars": 2000,
            "default": 0.0,
        }
    )
    c.rl = rl
    c.data.kind = "rl"
    c.train.batch_size = 1280  # rollouts: 256 tasks x group 5
    c.train.grad_accum = 320  # micro-batch 4 = one 16k-token row per batch shard (data x fsdp = 4)
    c.train.epochs = 5
    c.checkpoint.every_steps = 1  # a step is minutes of rollouts

    if preset == "tiny":  # the miniature world on the CPU: a couple of minutes from a fresh checkout
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
        c.checkpoint.every_steps = 4
    return c


def get_config(arg: str | None = None):
    return rl_config("grpo", common.parse_preset(arg), estimator="grpo")
