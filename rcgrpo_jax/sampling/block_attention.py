"""Block-sparse attention over a host-made list of (query block, key block) pairs: the packed prefill's and the
packed append's attention, computing only the blocks where a query sees a key (why: docs/sampling.md).

What. Queries come in Q blocks of B queries, q [Q, B, G, R, Dh] (G kv heads, R query heads per kv head), each
query with an id and a position (q_ids, q_pos [Q, B]). Keys and values live in Rs source rows of S slots, in
the cache's layout (k [Rs, G, S, Dh] or [Rs, G, Dh, S], `k_axis` 2 or 3; v [Rs, G, S, Dh]), each slot with
an id and a position (k_ids, k_pos [Rs, S]). Pair p joins query block pair_q[p] with the `block_k` slots
[pair_start[p], pair_start[p] + block_k) of source row pair_src[p]. A query sees a key when their ids are
equal and the key's position is at most the query's:

    out[q, b] = sum_j softmax_j(s_j) v_j over every key j of every pair of block q that the query sees,
    s_j = q[q, b] . k_j / sqrt(Dh).

So the attention computes P x B x block_k (query, key) pairs, whatever the span of the rows.

How. The pairs are sorted by query block, every query block 0..Q-1 has at least one pair (a block that sees
nothing gets one that it does not see), and the P pairs (padding: query block Q, which sees nothing) are
taken `chunk_of(P)` at a time (`lax.scan`). A chunk's pairs touch at most CHUNK consecutive query blocks from its
first one; each pair's scores give its own maximum, sum and weighted values, and these merge into running
accumulators (max, sum, output) of those blocks with the usual rescaling (the online softmax of flash
attention, here across pairs instead of inside a kernel). A query that sees no key gets zeros.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from rcgrpo_jax.sampling import buckets

# Pairs per scan step at most: bounds the [CHUNK, G, R, B, block_k] f32 scores and the accumulators' slice of
# CHUNK query blocks. On a GPU each step is a handful of small kernels; if gpu_check's packed_attention row
# shows the steps launch-bound (its pairs_tflop_s far below the matmuls'), a larger CHUNK is the knob.
CHUNK = 64
NEG = -1e30  # the score of a key a query does not see (finite: no inf - inf)
# `lax.scan`'s unroll of the chunk loop. XLA's cost analysis counts a loop's body once, whatever its trip
# count, so a test that reads a program's FLOPs sets this to True (every step in the program, counted).
SCAN_UNROLL: int | bool = 1


def pair_bucket(n: int) -> int:
    """The pairs a forward lists per row shard for n pairs: eight sizes per octave, multiples of 8 (at most
    1/8 padding past 64 pairs), so `chunk_of` is at least 8."""
    return buckets.token_bucket(max(int(n), 1), 8, per_octave=8)


def chunk_of(pairs: int, chunk: int = CHUNK) -> int:
    """The pairs per scan step for a list of `pairs` pairs: their greatest common divisor with `chunk` (a power
    of two), so the steps take every pair."""
    return math.gcd(int(pairs), int(chunk))


def pad_pairs(pair_q: np.ndarray, pair_src: np.ndarray, pair_start: np.ndarray, size: int, num_q: int):
    """The pair arrays padded to `size` pairs: the padding pairs join the query block `num_q` (the one past the
    last, which sees nothing) with slot 0 of source row 0. The pairs must be sorted by query block, with every
    block 0..num_q - 1 in at least one (what `attend`'s chunks rely on)."""
    n = len(pair_q)
    if n > size:
        raise ValueError(f"pad_pairs: {n} pairs do not fit in {size}")
    pq = np.asarray(pair_q)
    if np.any(np.diff(pq) < 0) or not np.array_equal(np.unique(pq), np.arange(num_q)):
        raise ValueError(f"pad_pairs: the pairs must be sorted by query block and name every block 0..{num_q - 1}")
    out = np.zeros((3, size), np.int32)
    out[0, n:] = num_q
    out[0, :n], out[1, :n], out[2, :n] = pair_q, pair_src, pair_start
    return out[0], out[1], out[2]


def attend(
    q, q_ids, q_pos, k, v, k_ids, k_pos, pair_q, pair_src, pair_start, *, block_k: int, k_axis: int = 2, chunk=CHUNK
):
    """Attention of q [Q, B, G, R, Dh] over the listed key blocks (module docstring). pair_* [P], distinct pairs
    sorted by query block, every query block with at least one. Returns [Q, B, G, R, Dh] in q's dtype."""
    nq, b, g, r, dh = q.shape
    p = pair_q.shape[0]
    c = chunk_of(p, chunk)
    dt = q.dtype
    scale = 1.0 / math.sqrt(dh)
    # the query block past the last sees nothing (padding pairs); the accumulators hold c more blocks, so that a
    # chunk starting at any block up to nq has all its blocks inside
    q = jnp.concatenate([q, jnp.zeros((1, b, g, r, dh), dt)])
    q_ids = jnp.concatenate([q_ids.astype(jnp.int32), jnp.full((1, b), -2, jnp.int32)])
    q_pos = jnp.concatenate([q_pos.astype(jnp.int32), jnp.full((1, b), -1, jnp.int32)])
    k_ids, k_pos = k_ids.astype(jnp.int32), k_pos.astype(jnp.int32)
    k_size = (1, g, block_k, dh) if k_axis == 2 else (1, g, dh, block_k)
    score_eq = "cbgrd,cgkd->cgrbk" if k_axis == 2 else "cbgrd,cgdk->cgrbk"

    def take(src, start):
        at = (src, 0, start, 0) if k_axis == 2 else (src, 0, 0, start)
        kb = jax.lax.dynamic_slice(k, at, k_size)[0]
        vb = jax.lax.dynamic_slice(v, (src, 0, start, 0), (1, g, block_k, dh))[0]
        ids = jax.lax.dynamic_slice(k_ids, (src, start), (1, block_k))[0]
        pos = jax.lax.dynamic_slice(k_pos, (src, start), (1, block_k))[0]
        return kb, vb, ids, pos

    def step(acc, xs):
        big_m, big_l, big_o = acc
        pq, ps, pst = xs  # [c] each
        first = pq[0]
        seg = pq - first  # in [0, c): the chunk's blocks are consecutive from its first
        kb, vb, ids, pos = jax.vmap(take)(ps, pst)  # [c, G, bk, Dh] (or [c, G, Dh, bk]), [c, bk]
        qb = q[pq]  # [c, B, G, R, Dh]
        sees = (ids[:, None, :] == q_ids[pq][:, :, None]) & (pos[:, None, :] <= q_pos[pq][:, :, None])  # [c, B, bk]
        s = jnp.einsum(score_eq, qb, kb.astype(dt), preferred_element_type=jnp.float32) * scale
        s = jnp.where(sees[:, None, None], s, NEG)  # [c, G, R, B, bk]
        m_c = jnp.maximum(jax.ops.segment_max(s.max(-1), seg, num_segments=c), NEG)  # [c, G, R, B]
        m_old = jax.lax.dynamic_slice_in_dim(big_m, first, c)
        l_old = jax.lax.dynamic_slice_in_dim(big_l, first, c)
        o_old = jax.lax.dynamic_slice_in_dim(big_o, first, c)
        m_new = jnp.maximum(m_old, m_c)
        w = jnp.exp(s - m_new[seg][..., None]) * sees[:, None, None]
        l_p = w.sum(-1)
        o_p = jnp.einsum("cgrbk,cgkd->cgrbd", w.astype(dt), vb.astype(dt), preferred_element_type=jnp.float32)
        alpha = jnp.exp(m_old - m_new)
        l_new = l_old * alpha + jax.ops.segment_sum(l_p, seg, num_segments=c)
        o_new = o_old * alpha[..., None] + jax.ops.segment_sum(o_p, seg, num_segments=c)
        big_m = jax.lax.dynamic_update_slice_in_dim(big_m, m_new, first, 0)
        big_l = jax.lax.dynamic_update_slice_in_dim(big_l, l_new, first, 0)
        big_o = jax.lax.dynamic_update_slice_in_dim(big_o, o_new, first, 0)
        return (big_m, big_l, big_o), None

    rows = nq + 1 + c
    acc = (
        jnp.full((rows, g, r, b), NEG, jnp.float32),
        jnp.zeros((rows, g, r, b), jnp.float32),
        jnp.zeros((rows, g, r, b, dh), jnp.float32),
    )
    split = lambda x: x.astype(jnp.int32).reshape(p // c, c)  # noqa: E731
    (_, big_l, big_o), _ = jax.lax.scan(
        step, acc, (split(pair_q), split(pair_src), split(pair_start)), unroll=SCAN_UNROLL
    )
    l, o = big_l[:nq], big_o[:nq]
    out = o / jnp.where(l > 0, l, 1.0)[..., None]  # [Q, G, R, B, Dh]
    return jnp.moveaxis(out, 3, 1).astype(dt)
