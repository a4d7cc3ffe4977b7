"""ModelConfig.from_hf: both transformers config layouts, hashing, and clear errors on bad configs."""

from __future__ import annotations

import json

import jax.numpy as jnp
import pytest

from rcgrpo_jax.models import Llama3RopeScaling, ModelConfig, load_hf

QWEN = {
    "model_type": "qwen2",
    "vocab_size": 152064,
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "rope_theta": 1000000.0,
    "rope_scaling": None,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "max_position_embeddings": 32768,
    "use_sliding_window": False,
    "sliding_window": 131072,
    "max_window_layers": 28,
    "torch_dtype": "bfloat16",
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "hidden_act": "silu",
}  # Qwen2.5-7B-Instruct's published config.json (abridged)

LLAMA_V5 = {
    "model_type": "llama",
    "vocab_size": 128256,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "rope_parameters": {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": False,
    "eos_token_id": [128001, 128008, 128009],
    "dtype": "bfloat16",
}  # LLaMA 3.1 8B in the transformers v5 layout


def test_qwen2_v4_layout():
    c = ModelConfig.from_hf(QWEN)
    assert (c.model_type, c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim) == ("qwen2", 28, 28, 4, 128)
    assert c.rope_theta == 1e6 and c.rope_scaling is None
    assert c.attention_bias and not c.tie_word_embeddings
    assert (c.param_dtype, c.dtype) == ("bfloat16", "bfloat16")
    assert c.eos_token_id == 151645


def test_llama_v5_layout_and_overrides():
    c = ModelConfig.from_hf(LLAMA_V5, dtype=jnp.float32, remat=True)
    assert c.rope_theta == 500000.0
    assert c.rope_scaling == Llama3RopeScaling(8.0, 1.0, 4.0, 8192)
    assert not c.attention_bias and c.remat
    assert (c.param_dtype, c.dtype) == ("float32", "float32")
    assert c.eos_token_id == (128001, 128008, 128009)


def test_v4_rope_scaling_dict_reads_the_same_as_v5():
    v4 = {k: v for k, v in LLAMA_V5.items() if k != "rope_parameters"}
    v4["rope_theta"] = 500000.0
    v4["rope_scaling"] = {k: v for k, v in LLAMA_V5["rope_parameters"].items() if k != "rope_theta"}
    assert ModelConfig.from_hf(v4) == ModelConfig.from_hf(LLAMA_V5)


def test_hashable_and_dtype_canonical():
    a = ModelConfig.from_hf(QWEN, dtype="bfloat16")
    b = ModelConfig.from_hf(QWEN, dtype=jnp.bfloat16)
    assert a == b and hash(a) == hash(b)
    assert len({a, b, ModelConfig.from_hf(LLAMA_V5)}) == 2


def test_round_trips_through_to_hf():
    for hf in (QWEN, LLAMA_V5):
        c = ModelConfig.from_hf(hf)
        assert ModelConfig.from_hf(c.to_hf()) == c


def test_reads_config_json_from_dir(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN))
    assert ModelConfig.from_hf(tmp_path) == ModelConfig.from_hf(QWEN)


@pytest.mark.parametrize(
    "change, field",
    [
        ({"model_type": "mistral"}, "model_type"),
        ({"model_type": None}, "model_type"),
        ({"use_sliding_window": True}, "use_sliding_window"),
        ({"layer_types": ["full_attention", "sliding_attention"]}, "layer_types"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_scaling"),
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling"),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope_scaling"),
        ({"mlp_bias": True}, "mlp_bias"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"num_key_value_heads": 5}, "num_key_value_heads"),
    ],
)
def test_unsupported_config_names_the_field(change, field):
    with pytest.raises(ValueError, match=field):
        ModelConfig.from_hf({**QWEN, **change})


def test_llama_rejects_nested_rope_and_attention_bias():
    nested = {**LLAMA_V5, "rope_parameters": {"full_attention": LLAMA_V5["rope_parameters"]}}
    with pytest.raises(ValueError, match="rope_parameters"):
        ModelConfig.from_hf(nested)
    with pytest.raises(ValueError, match="attention_bias"):
        ModelConfig.from_hf({**LLAMA_V5, "attention_bias": True})


def test_load_hf_with_unknown_model_type_fails_before_reading_weights(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({**QWEN, "model_type": "gpt2"}))
    with pytest.raises(ValueError, match="model_type: 'gpt2' is not supported"):
        load_hf(tmp_path)
