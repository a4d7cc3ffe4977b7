"""row_shards: row gathers and scatters by global index on a row-sharded array equal the plain jnp ops, and
the session's row programs on a mesh move only the sub-batch between devices, never a cache layer (the
SPMD partitioner all-gathers an array indexed by a replicated row list: a 7B cache layer per device)."""

import re

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from rcgrpo_jax import models, sharding
from rcgrpo_jax.sampling import SamplingParams, row_shards
from rcgrpo_jax.sampling.session import DecodeSession
from tests.helpers.tiny_sizes import TINY_QWEN2

MESHES = {"2x2x2": {"data": 2, "fsdp": 2, "tensor": 2}, "1x4x2": {"data": 1, "fsdp": 4, "tensor": 2}}
R, G, S, D = 16, 2, 12, 3  # rows, kv heads, slots, head dim


def _on(mesh, x, spec):
    return jax.device_put(x, NamedSharding(mesh, spec))


def test_shard_local_rows_by_hand():
    """16 rows on 4 shards (4 rows each): live rows 1, 2, 9 and 14 -> shard 0 has 2 (its rows 1, 2), shard
    2 one (9 - 8 = 1), shard 3 one (14 - 12 = 2); K = bucket(2) = 2, padding index 4."""
    bucket = lambda n, local: max(1, 1 << (n - 1).bit_length()) if n else 1  # noqa: E731
    idx = row_shards.shard_local_rows([1, 2, 9, 14], 16, 4, bucket)
    assert idx.tolist() == [1, 2, 4, 4, 1, 4, 2, 4]
    assert row_shards.global_rows(idx, 16, 4).tolist() == [1, 2, -1, -1, 9, -1, 14, -1]
    with pytest.raises(ValueError, match="do not split"):
        row_shards.shard_local_rows([0], 10, 4, bucket)


@pytest.mark.parametrize("mesh_name", list(MESHES))
def test_gather_scatter_copy_equal_the_plain_ops(mesh_name):
    mesh = sharding.make_mesh(MESHES[mesh_name])
    m = row_shards.shards(mesh)
    local = R // m
    rng = np.random.default_rng(0)
    x = rng.normal(size=(R, G, S, D)).astype(np.float32)
    live = [13, 2, 5, 0, 9, 10]
    idx = row_shards.shard_local_rows(live, R, m, lambda n, rows: min(rows, max(1, 1 << (n - 1).bit_length())))
    rows = row_shards.global_rows(idx, R, m)
    assert sorted(r for r in rows if r >= 0) == sorted(live) and (idx < local).sum() == len(live)
    new = rng.normal(size=(len(idx), G, S, D)).astype(np.float32)
    src, dst = np.array([3, 3, 14, 0], np.int32), np.array([7, 12, 1, R], np.int32)  # R: padding, dropped
    spec, at = P(sharding.BATCH_AXES, "tensor"), ("tensor",)

    @jax.jit
    def run(x, idx, new, src, dst):
        return (
            row_shards.gather(x, idx, at),
            row_shards.scatter(x, new, idx, at),
            row_shards.copy_rows(x, src, dst, 5, 2, at),
        )

    with jax.set_mesh(mesh):
        assert row_shards.batch_mesh() is not None
        args = (_on(mesh, x, spec), _on(mesh, idx, P(sharding.BATCH_AXES)), _on(mesh, new, spec))
        got = run(*args, _on(mesh, src, P()), _on(mesh, dst, P()))
    want_gather = np.where((rows >= 0)[:, None, None, None], x[np.maximum(rows, 0)], 0.0)
    want_scatter = x.copy()
    for b, r in enumerate(rows):
        if r >= 0:
            want_scatter[r] = new[b]
    want_copy = x.copy()
    for s_, d_ in zip(src, dst):
        if d_ < R:
            want_copy[d_, :, :5] = x[s_, :, :5]
    np.testing.assert_array_equal(np.asarray(got[0]), want_gather)
    np.testing.assert_array_equal(np.asarray(got[1]), want_scatter)
    np.testing.assert_array_equal(np.asarray(got[2]), want_copy)
    assert got[0].sharding.is_equivalent_to(NamedSharding(mesh, spec), 4)
    # off a mesh the same calls are the plain ops on global rows: the copy is the same
    np.testing.assert_array_equal(np.asarray(run(x, np.zeros(len(idx), np.int32), new, src, dst)[2]), want_copy)


CONFIG = TINY_QWEN2
_OP = re.compile(r"= (.*?) (all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute)(?:-start)?\(")
_ARRAY = re.compile(r"\b([a-z]+[0-9]*)\[([0-9,]*)\]")
_BYTES = {"f32": 4, "bf16": 2, "s32": 4, "u32": 4, "pred": 1, "f16": 2, "s8": 1, "u8": 1}


def _largest_collective(compiled) -> int:
    """Bytes of the largest collective's output (all of a tuple's arrays) in the program."""
    most = 0
    for out, _ in _OP.findall(compiled.as_text()):
        total = sum(
            int(np.prod([int(d) for d in dims.split(",") if d] or [1])) * _BYTES[dt] for dt, dims in _ARRAY.findall(out)
        )
        most = max(most, total)
    return most


def test_the_sessions_row_programs_move_the_sub_batch_not_a_cache_layer():
    """On a (1, 4, 2) mesh, 64 rows of 4096 slots: the admission's append (one row, a sub-batch of 4) moves
    no K/V between devices at all (each device takes and writes its own rows), and a sibling copy's program
    moves the sources' windows only; one device's block of a cache layer is 16x what one row holds, and the
    partitioner's gather of the whole layer 4x that again."""
    mesh = sharding.make_mesh(MESHES["1x4x2"])
    params = sharding.shard_params(models.init_params(CONFIG, jax.random.key(0)), mesh, sharding.DECODE_RULES)
    rows, span = 64, 4096
    sess = DecodeSession(
        CONFIG,
        params,
        rows,
        span,
        sampling=SamplingParams(),
        max_new_tokens=16,
        prefill_chunk=128,
        min_span=64,
        span=span,
        mesh=mesh,
    )
    deltas = [[] for _ in range(rows)]
    deltas[37] = list(range(1, 100))
    (append,) = [p.compile() for p in sess.lower_append(deltas)]
    sess.append(deltas)
    copy_k = sess.lower_copy_rows([37] * 7, list(range(38, 45)))[0].compile()
    local_layer = rows // 4 * (CONFIG.num_kv_heads // 2) * span * CONFIG.head_dim * 4  # one device's block
    one_row = local_layer // (rows // 4)
    activations = 4 * 128 * CONFIG.hidden_size * 4  # the sub-batch's [4, 128, hidden] float32 (tensor all-reduce)
    moved = {"append": _largest_collective(append), "copy": _largest_collective(copy_k)}
    window = 8 * (CONFIG.num_kv_heads // 2) * 128 * CONFIG.head_dim * 4  # 8 (bucketed) sources' 128-slot windows
    print(f"largest collective: {moved}, one device's cache layer {local_layer} bytes, one row {one_row}")
    assert moved["append"] <= activations and moved["append"] < one_row / 4
    assert moved["copy"] <= window and moved["copy"] < one_row / 2
