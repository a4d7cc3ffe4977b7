"""A live batched KV cache on the host side (`DecodeSession`): append token deltas, decode, truncate, select
or copy rows. The thin stateful shell the multi-turn rollout engine drives: every device operation is one of
the pure jitted programs here (`programs`: cache and logits donated, outputs on the session's shardings) or
in `decode_loop.py`. Rows are episodes; each appends at its own length (`decode_step.DecodeCache`: no holes, no
compaction). Each call executes the operations `session_ops.operations` lists for it (`DecodeSession.operations`:
the same sequence, as data). Layout, memory and sizes: docs/sampling.md.

- Span: every call works on the cache's whole span, `buckets.span_bucket` of what the rows need: append
  and decode grow it to hold max_b(lengths[b] + written[b]); select, copy and truncate shrink it to
  max_b(lengths[b]) + max_new_tokens. A resize copies one layer's K or V at a time.
- Appends compute only the rows given tokens; the other rows are left bit for bit. On a mesh of m > 1 row
  shards an append is token-packed (`packed_prefill`): rows with no token yet by `sampling.packed`, rows
  with context by `sampling.packed_append`. Otherwise each chunk (at most `prefill_chunk` columns) runs over
  a sub-batch of its rows (`append_rows_impl`; built shard by shard, `row_shards.shard_local_rows`, so no
  K/V leaves a device), or over the whole batch when the sub-batch would be it (`append_all_impl`).
- Row copies (`copy_rows`, and `select` keeping the row count) write the sources' slot window into the
  destination rows in place, one layer's K or V at a time (`row_shards.copy_rows`). Only a change of the
  row count (`select` with fewer or more rows) makes new arrays, one layer at a time (`take_program`): the
  transient is one layer, not a second cache.
- The cache is donated to, and aliased by, every program but the row-count change
  (tests/sampling/test_session.py checks it with XLA's memory analysis).
- KV writes follow the Sampler's `kv_write` (`decode_step.block_write`): a scatter, or the dry run's
  footprint.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from rcgrpo_jax import multihost, sharding
from rcgrpo_jax.models import ModelConfig
from rcgrpo_jax.models.layers import MLP, RMSNorm
from rcgrpo_jax.sampling import buckets, decode_step, packed, packed_append, row_shards, session_ops
from rcgrpo_jax.sampling.decode_loop import (
    Sampler,
    batch_multiple,
    cache_sharding,
    logits_last,
    mesh_context,
    new_cache,
    prefill_impl,
    put_batch,
    stop_table,
)
from rcgrpo_jax.sampling.decode_step import DecodeCache
from rcgrpo_jax.sampling.next_token import SamplingParams
from rcgrpo_jax.sharding import constrain


@functools.partial(jax.jit, static_argnums=(1, 2))
def _resize(x: jax.Array, span: int, axis: int) -> jax.Array:
    """x with its slot axis cut or zero-padded to `span` (the rows' valid slots always fit)."""
    if x.shape[axis] >= span:
        return jax.lax.slice_in_dim(x, 0, span, axis=axis)
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, span - x.shape[axis])
    return jnp.pad(x, pad)


# ----------------------------------------------------------------------------- row-count changes


@functools.lru_cache(maxsize=64)
def take_program(out_sharding: jax.sharding.Sharding | None):
    """jnp.take(x, rows, axis=0), its output placed on `out_sharding` (None: where XLA puts it)."""
    take = functools.partial(jnp.take, axis=0)
    return jax.jit(take) if out_sharding is None else jax.jit(take, out_shardings=out_sharding)


def take_rows(cache: DecodeCache, rows: jax.Array, shardings: DecodeCache | None = None) -> DecodeCache:
    """A new cache of len(rows) rows, row i being the cache's row rows[i], each array placed on
    `shardings` (a `DecodeCache` of shardings, `sampler.cache_sharding`; None: where XLA puts it). Pure:
    the caller holds both caches until it drops the old one; `DecodeSession.select` makes the copy one
    layer at a time instead, freeing each old layer as it goes."""
    sh = shardings or DecodeCache(k=(None,) * len(cache.k), v=(None,) * len(cache.v), lengths=None)
    k = tuple(take_program(sh.k[i])(x, rows) for i, x in enumerate(cache.k))
    v = tuple(take_program(sh.v[i])(x, rows) for i, x in enumerate(cache.v))
    lengths = take_program(sh.lengths)(cache.lengths, rows)
    return DecodeCache(k=k, v=v, lengths=lengths, layout=cache.layout)


