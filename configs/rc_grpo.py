"""RC-GRPO (stage 2): each rollout's reward token is drawn i.i.d. with p(high) = 0.5 and the rollout is
conditioned on it; group-normalised advantages over the mixed group; PPO clip 0.2 + KL 0.1 to the
frozen RCTP-FT policy (paper: lr 1e-6, group 5, batch 256 tasks; rcgrpo_jax/config_lib/rl_stage.py
for the shared fields).

  python -m rcgrpo_jax.main --config=configs/rc_grpo.py:tiny --config.model.path=/tmp/rctp/hf --workdir=/tmp/rc

From an SFT checkpoint (no reward tokens; the paper's SFT+RC-GRPO row) the tokens are added at start-up
with mean-initialised embedding rows.
"""

from rcgrpo_jax.config_lib import common, rl_stage


def get_config(arg: str | None = None):
    return rl_stage.base("rc_grpo", common.parse_preset(arg), estimator="rc_grpo", conditioning="sampled")
