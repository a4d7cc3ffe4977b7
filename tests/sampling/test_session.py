"""DecodeSession computes only the rows that have tokens: an append runs the forward over a bucketed
sub-batch of them and scatters their K/V back into the (donated) cache; sibling rows are copied in place.
Tiny random model (test_sampler's sizes), float32."""

import dataclasses
import re
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rcgrpo_jax import models, sharding
from rcgrpo_jax.sampling import SamplingParams, buckets, decode_step
from rcgrpo_jax.sampling import decode_loop as sampler_mod
from rcgrpo_jax.sampling import session as session_mod
from rcgrpo_jax.sampling.session import DecodeSession
from tests.helpers.tiny_sizes import TINY_QWEN2

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)

CONFIG = TINY_QWEN2
ROWS, SPAN, CHUNK = 16, 256, 64


@pytest.fixture(scope="module")
def params():
    return models.init_params(CONFIG, jax.random.key(0))


def _session(params, rows, span=SPAN, chunk=CHUNK, mesh=None, **kw):
    return DecodeSession(
        CONFIG,
        params,
        rows,
        512,
        sampling=SamplingParams(),
        max_new_tokens=16,
        prefill_chunk=chunk,
        min_span=64,
        span=span,
        mesh=mesh,
        **kw,
    )


def _close(x, y, rel=1e-5):
    """Equal up to float32 rounding at the scale of the values compared."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    np.testing.assert_allclose(x, y, rtol=0, atol=rel * max(np.abs(y).max(), 1e-30))


def _row(cache, r, n):
    """Row r's K and V over its n valid slots, per layer, as [G, n, Dh] numpy arrays."""
    return [np.asarray(cache.keys(i))[r, :, :n] for i in range(CONFIG.num_layers)] + [
        np.asarray(cache.v[i])[r, :, :n] for i in range(CONFIG.num_layers)
    ]


def _whole_rows(cache, rows, span=None):
    """Every slot (up to `span`) of the given rows: K and V as [rows, G, S, Dh], and the lengths."""
    rows, n = list(rows), span or cache.span
    kv = [cache.keys(i) for i in range(CONFIG.num_layers)] + list(cache.v)
    return [np.asarray(x)[rows, :, :n] for x in kv] + [np.asarray(cache.lengths)[rows]]


def test_row_bucket():
    assert [buckets.row_bucket(n, 160) for n in (0, 1, 8, 9, 17, 100, 129, 160)] == [8, 8, 8, 16, 32, 128, 160, 160]
    assert [buckets.row_bucket(n, 160, 1) for n in (1, 2, 3, 5, 100)] == [1, 2, 4, 8, 128]
    assert buckets.row_bucket(3, 8, 4) == 4 and buckets.row_bucket(5, 8, 4) == 8 and buckets.row_bucket(1, 1) == 1
    with pytest.raises(ValueError, match="max_rows"):
        buckets.row_bucket(9, 8)


@pytest.mark.parametrize("axis", [2, 3])  # the slot axis: V (and "ragged" K) [R, G, S, Dh]; "xla" K^T [R, G, Dh, S]
def test_slot_window_and_put_slots_against_a_loop(axis):
    """Reading a sub-batch's new slots and writing them into cache rows: what a per-element loop does, with
    the padding row (index R) and padding slots (index S) dropped."""
    rng = np.random.default_rng(3)
    shape = (5, 2, 7, 3) if axis == 2 else (5, 2, 3, 7)
    cache, sub = rng.normal(size=shape).astype(np.float32), rng.normal(size=(3,) + shape[1:]).astype(np.float32)
    rows, slots = np.array([4, 1, 5]), np.array([[2, 3, 7], [0, 1, 2], [5, 6, 7]])  # row 5, slot 7: padding
    new = np.asarray(session_mod._slot_window(jnp.asarray(sub), jnp.asarray(slots), axis))
    got = np.asarray(
        session_mod._put_slots(jnp.asarray(cache), jnp.asarray(new), jnp.asarray(rows), slots, axis, "scatter")
    )
    want = cache.copy()
    for b in range(3):
        for t in range(3):
            r, s_ = rows[b], slots[b, t]
            if r >= 5 or s_ >= 7:
                continue
            src = sub[b, :, s_] if axis == 2 else sub[b, :, :, s_]
            np.testing.assert_array_equal(new[b, t], src)
            if axis == 2:
                want[r, :, s_] = src
            else:
                want[r, :, :, s_] = src
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(got, cache)


