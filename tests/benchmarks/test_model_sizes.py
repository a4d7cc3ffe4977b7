"""benchmarks.model_sizes: the one shape table of the benchmarks. Its `world` entry is the quickstart budget's model
(built from the budget, never copied), the shipped quickstart base's architecture; every whole entry is a model our
decoder reads and transformers builds in its own family."""

from __future__ import annotations

import dataclasses
import os

import pytest

from benchmarks import model_sizes
from experiments import budgets
from rcgrpo_jax.models import ModelConfig
from rcgrpo_jax.models.tiny import tiny_architecture

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUICKSTART_BASE = os.path.join(REPO, "experiments", "base_models", "quickstart")
WHOLE = [name for name, fields in model_sizes.MODELS.items() if "model_type" in fields]


def test_the_world_entry_is_the_quickstart_budgets_model():
    q = budgets.QUICKSTART
    world = model_sizes.MODELS["world"]
    assert world == tiny_architecture(q.arch, **q.model)
    config = ModelConfig.from_hf(world)
    assert config.model_type == q.arch == "qwen3" and config.qk_norm
    assert (config.hidden_size, config.num_layers, config.num_heads, config.num_kv_heads) == (
        q.model["hidden_size"],
        q.model["num_layers"],
        q.model["num_heads"],
        q.model["num_kv_heads"],
    )
    assert config.head_dim == q.model["head_dim"] == 48 and config.rope_theta == q.model["rope_theta"]
    assert config.intermediate_size == q.model["intermediate_size"]
    assert config.vocab_size == q.model["tokenizer_vocab_size"]  # the BPE target


def test_the_world_entry_is_the_shipped_quickstart_bases_architecture_but_its_special_tokens():
    shipped = ModelConfig.from_hf(QUICKSTART_BASE)
    world = ModelConfig.from_hf(model_sizes.MODELS["world"])
    # the built tokenizer adds qwen3's 3 special and 6 added tokens to the BPE target
    assert world.vocab_size < shipped.vocab_size <= world.vocab_size + 9
    same = {"vocab_size": 0, "bos_token_id": None, "eos_token_id": None}
    assert dataclasses.replace(world, **same) == dataclasses.replace(shipped, **same)


@pytest.mark.parametrize("name", WHOLE)
def test_every_whole_entry_is_a_model_of_its_family(name):
    fields = model_sizes.MODELS[name]
    config = ModelConfig.from_hf(fields)
    assert config.model_type == fields["model_type"]
    assert (config.hidden_size, config.num_layers, config.vocab_size) == (
        fields["hidden_size"],
        fields["num_hidden_layers"],
        fields["vocab_size"],
    )


def test_hf_model_builds_the_entry_in_its_familys_classes():
    import torch

    torch.manual_seed(0)
    hf = model_sizes.hf_model("world", max_position_embeddings=1024)
    assert type(hf).__name__ == "Qwen3ForCausalLM" and hf.config.max_position_embeddings == 1024
    assert hf.config.head_dim == 48 and hf.config.tie_word_embeddings
    q_proj = hf.model.layers[0].self_attn.q_proj.weight
    assert tuple(q_proj.shape) == (4 * 48, 128)
    assert type(model_sizes.hf_model("tiny")).__name__ == "Qwen2ForCausalLM"


def test_builder_arch_names_the_entry_in_the_builders_words():
    assert model_sizes.builder_arch("tiny") == dict(
        hidden_size=256, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=704
    )


def test_the_lowering_stand_in_sizes_a_production_config_in_its_family():
    from benchmarks import cuda_lower
    from rcgrpo_jax.config_lib import common

    prod = ModelConfig.from_hf(common.hf_architecture("qwen3_8b"))
    small = cuda_lower.tiny_model(prod)
    s = model_sizes.MODELS["lowering"]
    assert (small.model_type, small.qk_norm, small.rope_theta) == (prod.model_type, prod.qk_norm, prod.rope_theta)
    assert (small.num_layers, small.head_dim, small.num_kv_heads) == (2, s["head_dim"], s["num_key_value_heads"])
    assert small.num_heads // small.num_kv_heads == min(prod.num_heads // prod.num_kv_heads, 4)
