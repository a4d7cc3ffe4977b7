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

Only the rows that have tokens are computed. Each chunk of an append (a prompt, a tool result, a group's
shared prefix) gathers the n rows it writes to into a sub-batch of `buckets.row_bucket(n, rows, m)` rows
(m = the batch-sharding size, 1 off a mesh; the rows past the n real ones are padding, with an
out-of-range row index, so their writes are dropped), runs the forward over the sub-batch, and scatters
the new slots' K/V, the lengths and the next-token logits back into those rows of the session's donated
cache. Admitting one group's prefix into a 160-row session computes about one row, not 160 (on a mesh
of m row shards, m rows: one per shard, so a device computes what one row costs). When the
bucket reaches the session's rows, the forward runs over the whole batch as it is (no gather). Copying
a group's prefix to its sibling rows (`select` keeping the row count, or `copy_rows`) is a donated
in-place scatter of the source rows' slot window into the sibling rows. Only a change of the row count
(`select` with fewer or more rows: a shrink, a broadcast of group rows) makes new arrays, one layer at a
time (`DecodeSession._per_layer` over `take_rows`' per-array program).

What each device program allocates beyond its inputs (the cache is donated, and aliased to the output, in
all but the row-count change; tests/sampling/test_session.py checks the aliases and the temporaries with XLA's
memory analysis):
  `_append_rows` (a sub-batch of `sub` rows, a block of T tokens)  per layer, the sub-batch's K and V
      (sub x span slots, gathered from the cache), its activations and attention scores; the logits
      [sub, V]. It writes T slots per real row and layer into the cache, in place.
  `_append_all` (the whole batch)  the activations of [rows, T] tokens; each layer's K/V is written in
      the cache in place (`decode_step.forward`), the logits merged in place.
  `_copy_rows` (`sub` destination rows, a window of W slots)  per layer, the sources' window (sub x W
      slots), written into the destination rows in place.
  `select` to a new row count R (`_take_program`, once per layer's K and V)  that array's copy (R rows),
      placed on the cache's sharding (out_shardings); the session drops the old layer before the next
      one is copied, so the transient is one layer, not a second cache. A buffer of another shape cannot
      alias the old one, so donating it would save nothing.
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
from rcgrpo_jax.models.layers import MLP, RMSNorm
from rcgrpo_jax.sampling import buckets, decode_step
from rcgrpo_jax.sampling.decode_step import DecodeCache
from rcgrpo_jax.sampling.sample_fns import SamplingParams
from rcgrpo_jax.sampling.sampler import (
    Sampler,
    _logits_last,
    _prefill_impl,
    batch_multiple,
    cache_sharding,
    mesh_context,
    new_cache,
    put_batch,
    stop_table,
)
from rcgrpo_jax.sharding import constrain


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


# ----------------------------------------------------------------------------- row-count changes


@functools.lru_cache(maxsize=64)
def _take_program(out_sharding: jax.sharding.Sharding | None):
    """jnp.take(x, rows, axis=0), its output placed on `out_sharding` (None: where XLA puts it)."""
    take = functools.partial(jnp.take, axis=0)
    return jax.jit(take) if out_sharding is None else jax.jit(take, out_shardings=out_sharding)


def take_rows(cache: DecodeCache, rows: jax.Array, shardings: DecodeCache | None = None) -> DecodeCache:
    """A new cache of len(rows) rows, row i being the cache's row rows[i], each array placed on
    `shardings` (a `DecodeCache` of shardings, `sampler.cache_sharding`; None: where XLA puts it). Pure:
    the caller holds both caches until it drops the old one; `DecodeSession.select` makes the copy one
    layer at a time instead, freeing each old layer as it goes."""
    sh = shardings or DecodeCache(k=(None,) * len(cache.k), v=(None,) * len(cache.v), lengths=None)
    k = tuple(_take_program(sh.k[i])(x, rows) for i, x in enumerate(cache.k))
    v = tuple(_take_program(sh.v[i])(x, rows) for i, x in enumerate(cache.v))
    lengths = _take_program(sh.lengths)(cache.lengths, rows)
    return DecodeCache(k=k, v=v, lengths=lengths, layout=cache.layout)


# ----------------------------------------------------------------------------- in-place programs


def _slot_window(x: jax.Array, slots: jax.Array, axis: int) -> jax.Array:
    """x [B, ...] (slots on `axis`) at slots [B, T] (clipped into range) -> [B, T, G, Dh]."""
    idx = jnp.minimum(slots, x.shape[axis] - 1)
    idx = idx[:, None, None, :] if axis == 3 else idx[:, None, :, None]
    got = jnp.take_along_axis(x, idx, axis=axis)  # [B, G, Dh, T] or [B, G, T, Dh]
    return jnp.transpose(got, (0, 3, 1, 2)) if axis == 3 else jnp.transpose(got, (0, 2, 1, 3))


def _put_slots(x: jax.Array, new: jax.Array, rows: jax.Array, slots: jax.Array, axis: int) -> jax.Array:
    """x [R, ...] with new[b, t] ([B, T, G, Dh]) written at row rows[b], slot slots[b, t]; an out-of-range
    row or slot is dropped (the sub-batch's padding rows and padding tokens)."""
    r = rows[:, None]
    if axis == 3:  # [R, G, Dh, S]
        return x.at[r, :, :, slots].set(new.astype(x.dtype), mode="drop")
    return x.at[r, :, slots, :].set(new.astype(x.dtype), mode="drop")  # [R, G, S, Dh]


def _rows_forward(c: ModelConfig, weights, cache: DecodeCache, rows: jax.Array, tokens: jax.Array, counts):
    """`decode_step.forward` over the cache's rows `rows` [B] only (B <= the cache's rows; an index past
    them is a padding row: it reads zeros and writes nothing). Row b of the sub-batch appends its first
    counts[b] tokens of tokens[b] at the length of cache row rows[b]. Each layer gathers the sub-batch's
    K/V, runs the same attention as `decode_step.forward` over it, and scatters the new slots back into
    their cache rows (in place when the cache is donated). Returns (final-normed hidden [B, T, D], cache
    with lengths[rows] += counts)."""
    b, t = tokens.shape
    dt, span, layout = c.jnp_dtype, cache.span, cache.layout
    take = functools.partial(jnp.take, indices=rows, axis=0, mode="fill", fill_value=0)
    lengths = take(cache.lengths)
    slots = lengths[:, None] + jnp.arange(t, dtype=jnp.int32)[None]  # [B, T]
    write_slots = jnp.where(jnp.arange(t)[None] < counts[:, None], slots, span)  # padding: dropped
    kv_len = jnp.where(counts > 0, lengths + counts, 0).astype(jnp.int32)
    norm = RMSNorm(c.rms_norm_eps, dt, c.jnp_param_dtype)
    x = jnp.take(weights["embed"]["embedding"], tokens, axis=0).astype(dt)
    k_all, v_all = list(cache.k), list(cache.v)
    k_axis = cache.k_slot_axis
    for i, p in enumerate(weights["layers"]):
        h = norm.apply({"params": p["input_norm"]}, x)
        a, k_sub, v_sub = decode_step._attention(
            c, p["attn"], h, slots, write_slots, kv_len, take(k_all[i]), take(v_all[i]), layout, "scatter"
        )
        k_all[i] = _put_slots(k_all[i], _slot_window(k_sub, write_slots, k_axis), rows, write_slots, k_axis)
        v_all[i] = _put_slots(v_all[i], _slot_window(v_sub, write_slots, 2), rows, write_slots, 2)
        x = x + a
        x = x + MLP(c).apply({"params": p["mlp"]}, norm.apply({"params": p["post_attn_norm"]}, x))
        x = constrain(x, ("batch", "seq", "hidden"))
    x = norm.apply({"params": weights["final_norm"]}, x)
    new_lengths = cache.lengths.at[rows].add(counts.astype(jnp.int32), mode="drop")
    return x, DecodeCache(k=tuple(k_all), v=tuple(v_all), lengths=new_lengths, layout=layout)


def _last_logits(s: Sampler, weights, hidden: jax.Array, counts: jax.Array) -> jax.Array:
    last = jnp.take_along_axis(hidden, jnp.maximum(counts - 1, 0)[:, None, None], axis=1)[:, 0]
    return _logits_last(s.config, weights, last)


def _append_rows_impl(s: Sampler, params, cache: DecodeCache, logits, rows, tokens, counts):
    """Append tokens [B, T] (counts [B] real) to the cache rows `rows` [B] (>= the cache's rows: padding):
    their K/V, lengths and next-token logits (logits [R, V]) updated in place. Returns (cache, logits)."""
    weights = decode_step.layer_weights(params)
    counts = counts.astype(jnp.int32)
    hidden, cache = _rows_forward(s.config, weights, cache, rows, tokens.astype(jnp.int32), counts)
    new = _last_logits(s, weights, hidden, counts)
    return cache, logits.at[rows].set(new.astype(logits.dtype), mode="drop")


def _append_all_impl(s: Sampler, params, cache: DecodeCache, logits, tokens, counts):
    """Append tokens [R, T] (counts [R]; 0 = the row is left as it is) to every row. Returns (cache,
    logits), the logits of rows with counts 0 unchanged."""
    new, cache = _prefill_impl(s, params, tokens, counts, cache)
    return cache, jnp.where((counts > 0)[:, None], new.astype(logits.dtype), logits)


def _copy_rows_impl(cache: DecodeCache, logits, src, dst, window: int):
    """Rows dst [B] become copies of rows src [B] (read before any is written; a dst past the cache's rows
    is padding: dropped): their first `window` slots of K/V (the caller keeps the sources' lengths <=
    window), lengths and logits. Returns (cache, logits)."""
    take = functools.partial(jnp.take, indices=src, axis=0, mode="clip")
    k = tuple(_set_window(x, jax.lax.slice_in_dim(take(x), 0, window, axis=cache.k_slot_axis), dst) for x in cache.k)
    v = tuple(_set_window(x, jax.lax.slice_in_dim(take(x), 0, window, axis=2), dst) for x in cache.v)
    lengths = cache.lengths.at[dst].set(take(cache.lengths), mode="drop")
    return cache.replace(k=k, v=v, lengths=lengths), logits.at[dst].set(take(logits), mode="drop")


def _set_window(x: jax.Array, part: jax.Array, dst: jax.Array) -> jax.Array:
    """x [R, G, ., .] with part [B, G, ., .] written at rows dst from slot 0 on (the axis where the shapes
    differ is the slot axis); a dst out of range is dropped."""
    idx = (dst,) + tuple(slice(0, n) for n in part.shape[1:])
    return x.at[idx].set(part, mode="drop")


@functools.lru_cache(maxsize=32)
def _programs(config: ModelConfig, mesh: Mesh | None, layout: str) -> dict[str, jax.stages.Wrapped]:
    """The session's jitted in-place programs, the cache (and logits) donated and their outputs placed on
    the shardings the session keeps them on (rows over data+fsdp; no mesh: XLA's default)."""
    outs = {}
    if mesh is not None:
        outs = {"out_shardings": (cache_sharding(config, mesh, layout), sharding.batch_sharding(mesh, 2))}
    return {
        "append_rows": jax.jit(_append_rows_impl, static_argnums=0, donate_argnums=(2, 3), **outs),
        "append_all": jax.jit(_append_all_impl, static_argnums=0, donate_argnums=(2, 3), **outs),
        "copy_rows": jax.jit(_copy_rows_impl, static_argnums=4, donate_argnums=(0, 1), **outs),
    }


@functools.lru_cache(maxsize=32)
def _logits_maker(rows: int, vocab: int, mesh: Mesh | None):
    make = functools.partial(jnp.zeros, (rows, vocab), jnp.float32)
    return jax.jit(make) if mesh is None else jax.jit(make, out_shardings=sharding.batch_sharding(mesh, 2))


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
        self.logits = _logits_maker(rows, config.vocab_size, mesh)()
        self.rng = jax.random.key(0) if rng is None else rng
        self.row_multiple = batch_multiple(mesh)  # a sub-batch's rows: a multiple of the row shards
        self.stats = {
            "prefill_calls": 0,
            "decode_calls": 0,
            "resizes": 0,
            "prefill_tokens": 0,
            "prefill_rows_computed": 0,  # sub-batch rows x block width over all prefill calls
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
        return _programs(self.config, self.mesh, self.layout)

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

    def _resize(self, span: int) -> None:
        if span == self.cache.span:
            return
        axis = self.cache.k_slot_axis
        self._per_layer(lambda x: _resize(x, span, axis), lambda x: _resize(x, span, 2))
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
        """Append deltas[i] to row i (empty = nothing); rows given a delta get fresh next-token logits.
        Only the rows given a delta are computed (module docstring); the others are left bit for bit."""
        with mesh_context(self.mesh, self.rules):
            for program, args, _ in self._append_calls(deltas):
                self.cache, self.logits = program(*args)

    def lower_append(self, deltas: Sequence[Sequence[int]]) -> list[jax.stages.Lowered]:
        """The programs `append(deltas)` would run, one per chunk, lowered and not run (XLA's cost and
        memory analyses of an admission: `.compile().cost_analysis()`). The span grows as append's would;
        nothing else changes."""
        with mesh_context(self.mesh, self.rules):
            return [program.lower(*args) for program, args, _ in self._append_calls(deltas, run=False)]

    def _append_calls(self, deltas: Sequence[Sequence[int]], run: bool = True):
        """Yields (program, args, rows computed) for each chunk of `deltas` (pieces of at most prefill_chunk
        columns, each of a bucketed width, over the rows that still have tokens in it). With run=True the
        caller runs each before the next is made (its args hold the current cache), and the host-side
        lengths and stats advance with them."""
        deltas = [list(d) for d in deltas]
        if len(deltas) > self.rows:
            raise ValueError(f"deltas: {len(deltas)} rows given to a session of {self.rows}")
        deltas += [[] for _ in range(self.rows - len(deltas))]
        n = np.array([len(d) for d in deltas], np.int64)
        if n.max(initial=0) == 0:
            return
        self._grow(int((self.lengths + n).max()))
        lengths = self.lengths.copy()
        for start in range(0, int(n.max()), self.chunk):
            counts = np.clip(n - start, 0, self.chunk)
            live = np.flatnonzero(counts)
            width = min(self.chunk, buckets.length_bucket(int(counts.max())))
            sub = buckets.row_bucket(len(live), self.rows, self.row_multiple)
            if sub == self.rows:  # the bucket is the whole batch: no gather
                block = np.zeros((self.rows, width), np.int32)
                for r in live:
                    block[r, : counts[r]] = deltas[r][start : start + counts[r]]
                args = (self.sampler, self.params, self.cache, self.logits)
                args += (put_batch(block, self.mesh), put_batch(counts.astype(np.int32), self.mesh))
                program = self._programs["append_all"]
            else:
                idx = np.full((sub,), self.rows, np.int32)  # padding rows: out of range, dropped
                idx[: len(live)] = live
                block = np.zeros((sub, width), np.int32)
                sub_counts = np.zeros((sub,), np.int32)
                for j, r in enumerate(live):
                    block[j, : counts[r]] = deltas[r][start : start + counts[r]]
                    sub_counts[j] = counts[r]
                args = (self.sampler, self.params, self.cache, self.logits, self._replicated(idx))
                args += (put_batch(block, self.mesh), put_batch(sub_counts, self.mesh))
                program = self._programs["append_rows"]
            yield program, args, sub
            if run:
                lengths = lengths + counts
                self.lengths = lengths
                self.stats["prefill_calls"] += 1
                self.stats["prefill_rows_computed"] += sub * width
        if run:
            self.stats["prefill_tokens"] += int(n.sum())

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
        """Keep (or repeat) the given rows, in that order: shrinks the batch or broadcasts a shared prefix.
        With as many rows as the session has, only the rows that change are written, in place
        (`copy_rows`); another row count makes a new cache, one layer at a time (`take_rows`)."""
        idx = np.asarray(rows, np.int64).reshape(-1)
        if len(idx) == 0 or idx.min() < 0 or idx.max() >= self.rows:
            raise ValueError(f"rows: each of {len(idx)} must be in [0, {self.rows}), at least one")
        if len(idx) == self.rows:
            changed = np.flatnonzero(idx != np.arange(self.rows))
            self.copy_rows(idx[changed], changed)
            with mesh_context(self.mesh, self.rules):
                self._shrink()
            return
        with mesh_context(self.mesh, self.rules):
            rows = put_batch(idx.astype(np.int32), self.mesh)
            if self.mesh is None:
                kv = lens = logits = None
            else:
                kv = cache_sharding(self.config, self.mesh, self.layout).v[0]
                lens, logits = sharding.batch_sharding(self.mesh, 1), sharding.batch_sharding(self.mesh, 2)
            take = _take_program(kv)
            self._per_layer(lambda x: take(x, rows), lambda x: take(x, rows), lambda x: _take_program(lens)(x, rows))
            self.logits = _take_program(logits)(self.logits, rows)
            self.lengths = self.lengths[idx]
            self._shrink()

    def copy_rows(self, src: Sequence[int], dst: Sequence[int]) -> None:
        """Row dst[i] becomes a copy of row src[i] (its context, K/V and next-token logits), in place: the
        sources are read before any row is written, so a permutation is fine; no dst may repeat. Copies
        the sources' slots up to a bucket of the longest source (`buckets.span_bucket`), not the span."""
        src, dst = np.asarray(src, np.int64).reshape(-1), np.asarray(dst, np.int64).reshape(-1)
        if src.shape != dst.shape:
            raise ValueError(f"copy_rows: src has {len(src)} rows, dst {len(dst)}")
        if len(dst) == 0:
            return
        if min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= self.rows:
            raise ValueError(f"copy_rows: src and dst must be rows in [0, {self.rows})")
        if len(np.unique(dst)) != len(dst):
            raise ValueError("copy_rows: dst repeats a row")
        with mesh_context(self.mesh, self.rules):
            program, args = self._copy_call(src, dst)
            self.cache, self.logits = program(*args)
        self.lengths = self.lengths.copy()
        self.lengths[dst] = self.lengths[src]
        self.stats["row_copies"] += 1
        with mesh_context(self.mesh, self.rules):
            self._shrink()

    def _copy_call(self, src: np.ndarray, dst: np.ndarray):
        sub = buckets.row_bucket(len(dst), self.rows, self.row_multiple)
        s, d = np.zeros((sub,), np.int32), np.full((sub,), self.rows, np.int32)  # padding: dropped
        s[: len(src)], d[: len(dst)] = src, dst
        window = buckets.span_bucket(int(self.lengths[src].max(initial=0)), self.span, self.min_span)
        args = (self.cache, self.logits, self._replicated(s), self._replicated(d), window)
        return self._programs["copy_rows"], args

    def lower_copy_rows(self, src: Sequence[int], dst: Sequence[int]) -> jax.stages.Lowered:
        """The program `copy_rows(src, dst)` would run, lowered and not run."""
        with mesh_context(self.mesh, self.rules):
            program, args = self._copy_call(np.asarray(src, np.int64), np.asarray(dst, np.int64))
            return program.lower(*args)
