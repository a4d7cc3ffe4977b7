"""DAPO: clip-higher (eps_low 0.2, eps_high 0.28), token-mean loss, no KL term, and the dynamic-sampling
group filter: groups whose rewards are all equal carry no group-relative signal and get no loss (DAPO
resamples to refill the batch; we keep shapes fixed and mask them, counted in dapo_frac_dropped)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from configs import common, grpo  # noqa: E402


def get_config(arg: str | None = None):
    c = grpo.rl_config("dapo", common.parse_preset(arg), estimator="grpo")
    c.rl.loss.eps_high = 0.28
    c.rl.loss.kl_beta = 0.0
    c.rl.loss.agg_mode = "token-mean"
    c.rl.group_filter = "dapo"
    return c