def test_append_to_some_rows_equals_one_row_sessions_and_leaves_the_others(params):
    """Three of 16 rows get deltas (one over two chunks): the forward runs over 4 rows, then 1; their K/V,
    lengths and logits equal those of one-row sessions fed the same tokens; the 13 others are untouched
    bit for bit. Then a same-size select copies row 3 into rows 4, 5 and 15 in place, and greedy decoding
    from the copies equals decoding from the one-row session."""
    rng = np.random.default_rng(0)
    prompts = [rng.integers(1, 96, int(rng.integers(17, 33))).tolist() for _ in range(ROWS)]
    deltas = [[] for _ in range(ROWS)]
    deltas[3], deltas[7], deltas[12] = rng.integers(1, 96, 100).tolist(), [5, 6], rng.integers(1, 96, 10).tolist()
    sess = _session(params, ROWS)
    sess.append(prompts)  # every row: the whole-batch program
    assert sess.stats["prefill_rows_computed"] == ROWS * 32
    before, logits_before = _whole_rows(sess.cache, range(ROWS)), np.asarray(sess.logits)
    sess.append(deltas)
    # chunk 1: rows 3, 7, 12 -> a sub-batch of 4 rows x 64 columns; chunk 2: row 3's last 36 -> 1 x 48
    assert sess.stats["prefill_rows_computed"] == ROWS * 32 + 4 * 64 + 1 * 48
    idle = [r for r in range(ROWS) if not deltas[r]]
    for x, y in zip(_whole_rows(sess.cache, idle), before):
        np.testing.assert_array_equal(x, y[idle])
    np.testing.assert_array_equal(np.asarray(sess.logits)[idle], logits_before[idle])
    refs = {}
    for r in (3, 7, 12):
        one = _session(params, 1)
        one.append([prompts[r]])
        one.append([deltas[r]])
        n = len(prompts[r]) + len(deltas[r])
        assert sess.lengths[r] == one.lengths[0] == int(sess.cache.lengths[r]) == n
        for x, y in zip(_row(sess.cache, r, n), _row(one.cache, 0, n)):
            _close(x, y)
        _close(sess.logits[r], one.logits[0])
        assert int(np.argmax(sess.logits[r])) == int(np.argmax(one.logits[0]))
        refs[r] = one

    src = list(range(ROWS))
    src[4] = src[5] = src[15] = 3
    kept = [r for r in range(ROWS) if src[r] == r]
    untouched = _whole_rows(sess.cache, kept)
    sess.select(src)
    assert sess.stats["row_copies"] == 1 and sess.rows == ROWS
    n = len(prompts[3]) + 100
    for d in (4, 5, 15):
        assert sess.lengths[d] == int(sess.cache.lengths[d]) == n
        for x, y in zip(_row(sess.cache, d, n), _row(sess.cache, 3, n)):
            np.testing.assert_array_equal(x, y)  # a copy: exact
        np.testing.assert_array_equal(np.asarray(sess.logits)[d], np.asarray(sess.logits)[3])
    assert sess.span == 192  # the select shrank the span (132 + 16 slots); the kept rows' slots are unchanged
    for x, y in zip(_whole_rows(sess.cache, kept), untouched):
        np.testing.assert_array_equal(x, y if x.ndim == 1 else y[:, :, :192])

    budgets = [0] * ROWS
    for r in (3, 4, 15, 7):
        budgets[r] = 6
    out = sess.decode(budgets, ())
    want3 = refs[3].decode([6], ())[0]
    want7 = refs[7].decode([6], ())[0]
    for r in (3, 4, 15):
        assert out[r][0] == want3[0]
        _close(out[r][1], want3[1])
    assert out[7][0] == want7[0]


