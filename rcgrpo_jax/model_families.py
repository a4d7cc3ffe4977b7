"""The model families the decoder supports, one row each: everything that differs between Qwen2/2.5, Qwen3 and
LLaMA 3/3.1 besides the sizes in config.json. The decoder (`models.config.ModelConfig`), the chat parsers
(`chat.family_for`), the tiny-checkpoint builder (`models/tiny.py`) and the config checks read this table; adding a
family that fits the decoder's blocks is one row here, one tokenizer row in `models/tiny.py` and its parity test.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

ATTENTION_BIAS = ("always", "config", "never")  # q/k/v biases: always on, read from config.json, refused


@dataclasses.dataclass(frozen=True)
class ModelFamily:
    model_type: str  # HF config.json's `model_type`
    hf_architecture: str  # config.json's `architectures[0]`, and the transformers class of that name
    hf_config_class: str  # the transformers config class (the tiny builder makes one)
    tool_call_format: str  # the chat parser (`chat.parsers`): hermes | llama3_json
    qk_norm: bool  # an RMSNorm on each query and key head before RoPE (Qwen3)
    attention_bias: str  # one of ATTENTION_BIAS
    o_proj_bias: bool  # whether config.json's attention_bias also covers the output projection (Qwen3)
    hf_extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # fixed keys `to_hf` writes


FAMILIES: dict[str, ModelFamily] = {
    f.model_type: f
    for f in (
        ModelFamily(
            "qwen2",
            "Qwen2ForCausalLM",
            "Qwen2Config",
            tool_call_format="hermes",
            qk_norm=False,
            attention_bias="always",
            o_proj_bias=False,
            hf_extra={"use_sliding_window": False},
        ),
        ModelFamily(
            "qwen3",
            "Qwen3ForCausalLM",
            "Qwen3Config",
            tool_call_format="hermes",
            qk_norm=True,
            attention_bias="config",
            o_proj_bias=True,
            hf_extra={"use_sliding_window": False},
        ),
        ModelFamily(
            "llama",
            "LlamaForCausalLM",
            "LlamaConfig",
            tool_call_format="llama3_json",
            qk_norm=False,
            attention_bias="never",
            o_proj_bias=False,
            hf_extra={"mlp_bias": False},
        ),
    )
}
MODEL_TYPES = tuple(FAMILIES)


def get(model_type: str) -> ModelFamily:
    """The family of an HF `model_type`; a ValueError naming the supported ones otherwise."""
    try:
        return FAMILIES[model_type]
    except KeyError:
        raise ValueError(f"model_type: {model_type!r} is not supported (expected one of {MODEL_TYPES})") from None


def attention_bias(family: ModelFamily, hf: Mapping[str, Any]) -> bool:
    """Whether q/k/v have biases, from the family's rule and config.json (a refused bias raises)."""
    if family.attention_bias == "always":
        return True
    if family.attention_bias == "never":
        if hf.get("attention_bias"):
            raise ValueError(f"attention_bias: {family.model_type} attention biases are not supported")
        return False
    return bool(hf.get("attention_bias", False))
