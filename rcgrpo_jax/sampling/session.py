"""A live batched KV cache on the host side: append token deltas, decode, gather rows, compact.

This is the thin stateful shell the multi-turn rollout engine drives; every device operation is one of
the pure jitted functions here or in `sampler.py`. Rows are episodes. The cache's write index is
shared by the batch, so appending a left-padded delta or decoding rows that stop early leaves holes;
`compact` squeezes each row's real slots to the front (order kept, so causality holds) when the
index would run past the capacity.
"""

from __future__ import annotations

import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from rcgrpo_jax import multihost, sharding
from rcgrpo_jax.models import KVCache, ModelConfig
from rcgrpo_jax.sampling import buckets
from rcgrpo_jax.sampling.sample_fns import SamplingParams
from rcgrpo_jax.sampling.sampler import Sampler, left_pad, mesh_context, new_cache, put_batch, stop_table


class CapacityError(RuntimeError):
    """A row holds more real tokens than the cache can take even after compaction."""


@jax.jit
def compact(cache: KVCache) -> KVCache:
    """Move each row's valid slots to the front, in order; the index becomes the longest row."""
    order = jnp.argsort(~cache.mask, axis=1, stable=True)  # [B, S]: valid slots first
    gather = lambda x: jnp.take_along_axis(x, order[None, :, :, None, None], axis=2)
    mask = jnp.take_along_axis(cache.mask, order, axis=1)
    return KVCache(k=gather(cache.k), v=gather(cache.v), mask=mask, index=jnp.max(mask.sum(1)).astype(jnp.int32))


@jax.jit
def take_rows(cache: KVCache, rows: jax.Array) -> KVCache:
    """The cache restricted to / repeated over `rows` (prefix sharing broadcasts a group's prompt row)."""
    return KVCache(
        k=jnp.take(cache.k, rows, axis=1),
        v=jnp.take(cache.v, rows, axis=1),
        mask=jnp.take(cache.mask, rows, axis=0),
        index=cache.index,
    )


@jax.jit
def truncate_rows(cache: KVCache, keep: jax.Array) -> KVCache:
    """Each row b keeps only its first keep[b] valid slots (the rest become holes; `compact` reclaims them)."""
    mask = cache.mask & (jnp.cumsum(cache.mask, axis=1) <= keep[:, None])
    return KVCache(k=cache.k, v=cache.v, mask=mask, index=cache.index)


@functools.partial(jax.jit, donate_argnums=(0,))
def _merge_logits(old: jax.Array, new: jax.Array, fresh: jax.Array) -> jax.Array:
    return jnp.where(fresh[:, None], new, old)


