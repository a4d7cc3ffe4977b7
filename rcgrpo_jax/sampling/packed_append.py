"""Token-packed append to rows that hold context (tool output after a step, a rollout's suffix), balanced over
the row shards.

Why. An append's rows differ in how many tokens they get and sit on different row shards; the row sub-batch
(`session._rows_forward`) computes on every shard as many rows as the busiest one holds, each as wide as the
longest delta, so a forward of tool outputs is ~0.27 real (docs/rollout_plan.md). Unlike a fresh row
(`sampling.packed`), a row with context must attend its own cache, which lives on one shard.

How. The matmuls go where the tokens are balanced and the attention where the cache is. The rows' new tokens
are concatenated and split evenly over the m row shards (Tl = `buckets.token_bucket(ceil(N / m))` each), and
each layer
  1. projects q, k, v of each shard's own Tl tokens (RoPE at each token's slot in its row);
  2. gathers q, k and v of all N tokens on every row shard; each shard writes the new K/V of the rows it owns
     into its cache block (`row_shards.put_tokens`);
  3. on the shard that owns each row, attends that row's tokens over the row's cache in blocks of BLOCK
     queries (a row's tokens split into blocks; each block a query window at slots [start, start + count)),
     causal by slot, through (block, key block) pairs (`block_attention`, `AppendForward.pairs`): each block
     reads the `key_block`-slot blocks of its row up to its last query, not a span;
  4. adds every shard's block outputs into an [N, ...] array and reduce-scatters it over the row shards, so
     each shard gets back its own Tl tokens' attention output, and goes on with o_proj and the MLP.
So every shard computes Tl tokens' matmuls; the attention is each owner's own pairs, as many on every shard as
the busiest has (bucketed: `block_attention.pair_bucket`): the shards' attention is as unbalanced as their
rows. Rows are packed into forwards of at most APPEND_TOKENS tokens (a longer row goes alone). Off a mesh the
same program runs on one device.
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
from rcgrpo_jax.sampling import block_attention, buckets, decode_step, packed, row_shards
from rcgrpo_jax.sampling.decode_loop import Sampler, logits_last
from rcgrpo_jax.sampling.decode_step import DecodeCache
from rcgrpo_jax.sharding import BATCH_AXES, constrain

APPEND_TOKENS = 8192  # rows share a forward while their tokens add up to at most this many (a longer row: alone)
BLOCK = 32  # queries per attention block of one row
KEY_BLOCK = 128  # cache slots per key block of a pair (`key_block`)
TOKEN_MIN = 32  # the fewest tokens a row shard computes (`AppendForward.per_shard`)


@dataclasses.dataclass(frozen=True)
class AppendForward:
    """One packed append: rows[i] (holding bases[i] tokens) gets counts[i] more."""

    rows: tuple[int, ...]
    counts: tuple[int, ...]
    bases: tuple[int, ...]

    @property
    def tokens(self) -> int:
        return sum(self.counts)

    def per_shard(self, m: int) -> int:
        """Tl: the tokens each of the m row shards computes (eight sizes per octave, multiples of TOKEN_MIN)."""
        return buckets.token_bucket(-(-self.tokens // m), TOKEN_MIN, per_octave=8)

    def blocks(self, m: int, session_rows: int) -> list[list[tuple[int, int, int, int]]]:
        """Per row shard, its attention blocks (row index within the shard, first token's index in the
        packed tokens, count <= BLOCK, first token's slot)."""
        local = session_rows // m
        out: list[list[tuple[int, int, int, int]]] = [[] for _ in range(m)]
        at = 0
        for r, n, base in zip(self.rows, self.counts, self.bases):
            for s in range(0, n, BLOCK):
                out[r // local].append((r % local, at + s, min(BLOCK, n - s), base + s))
            at += n
        return out

    def blocks_per_shard(self, m: int, session_rows: int) -> int:
        """K: the blocks each row shard attends (the busiest shard's, bucketed: 1, 2, 4, ...)."""
        most = max(len(b) for b in self.blocks(m, session_rows))
        return buckets.row_bucket(most, max(most, 1) * 2, 1)

    def pairs(self, m: int, session_rows: int, block_k: int) -> list[list[tuple[int, int, int]]]:
        """Per row shard, its (block, row within the shard, first slot) pairs for `block_attention`: each of its
        blocks (`blocks`) with every `block_k`-slot block of its row's cache up to its last query, and each
        padding block up to K with slot 0 of row 0 (which it does not see)."""
        k = self.blocks_per_shard(m, session_rows)
        out: list[list[tuple[int, int, int]]] = []
        for entries in self.blocks(m, session_rows):
            pairs = [
                (e, row, j * block_k)
                for e, (row, _, n, st) in enumerate(entries)
                for j in range(-(-(st + n) // block_k))
            ]
            out.append(pairs + [(e, 0, 0) for e in range(len(entries), k)])
        return out

    def pairs_per_shard(self, m: int, session_rows: int, block_k: int) -> int:
        """P: the pairs each row shard lists (the busiest shard's, `block_attention.pair_bucket`)."""
        return block_attention.pair_bucket(max(len(p) for p in self.pairs(m, session_rows, block_k)))

    def span(self, capacity: int, minimum: int = buckets.MIN_SPAN) -> int:
        """A span bucket of the longest row after the append (`buckets.span_bucket`)."""
        return buckets.span_bucket(max(b + n for b, n in zip(self.bases, self.counts)), capacity, minimum)


def key_block(span: int) -> int:
    """The cache slots per key block of a session whose cache holds `span` slots per row: KEY_BLOCK, or the
    largest power of two below it that divides the span (a tiny session's)."""
    return math.gcd(KEY_BLOCK, int(span))


def pack(counts: dict[int, int], bases: dict[int, int], budget: int = APPEND_TOKENS) -> list[AppendForward]:
    """The forwards of rows getting counts[row] tokens after their bases[row] (`packed.groups`)."""
    return [
        AppendForward(tuple(g), tuple(int(counts[r]) for r in g), tuple(int(bases[r]) for r in g))
        for g in packed.groups(counts, budget)
    ]


@dataclasses.dataclass(frozen=True)
class AppendArrays:
    """Host arrays of one packed append: tokens, rows, slots [m Tl] (split over the row shards in blocks of Tl;
    padding: row -1, slot 0); the attention blocks [m K] (shard j's K in block j; padding: a row past the
    shard's, count 0) and their pairs [m P] (`AppendForward.pairs`, shard j's P in block j, padded by
    `block_attention.pad_pairs`); each row's last token's index, its row (padding: the session's rows) and
    new length."""

    tokens: np.ndarray
    rows: np.ndarray
    slots: np.ndarray
    block_rows: np.ndarray
    block_first: np.ndarray
    block_count: np.ndarray
    block_start: np.ndarray
    pair_block: np.ndarray
    pair_row: np.ndarray
    pair_start: np.ndarray
    last: np.ndarray
    last_rows: np.ndarray
    lengths: np.ndarray

    @property
    def blocks(self) -> tuple[np.ndarray, ...]:
        """The block and pair arrays, in `append_impl`'s order."""
        return (
            self.block_rows,
            self.block_first,
            self.block_count,
            self.block_start,
            self.pair_block,
            self.pair_row,
            self.pair_start,
        )


def arrays(fwd: AppendForward, deltas: Sequence[Sequence[int]], m: int, session_rows: int, span: int) -> AppendArrays:
    """The arrays of `fwd`, row r's tokens being deltas[r][:count], for a cache of `span` slots per row."""
    n = m * fwd.per_shard(m)
    tokens, rows, slots = np.zeros((n,), np.int32), np.full((n,), -1, np.int32), np.zeros((n,), np.int32)
    f = buckets.row_bucket(len(fwd.rows), session_rows, 1)
    last, last_rows, lengths = np.zeros((f,), np.int32), np.full((f,), session_rows, np.int32), np.zeros((f,), np.int32)
    at = 0
    for i, (r, c, base) in enumerate(zip(fwd.rows, fwd.counts, fwd.bases)):
        if base + c > span:
            raise ValueError(f"row {r}: {base} + {c} tokens do not fit in the cache's {span} slots")
        tokens[at : at + c] = np.asarray(deltas[r][:c], np.int32)
        rows[at : at + c] = r
        slots[at : at + c] = base + np.arange(c, dtype=np.int32)
        at += c
        last[i], last_rows[i], lengths[i] = at - 1, r, base + c
    k = fwd.blocks_per_shard(m, session_rows)
    local = session_rows // m
    blk = np.zeros((4, m, k), np.int32)
    blk[0] = local  # padding: a row past the shard's (sees nothing, writes nothing)
    for j, entries in enumerate(fwd.blocks(m, session_rows)):
        for e, entry in enumerate(entries):
            blk[:, j, e] = entry
    b = blk.reshape(4, m * k)
    bk = key_block(span)
    size = fwd.pairs_per_shard(m, session_rows, bk)
    prs = np.zeros((3, m, size), np.int32)
    for j, pairs in enumerate(fwd.pairs(m, session_rows, bk)):
        prs[:, j] = block_attention.pad_pairs(*np.asarray(pairs, np.int32).reshape(-1, 3).T, size, k)
    pr = prs.reshape(3, m * size)
    return AppendArrays(tokens, rows, slots, b[0], b[1], b[2], b[3], pr[0], pr[1], pr[2], last, last_rows, lengths)


def _owner_attention(q, k_c, v_c, rows, first, count, start, pair_block, pair_row, pair_start, *, k_axis, scatter):
    """One shard's blocks: q [N, G, R, Dh] (every token's queries), k_c / v_c this shard's cache layer, blocks
    rows/first/count/start [K] and their pairs [P]. Returns the [N, G, R, Dh] attention output with this shard's
    blocks' tokens filled (zero elsewhere), reduce-scattered over the row shards to this shard's [N / m, ...]
    when `scatter`."""
    n, g, r, dh = q.shape
    local, span = k_c.shape[0], k_c.shape[k_axis]
    t = jnp.arange(BLOCK)
    idx = jnp.minimum(first[:, None] + t[None], n - 1)  # [K, W]
    valid = t[None] < count[:, None]
    q_pos = jnp.where(valid, start[:, None] + t[None], -1)  # a padding query sees nothing
    q_ids = jnp.broadcast_to(rows[:, None], idx.shape)
    k_ids = jax.lax.broadcasted_iota(jnp.int32, (local, span), 0)
    k_pos = jax.lax.broadcasted_iota(jnp.int32, (local, span), 1)
    out = block_attention.attend(
        jnp.take(q, idx, axis=0),
        q_ids,
        q_pos,
        k_c,
        v_c,
        k_ids,
        k_pos,
        pair_block,
        pair_row,
        pair_start,
        block_k=key_block(span),
        k_axis=k_axis,
    )  # [K, W, G, R, Dh]
    where = jnp.where(valid, idx, n)
    full = jnp.zeros((n, g, r, dh), q.dtype).at[where.reshape(-1)].add(out.reshape(-1, g, r, dh), mode="drop")
    if not scatter:
        return full
    return jax.lax.psum_scatter(full, BATCH_AXES, scatter_dimension=0, tiled=True)


def _attention(q, k_c, v_c, blocks, *, k_axis: int, at: tuple):
    """`_owner_attention` on each row shard (`shard_map`: the cache, the blocks and the pairs by row shard, kv
    heads over `at`), or over the whole cache off a mesh. q [N, G, R, Dh] whole on every shard; returns
    [N, G, R, Dh], row-sharded."""
    mesh = row_shards.batch_mesh()
    if mesh is None:
        return _owner_attention(q, k_c, v_c, *blocks, k_axis=k_axis, scatter=False)
    heads = at[0] if at else None
    cache_spec = P(BATCH_AXES, heads, None, None)

    def f(ql, kl, vl, *bl):
        return _owner_attention(ql, kl, vl, *bl, k_axis=k_axis, scatter=True)

    in_specs = (P(None, heads, None, None), cache_spec, cache_spec) + (P(BATCH_AXES),) * len(blocks)
    return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=P(BATCH_AXES, heads, None, None), check_vma=False)(
        q, k_c, v_c, *blocks
    )


def append_impl(
    s: Sampler,
    params,
    cache: DecodeCache,
    logits,
    tokens,
    rows,
    slots,
    block_rows,
    block_first,
    block_count,
    block_start,
    pair_block,
    pair_row,
    pair_start,
    last,
    last_rows,
    lengths,
):
    """One packed append (module docstring): tokens, rows, slots [m Tl], the blocks [m K] and pairs [m P]
    row-sharded;
    last, last_rows, lengths [F] whole on every shard. Writes the rows' K/V at their slots, lengths[last_rows] =
    lengths and logits[last_rows] = the last tokens' next-token logits. Returns (cache, logits)."""
    c, mode = s.config, decode_step.block_write(s.kv_write)
    mesh = row_shards.batch_mesh()
    m = row_shards.shards(mesh)
    at = () if mesh is None else (decode_step.kv_heads_axis(c.num_kv_heads, jax.sharding.get_abstract_mesh()),)
    weights = decode_step.layer_weights(params)
    dt, g, dh = c.jnp_dtype, c.num_kv_heads, c.head_dim
    tl = tokens.shape[0] // m
    n = m * tl
    tok2, slots2 = tokens.astype(jnp.int32).reshape(m, tl), slots.astype(jnp.int32).reshape(m, tl)
    k_rows, k_slots = packed.whole(rows.astype(jnp.int32), ()), packed.whole(slots.astype(jnp.int32), ())
    blocks = (block_rows, block_first, block_count, block_start, pair_block, pair_row, pair_start)
    blocks = tuple(x.astype(jnp.int32) for x in blocks)
    norm = RMSNorm(c.rms_norm_eps, dt, c.jnp_param_dtype)
    x = constrain(jnp.take(weights["embed"]["embedding"], tok2, axis=0).astype(dt), ("batch", "seq", "hidden"))
    k_all, v_all = list(cache.k), list(cache.v)
    for i, p in enumerate(weights["layers"]):
        h = norm.apply({"params": p["input_norm"]}, x)
        q, k, v = decode_step.project_qkv(c, p["attn"], h, slots2)
        k, v = packed.whole(k.reshape(n, g, dh), at), packed.whole(v.reshape(n, g, dh), at)
        q = packed.whole(q.reshape(n, g, c.num_heads // g, dh), at)
        k_all[i] = row_shards.put_tokens(k_all[i], k, k_rows, k_slots, cache.k_slot_axis, at, mode)
        v_all[i] = row_shards.put_tokens(v_all[i], v, k_rows, k_slots, 2, at, mode)
        out = _attention(q, k_all[i], v_all[i], blocks, k_axis=cache.k_slot_axis, at=at)
        x = x + decode_step.dense(p["attn"]["o_proj"], out.reshape(m, tl, c.num_heads * dh), dt)
        x = x + MLP(c).apply({"params": p["mlp"]}, norm.apply({"params": p["post_attn_norm"]}, x))
        x = constrain(x, ("batch", "seq", "hidden"))
    x = norm.apply({"params": weights["final_norm"]}, x)
    new_logits = logits_last(c, weights, jnp.take(x.reshape(n, x.shape[-1]), last, axis=0))
    new_lengths = row_shards.put_rows(cache.lengths, lengths.astype(cache.lengths.dtype), last_rows)
    cache = DecodeCache(k=tuple(k_all), v=tuple(v_all), lengths=new_lengths, layout=cache.layout)
    return cache, row_shards.put_rows(logits, new_logits, last_rows)
