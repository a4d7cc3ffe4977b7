"""Dr.GRPO: advantages r - mean_g (no std division) and the length-unbiased loss aggregation
seq-mean-token-sum-norm, whose constant is the longest sampled response (rl.max_context here)."""

from rcgrpo_jax.config_lib import common, rl_stage


def get_config(arg: str | None = None):
    c = rl_stage.base("dr_grpo", common.parse_preset(arg), estimator="dr_grpo")
    c.rl.loss.ppo_clip.agg_mode = "seq-mean-token-sum-norm"
    c.rl.loss.ppo_clip.norm_const = float(c.rl.max_context)
    return c
