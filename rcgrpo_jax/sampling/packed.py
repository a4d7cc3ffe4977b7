"""Token-packed prefill of fresh rows: a row with no context yet (a group's shared prefix, a new prompt)
computed on every row shard, not only on the one that holds the row.

Why. The session's rectangular sub-batch (`session._rows_forward`) computes, on each of the m row shards,
as many rows as the shard with the most rows that have tokens. A refill admits one group at a time: its
4-7k-token prefix sits in one row, on one shard, and the other m - 1 shards compute padding, so such a
forward is at most 1/m real (`bench.rollout_plan`'s prefix figures). A fresh row has no context to read,
so its tokens need not be computed where the row lives.

How. The fresh rows' tokens are concatenated into one sequence of N tokens and split evenly over the m
row shards, Tl = `buckets.token_bucket(ceil(N / m))` tokens each (the tail is padding). Each layer
  1. projects the q, k, v of each shard's own Tl tokens (RoPE at each token's slot in its row);
  2. gathers the N keys and values on every row shard (N x kv heads x head_dim: MBs, not a cache);
  3. attends each query over the gathered keys of its own row at slots <= its own (a block-diagonal
     causal mask), QUERY_BLOCK queries at a time;
  4. writes the gathered keys and values into the cache rows each shard owns
     (`row_shards.put_tokens`; the others are dropped there);
so every shard computes Tl tokens, whichever rows they belong to. The next-token logits of each row (its
last token through the output head) and its length are written into its row, in place (the cache and the
logits are donated). Padding tokens have row -1 and slot 0: they attend only one another and write nothing.

The attention is dense over the N gathered keys: N x N (query, key) pairs for N (N + 1) / 2 real ones when
one row fills the forward, and the pairs between two rows are computed and masked. So `pack` puts several
rows into one forward only while they add up to at most PACK_TOKENS tokens; a longer row goes alone.

Off a mesh (m = 1) the same program runs on one device (one row shard): it is the sub-batch of the fresh
rows with their tokens side by side instead of padded to the longest. The session uses it on a mesh
(`DecodeSession(packed_prefill=None)`: when m > 1), where the sub-batch would leave m - 1 shards idle.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from rcgrpo_jax.models.layers import MLP, RMSNorm
from rcgrpo_jax.sampling import buckets, decode_step, row_shards
from rcgrpo_jax.sampling.decode_step import DecodeCache
from rcgrpo_jax.sampling.sampler import Sampler, _logits_last
from rcgrpo_jax.sharding import constrain

PACK_TOKENS = 2048  # rows share a forward while they add up to at most this many tokens (a longer row: alone)
QUERY_BLOCK = 64  # queries per attention block (scores [m, G, 64, R, N]); token_bucket's sizes are multiples


@dataclasses.dataclass(frozen=True)
class PackedForward:
    """One packed forward: `rows` (session rows, each holding no token yet) get counts[i] tokens each."""

    rows: tuple[int, ...]
    counts: tuple[int, ...]

    @property
    def tokens(self) -> int:
        return sum(self.counts)

    def per_shard(self, m: int) -> int:
        """Tl: the tokens each of the m row shards computes."""
        return buckets.token_bucket(-(-self.tokens // m), QUERY_BLOCK)


def pack(counts: dict[int, int], budget: int = PACK_TOKENS) -> list[PackedForward]:
    """The forwards of fresh rows getting counts[row] tokens (rows in ascending order): a forward takes the
    next rows while their tokens add up to at most `budget`; a row of more tokens than that goes alone."""
    out: list[PackedForward] = []
    rows: list[int] = []
    ns: list[int] = []
    for r in sorted(counts):
        n = int(counts[r])
        if n <= 0:
            continue
        if rows and sum(ns) + n > budget:
            out.append(PackedForward(tuple(rows), tuple(ns)))
            rows, ns = [], []
        rows.append(int(r))
        ns.append(n)
    if rows:
        out.append(PackedForward(tuple(rows), tuple(ns)))
    return out


@dataclasses.dataclass(frozen=True)
class PackedArrays:
    """Host arrays of one packed forward: tokens, rows (-1: padding) and slots [m * Tl], split over the m
    row shards in blocks of Tl; each row's last token's index into them (`last`), its row (`last_rows`; the
    session's row count for padding: dropped) and its count, over a bucket of the forward's rows."""

    tokens: np.ndarray
    rows: np.ndarray
    slots: np.ndarray
    last: np.ndarray
    last_rows: np.ndarray
    counts: np.ndarray


def arrays(forward: PackedForward, deltas: Sequence[Sequence[int]], m: int, session_rows: int) -> PackedArrays:
    """The arrays of `forward`, the tokens of row r being deltas[r][:counts]."""
    n = m * forward.per_shard(m)
    tokens, rows, slots = np.zeros((n,), np.int32), np.full((n,), -1, np.int32), np.zeros((n,), np.int32)
    f = buckets.row_bucket(len(forward.rows), session_rows, 1)
    last, last_rows, counts = np.zeros((f,), np.int32), np.full((f,), session_rows, np.int32), np.zeros((f,), np.int32)
    at = 0
    for i, (r, c) in enumerate(zip(forward.rows, forward.counts)):
        tokens[at : at + c] = np.asarray(deltas[r][:c], np.int32)
        rows[at : at + c] = r
        slots[at : at + c] = np.arange(c, dtype=np.int32)
        at += c
        last[i], last_rows[i], counts[i] = at - 1, r, c
    return PackedArrays(tokens, rows, slots, last, last_rows, counts)


def _whole(x: jax.Array, at: tuple) -> jax.Array:
    """x [N, ...] whole on every row shard (its axis 1 kept on `at`): the all-gather of step 2."""
    mesh = row_shards.batch_mesh()
    if mesh is None:
        return x
    spec = P(None, *(tuple(at) + (None,) * (x.ndim - 1 - len(at))))
    return jax.lax.with_sharding_constraint(x, spec)


def _attend(q: jax.Array, k: jax.Array, v: jax.Array, q_rows, q_slots, k_rows, k_slots, dt) -> jax.Array:
    """q [m, Tl, G, R, Dh] over k, v [N, G, Dh]: query (row, slot) sees the keys of its row at slots <= its
    own. Returns [m, Tl, G, R, Dh]."""
    m, tl, g, r, dh = q.shape
    nb = tl // QUERY_BLOCK

    def block(xs):
        qb, rb, sb = xs  # [m, QB, G, R, Dh], [m, QB], [m, QB]
        scores = jnp.einsum("mtgrd,ngd->mgtrn", qb, k, preferred_element_type=jnp.float32)
        allowed = (k_rows[None, None, :] == rb[:, :, None]) & (k_slots[None, None, :] <= sb[:, :, None])
        scores = jnp.where(allowed[:, None, :, None, :], scores / math.sqrt(dh), -jnp.inf)
        weights = jax.nn.softmax(scores, axis=-1).astype(dt)
        return jnp.einsum("mgtrn,ngd->mtgrd", weights, v)

    split = lambda x: jnp.moveaxis(x.reshape(m, nb, QUERY_BLOCK, *x.shape[2:]), 1, 0)  # noqa: E731
    out = jax.lax.map(block, (split(q), split(q_rows), split(q_slots)))  # [nb, m, QB, G, R, Dh]
    return jnp.moveaxis(out, 0, 1).reshape(m, tl, g, r, dh)


def prefill_impl(s: Sampler, params, cache: DecodeCache, logits, tokens, rows, slots, last, last_rows, counts):
    """One packed forward (module docstring): tokens, rows, slots [m * Tl] (row-sharded: shard j holds its
    block of Tl); last, last_rows, counts [F] whole on every shard. Writes the rows' K/V at their slots,
    lengths[last_rows] = counts and logits[last_rows] = the last tokens' next-token logits. Returns
    (cache, logits)."""
    c = s.config
    m = row_shards.shards(row_shards.batch_mesh())
    weights = decode_step.layer_weights(params)
    dt, layout = c.jnp_dtype, cache.layout
    at = (
        ()
        if row_shards.batch_mesh() is None
        else (decode_step.kv_heads_axis(c.num_kv_heads, jax.sharding.get_abstract_mesh()),)
    )
    tl = tokens.shape[0] // m
    tok2, rows2, slots2 = (x.astype(jnp.int32).reshape(m, tl) for x in (tokens, rows, slots))
    k_rows, k_slots = _whole(rows.astype(jnp.int32), ()), _whole(slots.astype(jnp.int32), ())
    norm = RMSNorm(c.rms_norm_eps, dt, c.jnp_param_dtype)
    x = constrain(jnp.take(weights["embed"]["embedding"], tok2, axis=0).astype(dt), ("batch", "seq", "hidden"))
    k_all, v_all = list(cache.k), list(cache.v)
    g, dh = c.num_kv_heads, c.head_dim
    for i, p in enumerate(weights["layers"]):
        h = norm.apply({"params": p["input_norm"]}, x)
        q, k, v = decode_step.project_qkv(c, p["attn"], h, slots2)
        k, v = _whole(k.reshape(m * tl, g, dh), at), _whole(v.reshape(m * tl, g, dh), at)
        out = _attend(q, k, v, rows2, slots2, k_rows, k_slots, dt)
        k_all[i] = row_shards.put_tokens(k_all[i], k, k_rows, k_slots, cache.k_slot_axis, at)
        v_all[i] = row_shards.put_tokens(v_all[i], v, k_rows, k_slots, 2, at)
        x = x + decode_step._proj(p["attn"]["o_proj"], out.reshape(m, tl, c.num_heads * dh), dt)
        x = x + MLP(c).apply({"params": p["mlp"]}, norm.apply({"params": p["post_attn_norm"]}, x))
        x = constrain(x, ("batch", "seq", "hidden"))
    x = norm.apply({"params": weights["final_norm"]}, x)
    hidden_last = jnp.take(x.reshape(m * tl, x.shape[-1]), last, axis=0)
    new_logits = _logits_last(c, weights, hidden_last)
    lengths = row_shards.put_rows(cache.lengths, counts.astype(cache.lengths.dtype), last_rows)
    cache = DecodeCache(k=tuple(k_all), v=tuple(v_all), lengths=lengths, layout=layout)
    return cache, row_shards.put_rows(logits, new_logits, last_rows)
