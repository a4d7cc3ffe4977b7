"""Evaluation on BFCL v4 with the official checkers: multi-turn episodes, single-turn AST categories, or both.

  python -m rcgrpo_jax.main --config=configs/eval.py:tiny --config.model.path=/tmp/rl/hf --workdir=/tmp/eval
  python -m rcgrpo_jax.main --config=configs/eval.py:qwen2_5_7b --config.model.path=/ckpt/rc_grpo/hf \
      --config.eval.suite=bfcl_v4 --config.eval.split=all --workdir=/ckpt/eval
  python -m rcgrpo_jax.main --config=configs/eval.py:tiny --config.eval.policy=oracle --workdir=/tmp/oracle
  python -m rcgrpo_jax.main --config=configs/eval.py:qwen2_5_7b --config.eval.suite=single_turn \
      --config.eval.policy=replay --config.eval.replay_path=outputs.jsonl --workdir=/tmp/replay

  python -m rcgrpo_jax.main --config=configs/eval.py:qwen3_8b --config.model.path=/ckpt/awpo/hf \
      --config.eval.suite=bfcl_v4,api_bank,mmlu_pro --config.eval.split=all \
      --config.eval.api_bank.path=/data/api-bank --config.eval.mmlu_pro.path=/data/MMLU-Pro --workdir=/ckpt/eval

eval.suite: one or several, comma-separated: multi_turn (the episodes of `eval.split` of `data.source`),
single_turn (BFCL's 13 single-turn categories) or bfcl_v4 (both) -- at most one of these three --, api_bank
(API-Bank levels 1-3 from a copy of the benchmark at `eval.api_bank.path`, `eval.api_bank.levels`) and
mmlu_pro (MMLU-Pro's released test split at `eval.mmlu_pro.path`). eval.split: test | train | all for
multi-turn (all = the 800 tasks); the other suites are never trained on, so test and all both mean every
entry (train is refused).

Writes workdir/eval.json (summary + one record per episode; API-Bank and MMLU-Pro under their names, with
their records) and workdir/eval.md (the tables); the last line printed is the summary as one JSON object
(BFCL's categories, groups, overall, n, error_kinds; `api_bank` and `mmlu_pro` when run).
Reward-conditioned checkpoints (their tokenizer has `<|high_reward|>`) are evaluated with
`[Reward Goal: <|high_reward|>]` (eval.reward_token = auto); others without a goal.
"""

from rcgrpo_jax.config_lib import common
from rcgrpo_jax.config_lib import eval as eval_lib


def get_config(arg: str | None = None):
    return eval_lib.base(common.parse_preset(arg))
