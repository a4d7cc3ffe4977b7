"""Next-token selection: greedy, temperature, top-k and top-p, as pure functions of [B, V] logits.

Each returns the chosen tokens and the log-prob of each under the distribution it was actually drawn
from (after temperature, top-k and top-p, renormalised). Greedy reports the log-prob under the raw
softmax, which is what a full forward over the generated sequence gives and what RL losses need.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """Static sampling settings (hashable: part of a jitted function's static self).

    temperature 0 means greedy; top_k None or 0 and top_p None or >= 1 disable those filters.
    """

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 or None, got {self.top_k}")
        if self.top_p is not None and not 0.0 < self.top_p:
            raise ValueError(f"top_p must be > 0 or None, got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def argmax(x: jax.Array) -> jax.Array:
    """First index of the maximum along the last axis, int32 (jnp.argmax's answer).

    Written as a max and a min over indices: two plain reductions that XLA's CPU backend vectorises,
    where argmax's (value, index) pair reduction is not (~40% of a tiny model's sampling step).
    NaN rows are not supported (logits are finite).
    """
    top = jnp.max(x, axis=-1, keepdims=True)
    ids = jnp.arange(x.shape[-1], dtype=jnp.int32)
    return jnp.min(jnp.where(x == top, ids, x.shape[-1]), axis=-1)


def greedy(logits: jax.Array) -> tuple[jax.Array, jax.Array]:
    """argmax tokens [B] and their log-probs under softmax(logits)."""
    tokens = argmax(logits)
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return tokens, jnp.take_along_axis(logp, tokens[:, None], axis=-1)[:, 0]


def _top_p_mask(sorted_logits: jax.Array, top_p: float) -> jax.Array:
    """Keep-mask over logits sorted descending: the smallest prefix whose mass reaches top_p."""
    probs = jax.nn.softmax(sorted_logits, axis=-1)
    mass_before = jnp.cumsum(probs, axis=-1) - probs
    return mass_before < top_p  # the first entry always survives


def filtered_logits(logits: jax.Array, params: SamplingParams) -> tuple[jax.Array, jax.Array]:
    """Candidate logits [B, K] (temperature applied, filtered ones at -inf) and their vocab ids [B, K].

    With top-k the candidates are the k best (K = k), else the whole vocabulary; top-p then trims
    the sorted candidates. Ordering is temperature -> top-k -> top-p, as in HF's warpers.
    """
    scaled = logits.astype(jnp.float32) / params.temperature
    vocab = scaled.shape[-1]
    use_top_p = params.top_p is not None and params.top_p < 1.0
    if params.top_k and params.top_k < vocab:
        vals, ids = jax.lax.top_k(scaled, params.top_k)
    elif use_top_p:
        vals, ids = jax.lax.top_k(scaled, vocab)  # a full descending sort
    else:
        ids = jnp.broadcast_to(jnp.arange(vocab, dtype=jnp.int32), scaled.shape)
        return scaled, ids
    if use_top_p:
        vals = jnp.where(_top_p_mask(vals, params.top_p), vals, -jnp.inf)
    return vals, ids.astype(jnp.int32)


def sample(logits: jax.Array, rng: jax.Array, params: SamplingParams) -> tuple[jax.Array, jax.Array]:
    """Tokens [B] int32 and their log-probs [B] f32 under the distribution sampled from."""
    if params.greedy:
        return greedy(logits)
    vals, ids = filtered_logits(logits, params)
    logp = jax.nn.log_softmax(vals, axis=-1)
    # jax.random.categorical's Gumbel-max with the same noise, so the same draws, and our argmax.
    choice = argmax(vals + jax.random.gumbel(rng, vals.shape, jnp.float32))
    tokens = jnp.take_along_axis(ids, choice[:, None], axis=-1)[:, 0]
    return tokens, jnp.take_along_axis(logp, choice[:, None], axis=-1)[:, 0]
