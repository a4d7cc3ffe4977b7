"""GRPO (stage 2 without reward conditioning): the paper's GRPO baseline (RC-GRPO Table 12: batch 64 tasks).
Every RL stage's fields, their paper values and the swaps they take: rcgrpo_jax/config_lib/rl_stage.py.

  python -m rcgrpo_jax.main --config=configs/grpo.py:tiny --config.model.path=/tmp/sft/hf --workdir=/tmp/grpo
  python -m rcgrpo_jax.main --config=configs/grpo.py:qwen2_5_7b --config.model.path=/ckpt/rctp/hf --workdir=/ckpt/grpo

On an RCTP-FT checkpoint (it has the reward tokens) GRPO conditions every rollout on `<|high_reward|>`, the token
evaluation uses (`rl.reward_conditioning='auto'`); on an SFT checkpoint it adds nothing.
"""

from rcgrpo_jax.config_lib import common, rl_stage


def get_config(arg: str | None = None):
    return rl_stage.base("grpo", common.parse_preset(arg), estimator="grpo", tasks_per_step=64)  # Table 12: batch 64
