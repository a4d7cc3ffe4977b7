"""A live batched KV cache on the host side: append token deltas, decode, truncate, gather rows.

This is the thin stateful shell the multi-turn rollout engine drives; every device operation is one of
the pure jitted functions here or in `sampler.py`. Rows are episodes. Each row appends at its own length
(`decode_step.DecodeCache`), so the cache has no holes and needs no compaction; every call works on the
cache's whole span, which the session keeps at `buckets.span_bucket` of the slots its rows need:

  append / decode  grow the span to span_bucket(max_b(lengths[b] + written[b])) when that is larger;
  select / truncate  shrink it to span_bucket(max_b(lengths[b]) + max_new_tokens) when that is smaller
                     (room for the next decode, so the two do not alternate);

so a decode step reads (rows x span) slots, span within a bucket of the longest row, whatever the rows'
history. Resizing copies one layer's K or V at a time (a transient of one layer, not of the cache).
"""

from __future__ import annotations

import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from rcgrpo_jax import multihost, sharding
from rcgrpo_jax.models import ModelConfig
from rcgrpo_jax.sampling import buckets, decode_step
from rcgrpo_jax.sampling.decode_step import DecodeCache
from rcgrpo_jax.sampling.sample_fns import SamplingParams
from rcgrpo_jax.sampling.sampler import Sampler, mesh_context, new_cache, put_batch, right_pad, stop_table


class CapacityError(RuntimeError):
    """A row would hold more tokens than the session's capacity."""


@functools.partial(jax.jit, static_argnums=(1, 2))
def _resize(x: jax.Array, span: int, axis: int) -> jax.Array:
    """x with its slot axis cut or zero-padded to `span` (the rows' valid slots always fit)."""
    if x.shape[axis] >= span:
        return jax.lax.slice_in_dim(x, 0, span, axis=axis)
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, span - x.shape[axis])
    return jnp.pad(x, pad)


@jax.jit
def take_rows(cache: DecodeCache, rows: jax.Array) -> DecodeCache:
    """The cache restricted to / repeated over `rows` (prefix sharing broadcasts a group's prompt row)."""
    return jax.tree.map(lambda x: jnp.take(x, rows, axis=0), cache)


@functools.partial(jax.jit, donate_argnums=(0,))
def _merge_logits(old: jax.Array, new: jax.Array, fresh: jax.Array) -> jax.Array:
    return jnp.where(fresh[:, None], new, old)


