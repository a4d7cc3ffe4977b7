"""Reward-conditioned sampling (RC-GRPO stage 2): which reward token each rollout is conditioned on.

Tokens are int32, HIGH = 1 (`<|high_reward|>`) and LOW = 0 (`<|low_reward|>`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array

HIGH = 1
LOW = 0
MODES = ("iid", "stratified")


def sample(rng: Array, num_groups: int, group_size: int, p_high: float | Array = 0.5, mode: str = "iid") -> Array:
    """Reward tokens [num_groups, group_size] int32, deterministic under `rng`.

    "iid": each token ~ Bernoulli(p_high), as in the paper (p_high = 0.5 matches the 1:1 RCTP data).
    "stratified": the number of high tokens k ~ Binomial(G, p_high) is clipped to [1, G - 1] and the
    k high tokens are placed at uniformly random positions, so every group of G >= 2 holds both
    tokens (a group of one is plain iid). The clipping moves the high share slightly toward 1/2.
    """
    if mode not in MODES:
        raise ValueError(f"unknown reward-token mode {mode!r}; known: {', '.join(MODES)}")
    shape = (num_groups, group_size)
    k_draw, k_perm = jax.random.split(rng)
    iid = jax.random.bernoulli(k_draw, p_high, shape).astype(jnp.int32)
    if mode == "iid" or group_size < 2:
        return iid
    num_high = jnp.clip(iid.sum(axis=1, keepdims=True), 1, group_size - 1)
    # rank of each slot in a random order; the num_high lowest-ranked slots get the high token
    order = jnp.argsort(jax.random.uniform(k_perm, shape), axis=1)
    rank = jnp.argsort(order, axis=1)
    return (rank < num_high).astype(jnp.int32)
