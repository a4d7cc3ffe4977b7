"""The token-packed prefill of fresh rows (`sampling.packed`) and append to rows with context
(`sampling.packed_append`): the packing and bucket rules by hand, the session's values against the row
sub-batch's (on a mesh and off one), the writes each row shard owns, and XLA's cost analysis of one group's
prefix admitted into a 160-row session on 4 row shards."""

import jax
import numpy as np
import pytest

from rcgrpo_jax import models, sharding
from rcgrpo_jax.models import ModelConfig
from rcgrpo_jax.sampling import SamplingParams, block_attention, buckets, packed, packed_append, row_shards
from rcgrpo_jax.sampling.session import DecodeSession
from tests.helpers.tiny_sizes import TINY_QWEN2

CONFIG = TINY_QWEN2


def test_token_bucket_by_hand():
    got = [buckets.token_bucket(n) for n in (1, 64, 65, 128, 129, 200, 300, 513, 1500, 4096, 4097)]
    # steps: 64 up to 256, then a quarter of the power of two (512 -> 128, 1024 -> 256, 4096 -> 1024)
    assert got == [64, 64, 128, 128, 192, 256, 320, 640, 1536, 4096, 5120]
    for n in range(65, 5000, 37):
        b = buckets.token_bucket(n)
        assert b >= n and b % 64 == 0 and b <= 1.25 * n + 64
    with pytest.raises(ValueError, match="power of two"):
        buckets.token_bucket(10, 48)


def test_pack_by_hand():
    got = packed.pack({12: 3000, 3: 100, 9: 600, 7: 1500, 5: 0})
    assert [(f.rows, f.counts) for f in got] == [((3, 7), (100, 1500)), ((9,), (600,)), ((12,), (3000,))]
    fwd = got[0]
    assert fwd.tokens == 1600 and fwd.per_shard(4) == 448 and fwd.per_shard(1) == 1664  # 400 -> 448, 1600 -> 1664
    # 28 blocks of 64 tokens, 7 a shard, dealt back and forth: shard 0 computes natural blocks 0, 7, 8, 15, ...
    order = packed.block_order(4, 7)
    assert order[0].tolist() == [0, 7, 8, 15, 16, 23, 24] and order[3].tolist() == [3, 4, 11, 12, 19, 20, 27]
    a = packed.arrays(fwd, {3: list(range(1, 101)), 7: [5] * 1500}, 4, 16)
    assert a.tokens.shape == a.rows.shape == a.slots.shape == (4 * 448,)
    at = lambda i: np.argsort(packed.token_order(4, 448))[i]  # noqa: E731  natural token i's position
    assert a.rows[at(np.arange(100))].tolist() == [3] * 100 and a.slots[at(99)] == 99
    assert a.rows[at(100)] == 7 and a.slots[at(100)] == 0 and a.tokens[at(5)] == 6
    pad = at(np.arange(1600, 1792))
    assert (a.rows[pad] == -1).all() and (a.slots[pad] == 0).all() and (a.tokens[pad] == 0).all()
    # row 3's last token (natural 99, block 1: shard 1's first place) and row 7's (1599, block 24: shard 0's last)
    assert a.last.tolist() == [448 + 35, 6 * 64 + 63] and a.last_rows.tolist() == [3, 7]
    assert a.counts.tolist() == [100, 1500]
    # pairs: natural block i (64 tokens from a = 64 i) with the 64-key blocks from its first token's row's start
    # to block i. Block 0 (row 3) sees key block 0; block 1 (rows 3, 7) blocks 0-1; block i >= 2 (row 7 from
    # token 100: key block 1) blocks 1..i, i pairs; blocks 25-27 are padding (one pair each: their own keys).
    pairs = fwd.pairs(4)
    want = [sum(1 if i == 0 else 2 if i == 1 else 1 if i >= 25 else i for i in order[s]) for s in range(4)]
    assert [len(p) for p in pairs] == want == [1 + 7 + 8 + 15 + 16 + 23 + 24, 71, 70, 70]
    assert pairs[0][:3] == [(0, 0, 0), (1, 0, 64), (1, 0, 128)] and pairs[3][-1] == (6, 0, 27 * 64)
    assert fwd.pairs_per_shard(4) == 96 and a.pair_block.shape == a.pair_start.shape == (4 * 96,)
    assert a.pair_block[94:96].tolist() == [7, 7]  # shard 0's padding pairs: the block past its last
    # one fresh row of 1600 tokens alone, contiguous over the shards, would leave shard 2 with 119 pairs