class DecodeSession:
    """Episodes' live contexts as rows of one KV cache.

    capacity: the most slots a row may hold (its longest context plus one decode call's budget); the
    span never exceeds it. span: the initial span (default the smallest bucket). min_span: the
    smallest span a resize goes to. decode_attention: auto | xla | ragged (`decode_step.
    select_decode_attention`): the decode attention, hence the cache's layout, for the session's life.
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
        span: int | None = None,
        min_span: int = buckets.MIN_SPAN,
        decode_attention: str = "auto",
    ):
        self.config, self.params, self.mesh, self.rules = config, params, mesh, rules
        self.capacity, self.chunk, self.min_span = int(capacity), int(prefill_chunk), int(min_span)
        self.sampler = Sampler(config, max_new_tokens, sampling, prefill_chunk)
        span = buckets.span_bucket(0, self.capacity, self.min_span) if span is None else int(span)
        if not 0 < span <= self.capacity:
            raise ValueError(f"span {span} must be in (0, capacity {self.capacity}]")
        self.layout = decode_step.cache_layout(config, decode_attention)
        self.cache = new_cache(config, rows, span, mesh, self.layout)
        self.lengths = np.zeros((rows,), np.int64)  # tokens per row (= the next token's RoPE position)
        self.logits = jnp.zeros((rows, config.vocab_size), jnp.float32)
        self.rng = jax.random.key(0) if rng is None else rng
        self.stats = {
            "prefill_calls": 0,
            "decode_calls": 0,
            "resizes": 0,
            "prefill_tokens": 0,
            "decode_steps": 0,  # while-loop iterations over all decode calls
            "kv_slots_read": 0,  # decode steps x rows x span: what the dense ("xla") decode attention reads
            "kv_slots_useful": 0,  # of those, the valid slots of the rows that were live at that step
        }

    @property
    def rows(self) -> int:
        return len(self.lengths)

    @property
    def span(self) -> int:
        return self.cache.span

    @property
    def positions(self) -> np.ndarray:
        """RoPE position of each row's next token (= its length: slot i holds position i)."""
        return self.lengths.astype(np.int32)

    def _resize(self, span: int) -> None:
        if span == self.cache.span:
            return
        k, v, axis = list(self.cache.k), list(self.cache.v), self.cache.k_slot_axis
        for i in range(len(k)):  # one layer at a time: the old layer is freed before the next is copied
            k[i] = _resize(k[i], span, axis)
            v[i] = _resize(v[i], span, 2)
        self.cache = self.cache.replace(k=tuple(k), v=tuple(v))
        self.stats["resizes"] += 1

    def _grow(self, need: int) -> None:
        """Make the span hold `need` slots per row (the most any row holds after the next call)."""
        if need > self.capacity:
            raise CapacityError(f"a row needs {need} slots, capacity {self.capacity}")
        if need > self.cache.span:
            self._resize(buckets.span_bucket(need, self.capacity, self.min_span))

    def _shrink(self) -> None:
        need = min(int(self.lengths.max(initial=0)) + self.sampler.max_new_tokens, self.capacity)
        span = buckets.span_bucket(need, self.capacity, self.min_span)
        if span < self.cache.span:
            self._resize(span)

    def append(self, deltas: Sequence[Sequence[int]]) -> None:
        """Append deltas[i] to row i (empty = nothing); rows given a delta get fresh next-token logits."""
        with mesh_context(self.mesh, self.rules):
            self._append(deltas)

    def _append(self, deltas: Sequence[Sequence[int]]) -> None:
        deltas = list(deltas) + [()] * (self.rows - len(deltas))
        n = np.array([len(d) for d in deltas], np.int64)
        if n.max(initial=0) == 0:
            return
        self._grow(int((self.lengths + n).max()))
        tokens, _ = right_pad(deltas, int(n.max()), self.rows)
        start = 0
        while start < n.max():  # pieces of at most prefill_chunk columns, each of a bucketed width
            counts = np.clip(n - start, 0, self.chunk)
            width = min(self.chunk, buckets.length_bucket(int(counts.max())))
            block = np.zeros((self.rows, width), np.int32)
            block[:, : min(width, tokens.shape[1] - start)] = tokens[:, start : start + width]
            logits, self.cache = self.sampler.prefill(
                self.params, put_batch(block, self.mesh), put_batch(counts.astype(np.int32), self.mesh), self.cache
            )
            self.logits = _merge_logits(self.logits, logits, put_batch(counts > 0, self.mesh))
            self.lengths = self.lengths + counts
            self.stats["prefill_calls"] += 1
            start += self.chunk
        self.stats["prefill_tokens"] += int(n.sum())

    def decode(self, budgets: Sequence[int], stop_ids) -> list[tuple[list[int], np.ndarray, bool]]:
        """Sample up to budgets[i] tokens for each row (0 or missing = skip); per row (tokens, logprobs,
        stopped)."""
        with mesh_context(self.mesh, self.rules):
            return self._decode(budgets, stop_ids)

    def _decode(self, budgets: Sequence[int], stop_ids) -> list[tuple[list[int], np.ndarray, bool]]:
        given = np.asarray(budgets, np.int64).reshape(-1)
        if len(given) > self.rows:
            raise ValueError(f"{len(given)} budgets for {self.rows} rows")
        budgets = np.zeros((self.rows,), np.int64)  # rows without a budget (padding rows) skip
        budgets[: len(given)] = np.clip(given, 0, self.sampler.max_new_tokens)
        if budgets.max(initial=0) <= 0:
            return [([], np.zeros((0,), np.float32), False)] * self.rows
        self._grow(int((self.lengths + budgets).max()))
        self.rng, key = jax.random.split(self.rng)
        start = self.lengths.copy()
        out = self.sampler.decode(
            self.params,
            self.logits,
            self.cache,
            put_batch(stop_table(stop_ids, self.rows), self.mesh),
            put_batch(budgets.astype(np.int32), self.mesh),
            key,
        )
        self.cache, self.logits = out.cache, out.logits
        # gather, not device_get: with several processes the rows live on other processes' devices too
        toks, lps, lens, stopped = multihost.gather((out.tokens, out.logprobs, out.lengths, out.stopped))
        lens = lens.astype(np.int64)
        self.lengths = self.lengths + lens
        steps = int(lens.max(initial=0))
        self.stats["decode_calls"] += 1
        self.stats["decode_steps"] += steps
        self.stats["kv_slots_read"] += steps * self.rows * self.cache.span
        # a live row at its k-th token of this call attends over start + k + 1 slots
        self.stats["kv_slots_useful"] += int((lens * start + lens * (lens + 1) // 2).sum())
        return [(toks[i, : lens[i]].tolist(), lps[i, : lens[i]], bool(stopped[i])) for i in range(self.rows)]

    def truncate(self, keep: Sequence[int]) -> None:
        """Row i keeps only the first keep[i] tokens of its context (capped at its length); its next-token
        logits are stale until the row is appended to, so append to every truncated row next."""
        keep = np.minimum(np.asarray(keep, np.int64), self.lengths)
        if np.array_equal(keep, self.lengths):
            return
        with mesh_context(self.mesh, self.rules):
            self.cache = self.cache.replace(lengths=put_batch(keep.astype(np.int32), self.mesh))
            self.lengths = keep
            self._shrink()

    def select(self, rows: Sequence[int]) -> None:
        """Keep (or repeat) the given rows, in that order: shrinks the batch or broadcasts a shared prefix."""
        idx = np.asarray(rows, np.int32)
        with mesh_context(self.mesh, self.rules):
            self.cache = take_rows(self.cache, put_batch(idx, self.mesh))
            self.logits = jnp.take(self.logits, put_batch(idx, self.mesh), axis=0)
            self.lengths = self.lengths[idx]
            self._shrink()
