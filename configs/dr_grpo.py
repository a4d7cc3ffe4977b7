"""Dr.GRPO: advantages r - mean_g (no std division) and the length-unbiased loss aggregation
seq-mean-token-sum-norm, whose constant is the longest sampled response (rl.max_context here)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from configs import common, grpo  # noqa: E402


def get_config(arg: str | None = None):
    c = grpo.rl_config("dr_grpo", common.parse_preset(arg), estimator="dr_grpo")
    c.rl.loss.ppo_clip.agg_mode = "seq-mean-token-sum-norm"
    c.rl.loss.ppo_clip.norm_const = float(c.rl.max_context)
    return c