def test_put_rows_and_tokens_write_only_owned_rows():
    """On 4 row shards a global write lands once, in the owning shard's block; rows -1 and R are dropped."""
    mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    x = np.zeros((8, 2, 6, 3), np.float32)  # [R, G, S, Dh]
    new = np.arange(4 * 2 * 3, dtype=np.float32).reshape(4, 2, 3) + 1
    rows, slots = np.array([5, 0, -1, 7], np.int32), np.array([2, 4, 1, 0], np.int32)
    want = x.copy()
    for n in (0, 1, 3):
        want[rows[n], :, slots[n], :] = new[n]
    with jax.set_mesh(mesh):
        placed = jax.device_put(x, jax.sharding.NamedSharding(mesh, jax.P(sharding.BATCH_AXES, "tensor")))
        got = jax.jit(lambda a, b, r, s: row_shards.put_tokens(a, b, r, s, 2, ("tensor",)))(placed, new, rows, slots)
        lens = jax.jit(row_shards.put_rows)(
            np.zeros((8,), np.int32), np.array([3, 4, 9], np.int32), np.array([6, 8, 1])
        )
    np.testing.assert_array_equal(np.asarray(got), want)
    np.testing.assert_array_equal(np.asarray(lens), [0, 9, 0, 0, 0, 0, 3, 0])


def _session(params, rows, mesh=None, **kw):
    return DecodeSession(
        CONFIG,
        params,
        rows,
        512,
        sampling=SamplingParams(),
        max_new_tokens=16,
        prefill_chunk=64,
        min_span=64,
        span=64,
        mesh=mesh,
        **kw,
    )


def _close(x, y, rel=1e-5):
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    np.testing.assert_allclose(x, y, rtol=0, atol=rel * max(np.abs(y).max(), 1e-30))


def test_pack_append_by_hand():
    """Rows 0 (holding 1000) and 41 (holding 300) of a 160-row session on 4 row shards get 40 and 70 tokens:
    one forward of 110 tokens (28 a shard -> 32); blocks of 32: shard 0 has rows 0's two (slots 1000, 1032),
    shard 1 row 41's three (300, 332, 364), so every shard attends 4 (row_bucket of 3). Pairs with 128-slot
    key blocks: row 0's blocks see slots up to 1031 and 1039 (9 key blocks each), row 41's up to 331, 363 and
    369 (3 each); a padding block gets one pair."""
    (fwd,) = packed_append.pack({41: 70, 0: 40, 7: 0}, {0: 1000, 41: 300, 7: 5})
    assert (fwd.rows, fwd.counts, fwd.bases, fwd.tokens, fwd.per_shard(4)) == ((0, 41), (40, 70), (1000, 300), 110, 32)
    assert fwd.blocks(4, 160) == [
        [(0, 0, 32, 1000), (0, 32, 8, 1032)],
        [(1, 40, 32, 300), (1, 72, 32, 332), (1, 104, 6, 364)],
        [],
        [],
    ]
    assert fwd.blocks_per_shard(4, 160) == 4 and fwd.span(16896) == buckets.span_bucket(1070, 16896)
    assert [len(p) for p in fwd.pairs(4, 160, 128)] == [9 + 9 + 2, 3 + 3 + 3 + 1, 4, 4]
    assert fwd.pairs(4, 160, 128)[1][:4] == [(0, 1, 0), (0, 1, 128), (0, 1, 256), (1, 1, 0)]
    assert fwd.pairs_per_shard(4, 160, 128) == 24 and packed_append.key_block(16896) == 128
    assert packed_append.key_block(80) == 16  # a tiny session's span: the largest power of two dividing it
    a = packed_append.arrays(fwd, {0: list(range(1, 41)), 41: [9] * 70}, 4, 160, 2048)
    assert a.tokens.shape == (128,) and a.block_rows.shape == (16,) and a.pair_block.shape == (4 * 24,)
    assert a.pair_block[20:24].tolist() == [4] * 4 and a.pair_start[:10].tolist() == [128 * j for j in range(9)] + [0]
    with pytest.raises(ValueError, match="do not fit in the cache's 1024 slots"):
        packed_append.arrays(fwd, {0: list(range(1, 41)), 41: [9] * 70}, 4, 160, 1024)
    assert a.rows[:40].tolist() == [0] * 40 and a.slots[40] == 300 and (a.rows[110:] == -1).all()
    assert a.block_rows.tolist()[:4] == [0, 0, 40, 40] and a.block_count.tolist()[4:8] == [32, 32, 6, 0]
    assert a.last.tolist() == [39, 109] and a.last_rows.tolist() == [0, 41] and a.lengths.tolist() == [1040, 370]
    many = packed_append.pack({r: 3000 for r in range(5)}, {r: 10 for r in range(5)})
    assert [f.rows for f in many] == [(0, 1), (2, 3), (4,)]  # at most APPEND_TOKENS = 8192 tokens a forward