class DecodeSession:
    """Episodes' live contexts as rows of one KV cache.

    capacity should be at least the longest context a row may reach plus max(max_new_tokens,
    prefill_chunk), so that compaction always makes room for the next block.
    """

    def __init__(
        self,
        config: ModelConfig,
        params,
        rows: int,
        capacity: int,
        *,
        sampling: SamplingParams,
        max_new_tokens: int,
        prefill_chunk: int = 256,
        mesh: Mesh | None = None,
        rng: jax.Array | None = None,
        rules: sharding.Rules = sharding.DECODE_RULES,
    ):
        self.config, self.params, self.mesh, self.rules = config, params, mesh, rules
        self.capacity, self.chunk = capacity, prefill_chunk
        self.sampler = Sampler(config, max_new_tokens, sampling, prefill_chunk)
        self.cache = new_cache(config, rows, capacity, mesh)
        self.positions = np.zeros((rows,), np.int32)  # next RoPE position per row
        self.lengths = np.zeros((rows,), np.int64)  # real tokens per row
        self.logits = jnp.zeros((rows, config.vocab_size), jnp.float32)
        self.index = 0
        self.rng = jax.random.key(0) if rng is None else rng
        self.stats = {"prefill_calls": 0, "decode_calls": 0, "compactions": 0, "prefill_tokens": 0}

    @property
    def rows(self) -> int:
        return len(self.positions)

    def _room(self, width: int) -> None:
        if self.index + width <= self.capacity:
            return
        self.cache = compact(self.cache)
        self.index = int(self.cache.index)
        self.stats["compactions"] += 1
        if self.index + width > self.capacity:
            raise CapacityError(f"need {width} slots after {self.index}, capacity {self.capacity}")

    def append(self, deltas: Sequence[Sequence[int]]) -> None:
        """Append deltas[i] to row i (empty = nothing); rows given a delta get fresh next-token logits."""
        with mesh_context(self.mesh, self.rules):
            self._append(deltas)

    def _append(self, deltas: Sequence[Sequence[int]]) -> None:
        deltas = list(deltas) + [()] * (self.rows - len(deltas))
        longest = max(len(d) for d in deltas)
        if longest == 0:
            return
        width = buckets.length_bucket(longest)
        if width > self.chunk:
            width = -(-width // self.chunk) * self.chunk
        tokens, positions, mask = left_pad(deltas, width, self.rows, self.positions)
        pieces = (
            [(0, width)]
            if self.index + width <= self.capacity
            else [(a, min(a + self.chunk, width)) for a in range(0, width, self.chunk)]
        )
        logits = None
        for a, b in pieces:
            self._room(b - a)
            logits, self.cache = self.sampler.prefill(
                self.params, *(put_batch(x[:, a:b], self.mesh) for x in (tokens, positions, mask)), self.cache
            )
            self.index += b - a
        fresh = np.array([len(d) > 0 for d in deltas])
        self.logits = _merge_logits(self.logits, logits, put_batch(fresh, self.mesh))
        n = np.array([len(d) for d in deltas])
        self.positions = self.positions + n.astype(np.int32)
        self.lengths = self.lengths + n
        self.stats["prefill_calls"] += len(pieces)
        self.stats["prefill_tokens"] += int(n.sum())

    def decode(self, budgets: Sequence[int], stop_ids) -> list[tuple[list[int], np.ndarray, bool]]:
        """Sample up to budgets[i] tokens for each row (0 = skip); per row (tokens, logprobs, stopped)."""
        with mesh_context(self.mesh, self.rules):
            return self._decode(budgets, stop_ids)

    def _decode(self, budgets: Sequence[int], stop_ids) -> list[tuple[list[int], np.ndarray, bool]]:
        budgets = np.minimum(np.asarray(budgets, np.int32), self.sampler.max_new_tokens)
        if budgets.max(initial=0) <= 0:
            return [([], np.zeros((0,), np.float32), False)] * self.rows
        self._room(int(budgets.max()))
        self.rng, key = jax.random.split(self.rng)
        # The loop attends over (and re-lays out) only the slots it can reach: a power-of-two span,
        # so a long rollout compiles the decode loop a handful of times, not once per length.
        span = min(self.capacity, buckets.batch_bucket(max(self.index + int(budgets.max()), 256)))
        out = self.sampler.decode(
            self.params,
            self.logits,
            put_batch(self.positions, self.mesh),
            self.cache,
            put_batch(stop_table(stop_ids, self.rows), self.mesh),
            put_batch(budgets, self.mesh),
            key,
            span=span,
        )
        self.cache, self.logits = out.cache, out.logits
        # gather, not device_get: with several processes the rows live on other processes' devices too
        toks, lps, lens, stopped, index = multihost.gather(
            (out.tokens, out.logprobs, out.lengths, out.stopped, out.cache.index)
        )
        self.index = int(index)
        self.positions = self.positions + lens.astype(np.int32)
        self.lengths = self.lengths + lens
        self.stats["decode_calls"] += 1
        return [(toks[i, : lens[i]].tolist(), lps[i, : lens[i]], bool(stopped[i])) for i in range(self.rows)]

    def truncate(self, keep: Sequence[int]) -> None:
        """Row i keeps only the first keep[i] tokens of its context (capped at its length); its next-token
        logits are stale until the row is appended to, so append to every truncated row next."""
        keep = np.minimum(np.asarray(keep, np.int64), self.lengths)
        if np.array_equal(keep, self.lengths):
            return
        with mesh_context(self.mesh, self.rules):
            self.cache = truncate_rows(self.cache, put_batch(keep.astype(np.int32), self.mesh))
        self.positions, self.lengths = keep.astype(np.int32), keep

    def select(self, rows: Sequence[int]) -> None:
        """Keep (or repeat) the given rows, in that order: shrinks the batch or broadcasts a shared prefix."""
        idx = np.asarray(rows, np.int32)
        with mesh_context(self.mesh, self.rules):
            self._select(idx)

    def _select(self, idx: np.ndarray) -> None:
        self.cache = take_rows(self.cache, put_batch(idx, self.mesh))
        self.logits = jnp.take(self.logits, put_batch(idx, self.mesh), axis=0)
        self.positions, self.lengths = self.positions[idx], self.lengths[idx]
