"""Row gathers and scatters on a row-sharded array that keep each device on its own rows.

The session's arrays keep their rows over the mesh's batch axes (`sharding.BATCH_AXES`: m shards, shard j
holding rows [j R/m, (j + 1) R/m)). Indexing them with a global row list would make the SPMD partitioner
all-gather the whole array on every device (docs/sampling.md), so a sub-batch is built shard by shard
(`shard_local_rows`: block j of m x K rows lists shard j's rows as indices into its own block), and inside
`jax.shard_map`:

  gather(x, idx)               y = x[idx] per shard (zeros at the padding index R/m); row-sharded like x.
  scatter(x, new, idx)         x[idx] = new per shard (padding dropped), in place when x is donated;
                               `write` replaces the row write (the K/V slot writes, a lengths add).
  copy_rows(x, src, dst, w)    x[dst[b], :w on `axis`] = x[src[b], :w], global replicated indices (a sibling
                               may live on another shard): each shard takes the sources it owns, a psum over
                               the batch axes gives every shard all B windows, each writes the destinations
                               it owns. Its transient is B windows of one array.
  put_rows(x, new, rows)       x[rows[b]] = new[b], global rows and values whole on every shard (the packed
                               prefills' writes): each shard writes the rows it owns.
  put_tokens(x, new, rows, slots, axis)
                               x[rows[n], slot slots[n] on `axis`] = new[n] (one token's K or V of a layer),
                               likewise; a row past the array (a padding token's -1) is dropped.

`at` is x's sharding after the rows (a PartitionSpec tail: the cache's kv heads over 'tensor'). `mode` of the
K/V writes (`put_tokens`, `copy_rows`): "scatter", or "footprint" (`decode_step.footprint_write`, the dry
run's). Without a mesh in context, or with one batch shard, these are the plain jnp ops on global indices.
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from rcgrpo_jax.sampling import buckets, decode_step
from rcgrpo_jax.sharding import BATCH_AXES


def batch_mesh():
    """The abstract mesh in context when its batch axes split rows (m > 1), else None."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or not all(a in mesh.shape for a in BATCH_AXES):
        return None
    return mesh if shards(mesh) > 1 else None


def shards(mesh) -> int:
    """m: the row shards of `mesh` (the product of its batch axes; 1 for None)."""
    if mesh is None:
        return 1
    n = 1
    for a in BATCH_AXES:
        n *= mesh.shape.get(a, 1)
    return n