# ----------------------------------------------------------------------------- in-place programs


def _slot_window(x: jax.Array, slots: jax.Array, axis: int) -> jax.Array:
    """x [B, ...] (slots on `axis`) at slots [B, T] (clipped into range) -> [B, T, G, Dh]."""
    idx = jnp.minimum(slots, x.shape[axis] - 1)
    idx = idx[:, None, None, :] if axis == 3 else idx[:, None, :, None]
    got = jnp.take_along_axis(x, idx, axis=axis)  # [B, G, Dh, T] or [B, G, T, Dh]
    return jnp.transpose(got, (0, 3, 1, 2)) if axis == 3 else jnp.transpose(got, (0, 2, 1, 3))


def _put_slots(x: jax.Array, new: jax.Array, rows: jax.Array, slots: jax.Array, axis: int, mode: str) -> jax.Array:
    """x [R, ...] with new[b, t] ([B, T, G, Dh]) written at row rows[b], slot slots[b, t]; an out-of-range
    row or slot is dropped (the sub-batch's padding rows and padding tokens). mode "footprint":
    `decode_step.footprint_write`."""
    if mode == decode_step.FOOTPRINT:
        return decode_step.footprint_write(x, new)
    r = rows[:, None]
    if axis == 3:  # [R, G, Dh, S]
        return x.at[r, :, :, slots].set(new.astype(x.dtype), mode="drop")
    return x.at[r, :, slots, :].set(new.astype(x.dtype), mode="drop")  # [R, G, S, Dh]


def _kv_at(c: ModelConfig) -> tuple:
    """The cache's kv-head sharding (a PartitionSpec tail after the rows) on the mesh in context."""
    mesh = row_shards.batch_mesh()
    return () if mesh is None else (decode_step.kv_heads_axis(c.num_kv_heads, mesh),)


def _scatter_slots(x: jax.Array, new: jax.Array, idx: jax.Array, slots: jax.Array, axis: int, at: tuple, mode: str):
    """`_put_slots` at shard-local rows idx: each shard writes its own rows (`row_shards.scatter`)."""

    def write(xl, nl, i, sl):
        return _put_slots(xl, nl, i, sl, axis, mode)

    return row_shards.scatter(x, new, idx, at, new_at=(None,) + at, write=write, extra=slots)


def _add_rows(xl, nl, i, _):
    return xl.at[i].add(nl.astype(xl.dtype), mode="drop")


