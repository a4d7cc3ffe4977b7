"""DAPO's dynamic-sampling group filter and overlong reward shaping, as pure functions.

The filter returns a keep-mask rather than dropping rows, so it stays jittable and composes with any
estimator (pass it as aux["group_mask"]); `select_groups` does the actual drop on the host.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


def dapo_group_filter(rewards: Array, *, atol: float = 0.0) -> tuple[Array, dict[str, Array]]:
    """keep [N] bool = the group's rewards are not all equal (max - min > atol).

    Such groups carry no group-relative signal (every centred advantage is 0), so DAPO resamples
    instead of training on them.
    """
    rewards = jnp.asarray(rewards, jnp.float32)
    spread = rewards.max(axis=1) - rewards.min(axis=1)
    keep = spread > atol
    dropped = jnp.sum(~keep).astype(jnp.int32)
    return keep, {
        "dapo_groups_dropped": dropped,
        "dapo_frac_dropped": dropped / rewards.shape[0],
    }


def select_groups(keep: Any, *arrays: Any) -> tuple[np.ndarray, ...]:
    """Host-side drop: each array's leading [N] axis indexed by the keep mask (dynamic shape)."""
    idx = np.flatnonzero(np.asarray(keep))
    return tuple(np.asarray(a)[idx] for a in arrays)


def response_lengths(episodes) -> np.ndarray:
    """[B] int: the tokens each episode's policy sampled (its loss-mask tokens, over every training sample
    of a re-rendered episode), the length DAPO's overlong shaping measures. The prompt, tool results and
    the next user turns in the context are not the model's response and do not count."""
    return np.asarray([sum(int(np.sum(s.loss_mask)) for s in e.samples()) for e in episodes], np.int64)


def overlong_max_len(rl_config) -> int:
    """DAPO's L_max in response tokens: `rl.overlong.max_len`, or `rl.max_context` when that is 0 (an
    episode cannot sample more than its context holds)."""
    max_len = int(rl_config.overlong.get("max_len", 0) or 0)
    return max_len if max_len > 0 else int(rl_config.max_context)


def overlong_penalty(lengths: Array, *, max_len: int, cache_len: int, penalty: float = 1.0) -> Array:
    """DAPO's soft overlong punishment, added to the task reward (values in [-penalty, 0]). `lengths` are
    response lengths (`response_lengths`: sampled tokens, not the whole multi-turn context).

    0                                  if L <= max_len - cache_len
    penalty * (max_len - cache_len - L) / cache_len   if max_len - cache_len < L <= max_len
    -penalty                           if L > max_len
    """
    if not 0 < cache_len <= max_len:
        raise ValueError(f"need 0 < cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}")
    lengths = jnp.asarray(lengths, jnp.float32)
    soft_start = max_len - cache_len
    ramp = (soft_start - lengths) / cache_len
    shaped = jnp.where(lengths <= soft_start, 0.0, jnp.where(lengths <= max_len, ramp, -1.0))
    return penalty * shaped
