"""Pytrees carried by the decode loop and returned by it."""

from __future__ import annotations

import flax.struct
import jax

from rcgrpo_jax.sampling.decode_step import DecodeCache


@flax.struct.dataclass
class DecodeState:
    """The lax.while_loop carry. B = batch rows, N = static token budget of one decode call."""

    step: jax.Array  # int32 []: decode steps taken (= next column of the buffers)
    done: jax.Array  # bool [B]: row finished (stop token, budget, or never live)
    stopped: jax.Array  # bool [B]: row finished on a stop token
    logits: jax.Array  # f32 [B, V]: next-token logits
    tokens: jax.Array  # int32 [B, N]: sampled tokens, row i valid in [:lengths[i]]
    logprobs: jax.Array  # f32 [B, N]: log-prob of each under the sampled-from distribution
    lengths: jax.Array  # int32 [B]: tokens sampled per row
    budgets: jax.Array  # int32 [B]: per-row cap on tokens this call
    stop_ids: jax.Array  # int32 [B, K]: per-row stop tokens, -1 = unused
    cache: DecodeCache  # written in place; a row's next token goes to slot cache.lengths[row]
    rng: jax.Array


@flax.struct.dataclass
class DecodeOutput:
    """What one decode call hands back; the cache holds every sampled token (the last one included)."""

    tokens: jax.Array  # int32 [B, N]
    logprobs: jax.Array  # f32 [B, N]
    lengths: jax.Array  # int32 [B]: tokens sampled per row
    stopped: jax.Array  # bool [B]
    logits: jax.Array  # f32 [B, V]: next-token logits (unchanged for rows that did not decode)
    cache: DecodeCache