@pytest.fixture(scope="module")
def admission(params):
    """A 160-row session and a one-row session, each about to take one group's 300-token prefix (chunks of
    128, 128 and 44 tokens), the programs compiled and not run."""
    prefix = np.random.default_rng(1).integers(1, 96, 300).tolist()
    big = _session(params, 160, span=512, chunk=128)
    deltas = [[] for _ in range(160)]
    deltas[37] = prefix
    one = _session(params, 1, span=512, chunk=128)
    return {
        "big": big,
        "big_programs": [p.compile() for p in big.lower_append(deltas)],
        "one_programs": [p.compile() for p in one.lower_append([prefix])],
    }


def _flops(programs):
    return sum(float(p.cost_analysis()["flops"]) for p in programs)


def test_admitting_a_prefix_into_160_rows_costs_about_one_row(admission, params):
    """XLA's cost analysis: the prefix into one row of a 160-row session costs at most 1.25x the same
    prefill in a one-row session (the whole-batch forward, which the session used to run, costs ~160x)."""
    big, one = _flops(admission["big_programs"]), _flops(admission["one_programs"])
    ratio = big / one
    print(f"admission flops: 160-row session {big:.4g}, one-row session {one:.4g}, ratio {ratio:.4f}")
    assert len(admission["big_programs"]) == 3 and ratio <= 1.25
    sess = admission["big"]  # the old behaviour: the forward over every row, for the first chunk
    block = np.zeros((160, 128), np.int32)
    counts = np.zeros((160,), np.int32)
    counts[37] = 128
    whole = sess._programs["append_all"].lower(sess.sampler, params, sess.cache, sess.logits, block, counts)
    per_chunk_one = float(admission["one_programs"][0].cost_analysis()["flops"])
    assert float(whole.compile().cost_analysis()["flops"]) > 100 * per_chunk_one


def _aliased_params(compiled) -> set[int]:
    header = re.search(r"input_output_alias=\{(.*?)\}, entry_computation_layout", compiled.as_text()).group(1)
    return {int(p) for p in re.findall(r"\((\d+), \{\}, may-alias\)", header)}


def test_append_and_copy_programs_update_the_cache_in_place(admission):
    """The admission's append aliases the cache and logits to its outputs, the sibling copy's programs (one
    layer's K, one layer's V, the logits) each their array, and their temporaries hold no second cache
    (XLA's memory analysis)."""
    sess = admission["big"]
    cache_bytes = decode_step.cache_bytes(CONFIG, 160, sess.span)
    logits_bytes = 160 * CONFIG.vocab_size * 4
    append = admission["big_programs"][0]
    mem = append.memory_analysis()
    assert mem.alias_size_in_bytes >= cache_bytes + logits_bytes
    assert mem.temp_size_in_bytes < 0.25 * cache_bytes
    assert len(_aliased_params(append)) == 2 * CONFIG.num_layers + 2  # K, V per layer, lengths, logits
    copies = [p.compile() for p in sess.lower_copy_rows([37] * 7, list(range(38, 45)))]
    layer_bytes = 160 * CONFIG.num_kv_heads * sess.span * CONFIG.head_dim * 4  # one K or V, float32
    for compiled, size in zip(copies, (layer_bytes, layer_bytes, logits_bytes)):
        mem = compiled.memory_analysis()
        assert mem.alias_size_in_bytes >= size and _aliased_params(compiled) == {0}
        assert mem.temp_size_in_bytes < 0.25 * cache_bytes


def test_a_row_count_change_frees_each_old_layer_as_it_copies(params, monkeypatch):
    """select with fewer rows copies one layer at a time: when a layer's K or V is copied, the old arrays
    already copied are gone (the transient is one layer, not a second cache)."""
    sess = _session(params, 8, span=64)
    sess.append([[1, 2, 3]] * 8)
    alive_at_call = []
    real = session_mod.take_program

    def counting(sh):
        take = real(sh)

        def run(x, rows):
            if x.ndim == 4:
                alive_at_call.append(sum(r() is not None for r in old))
            return take(x, rows)

        return run

    monkeypatch.setattr(session_mod, "take_program", counting)
    sess.select([6, 1, 0, 3, 0, 1, 2, 3])  # as many rows: an in-place copy, no new arrays
    assert alive_at_call == [] and sess.stats["row_copies"] == 1
    old = [weakref.ref(x) for pair in zip(sess.cache.k, sess.cache.v) for x in pair]
    sess.select([0, 1, 2, 3])  # fewer rows: new arrays
    assert sess.rows == 4 and alive_at_call == [4, 3, 2, 1]
    assert all(r() is None for r in old)


