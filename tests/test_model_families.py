"""`rcgrpo_jax.model_families`: one table that the decoder config, the parsers and the tiny builder read."""

import pytest
import transformers

from rcgrpo_jax import chat, model_families
from rcgrpo_jax.models import ModelConfig

SIZES = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4)


@pytest.mark.parametrize("model_type", model_families.MODEL_TYPES)
def test_each_family_names_real_transformers_classes_and_a_parser(model_type):
    row = model_families.get(model_type)
    assert getattr(transformers, row.hf_config_class)().model_type == model_type
    assert hasattr(transformers, row.hf_architecture)
    assert chat.family_for(model_type) == row.tool_call_format and chat.get_parser(row.tool_call_format)


@pytest.mark.parametrize("model_type", model_families.MODEL_TYPES)
def test_the_config_round_trips_through_the_table(model_type):
    row = model_families.get(model_type)
    hf = {"model_type": model_type, **SIZES, "attention_bias": row.attention_bias == "always"}
    config = ModelConfig.from_hf(hf)
    assert config.family is row and config.qk_norm == row.qk_norm
    assert config.attention_bias == (row.attention_bias == "always")
    back = config.to_hf()
    assert back["architectures"] == [row.hf_architecture] and ModelConfig.from_hf(back) == config


def test_qwen3_reads_its_bias_from_config_json_and_llama_refuses_one():
    qwen3 = ModelConfig.from_hf({"model_type": "qwen3", **SIZES, "attention_bias": True})
    assert qwen3.attention_bias and qwen3.o_proj_bias
    with pytest.raises(ValueError, match="attention_bias: llama attention biases are not supported"):
        ModelConfig.from_hf({"model_type": "llama", **SIZES, "attention_bias": True})


def test_an_unknown_family_names_the_supported_ones():
    with pytest.raises(
        ValueError, match=r"model_type: 'gemma' is not supported \(expected one of \('qwen2', 'qwen3', 'llama'\)\)"
    ):
        model_families.get("gemma")
    with pytest.raises(ValueError, match="no tool-call family for model_type 'gemma'"):
        chat.family_for("gemma")
