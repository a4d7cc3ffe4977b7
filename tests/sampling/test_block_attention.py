"""Block-sparse attention over a pair list (`sampling.block_attention`): equal to dense masked attention when the
pairs cover every key a query sees, across scan chunks, in both key layouts; pairs that see nothing change
nothing; a query that sees no key gets zeros; and XLA's cost analysis counts the listed pairs, not the span."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rcgrpo_jax.sampling import block_attention

G, R, DH, B, BK = 2, 3, 8, 4, 8


def _dense(q, q_ids, q_pos, k, v, k_ids, k_pos):
    """The reference: every query against every slot of every source row, masked by the same rule."""
    nq, b = q_ids.shape
    kk = np.asarray(k, np.float64).transpose(0, 2, 1, 3).reshape(-1, G, DH)  # [Rs * S, G, Dh]
    vv = np.asarray(v, np.float64).transpose(0, 2, 1, 3).reshape(-1, G, DH)
    ids, pos = np.asarray(k_ids).reshape(-1), np.asarray(k_pos).reshape(-1)
    out = np.zeros(q.shape)
    qq = np.asarray(q, np.float64)
    for i in range(nq):
        for j in range(b):
            sees = (ids == q_ids[i, j]) & (pos <= q_pos[i, j])
            if not sees.any():
                continue
            s = np.einsum("grd,ngd->grn", qq[i, j], kk[sees]) / np.sqrt(DH)
            w = np.exp(s - s.max(-1, keepdims=True))
            w /= w.sum(-1, keepdims=True)
            out[i, j] = np.einsum("grn,ngd->grd", w, vv[sees])
    return out


def _case(seed=0, rs=3, s=32, nq=6):
    """Query blocks each of one source row (its id), at random positions; the row's slots hold positions
    0..S-1; one block sees nothing (positions -1)."""
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(nq, B, G, R, DH)).astype(np.float32)
    k = rng.normal(size=(rs, G, s, DH)).astype(np.float32)
    v = rng.normal(size=(rs, G, s, DH)).astype(np.float32)
    k_ids = np.repeat(np.arange(rs, dtype=np.int32)[:, None], s, 1)
    k_pos = np.repeat(np.arange(s, dtype=np.int32)[None], rs, 0)
    rows = rng.integers(0, rs, nq).astype(np.int32)
    q_ids = np.repeat(rows[:, None], B, 1)
    q_pos = rng.integers(0, s, (nq, B)).astype(np.int32)
    q_pos[2] = -1
    return q, q_ids, q_pos, k, v, k_ids, k_pos, rows


def _pairs(rows, q_pos, extra=0):
    """Every key block up to each block's furthest query, of its own row (a block seeing nothing: block 0);
    with `extra`, each block's first key block of the next row too (which it does not see)."""
    pq, src, st = [], [], []
    for i, r in enumerate(rows):
        for j in range(max(int(q_pos[i].max()) // BK + 1, 1)):
            pq.append(i), src.append(int(r)), st.append(j * BK)
        if extra:
            pq.append(i), src.append((int(r) + 1) % 3), st.append(0)
    return np.array(pq), np.array(src), np.array(st)


@pytest.mark.parametrize("chunk", [4, 8])
def test_equals_dense_masked_attention(chunk):
    q, q_ids, q_pos, k, v, k_ids, k_pos, rows = _case()
    pq, src, st = _pairs(rows, q_pos)
    size = block_attention.pair_bucket(len(pq))
    assert block_attention.chunk_of(size, chunk) < size  # several scan steps
    pairs = block_attention.pad_pairs(pq, src, st, size, len(rows))
    got = block_attention.attend(q, q_ids, q_pos, k, v, k_ids, k_pos, *pairs, block_k=BK, chunk=chunk)
    want = _dense(q, q_ids, q_pos, k, v, k_ids, k_pos)
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-5 * np.abs(want).max())
    assert not np.asarray(got[2]).any()  # the block that sees nothing


def test_transposed_keys_and_blind_pairs_change_nothing():
    q, q_ids, q_pos, k, v, k_ids, k_pos, rows = _case(seed=1)
    pq, src, st = _pairs(rows, q_pos)
    base = block_attention.attend(
        q, q_ids, q_pos, k, v, k_ids, k_pos, *block_attention.pad_pairs(pq, src, st, len(pq), len(rows)), block_k=BK
    )
    kt = np.swapaxes(k, 2, 3)  # [Rs, G, Dh, S]: the decode cache's K layout
    got_t = block_attention.attend(
        q,
        q_ids,
        q_pos,
        kt,
        v,
        k_ids,
        k_pos,
        *block_attention.pad_pairs(pq, src, st, len(pq), len(rows)),
        block_k=BK,
        k_axis=3,
    )
    np.testing.assert_allclose(np.asarray(got_t), np.asarray(base), rtol=1e-6, atol=1e-6)
    # more pairs per block, each past its furthest query (nothing seen), and padding pairs: the same output
    pq2, src2, st2 = _pairs(rows, q_pos, extra=1)
    more = block_attention.attend(
        q, q_ids, q_pos, k, v, k_ids, k_pos, *block_attention.pad_pairs(pq2, src2, st2, 40, len(rows)), block_k=BK
    )
    np.testing.assert_allclose(np.asarray(more), np.asarray(base), rtol=1e-5, atol=1e-6)


def test_bfloat16_stays_close_to_float32():
    q, q_ids, q_pos, k, v, k_ids, k_pos, rows = _case(seed=2)
    pairs = block_attention.pad_pairs(*_pairs(rows, q_pos), 24, len(rows))
    f32 = block_attention.attend(q, q_ids, q_pos, k, v, k_ids, k_pos, *pairs, block_k=BK, chunk=8)
    bf = block_attention.attend(
        *(jnp.asarray(x, jnp.bfloat16) for x in (q,)), q_ids, q_pos, jnp.asarray(k, jnp.bfloat16),
        jnp.asarray(v, jnp.bfloat16), k_ids, k_pos, *pairs, block_k=BK, chunk=8,
    )  # fmt: skip
    assert bf.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(bf, np.float32), np.asarray(f32), atol=0.05 * np.abs(np.asarray(f32)).max())


