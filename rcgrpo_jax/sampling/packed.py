"""Token-packed prefill of fresh rows: a row with no context yet (a group's shared prefix, a new prompt)
computed on every row shard, not only on the one that holds the row (why: docs/sampling.md).

How. The fresh rows' tokens are concatenated into one sequence of N tokens and split evenly over the m
row shards, Tl = `buckets.token_bucket(ceil(N / m))` tokens each (the tail is padding). Each layer
  1. projects the q, k, v of each shard's own Tl tokens (RoPE at each token's slot in its row);
  2. gathers the N keys and values on every row shard (N x kv heads x head_dim: MBs, not a cache);
  3. attends each query over the gathered keys of its own row at slots <= its own, through the shard's
     (query block, key block) pairs (`block_attention`, `PackedForward.pairs`: QUERY_BLOCK x QUERY_BLOCK
     blocks, only those on or below each row's causal diagonal);
  4. writes the gathered keys and values into the cache rows each shard owns
     (`row_shards.put_tokens`; the others are dropped there);
so every shard computes Tl tokens, whichever rows they belong to. The next-token logits of each row (its
last token through the output head) and its length are written into its row, in place (the cache and the
logits are donated). Padding tokens have row -1 and slot 0: they attend only one another and write nothing.

A causal triangle's late query blocks see the most keys, so the blocks are dealt to the shards back and
forth (`block_order`: shard 0 computes natural blocks 0, 2m - 1, 2m, 4m - 1, ...), which evens out the
pairs each shard computes (the busiest shard's count, bucketed, is every shard's); the gathered keys are put
back in natural order (a static permutation) before the attention. `pack` puts several rows into one
forward while they add up to at most PACK_TOKENS tokens; a longer row goes alone.

Off a mesh (m = 1) the same program runs on one device (one row shard): it is the sub-batch of the fresh
rows with their tokens side by side instead of padded to the longest. The session uses it on a mesh
(`DecodeSession(packed_prefill=None)`: when m > 1), where the sub-batch would leave m - 1 shards idle.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from rcgrpo_jax.models.layers import MLP, RMSNorm
from rcgrpo_jax.sampling import block_attention, buckets, decode_step, row_shards
from rcgrpo_jax.sampling.decode_loop import Sampler, logits_last
from rcgrpo_jax.sampling.decode_step import DecodeCache
from rcgrpo_jax.sharding import BATCH_AXES, constrain

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
        """Tl: the tokens each of the m row shards computes (eight sizes per octave, multiples of QUERY_BLOCK)."""
        return buckets.token_bucket(-(-self.tokens // m), QUERY_BLOCK, per_octave=8)

    def pairs(self, m: int) -> list[list[tuple[int, int, int]]]:
        """Per row shard, its (query block, source 0, first key) pairs for `block_attention`: each of its blocks
        (`block_order`: natural block i) with every QUERY_BLOCK-key block of the packed tokens, in natural order,
        from the start of its first token's row up to block i (a block of padding: its own keys, which only
        padding sees)."""
        qb, n = QUERY_BLOCK, self.tokens
        row_start = np.repeat(np.cumsum((0,) + self.counts[:-1]), self.counts)  # each real token's row's first
        order = block_order(m, self.per_shard(m) // qb)
        out: list[list[tuple[int, int, int]]] = []
        for s in range(m):
            pairs = []
            for b, i in enumerate(order[s]):
                a = int(i) * qb
                first = int(row_start[a]) if a < n else a
                pairs += [(b, 0, j * qb) for j in range(first // qb, int(i) + 1)]
            out.append(pairs)
        return out

    def pairs_per_shard(self, m: int) -> int:
        """P: the pairs each row shard lists (the busiest shard's, `block_attention.pair_bucket`)."""
        return block_attention.pair_bucket(max(len(p) for p in self.pairs(m)))


def block_order(m: int, per_shard: int) -> np.ndarray:
    """[m, per_shard]: the natural query block (QUERY_BLOCK tokens of the packed sequence) that each row shard
    computes at each of its places: block i goes to round i // m, and the rounds go over the shards back and
    forth (0, 1, ..., m - 1, then m - 1, ..., 0), so that a causal triangle's late blocks, which see the most
    keys, are shared out evenly."""
    i = np.arange(m * per_shard).reshape(per_shard, m)  # [round, place in the round]
    i[1::2] = i[1::2, ::-1]
    return np.ascontiguousarray(i.T)


def token_order(m: int, per_shard: int) -> np.ndarray:
    """[m * per_shard tokens]: the natural index of the token at each position of the row-sharded layout
    (`block_order` by token)."""
    blocks = block_order(m, per_shard // QUERY_BLOCK)
    return (blocks[..., None] * QUERY_BLOCK + np.arange(QUERY_BLOCK)).reshape(-1)


def groups(counts: dict[int, int], budget: int) -> list[list[int]]:
    """The rows with tokens (counts[row] > 0, in ascending order) cut into forwards: a forward takes the next
    rows while their tokens add up to at most `budget`; a row of more tokens than that goes alone."""
    out: list[list[int]] = []
    total = 0
    for r in sorted(r for r, n in counts.items() if n > 0):
        if out and total + counts[r] <= budget:
            out[-1].append(int(r))
            total += counts[r]
        else:
            out.append([int(r)])
            total = counts[r]
    return out


def pack(counts: dict[int, int], budget: int = PACK_TOKENS) -> list[PackedForward]:
    """The forwards of fresh rows getting counts[row] tokens (`groups`)."""
    return [PackedForward(tuple(g), tuple(int(counts[r]) for r in g)) for g in groups(counts, budget)]


@dataclasses.dataclass(frozen=True)
class PackedArrays:
    """Host arrays of one packed forward: tokens, rows (-1: padding) and slots [m * Tl], split over the m
    row shards in blocks of Tl, each shard's QUERY_BLOCK-token blocks in `block_order`; the attention's pairs
    [m * P] (`PackedForward.pairs`: query block, first key; shard j's P in block j); each row's last token's
    index into them (`last`), its row (`last_rows`; the session's row count for padding: dropped) and its
    count, over a bucket of the forward's rows."""

    tokens: np.ndarray
    rows: np.ndarray
    slots: np.ndarray
    pair_block: np.ndarray
    pair_start: np.ndarray
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
    natural = token_order(m, n // m)  # the layout's position p holds natural token natural[p]
    tokens, rows, slots = tokens[natural], rows[natural], slots[natural]
    place = np.argsort(natural)
    last[: len(forward.rows)] = place[last[: len(forward.rows)]]
    size = forward.pairs_per_shard(m)
    prs = np.zeros((2, m, size), np.int32)
    blocks = forward.per_shard(m) // QUERY_BLOCK
    for j, pairs in enumerate(forward.pairs(m)):
        pq, _, st = np.asarray(pairs, np.int32).reshape(-1, 3).T
        prs[0, j], _, prs[1, j] = block_attention.pad_pairs(pq, np.zeros_like(pq), st, size, blocks)
    pr = prs.reshape(2, m * size)
    return PackedArrays(tokens, rows, slots, pr[0], pr[1], last, last_rows, counts)


def whole(x: jax.Array, at: tuple) -> jax.Array:
    """x [N, ...] whole on every row shard (its axis 1 kept on `at`): the all-gather of step 2."""
    mesh = row_shards.batch_mesh()
    if mesh is None:
        return x
    spec = P(None, *(tuple(at) + (None,) * (x.ndim - 1 - len(at))))
    return jax.lax.with_sharding_constraint(x, spec)


def _attend_local(q, q_rows, q_slots, k, v, k_rows, k_slots, pair_block, pair_start):
    """One shard's queries q [1, Tl, G, R, Dh] (rows, slots [1, Tl]) over the packed keys k, v [N, G, Dh]
    (rows, slots [N]) through its pairs [P]: a query sees the keys of its row at slots <= its own."""
    _, tl, g, r, dh = q.shape
    nb = tl // QUERY_BLOCK
    out = block_attention.attend(
        q.reshape(nb, QUERY_BLOCK, g, r, dh),
        q_rows.reshape(nb, QUERY_BLOCK),
        q_slots.reshape(nb, QUERY_BLOCK),
        jnp.swapaxes(k, 0, 1)[None],
        jnp.swapaxes(v, 0, 1)[None],
        k_rows[None],
        k_slots[None],
        pair_block,
        jnp.zeros_like(pair_block),
        pair_start,
        block_k=QUERY_BLOCK,
    )
    return out.reshape(1, tl, g, r, dh)


def _attend(q, k, v, q_rows, q_slots, k_rows, k_slots, pair_block, pair_start, at: tuple) -> jax.Array:
    """q [m, Tl, G, R, Dh] (row-sharded) over the whole packed k, v [N, G, Dh]: each row shard attends its own
    query blocks through its own pairs (`shard_map`; kv heads over `at`). Returns [m, Tl, G, R, Dh]."""
    args = (q, q_rows, q_slots, k, v, k_rows, k_slots, pair_block, pair_start)
    mesh = row_shards.batch_mesh()
    if mesh is None:
        return _attend_local(*args)
    heads = at[0] if at else None
    rows_spec = P(BATCH_AXES)
    in_specs = (P(BATCH_AXES, None, heads), rows_spec, rows_spec, P(None, heads), P(None, heads), P(), P())
    in_specs += (rows_spec, rows_spec)
    return jax.shard_map(
        _attend_local, mesh=mesh, in_specs=in_specs, out_specs=P(BATCH_AXES, None, heads), check_vma=False
    )(*args)


def prefill_impl(
    s: Sampler, params, cache: DecodeCache, logits, tokens, rows, slots, pair_block, pair_start, last, last_rows, counts
):
    """One packed forward (module docstring): tokens, rows, slots [m * Tl] and the pairs [m * P] (row-sharded:
    shard j holds its block of each); last, last_rows, counts [F] whole on every shard. Writes the rows' K/V at
    their slots, lengths[last_rows] = counts and logits[last_rows] = the last tokens' next-token logits.
    Returns (cache, logits)."""
    c, mode = s.config, decode_step.block_write(s.kv_write)
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
    place = np.argsort(token_order(m, tl))  # natural token -> its position in the layout
    natural = lambda x: jnp.take(x, place, axis=0)  # noqa: E731  the gathered tokens in natural order
    k_rows, k_slots = natural(whole(rows.astype(jnp.int32), ())), natural(whole(slots.astype(jnp.int32), ()))
    norm = RMSNorm(c.rms_norm_eps, dt, c.jnp_param_dtype)
    x = constrain(jnp.take(weights["embed"]["embedding"], tok2, axis=0).astype(dt), ("batch", "seq", "hidden"))
    k_all, v_all = list(cache.k), list(cache.v)
    g, dh = c.num_kv_heads, c.head_dim
    for i, p in enumerate(weights["layers"]):
        h = norm.apply({"params": p["input_norm"]}, x)
        q, k, v = decode_step.project_qkv(c, p["attn"], h, slots2)
        k, v = natural(whole(k.reshape(m * tl, g, dh), at)), natural(whole(v.reshape(m * tl, g, dh), at))
        out = _attend(
            q, k, v, rows2, slots2, k_rows, k_slots, pair_block.astype(jnp.int32), pair_start.astype(jnp.int32), at
        )
        k_all[i] = row_shards.put_tokens(k_all[i], k, k_rows, k_slots, cache.k_slot_axis, at, mode)
        v_all[i] = row_shards.put_tokens(v_all[i], v, k_rows, k_slots, 2, at, mode)
        x = x + decode_step.dense(p["attn"]["o_proj"], out.reshape(m, tl, c.num_heads * dh), dt)
        x = x + MLP(c).apply({"params": p["mlp"]}, norm.apply({"params": p["post_attn_norm"]}, x))
        x = constrain(x, ("batch", "seq", "hidden"))
    x = norm.apply({"params": weights["final_norm"]}, x)
    hidden_last = jnp.take(x.reshape(m * tl, x.shape[-1]), last, axis=0)
    new_logits = logits_last(c, weights, hidden_last)
    lengths = row_shards.put_rows(cache.lengths, counts.astype(cache.lengths.dtype), last_rows)
    cache = DecodeCache(k=tuple(k_all), v=tuple(v_all), lengths=lengths, layout=layout)
    return cache, row_shards.put_rows(logits, new_logits, last_rows)