def shard_local_rows(live: Sequence[int], rows: int, m: int, bucket: Callable[[int, int], int] | None = None):
    """The sub-batch of the rows `live` of a session of `rows` rows on m row shards: an [m * K] int32 vector
    whose block j (K entries) lists shard j's live rows as indices into its own block, padded with
    rows // m (past the block: a padding row). K = bucket(most live rows on one shard, rows // m); default
    `buckets.row_bucket(n, rows // m, 1)`: 1, 2, 4, ..., capped at a shard's rows (so m = 1 is the
    sub-batch of a session off a mesh: row_bucket(n, rows, 1) rows)."""
    if rows % m:
        raise ValueError(f"{rows} rows do not split over {m} row shards")
    bucket = bucket or (lambda n, local: buckets.row_bucket(n, local, 1))
    local = rows // m
    live = np.asarray(live, np.int64)
    per = [live[(live // local) == j] - j * local for j in range(m)]
    k = bucket(max(len(p) for p in per), local)
    idx = np.full((m, k), local, np.int32)
    for j, p in enumerate(per):
        idx[j, : len(p)] = p
    return idx.reshape(-1)


def sub_batch_rows(live: Sequence[int], rows: int, m: int) -> int:
    """The rows a forward over the rows `live` computes, padding included: `shard_local_rows`' length, m x K
    (K the bucketed count of live rows on the busiest shard); for callers that need only the count."""
    return len(shard_local_rows(live, rows, m))


def global_rows(idx: np.ndarray, rows: int, m: int) -> np.ndarray:
    """The session rows of a `shard_local_rows` vector (-1 for a padding entry)."""
    local = rows // m
    k = len(idx) // m
    block = np.repeat(np.arange(m), k) * local
    return np.where(idx < local, idx + block, -1)


def _spec(at: tuple, ndim: int) -> P:
    return P(BATCH_AXES, *(tuple(at) + (None,) * (ndim - 1 - len(at))))


def _smap(f: Callable, mesh, in_specs, out_specs):
    return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)


def gather(x: jax.Array, idx: jax.Array, at: tuple = ()) -> jax.Array:
    """x's rows at the shard-local indices idx ([m K], row-sharded), zeros at a padding index."""
    take = lambda xl, i: jnp.take(xl, i, axis=0, mode="fill", fill_value=0)  # noqa: E731
    mesh = batch_mesh()
    if mesh is None:
        return take(x, idx)
    spec = _spec(at, x.ndim)
    return _smap(take, mesh, (spec, P(BATCH_AXES)), spec)(x, idx)


def _set(xl, nl, i, _):
    return xl.at[i].set(nl.astype(xl.dtype), mode="drop")


def scatter(
    x: jax.Array,
    new: jax.Array,
    idx: jax.Array,
    at: tuple = (),
    *,
    new_at: tuple | None = None,
    write: Callable = _set,
    extra: jax.Array | None = None,
) -> jax.Array:
    """x with its rows at the shard-local indices idx set to new ([m K, ...], row-sharded; padding dropped).
    write(x_block, new_block, idx_block, extra_block) does the write on each shard (default: the rows set);
    `extra` is a row-sharded companion of new (the slots of a K/V write). `new_at`: new's sharding tail."""
    mesh = batch_mesh()
    if mesh is None:
        return write(x, new, idx, extra)
    spec = _spec(at, x.ndim)
    new_spec = _spec(at if new_at is None else new_at, new.ndim)
    extra_spec = None if extra is None else P(BATCH_AXES)
    return _smap(write, mesh, (spec, new_spec, P(BATCH_AXES), extra_spec), spec)(x, new, idx, extra)


def copy_rows(
    x: jax.Array, src: jax.Array, dst: jax.Array, window: int, axis: int, at: tuple = (), mode: str = "scatter"
) -> jax.Array:
    """x with rows dst[b] set, on their first `window` slots along `axis`, to those of rows src[b] (global
    replicated indices; read before any is written; a dst past len(x) is dropped; src in range)."""

    def set_window(x, part, dst):
        return decode_step.footprint_write(x, part) if mode == decode_step.FOOTPRINT else _set_window(x, part, dst)

    def window_of(xl):
        return jax.lax.slice_in_dim(xl, 0, window, axis=axis)

    mesh = batch_mesh()
    if mesh is None:
        return set_window(x, window_of(jnp.take(x, src, axis=0, mode="clip")), dst)
    spec = _spec(at, x.ndim)

    def f(xl, s, d):
        n = xl.shape[0]
        first = jax.lax.axis_index(BATCH_AXES) * n
        own = (s >= first) & (s < first + n)
        part = jnp.take(window_of(xl), jnp.where(own, s - first, n), axis=0, mode="fill", fill_value=0)
        part = jax.lax.psum(part, BATCH_AXES)  # every window from the shard that owns it (the others add 0)
        mine = (d >= first) & (d < first + n)
        return set_window(xl, part, jnp.where(mine, d - first, n))

    return _smap(f, mesh, (spec, P(), P()), spec)(x, src, dst)


def _set_window(x: jax.Array, part: jax.Array, dst: jax.Array) -> jax.Array:
    """x [R, ...] with part [B, ...] written at rows dst from index 0 on along every other axis (part is
    shorter on the window's axis); a dst out of range is dropped."""
    idx = (dst,) + tuple(slice(0, n) for n in part.shape[1:])
    return x.at[idx].set(part.astype(x.dtype), mode="drop")


def _owned(rows: jax.Array, n: int) -> jax.Array:
    """Global row indices as indices into this shard's block of n rows (n = dropped: another shard's or
    out of range). Inside a `shard_map` over the batch axes."""
    local = rows - jax.lax.axis_index(BATCH_AXES) * n
    return jnp.where((local >= 0) & (local < n), local, n)


def _tail_spec(at: tuple, ndim: int) -> P:
    """Whole over the batch axes, `at` after the leading axis (a value every row shard holds)."""
    return P(None, *(tuple(at) + (None,) * (ndim - 1 - len(at))))


def put_rows(x: jax.Array, new: jax.Array, rows: jax.Array, at: tuple = ()) -> jax.Array:
    """x [R, ...] (row-sharded) with rows[b] set to new[b] (global row indices and values whole on every
    shard; a row outside [0, R) is dropped)."""
    mesh = batch_mesh()
    if mesh is None:
        safe = jnp.where((rows >= 0) & (rows < x.shape[0]), rows, x.shape[0])
        return x.at[safe].set(new.astype(x.dtype), mode="drop")

    def f(xl, nl, r):
        return xl.at[_owned(r, xl.shape[0])].set(nl.astype(xl.dtype), mode="drop")

    return _smap(f, mesh, (_spec(at, x.ndim), _tail_spec(at, new.ndim), P()), _spec(at, x.ndim))(x, new, rows)


def _put_token_slots(
    x: jax.Array, new: jax.Array, rows: jax.Array, slots: jax.Array, axis: int, mode: str
) -> jax.Array:
    if mode == decode_step.FOOTPRINT:
        return decode_step.footprint_write(x, new)
    if axis == 3:  # [R, G, Dh, S]
        return x.at[rows, :, :, slots].set(new.astype(x.dtype), mode="drop")
    return x.at[rows, :, slots, :].set(new.astype(x.dtype), mode="drop")  # [R, G, S, Dh]


def put_tokens(
    x: jax.Array, new: jax.Array, rows: jax.Array, slots: jax.Array, axis: int, at: tuple = (), mode: str = "scatter"
) -> jax.Array:
    """x [R, G, ., .] (one layer's K or V, its slots on `axis`: 2 or 3) with new[n] ([N, G, Dh]) written at
    row rows[n], slot slots[n] (global rows, whole on every shard; a row outside [0, R) is dropped)."""
    mesh = batch_mesh()
    if mesh is None:
        safe = jnp.where((rows >= 0) & (rows < x.shape[0]), rows, x.shape[0])
        return _put_token_slots(x, new, safe, slots, axis, mode)

    def f(xl, nl, r, s):
        return _put_token_slots(xl, nl, _owned(r, xl.shape[0]), s, axis, mode)

    spec = _spec(at, x.ndim)
    return _smap(f, mesh, (spec, _tail_spec(at, new.ndim), P(), P()), spec)(x, new, rows, slots)
