"""The memory figures (`train.memory`): the plan's arithmetic over phases and resident buffers, the allocator's
limit under XLA_PYTHON_CLIENT_MEM_FRACTION, a tree's bytes on one device."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from rcgrpo_jax.train import memory


def test_memory_plan_arithmetic():
    plan = memory.memory_plan(
        phases={"update": 50.0, "prefill": 9.0, "decode": 4.0},
        resident={"train_state": 12.0, "reference": 4.0, "decode_weights": 8.0, "kv_cache": 30.0},
        resident_during={
            "update": ["train_state", "reference"],
            "prefill": ["train_state", "reference", "decode_weights", "kv_cache"],
            "decode": ["train_state", "reference", "decode_weights", "kv_cache"],
        },
        limit_gb=65.0,
    )
    zero = {"reference": 0.0, "cast": 0.0, "session": 0.0}  # phases not given are 0
    assert plan["per_device_gb"] == {
        "update": 50.0,
        "prefill": 9.0,
        "decode": 4.0,
        **zero,
        "resident": 54.0,
        "peak": 66.0,
    }
    assert plan["peak_phase"] == "update" and plan["resident_during_gb"]["prefill"] == 54.0
    assert plan["fits"] is False  # 66 > 65
    with pytest.raises(ValueError, match="unknown resident"):
        memory.memory_plan({"update": 1.0}, {"a": 1.0}, {"update": ["b"]}, 10.0)


def test_allocator_limit_reads_the_memory_fraction():
    hbm = 141 * 10**9  # CPU devices report no limit: the configured bytes stand
    assert memory.allocator_limit_bytes(hbm, env={}) == int(0.75 * hbm)  # JAX's default
    assert memory.allocator_limit_bytes(hbm, env={"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.9"}) == int(0.9 * hbm)
    for bad in ("x", "0", "1.5"):
        with pytest.raises(ValueError, match="XLA_PYTHON_CLIENT_MEM_FRACTION"):
            memory.allocator_limit_bytes(hbm, env={"XLA_PYTHON_CLIENT_MEM_FRACTION": bad})


def test_shard_bytes_counts_one_devices_share():
    mesh = jax.make_mesh((8,), ("x",))
    tree = {"a": jax.ShapeDtypeStruct((16, 4), jnp.float32), "b": jax.ShapeDtypeStruct((3,), jnp.bfloat16)}
    shardings = {"a": NamedSharding(mesh, P("x", None)), "b": NamedSharding(mesh, P())}
    assert memory.shard_bytes(tree, shardings) == 2 * 4 * 4 + 3 * 2  # a's rows split 8 ways, b whole
