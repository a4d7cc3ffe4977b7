"""A user's own registry entries, from outside the package: one group filter, one reward shaping, one KL
estimator, one loss aggregation and one reward. Each is selected as `tests.helpers.my_entries:<name>` (the module is imported at
start-up, which registers them):

    --config.rl.group_filter.name=tests.helpers.my_entries:unsolved_groups
    --config.rl.shaping.name=tests.helpers.my_entries:sampled_token_cost
    --config.rl.loss.ppo_clip.kl_estimator=tests.helpers.my_entries:abs_log_ratio
    --config.rl.loss.ppo_clip.agg_mode=tests.helpers.my_entries:per_row_cap
    --config.rl.reward=tests.helpers.my_entries:any_call

`tests/test_module_entries.py` selects each one, checks it at start-up and calls it.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from rcgrpo_jax.envs import rewards as reward_lib
from rcgrpo_jax.rl import filters, losses, shaping

TOKEN_COST = 0.01


@filters.register("unsolved_groups", override=True)
def unsolved_groups(rewards: jnp.ndarray, *, config=None):
    """keep_i = mean_g r_ig < 1: drop the groups every rollout of which succeeded."""
    keep = jnp.asarray(rewards, jnp.float32).mean(axis=1) < 1.0
    return keep, {"solved_groups": jnp.sum(~keep)}


@shaping.register("sampled_token_cost", override=True)
def sampled_token_cost(rewards, episodes, *, rl, config=None):
    """r'_i = r_i - TOKEN_COST * L_i, L_i the episode's sampled tokens (`shaping.response_lengths`)."""
    r = np.asarray(rewards, np.float32)
    cost = (TOKEN_COST * shaping.response_lengths(episodes)).reshape(r.shape).astype(np.float32)
    return r - cost, {"token_cost_mean": float(cost.mean())}


@losses.kl_estimators.register("abs_log_ratio", override=True)
def abs_log_ratio(logp, ref_logp):
    """|log pi - log pi_ref| (an illustration: >= 0, not an unbiased KL estimate)."""
    return jnp.abs(logp - ref_logp)


@losses.aggregations.register("per_row_cap", override=True)
def per_row_cap(per_token, mask, norm_const: float = 1.0):
    """sum_bt m l / (B * T): every micro-batch row as if it filled its whole width (a fixed denominator)."""
    return (per_token * mask).sum(), jnp.asarray(float(mask.shape[0] * mask.shape[1]), jnp.float32)


@reward_lib.register("any_call", override=True)
def any_call(outcome: reward_lib.EpisodeOutcome) -> float:
    """1 when the episode executed at least one call, else 0; 0 when it was force-terminated (as every reward)."""
    return float(len(outcome.model_calls) > 0 and not outcome.terminated)
