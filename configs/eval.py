"""Evaluation: greedy multi-turn rollouts on the test split, scored by BFCL's official multi-turn checker.

  python -m rcgrpo_jax.main --config=configs/eval.py:tiny --config.model.path=/tmp/rl/hf --workdir=/tmp/eval
  python -m rcgrpo_jax.main --config=configs/eval.py:qwen2_5_7b --config.model.path=/ckpt/rc_grpo/hf \
      --workdir=/ckpt/eval
  python -m rcgrpo_jax.main --config=configs/eval.py:tiny --config.eval.policy=oracle --workdir=/tmp/oracle

Writes workdir/eval.json (summary + one record per episode) and workdir/eval.md (the table), and prints
the table. Reward-conditioned checkpoints (their tokenizer has `<|high_reward|>`) are evaluated with
`[Reward Goal: <|high_reward|>]` (eval.reward_token = auto); others without a goal.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from configs import common  # noqa: E402


def get_config(arg: str | None = None):
    preset = common.parse_preset(arg)
    c = common.base("eval", preset, lr=1e-5, trainer="eval")  # optim/train sections are unused but keep the checks uniform
    c.train.batch_size = 1
    c.train.grad_accum = 1
    c.model.build_tiny = False  # evaluating a random model means nothing: model.path is required ...
    c.eval = eval_section(preset)
    if preset == "tiny":
        c.model.build_tiny = True  # ... except for the oracle on tiny, which only needs a tokenizer
    return c


def eval_section(preset: str):
    import ml_collections
    from ml_collections.config_dict import placeholder

    c = ml_collections.ConfigDict()
    c.policy = "model"  # model (greedy decoding) | oracle (scripted ground truth: checks the scoring path)
    c.reward_token = "auto"  # auto (high if the tokenizer has the reward tokens) | high | low | none
    c.split = "test"  # test | train (train: tuning on the training split only)
    c.max_tasks = -1  # > 0 evaluates the first N tasks of the split (debugging)
    c.batch_size = 64 if preset == "tiny" else 32  # episodes per rollout batch
    c.max_context = 2048 if preset == "tiny" else 32768  # tokens per episode; past it: truncated
    c.max_step_tokens = 128 if preset == "tiny" else 1024  # decode budget of one assistant step
    c.prefill_chunk = 256 if preset == "tiny" else 2048
    c.max_steps_per_turn = placeholder(int)  # None = the environment's cap (BFCL: 20); past it the turn ends
    # Categories reported apart and left out of `overall` (the world's held-out compositions).
    c.heldout_categories = ("compose_heldout",)
    return c