@pytest.mark.slow
def test_packed_appends_equal_the_row_sub_batch():
    """Eight prompts (one of 300 tokens, over the packing budget of the rest) then deltas to three rows that
    hold context (one of 70 tokens: three attention blocks): the packed prefill and the packed append on a
    (2, 2, 2) mesh and off a mesh give the K/V, lengths and logits of the row sub-batches without packing,
    and the same greedy tokens."""
    params = models.init_params(CONFIG, jax.random.key(0))
    mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    placed = sharding.shard_params(params, mesh, sharding.DECODE_RULES)
    rng = np.random.default_rng(2)
    prompts = [rng.integers(1, 96, int(rng.integers(5, 40))).tolist() for _ in range(8)]
    prompts[3] = rng.integers(1, 96, 300).tolist()
    delta = [[] for _ in range(8)]
    delta[5], delta[2], delta[6] = (rng.integers(1, 96, k).tolist() for k in (70, 3, 33))
    runs = []
    for m, p, pk in ((None, params, False), (mesh, placed, None), (None, params, True)):
        sess = _session(p, 8, mesh=m, packed_prefill=pk)
        sess.append(prompts)
        sess.append(delta)
        runs.append(sess)
    ref, meshed, flat = runs
    assert ref.stats["packed_calls"] == 0 and meshed.packed_prefill and not ref.packed_prefill
    n = sum(map(len, prompts))
    assert meshed.stats["packed_calls"] == flat.stats["packed_calls"] == 2  # the prompts, then the deltas
    # n = 440 prompt tokens (110 a shard -> 128), then 106 delta tokens (27 a shard -> 32)
    assert meshed.stats["packed_tokens_computed"] == 4 * 128 + 4 * 32 and n == 440
    assert flat.stats["packed_tokens_computed"] == 448 + 128
    assert meshed.stats["prefill_rows_computed"] == flat.stats["prefill_rows_computed"] == 0
    for sess in (meshed, flat):
        assert sess.lengths.tolist() == ref.lengths.tolist() == np.asarray(sess.cache.lengths).tolist()
        for i in range(CONFIG.num_layers):
            for r, n_r in enumerate(ref.lengths):
                _close(np.asarray(sess.cache.keys(i))[r, :, :n_r], np.asarray(ref.cache.keys(i))[r, :, :n_r])
                _close(np.asarray(sess.cache.v[i])[r, :, :n_r], np.asarray(ref.cache.v[i])[r, :, :n_r])
        _close(sess.logits, ref.logits)
    want = ref.decode([6] * 8, ())
    for sess in (meshed, flat):
        assert [o[0] for o in sess.decode([6] * 8, ())] == [w[0] for w in want]


BIG = ModelConfig(  # wider layers, so the matmuls outweigh the attention as at 7B (the FLOPs compared)
    model_type="qwen2",
    vocab_size=96,
    hidden_size=256,
    intermediate_size=1024,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=64,
    attention_bias=True,
)


@pytest.mark.slow
def test_one_prefix_into_160_rows_on_4_row_shards_costs_about_one_row(monkeypatch):
    """XLA's cost analysis (per device, x 8 devices): a 600-token prefix admitted into one row of a 160-row
    session on (data 2, fsdp 2, tensor 2) computes at most 1.25x the FLOPs of the same prefill in a
    one-row session off a mesh, where the row sub-batch (one row per row shard) computes about 4x. The block
    attention's scan is unrolled, so that every step is counted (XLA counts a loop's body once)."""
    monkeypatch.setattr(block_attention, "SCAN_UNROLL", True)
    params = models.init_params(BIG, jax.random.key(0))
    mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    placed = sharding.shard_params(params, mesh, sharding.DECODE_RULES)
    prefix = np.random.default_rng(1).integers(1, 96, 600).tolist()
    deltas = [[] for _ in range(160)]
    deltas[37] = prefix

    def flops(sess, d):
        return sum(float(p.compile().cost_analysis()["flops"]) for p in sess.lower_append(d))

    def session(p, rows, m, pk):
        return DecodeSession(
            BIG,
            p,
            rows,
            1024,
            sampling=SamplingParams(),
            max_new_tokens=16,
            prefill_chunk=256,
            mesh=m,
            span=1024,
            packed_prefill=pk,
        )

    one = flops(session(params, 1, None, False), [prefix])
    packed_total = 8 * flops(session(placed, 160, mesh, None), deltas)
    rect_total = 8 * flops(session(placed, 160, mesh, False), deltas)
    print(f"prefix flops: one row {one:.4g}, packed on 8 devices {packed_total:.4g}, sub-batch {rect_total:.4g}")
    assert packed_total <= 1.25 * one
    assert rect_total >= 3 * one