def test_bad_pair_counts_are_refused_and_buckets_by_hand():
    with pytest.raises(ValueError, match="do not fit"):
        block_attention.pad_pairs(np.zeros(5), np.zeros(5), np.zeros(5), 4, 1)
    z = np.zeros(3)
    for blocks in ([1, 0, 2], [0, 2, 2]):  # unsorted; block 1 without a pair
        with pytest.raises(ValueError, match="sorted by query block and name every block 0..2"):
            block_attention.pad_pairs(np.array(blocks), z, z, 8, 3)
    got = [block_attention.pair_bucket(n) for n in (0, 1, 9, 64, 65, 130, 300, 513)]
    assert got == [8, 8, 16, 64, 72, 144, 320, 576]
    assert [block_attention.chunk_of(p) for p in (8, 72, 144, 320, 576, 40)] == [8, 8, 16, 64, 64, 8]


def test_cost_counts_the_pairs_not_the_span(monkeypatch):
    """XLA's FLOPs for P pairs over a long source grow with P, not with the source's slots: 64 pairs over
    rows of 4096 slots cost about what 64 pairs over rows of 256 cost, and 128 pairs about twice that (in
    chunks of 32, the scan unrolled: XLA's cost analysis counts a loop's body once)."""
    monkeypatch.setattr(block_attention, "SCAN_UNROLL", True)
    g, r, dh, b, bk = 2, 4, 64, 32, 128

    def flops(slots, pairs):
        args = (
            jax.ShapeDtypeStruct((8, b, g, r, dh), jnp.float32),
            jax.ShapeDtypeStruct((8, b), jnp.int32),
            jax.ShapeDtypeStruct((8, b), jnp.int32),
            jax.ShapeDtypeStruct((4, g, slots, dh), jnp.float32),
            jax.ShapeDtypeStruct((4, g, slots, dh), jnp.float32),
            jax.ShapeDtypeStruct((4, slots), jnp.int32),
            jax.ShapeDtypeStruct((4, slots), jnp.int32),
            *(jax.ShapeDtypeStruct((pairs,), jnp.int32),) * 3,
        )
        f = jax.jit(lambda *a: block_attention.attend(*a, block_k=bk, chunk=32))
        return f.lower(*args).compile().cost_analysis()["flops"]

    short, long_, twice = flops(256, 64), flops(4096, 64), flops(4096, 128)
    matmul = 2 * 2 * 64 * g * r * b * bk * dh  # q k^T and p v of 64 pairs
    assert matmul <= long_ <= 1.5 * matmul
    assert long_ <= 1.1 * short
    assert 1.8 * long_ <= twice <= 2.2 * long_