def _rows_forward(c: ModelConfig, weights, cache: DecodeCache, idx: jax.Array, tokens: jax.Array, counts, mode: str):
    """`decode_step.forward` over some of the cache's rows only: sub-batch row b is the cache row at the
    shard-local index idx[b] (`row_shards.shard_local_rows`; off a mesh, the row itself; the padding index
    is a padding row: it reads zeros and writes nothing). Row b appends its first counts[b] tokens of
    tokens[b] at that cache row's length. Each layer takes the sub-batch's K/V from the cache (on each
    device, from its own rows), runs the same attention as `decode_step.forward` over it, and writes the new
    slots back into their cache rows (in place when the cache is donated; `mode`: `decode_step.block_write`).
    Returns (final-normed hidden [B, T, D], cache with the rows' lengths += counts)."""
    b, t = tokens.shape
    dt, span, layout = c.jnp_dtype, cache.span, cache.layout
    lengths = row_shards.gather(cache.lengths, idx)
    slots = lengths[:, None] + jnp.arange(t, dtype=jnp.int32)[None]  # [B, T]
    write_slots = jnp.where(jnp.arange(t)[None] < counts[:, None], slots, span)  # padding: dropped
    kv_len = jnp.where(counts > 0, lengths + counts, 0).astype(jnp.int32)
    norm = RMSNorm(c.rms_norm_eps, dt, c.jnp_param_dtype)
    x = jnp.take(weights["embed"]["embedding"], tokens, axis=0).astype(dt)
    k_all, v_all = list(cache.k), list(cache.v)
    k_axis, at = cache.k_slot_axis, _kv_at(c)
    for i, p in enumerate(weights["layers"]):
        # Each layer's takes wait for the previous layer (they read only the cache and idx, so a scheduler
        # could otherwise hoist them all: every layer's sub-batch K/V alive at once).
        x, idx_i = jax.lax.optimization_barrier((x, idx))
        h = norm.apply({"params": p["input_norm"]}, x)
        k_rows, v_rows = row_shards.gather(k_all[i], idx_i, at), row_shards.gather(v_all[i], idx_i, at)
        a, k_sub, v_sub = decode_step.layer_attention(
            c, p["attn"], h, slots, write_slots, kv_len, k_rows, v_rows, layout, mode
        )
        k_new, v_new = _slot_window(k_sub, write_slots, k_axis), _slot_window(v_sub, write_slots, 2)
        k_all[i] = _scatter_slots(k_all[i], k_new, idx_i, write_slots, k_axis, at, mode)
        v_all[i] = _scatter_slots(v_all[i], v_new, idx_i, write_slots, 2, at, mode)
        x = x + a
        x = x + MLP(c).apply({"params": p["mlp"]}, norm.apply({"params": p["post_attn_norm"]}, x))
        x = constrain(x, ("batch", "seq", "hidden"))
    x = norm.apply({"params": weights["final_norm"]}, x)
    new_lengths = row_shards.scatter(cache.lengths, counts.astype(jnp.int32), idx, write=_add_rows)
    return x, DecodeCache(k=tuple(k_all), v=tuple(v_all), lengths=new_lengths, layout=layout)


def _last_logits(s: Sampler, weights, hidden: jax.Array, counts: jax.Array) -> jax.Array:
    last = jnp.take_along_axis(hidden, jnp.maximum(counts - 1, 0)[:, None, None], axis=1)[:, 0]
    return logits_last(s.config, weights, last)


def append_rows_impl(s: Sampler, params, cache: DecodeCache, logits, idx, tokens, counts):
    """Append tokens [B, T] (counts [B] real) to the cache rows at the shard-local indices idx [B]
    (`_rows_forward`): their K/V, lengths and next-token logits (logits [R, V]) updated in place. Returns
    (cache, logits)."""
    weights = decode_step.layer_weights(params)
    counts = counts.astype(jnp.int32)
    mode = decode_step.block_write(s.kv_write)
    hidden, cache = _rows_forward(s.config, weights, cache, idx, tokens.astype(jnp.int32), counts, mode)
    new = _last_logits(s, weights, hidden, counts)
    return cache, row_shards.scatter(logits, new, idx)


def append_all_impl(s: Sampler, params, cache: DecodeCache, logits, tokens, counts):
    """Append tokens [R, T] (counts [R]; 0 = the row is left as it is) to every row. Returns (cache,
    logits), the logits of rows with counts 0 unchanged."""
    new, cache = prefill_impl(s, params, tokens, counts, cache)
    return cache, jnp.where((counts > 0)[:, None], new.astype(logits.dtype), logits)


@functools.partial(jax.jit, static_argnames=("window", "axis", "at", "mode"), donate_argnums=0)
def copy_array(x: jax.Array, src, dst, *, window: int, axis: int, at: tuple = (), mode: str = "scatter") -> jax.Array:
    """One array's rows dst [B] become copies of rows src [B] on their first `window` slots along `axis`
    (read before any is written; a dst past the rows is padding: dropped), in place (`row_shards.copy_rows`):
    one layer's K or V, or the logits. mode "footprint": `decode_step.footprint_write`."""
    return row_shards.copy_rows(x, src, dst, window, axis, at, mode)


@functools.lru_cache(maxsize=32)
def programs(config: ModelConfig, mesh: Mesh | None, layout: str) -> dict[str, jax.stages.Wrapped]:
    """The session's jitted in-place programs, the cache (and logits) donated and their outputs placed on
    the shardings the session keeps them on (rows over data+fsdp; no mesh: XLA's default)."""
    outs = {}
    if mesh is not None:
        outs = {"out_shardings": (cache_sharding(config, mesh, layout), sharding.batch_sharding(mesh, 2))}
    return {
        "append_rows": jax.jit(append_rows_impl, static_argnums=0, donate_argnums=(2, 3), **outs),
        "append_all": jax.jit(append_all_impl, static_argnums=0, donate_argnums=(2, 3), **outs),
        "prefill_packed": jax.jit(packed.prefill_impl, static_argnums=0, donate_argnums=(2, 3), **outs),
        "append_packed": jax.jit(packed_append.append_impl, static_argnums=0, donate_argnums=(2, 3), **outs),
    }


