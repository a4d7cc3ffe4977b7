"""Mesh construction, rules as data, and a sharded forward on a (2, 2, 2) mesh equal to the unsharded one."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from rcgrpo_jax import sharding
from rcgrpo_jax.models import ModelConfig, abstract_params, apply, init_params

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)

CONFIG = ModelConfig(
    model_type="qwen2",
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    attention_bias=True,
    tie_word_embeddings=False,
)


# ---- make_mesh


def test_make_mesh_sizes():
    mesh = sharding.make_mesh({"data": 2, "fsdp": -1, "tensor": 2})
    assert mesh.axis_names == ("data", "fsdp", "tensor")
    assert dict(mesh.shape) == {"data": 2, "fsdp": 2, "tensor": 2}
    assert dict(sharding.make_mesh({"tensor": 4}).shape) == {"data": 1, "fsdp": 1, "tensor": 4}
    assert dict(sharding.make_mesh({"fsdp": -1}).shape) == {"data": 1, "fsdp": 8, "tensor": 1}


@pytest.mark.parametrize(
    "axes, match",
    [
        ({"data": 4, "fsdp": 4}, "needs 16 devices"),
        ({"data": -1, "fsdp": -1}, "at most one axis"),
        ({"data": 3, "fsdp": -1}, "not divisible"),
        ({"model": 2}, "'model'"),
        ({"data": 0}, "positive"),
    ],
)
def test_make_mesh_errors(axes, match):
    with pytest.raises(ValueError, match=match):
        sharding.make_mesh(axes)


def test_make_mesh_accepts_config_dict():
    import ml_collections  # a runtime dependency (setup.py): never skipped

    axes = ml_collections.ConfigDict({"data": 1, "fsdp": -1, "tensor": 2})
    assert dict(sharding.make_mesh(axes).shape) == {"data": 1, "fsdp": 4, "tensor": 2}


# ---- rules


@pytest.fixture(scope="module")
def mesh():
    return sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})


def test_every_model_param_has_a_rule_with_matching_rank(mesh):
    for rules in (sharding.TRAIN_RULES, sharding.DECODE_RULES):
        specs = sharding.param_specs(abstract_params(CONFIG), rules.params, rules.logical, mesh)
        assert specs["layers"]["attn"]["q_proj"]["kernel"] == (
            P(None, "fsdp", "tensor") if rules is sharding.TRAIN_RULES else P(None, None, "tensor")
        )
        assert specs["layers"]["attn"]["q_proj"]["bias"] == P(None, "tensor")
        assert specs["final_norm"]["scale"] == P(None)


QWEN3 = ModelConfig(
    model_type="qwen3",
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,  # != hidden / heads
    attention_bias=True,  # Qwen3: q, k, v and o biases
)


@pytest.mark.parametrize("rules", [sharding.TRAIN_RULES, sharding.DECODE_RULES], ids=["train", "decode"])
def test_qwen3_params_all_have_rules(mesh, rules):
    specs = sharding.param_specs(abstract_params(QWEN3), rules.params, rules.logical, mesh)
    attn = specs["layers"]["attn"]
    assert attn["q_norm"]["scale"] == attn["k_norm"]["scale"] == P(None, None)  # [L, Dh]: whole
    assert attn["o_proj"]["bias"] == P(None, None)  # [L, D]: whole
    assert attn["k_proj"]["bias"] == P(None, "tensor")
    assert attn["o_proj"]["kernel"] == (
        P(None, "tensor", "fsdp") if rules is sharding.TRAIN_RULES else P(None, "tensor", None)
    )


def test_param_without_rule_raises_naming_it(mesh):
    tree = {**abstract_params(CONFIG), "adapter": {"w": jax.ShapeDtypeStruct((4, 4), jnp.float32)}}
    with pytest.raises(ValueError, match="adapter/w"):
        sharding.param_shardings(tree, mesh, sharding.PARAM_RULES, sharding.TRAIN_LOGICAL_MAP)


def test_mesh_axis_twice_in_one_spec_raises(mesh):
    tree = {"w": jax.ShapeDtypeStruct((4, 4), jnp.float32)}
    rules = [(r"^w$", ("embed", "mlp"))]
    with pytest.raises(ValueError, match="mesh axis 'tensor' is used twice"):
        sharding.param_shardings(tree, mesh, rules, {"embed": "tensor", "mlp": "tensor"})
    with pytest.raises(ValueError, match="mesh axis 'fsdp' is used twice"):
        sharding.param_shardings(tree, mesh, rules, {"embed": ("data", "fsdp"), "mlp": "fsdp"})


def test_rank_mismatch_and_unmapped_logical_axis_raise(mesh):
    tree = {"w": jax.ShapeDtypeStruct((4, 4), jnp.float32)}
    with pytest.raises(ValueError, match="names 1 axes"):
        sharding.param_shardings(tree, mesh, [(r"^w$", ("embed",))], {"embed": None})
    with pytest.raises(ValueError, match="'experts'"):
        sharding.param_shardings(tree, mesh, [(r"^w$", ("experts", None))], {})


def test_first_matching_rule_wins_and_indivisible_dims_stay_whole(mesh):
    tree = {"a": {"w": jax.ShapeDtypeStruct((6, 3), jnp.float32)}}
    rules = [(r"a/w", ("embed", "mlp")), (r".*", (None, None))]
    s = sharding.param_shardings(tree, mesh, rules, {"embed": ("data", "fsdp"), "mlp": "tensor"})
    # 6 is not divisible by data*fsdp = 4, 3 not by tensor = 2: both left whole
    assert s["a"]["w"] == NamedSharding(mesh, P(None, None))
    tree = {"a": {"w": jax.ShapeDtypeStruct((8, 4), jnp.float32)}}
    s = sharding.param_shardings(tree, mesh, rules, {"embed": ("data", "fsdp"), "mlp": "tensor"})
    assert s["a"]["w"].spec == P(("data", "fsdp"), "tensor")


def test_constrain_is_a_no_op_without_mesh_and_rules():
    x = jnp.ones((4, 2, 32))
    assert sharding.constrain(x, ("batch", "seq", "hidden")) is x


# ---- sharded forward


@pytest.fixture(scope="module")
def params():
    base = init_params(CONFIG, jax.random.key(0))
    keys = iter(jax.random.split(jax.random.key(1), len(jax.tree.leaves(base))))
    return jax.tree.map(lambda x: 0.3 * jax.random.normal(next(keys), x.shape) + (x == 1.0), base)


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, CONFIG.vocab_size, size=(4, 8)).astype(np.int32)
    mask = np.ones((4, 8), bool)
    mask[1, :3] = False  # one left-padded row
    mask[2, 6:] = False  # one right-padded row
    return jnp.asarray(ids), jnp.asarray(mask)


@pytest.fixture(scope="module")
def reference(params, batch):
    return np.asarray(jax.jit(apply, static_argnums=0)(CONFIG, params, batch[0], attention_mask=batch[1]))


@pytest.mark.parametrize("rules", [sharding.TRAIN_RULES, sharding.DECODE_RULES], ids=["train", "decode"])
def test_sharded_forward_equals_unsharded(mesh, params, batch, reference, rules):
    sharded = sharding.shard_params(params, mesh, rules)
    assert sharded["layers"]["mlp"]["up_proj"]["kernel"].sharding.spec == (
        P(None, "fsdp", "tensor") if rules is sharding.TRAIN_RULES else P(None, None, "tensor")
    )
    data = NamedSharding(mesh, P(("data", "fsdp")))
    ids, mask = (jax.device_put(x, data) for x in batch)
    fn = jax.jit(apply, static_argnums=0, out_shardings=NamedSharding(mesh, P(("data", "fsdp"), None, "tensor")))
    with jax.set_mesh(mesh), sharding.axis_rules(rules.logical):
        logits = fn(CONFIG, sharded, ids, attention_mask=mask)
    assert {s.data.shape for s in logits.addressable_shards} == {(1, 8, 32)}
    np.testing.assert_allclose(np.asarray(logits), reference, atol=1e-4, rtol=0)