def test_sub_batch_on_a_mesh_matches_one_device(params):
    """On a (data 2, fsdp 2, tensor 2) mesh the sub-batch is 4 rows (the row shards); appending to one row,
    copying it and shrinking give the values of the same calls without a mesh, and the cache keeps its
    sharding (rows over data+fsdp, kv heads over tensor)."""
    mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    placed = sharding.shard_params(params, mesh, sharding.DECODE_RULES)
    rng = np.random.default_rng(2)
    prompts = [rng.integers(1, 96, int(rng.integers(5, 16))).tolist() for _ in range(8)]
    delta = [[] for _ in range(8)]
    delta[5] = rng.integers(1, 96, 20).tolist()
    runs = []
    for m, p in ((None, params), (mesh, placed)):
        sess = _session(p, 8, span=64, mesh=m, packed_prefill=False)  # the fresh rows too (test_packed: packed)
        sess.append(prompts)
        sess.append(delta)
        sess.select([0, 1, 2, 3, 4, 5, 5, 7])
        sess.select([5, 6, 0, 1])
        runs.append(sess)
    flat, meshed = runs
    assert meshed.row_multiple == 4 and meshed.stats["prefill_rows_computed"] == 8 * 16 + 4 * 32
    assert (
        flat.lengths.tolist()
        == meshed.lengths.tolist()
        == [len(prompts[5]) + 20] * 2 + [len(prompts[0])] + [len(prompts[1])]
    )
    want = session_mod.cache_sharding(CONFIG, mesh, meshed.layout)
    for x, sh in zip((*meshed.cache.k, *meshed.cache.v, meshed.cache.lengths), (*want.k, *want.v, want.lengths)):
        assert x.sharding.is_equivalent_to(sh, x.ndim)
    for r, n in enumerate(flat.lengths):
        for x, y in zip(_row(meshed.cache, r, n), _row(flat.cache, r, n)):
            _close(x, y)
    _close(meshed.logits, flat.logits)


def _cache_scatters(lowered, cache) -> list[str]:
    """The operand types of the lowered program's scatters whose operand is one of the cache's layers."""
    layers = {"x".join(map(str, x.shape)) for x in (*cache.k, *cache.v)}
    types = re.findall(r'"stablehlo\.scatter".*?\}\) : \(tensor<([0-9x]+)x[a-z0-9]+>', lowered.as_text(), re.DOTALL)
    return [t for t in types if t in layers]


@pytest.mark.parametrize("packed_prefill", [False, True])
def test_every_kv_write_takes_the_footprint_mode(params, packed_prefill):
    """The dry run's seam (`Sampler(kv_write="footprint")`): no program the session runs (the appends of every
    path, the row copies, the decode) scatters into a cache layer under it, while under the default every one
    does. A KV write that ignored the mode would show up here as a scatter into a layer."""
    sess = _session(params, ROWS, packed_prefill=packed_prefill)
    sess.append([[1, 2, 3]] + [[]] * (ROWS - 1))  # row 0 holds context: later appends take both packed paths

    def lowered():
        deltas = [[4, 5]] + [[6, 7, 8]] * 2 + [[]] * (ROWS - 3)  # a held row and fresh ones
        programs = sess.lower_append(deltas) + sess.lower_copy_rows([0, 1], [5, 6])[:2]
        stops, budgets = jnp.asarray(np.full((ROWS, 1), -1, np.int32)), jnp.full((ROWS,), 4, jnp.int32)
        args = (sess.params, sess.logits, sess.cache, stops, budgets, jax.random.key(0))
        return programs + [sampler_mod.decode_jit.lower(sess.sampler, *args)]

    scatter = lowered()
    sess.sampler = dataclasses.replace(sess.sampler, kv_write=decode_step.FOOTPRINT)
    footprint = lowered()
    assert len(scatter) == len(footprint) >= 4
    assert all(_cache_scatters(p, sess.cache) for p in scatter)
    assert [_cache_scatters(p, sess.cache) for p in footprint] == [[]] * len(footprint)