@functools.lru_cache(maxsize=32)
def _logits_maker(rows: int, vocab: int, mesh: Mesh | None):
    make = functools.partial(jnp.zeros, (rows, vocab), jnp.float32)
    return jax.jit(make) if mesh is None else jax.jit(make, out_shardings=sharding.batch_sharding(mesh, 2))


class DecodeSession:
    """Episodes' live contexts as rows of one KV cache.

    capacity: the most slots a row may hold (its longest context plus one decode call's budget); the
    span never exceeds it. span: the initial span (default the smallest bucket). min_span: the
    smallest span a resize goes to. decode_attention: auto | xla | ragged | tokamax (`decode_step.
    select_decode_attention`): the decode attention, hence the cache's layout, for the session's life.
    packed_prefill: appends are token-packed over the row shards, rows that hold no token yet by
    `sampling.packed`, the others by `sampling.packed_append`; None = on a mesh of more than one row shard
    (off one, the sub-batch already computes about its own rows).
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
        packed_prefill: bool | None = None,
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
        self.logits = _logits_maker(rows, config.vocab_size, mesh)()
        self.rng = jax.random.key(0) if rng is None else rng
        self.row_multiple = batch_multiple(mesh)  # a sub-batch's rows: a multiple of the row shards
        self.packed_prefill = self.row_multiple > 1 if packed_prefill is None else bool(packed_prefill)
        self.stats = {
            "prefill_calls": 0,
            "decode_calls": 0,
            "resizes": 0,
            "prefill_tokens": 0,
            "prefill_rows_computed": 0,  # sub-batch rows x block width over all prefill calls
            "packed_calls": 0,  # token-packed prefills of fresh rows (`sampling.packed`)
            "packed_tokens_computed": 0,  # their token slots (row shards x tokens per shard)
            "packed_pairs_computed": 0,  # their attention's (query, key) pairs (row shards x pairs x block sizes)
            "row_copies": 0,  # in-place sibling-row copies (`copy_rows`)
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

    @property
    def _programs(self) -> dict[str, jax.stages.Wrapped]:
        return programs(self.config, self.mesh, self.layout)

    def _per_layer(self, k_fn, v_fn, lengths_fn=None) -> None:
        """Replace each layer's K by k_fn(K) and V by v_fn(V) (and the lengths by lengths_fn's), one layer
        at a time. The session lets go of its cache first, so each old layer is freed once its copy is made:
        the transient is one layer, not a second cache (as long as nobody else holds the cache)."""
        cache, self.cache = self.cache, None
        k, v, lengths, layout = list(cache.k), list(cache.v), cache.lengths, cache.layout
        del cache
        for i in range(len(k)):
            k[i] = k_fn(k[i])
            v[i] = v_fn(v[i])
        lengths = lengths if lengths_fn is None else lengths_fn(lengths)
        self.cache = DecodeCache(k=tuple(k), v=tuple(v), lengths=lengths, layout=layout)

    @property
    def sizes(self) -> session_ops.Sizes:
        """The settings its operations depend on (`session_ops.Sizes`)."""
        return session_ops.Sizes(
            self.capacity, self.sampler.max_new_tokens, self.chunk, self.min_span, self.packed_prefill
        )

    @property
    def state(self) -> session_ops.State:
        """Its rows' lengths and span (`session_ops.State`)."""
        return session_ops.State(tuple(int(x) for x in self.lengths), self.cache.span)

    def operations(self, call: session_ops.Call) -> list[tuple[session_ops.Operation, session_ops.State]]:
        """What `call` would run from here, in order, each operation with the state after it
        (`session_ops.operations`, the sequence the session's own calls execute)."""
        return session_ops.operations(self.sizes, self.state, call)

    def _run(self, op: session_ops.Operation, after: session_ops.State) -> None:
        """Run one operation that computes no tokens (resize, truncate, row copy or take), then hold `after`."""
        if isinstance(op, session_ops.Resize):
            axis = self.cache.k_slot_axis
            self._per_layer(lambda x: _resize(x, op.span, axis), lambda x: _resize(x, op.span, 2))
            self.stats["resizes"] += 1
        elif isinstance(op, session_ops.SetLengths):
            self.cache = self.cache.replace(lengths=put_batch(np.asarray(op.lengths, np.int32), self.mesh))
        elif isinstance(op, session_ops.CopyRows):
            calls = self._copy_calls(op)
            self._per_layer(*(functools.partial(program, **kw) for program, kw in calls[:2]))
            program, kw = calls[2]
            self.logits = program(self.logits, **kw)
            self.cache = self.cache.replace(lengths=put_batch(np.asarray(after.lengths, np.int32), self.mesh))
            self.stats["row_copies"] += 1
        elif isinstance(op, session_ops.TakeRows):
            self._take(np.asarray(op.rows, np.int32))
        else:
            raise TypeError(f"{type(op).__name__} computes tokens: run it through append or decode")
        self.lengths = np.asarray(after.lengths, np.int64)

    def _take(self, idx: np.ndarray) -> None:
        """The rows become rows idx of the old ones, a new cache made one layer at a time (`take_rows`)."""
        rows = put_batch(idx, self.mesh)
        if self.mesh is None:
            kv = lens = logits = None
        else:
            kv = cache_sharding(self.config, self.mesh, self.layout).v[0]
            lens, logits = sharding.batch_sharding(self.mesh, 1), sharding.batch_sharding(self.mesh, 2)
        take = take_program(kv)
        self._per_layer(lambda x: take(x, rows), lambda x: take(x, rows), lambda x: take_program(lens)(x, rows))
        self.logits = take_program(logits)(self.logits, rows)

    def append(self, deltas: Sequence[Sequence[int]]) -> None:
        """Append deltas[i] to row i (empty = nothing); rows given a delta get fresh next-token logits.
        Only the rows given a delta are computed (module docstring); the others are left bit for bit."""
        with mesh_context(self.mesh, self.rules):
            for program, args in self._append_calls(deltas):
                self.cache, self.logits = program(*args)

    def lower_append(self, deltas: Sequence[Sequence[int]]) -> list[jax.stages.Lowered]:
        """The programs `append(deltas)` would run, one per chunk, lowered and not run (XLA's cost and
        memory analyses of an admission: `.compile().cost_analysis()`). The span grows as append's would;
        nothing else changes."""
        with mesh_context(self.mesh, self.rules):
            return [program.lower(*args) for program, args in self._append_calls(deltas, run=False)]

    def _append_calls(self, deltas: Sequence[Sequence[int]], run: bool = True):
        """Yields (program, args) for each forward of `session_ops.operations(Append(deltas))` (a resize
        runs in place). With run=True the caller runs each before the next is made (its args hold the
        current cache), and the host-side lengths and stats advance with them."""
        deltas = tuple(list(d) for d in deltas)
        for op, after in self.operations(session_ops.Append(deltas)):
            if isinstance(op, session_ops.Resize):
                self._run(op, dataclasses.replace(self.state, span=op.span))
                continue
            program, args, counted = self._forward(op, deltas)
            yield program, args
            if run:
                self.lengths = np.asarray(after.lengths, np.int64)
                for key, n in counted.items():
                    self.stats[key] += n

    def _forward(self, op: session_ops.Operation, deltas: tuple[list[int], ...]):
        """(program, args, the stats it adds) of one forward operation: a packed prefill, a packed append or
        a row-block chunk (over a sub-batch of its rows, or the whole batch when the sub-batch would be it)."""
        args = (self.sampler, self.params, self.cache, self.logits)
        if isinstance(op, session_ops.PackedPrefill):
            a = packed.arrays(op.forward, deltas, self.row_multiple, self.rows)
            args += tuple(put_batch(x, self.mesh) for x in (a.tokens, a.rows, a.slots, a.pair_block, a.pair_start))
            args += tuple(self._replicated(x) for x in (a.last, a.last_rows, a.counts))
            pairs = len(a.pair_block) * packed.QUERY_BLOCK**2
            return self._programs["prefill_packed"], args, self._packed_stats(op.forward.tokens, len(a.tokens), pairs)
        if isinstance(op, session_ops.PackedAppend):
            a = packed_append.arrays(op.forward, deltas, self.row_multiple, self.rows, self.span)
            args += tuple(put_batch(x, self.mesh) for x in (a.tokens, a.rows, a.slots) + a.blocks)
            args += tuple(self._replicated(x) for x in (a.last, a.last_rows, a.lengths))
            pairs = len(a.pair_block) * packed_append.BLOCK * packed_append.key_block(self.span)
            return self._programs["append_packed"], args, self._packed_stats(op.forward.tokens, len(a.tokens), pairs)
        start, counts, width = op.start, np.asarray(op.counts, np.int64), op.width
        live = np.flatnonzero(counts)
        idx = row_shards.shard_local_rows(live, self.rows, self.row_multiple)
        counted = {"prefill_calls": 1, "prefill_tokens": int(counts.sum()), "prefill_rows_computed": len(idx) * width}
        if len(idx) == self.rows:  # the bucket is the whole batch: no gather
            block = np.zeros((self.rows, width), np.int32)
            for r in live:
                block[r, : counts[r]] = deltas[r][start : start + counts[r]]
            args += (put_batch(block, self.mesh), put_batch(counts.astype(np.int32), self.mesh))
            return self._programs["append_all"], args, counted
        block = np.zeros((len(idx), width), np.int32)
        sub_counts = np.zeros((len(idx),), np.int32)
        for j, r in enumerate(row_shards.global_rows(idx, self.rows, self.row_multiple)):
            if r >= 0:  # -1: a padding row (its index is past its shard's rows: dropped)
                block[j, : counts[r]] = deltas[r][start : start + counts[r]]
                sub_counts[j] = counts[r]
        args += (put_batch(idx, self.mesh), put_batch(block, self.mesh), put_batch(sub_counts, self.mesh))
        return self._programs["append_rows"], args, counted

    @staticmethod
    def _packed_stats(tokens: int, computed: int, pairs: int) -> dict[str, int]:
        return {
            "prefill_calls": 1,
            "prefill_tokens": tokens,
            "packed_calls": 1,
            "packed_tokens_computed": computed,
            "packed_pairs_computed": pairs,
        }

    def _replicated(self, x: np.ndarray) -> jax.Array:
        """A small index array whole on every device."""
        if self.mesh is None:
            return jnp.asarray(x)
        return multihost.place(x, sharding.replicated(self.mesh))

    def decode(self, budgets: Sequence[int], stop_ids) -> list[tuple[list[int], np.ndarray, bool]]:
        """Sample up to budgets[i] tokens for each row (0 or missing = skip); per row (tokens, logprobs,
        stopped)."""
        with mesh_context(self.mesh, self.rules):
            return self._decode(budgets, stop_ids)

    def _decode(self, budgets: Sequence[int], stop_ids) -> list[tuple[list[int], np.ndarray, bool]]:
        ops = self.operations(session_ops.Decode(tuple(int(b) for b in np.asarray(budgets).reshape(-1))))
        if not ops:
            return [([], np.zeros((0,), np.float32), False)] * self.rows
        for op, after in ops[:-1]:
            self._run(op, after)
        budgets = np.asarray(ops[-1][0].budgets, np.int32)  # clipped to max_new_tokens; padding rows skip
        self.rng, key = jax.random.split(self.rng)
        start = self.lengths.copy()
        out = self.sampler.decode(
            self.params,
            self.logits,
            self.cache,
            put_batch(stop_table(stop_ids, self.rows), self.mesh),
            put_batch(budgets, self.mesh),
            key,
        )
        self.cache, self.logits = out.cache, out.logits
        # gather, not device_get: with several processes the rows live on other processes' devices too
        toks, lps, lens, stopped = multihost.gather((out.tokens, out.logprobs, out.lengths, out.stopped))
        lens = lens.astype(np.int64)
        self.lengths = np.asarray(self.state.advanced(lens).lengths, np.int64)
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
        self._run_all(session_ops.Truncate(tuple(int(k) for k in keep)))

    def select(self, rows: Sequence[int]) -> None:
        """Keep (or repeat) the given rows, in that order: shrinks the batch or broadcasts a shared prefix.
        With as many rows as the session has, only the rows that change are written, in place
        (`copy_rows`); another row count makes a new cache, one layer at a time (`take_rows`)."""
        idx = np.asarray(rows, np.int64).reshape(-1)
        if len(idx) == 0 or idx.min() < 0 or idx.max() >= self.rows:
            raise ValueError(f"rows: each of {len(idx)} must be in [0, {self.rows}), at least one")
        self._run_all(session_ops.Select(tuple(int(r) for r in idx)))

    def copy_rows(self, src: Sequence[int], dst: Sequence[int]) -> None:
        """Row dst[i] becomes a copy of row src[i] (its context, K/V and next-token logits), in place: the
        sources are read before any row is written, so a permutation is fine; no dst may repeat. Copies
        the sources' slots up to a bucket of the longest source (`buckets.span_bucket`), not the span."""
        self._run_all(self._copy_call(src, dst))

    def _copy_call(self, src: Sequence[int], dst: Sequence[int]) -> session_ops.Copy:
        src, dst = np.asarray(src, np.int64).reshape(-1), np.asarray(dst, np.int64).reshape(-1)
        if src.shape != dst.shape:
            raise ValueError(f"copy_rows: src has {len(src)} rows, dst {len(dst)}")
        if len(dst) and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= self.rows):
            raise ValueError(f"copy_rows: src and dst must be rows in [0, {self.rows})")
        if len(np.unique(dst)) != len(dst):
            raise ValueError("copy_rows: dst repeats a row")
        return session_ops.Copy(tuple(int(r) for r in src), tuple(int(r) for r in dst))

    def perform(self, call: session_ops.Call) -> None:
        """Run a call that samples nothing (`session_ops.Append`, `Truncate`, `Select` or `Copy`: `append`,
        `truncate`, `select` or `copy_rows`)."""
        if isinstance(call, session_ops.Append):
            return self.append(call.deltas)
        if isinstance(call, session_ops.Truncate):
            return self.truncate(call.keep)
        if isinstance(call, session_ops.Select):
            return self.select(call.rows)
        if isinstance(call, session_ops.Copy):
            return self.copy_rows(call.src, call.dst)
        raise TypeError(f"perform runs calls that sample nothing, not {call!r} (`decode`)")

    def _run_all(self, call: session_ops.Call) -> None:
        with mesh_context(self.mesh, self.rules):
            for op, after in self.operations(call):
                self._run(op, after)

    def _copy_calls(self, op: session_ops.CopyRows):
        """(program, keyword args but the array) of the copy of each layer's K, each layer's V, the logits."""
        sub = buckets.row_bucket(len(op.dst), self.rows, self.row_multiple)
        s, d = np.zeros((sub,), np.int32), np.full((sub,), self.rows, np.int32)  # padding: dropped
        s[: len(op.src)], d[: len(op.dst)] = op.src, op.dst
        at = () if self.mesh is None else (decode_step.kv_heads_axis(self.config.num_kv_heads, self.mesh),)
        idx = {"src": self._replicated(s), "dst": self._replicated(d)}
        mode = decode_step.block_write(self.sampler.kv_write)
        window = op.window
        return [
            (copy_array, {**idx, "window": window, "axis": self.cache.k_slot_axis, "at": at, "mode": mode}),
            (copy_array, {**idx, "window": window, "axis": 2, "at": at, "mode": mode}),
            (copy_array, {**idx, "window": self.config.vocab_size, "axis": 1, "mode": mode}),
        ]

    def lower_copy_rows(self, src: Sequence[int], dst: Sequence[int]) -> list[jax.stages.Lowered]:
        """The programs `copy_rows(src, dst)` would run, lowered and not run: one layer's K copy (the same
        program runs for every layer), one layer's V copy, the logits' copy."""
        ops = [op for op, _ in self.operations(self._copy_call(src, dst)) if isinstance(op, session_ops.CopyRows)]
        with mesh_context(self.mesh, self.rules):
            calls = self._copy_calls(ops[0])
            arrays = (self.cache.k[0], self.cache.v[0], self.logits)
            return [program.lower(x, **kw) for (program, kw), x in zip(calls, arrays)]
