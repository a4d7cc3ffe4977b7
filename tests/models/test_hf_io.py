"""HF checkpoint round trips: load_hf -> save_hf -> transformers, sharded files, mesh placement, bf16."""

from __future__ import annotations

import json
import os

import jax
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
import torch
import transformers
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from rcgrpo_jax import sharding
from rcgrpo_jax.models import apply, load_hf, save_hf
from rcgrpo_jax.models.hf_io import SafetensorsReader
from tests.helpers.hf_models import ARCHS, VOCAB, hf_logits

IDS = np.random.default_rng(3).integers(0, VOCAB, size=(2, 9))


def _assert_trees_equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_round_trip_through_transformers(arch, hf_checkpoint, tmp_path):
    path, model = hf_checkpoint(arch)
    config, params = load_hf(path)
    save_hf(config, params, tmp_path)
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    assert type(reloaded) is type(model)
    np.testing.assert_array_equal(hf_logits(reloaded, IDS), hf_logits(model, IDS))
    config2, params2 = load_hf(tmp_path)
    assert config2 == config
    _assert_trees_equal(params2, params)


def test_tied_checkpoint_has_no_lm_head(hf_checkpoint, tmp_path):
    config, params = load_hf(hf_checkpoint("qwen2_tied")[0])
    assert "lm_head" not in params
    save_hf(config, params, tmp_path)
    assert "lm_head.weight" not in SafetensorsReader(tmp_path).names()


def _write_shards(src: str, dst, num_files: int = 3) -> None:
    """Re-saves a checkpoint as several safetensors files plus an index, with the safetensors library."""
    tensors = safetensors.numpy.load_file(os.path.join(src, "model.safetensors"))
    names = sorted(tensors)
    weight_map = {}
    for f in range(num_files):
        file = f"model-{f + 1:05d}-of-{num_files:05d}.safetensors"
        part = {n: tensors[n] for n in names[f::num_files]}
        safetensors.numpy.save_file(part, os.path.join(dst, file), metadata={"format": "pt"})
        weight_map.update({n: file for n in part})
    with open(os.path.join(dst, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {}, "weight_map": weight_map}, fh)
    with open(os.path.join(src, "config.json")) as fh, open(os.path.join(dst, "config.json"), "w") as out:
        out.write(fh.read())


def test_multi_file_checkpoint_loads_the_same(hf_checkpoint, tmp_path):
    path, _ = hf_checkpoint("llama3")
    _write_shards(path, tmp_path)
    assert len([f for f in os.listdir(tmp_path) if f.endswith(".safetensors")]) == 3
    _assert_trees_equal(load_hf(tmp_path)[1], load_hf(path)[1])


def test_load_onto_mesh_places_each_param_on_its_sharding(hf_checkpoint):
    path, _ = hf_checkpoint("qwen2_untied")
    mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    _, params = load_hf(path, mesh=mesh)
    _, plain = load_hf(path)
    _assert_trees_equal(params, plain)
    # Spot checks from the train rules: embed/embedding is ('vocab', 'embed') -> ('tensor', 'fsdp').
    emb = params["embed"]["embedding"]
    assert emb.sharding == NamedSharding(mesh, P("tensor", "fsdp"))
    assert {s.data.shape for s in emb.addressable_shards} == {(VOCAB // 2, 32)}
    q = params["layers"]["attn"]["q_proj"]["kernel"]  # [L, D, H*Dh] -> (None, 'fsdp', 'tensor')
    assert q.sharding.spec == P(None, "fsdp", "tensor")
    assert {s.data.shape for s in q.addressable_shards} == {(2, 32, 32)}
    # k_proj has 1 KV head * 16 = 16 columns: split over tensor=2 as well.
    assert params["layers"]["attn"]["k_proj"]["kernel"].sharding.spec == P(None, "fsdp", "tensor")


def test_decode_rules_keep_weights_whole_over_fsdp(hf_checkpoint):
    path, _ = hf_checkpoint("qwen2_untied")
    mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    _, params = load_hf(path, mesh=mesh, rules=sharding.DECODE_RULES)
    assert params["layers"]["mlp"]["down_proj"]["kernel"].sharding.spec == P(None, "tensor", None)
    assert params["lm_head"]["kernel"].sharding.spec == P(None, "tensor")


def test_bf16_load_save_matches_transformers(hf_checkpoint, tmp_path):
    path, _ = hf_checkpoint("qwen2_untied")
    config, params = load_hf(path, dtype="bfloat16")
    assert (config.param_dtype, config.dtype) == ("bfloat16", "bfloat16")
    assert {x.dtype for x in jax.tree.leaves(params)} == {np.dtype(ml_dtypes.bfloat16)}
    save_hf(config, params, tmp_path)
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16)
    hf_q = model.state_dict()["model.layers.1.self_attn.q_proj.weight"].float().numpy()
    ours_q = np.asarray(params["layers"]["attn"]["q_proj"]["kernel"][1]).astype(np.float32).T
    np.testing.assert_array_equal(hf_q, ours_q)
    _assert_trees_equal(load_hf(tmp_path)[1], params)
    # bf16 compute stays close to fp32 and the logits come back in f32.
    logits = apply(config, params, IDS)
    config32, params32 = load_hf(path)
    ref = np.asarray(apply(config32, params32, IDS))
    assert logits.dtype == np.float32
    assert np.abs(np.asarray(logits) - ref).max() < 0.05 * np.abs(ref).max()


def test_missing_and_unexpected_tensors_are_named(hf_checkpoint, tmp_path):
    path, _ = hf_checkpoint("qwen2_tied")
    tensors = safetensors.numpy.load_file(os.path.join(path, "model.safetensors"))
    with open(os.path.join(path, "config.json")) as fh:
        (tmp_path / "config.json").write_text(fh.read())
    file = os.path.join(tmp_path, "model.safetensors")
    safetensors.numpy.save_file({k: v for k, v in tensors.items() if k != "model.norm.weight"}, file)
    with pytest.raises(ValueError, match="model.norm.weight"):
        load_hf(tmp_path)
    safetensors.numpy.save_file({**tensors, "model.extra.weight": np.zeros(3, np.float32)}, file)
    with pytest.raises(ValueError, match="model.extra.weight"):
        load_hf(tmp_path)
