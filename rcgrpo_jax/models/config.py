"""ModelConfig: the static description of a Qwen2/Qwen2.5, Qwen3 or LLaMA 3/3.1 decoder, read from HF config.json.

Hashable and frozen, so it can be a static argument of jitted functions. Anything the model does not
implement (sliding window in use, other RoPE variants, MLP biases, ...) is rejected here with a
ValueError naming the config field, so a wrong checkpoint fails at start-up rather than giving silently
wrong logits.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping

import jax.numpy as jnp

from rcgrpo_jax import model_families as families

SUPPORTED_MODEL_TYPES = families.MODEL_TYPES


@dataclasses.dataclass(frozen=True)
class Llama3RopeScaling:
    """LLaMA 3.1 RoPE frequency scaling (HF rope_type 'llama3'). A dataclass, not a dict, to stay hashable."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int

    def to_hf(self) -> dict[str, Any]:
        return {"rope_type": "llama3", **dataclasses.asdict(self)}


def _dtype_name(dtype: Any) -> str:
    return jnp.dtype(dtype).name


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rope_scaling: Llama3RopeScaling | None = None
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    # Attention biases. qwen2: q/k/v (always set by from_hf), never o; qwen3: HF's `attention_bias`, which
    # covers q, k, v and o (see `o_proj_bias`); llama: none.
    attention_bias: bool = False
    max_position_embeddings: int = 32768
    param_dtype: str = "float32"
    dtype: str = "float32"  # compute dtype
    bos_token_id: int | None = None
    eos_token_id: int | tuple[int, ...] | None = None
    remat: bool = False
    # Layers the compiled layer loop unrolls: 1 = a rolled loop (compile time flat in depth), -1 = all
    # (straight-line code). On CPU the rolled loop's per-layer slicing and gradient stacking cost a small
    # model a large share of its training step (`benchmarks.train --unroll` measures it).
    scan_unroll: int = 1
    attention_impl: str = "auto"  # training attention: auto | xla | cudnn | pallas | tokamax (models.attention)

    def __post_init__(self):
        # Accept jnp dtypes or strings; store canonical names so equal configs hash equal.
        object.__setattr__(self, "param_dtype", _dtype_name(self.param_dtype))
        object.__setattr__(self, "dtype", _dtype_name(self.dtype))
        if isinstance(self.eos_token_id, list):
            object.__setattr__(self, "eos_token_id", tuple(self.eos_token_id))
        families.get(self.model_type)  # a ValueError naming the supported families
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_key_value_heads: {self.num_kv_heads} does not divide num_attention_heads {self.num_heads}"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim: {self.head_dim} must be even for RoPE")

    @property
    def qk_norm(self) -> bool:
        """Qwen3: an RMSNorm over head_dim (weights [Dh], eps rms_norm_eps) on each query and key head,
        after the projection's reshape to heads and before RoPE."""
        return self.family.qk_norm

    @property
    def o_proj_bias(self) -> bool:
        """Whether o_proj has a bias: only Qwen3's `attention_bias` covers the output projection."""
        return self.family.o_proj_bias and self.attention_bias

    @property
    def family(self) -> families.ModelFamily:
        return families.get(self.model_type)

    @property
    def jnp_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.dtype)

    @property
    def jnp_param_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.param_dtype)

    @classmethod
    def from_hf(
        cls,
        path_or_dict: str | os.PathLike | Mapping[str, Any],
        *,
        dtype: Any = None,
        param_dtype: Any = None,
        remat: bool = False,
        scan_unroll: int = 1,
    ) -> "ModelConfig":
        """Builds a config from an HF config.json (a checkpoint dir, the file itself, or its parsed dict).

        `dtype`/`param_dtype` default to the checkpoint's stored dtype ('dtype' or 'torch_dtype'), else
        float32. Both the transformers v4 layout (rope_theta + rope_scaling) and v5 (rope_parameters) are read.
        """
        hf = _read_hf_dict(path_or_dict)
        model_type = hf.get("model_type")
        family = families.get(model_type)
        _reject_unsupported(hf)
        rope_theta, rope_scaling = _parse_rope(hf)
        num_heads = int(hf["num_attention_heads"])
        stored = hf.get("dtype") or hf.get("torch_dtype") or "float32"
        stored = stored if stored in ("float32", "bfloat16", "float16") else "float32"
        eos = hf.get("eos_token_id")
        return cls(
            model_type=model_type,
            vocab_size=int(hf["vocab_size"]),
            hidden_size=int(hf["hidden_size"]),
            intermediate_size=int(hf["intermediate_size"]),
            num_layers=int(hf["num_hidden_layers"]),
            num_heads=num_heads,
            num_kv_heads=int(hf.get("num_key_value_heads") or num_heads),
            head_dim=int(hf.get("head_dim") or hf["hidden_size"] // num_heads),
            rope_theta=float(rope_theta),
            rope_scaling=rope_scaling,
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            attention_bias=families.attention_bias(family, hf),
            max_position_embeddings=int(hf.get("max_position_embeddings", 32768)),
            param_dtype=param_dtype or dtype or stored,
            dtype=dtype or stored,
            bos_token_id=hf.get("bos_token_id"),
            eos_token_id=tuple(eos) if isinstance(eos, list) else eos,
            remat=remat,
            scan_unroll=scan_unroll,
        )

    def to_hf(self) -> dict[str, Any]:
        """The config.json that transformers reads back into the same architecture (v4-style rope keys,
        which transformers v5 still accepts and which matches the published Qwen2.5/Qwen3/LLaMA 3.1 files)."""
        out: dict[str, Any] = {
            "architectures": [self.family.hf_architecture],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rope_theta": self.rope_theta,
            "rope_scaling": self.rope_scaling.to_hf() if self.rope_scaling else None,
            "rms_norm_eps": self.rms_norm_eps,
            "tie_word_embeddings": self.tie_word_embeddings,
            "max_position_embeddings": self.max_position_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": list(self.eos_token_id) if isinstance(self.eos_token_id, tuple) else self.eos_token_id,
            "torch_dtype": self.param_dtype,
            "use_cache": True,
        }
        out.update(self.family.hf_extra)
        if self.family.attention_bias != "always":  # Qwen2's q/k/v biases are implied by its model_type
            out["attention_bias"] = self.attention_bias
        return out


def _read_hf_dict(path_or_dict: str | os.PathLike | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(path_or_dict, Mapping):
        return dict(path_or_dict)
    path = os.fspath(path_or_dict)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    with open(path) as f:
        return json.load(f)


def _reject_unsupported(hf: Mapping[str, Any]) -> None:
    act = hf.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"hidden_act: {act!r} is not supported (only 'silu')")
    if hf.get("mlp_bias"):
        raise ValueError("mlp_bias: MLP biases are not supported")
    if hf.get("use_sliding_window"):
        raise ValueError("use_sliding_window: sliding-window attention is not supported")
    layer_types = hf.get("layer_types") or []
    if any(t != "full_attention" for t in layer_types):
        raise ValueError(f"layer_types: only 'full_attention' layers are supported, got {sorted(set(layer_types))}")
    if float(hf.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ValueError("partial_rotary_factor: partial RoPE is not supported")


def _parse_rope(hf: Mapping[str, Any]) -> tuple[float, Llama3RopeScaling | None]:
    """(theta, scaling) from either rope_parameters (transformers v5) or rope_theta/rope_scaling (v4)."""
    if hf.get("rope_parameters") is not None:
        params, field = dict(hf["rope_parameters"]), "rope_parameters"
        if any(isinstance(v, Mapping) for v in params.values()):
            raise ValueError("rope_parameters: per-layer-type RoPE parameters are not supported")
    else:
        params, field = dict(hf.get("rope_scaling") or {}), "rope_scaling"
    theta = params.get("rope_theta", hf.get("rope_theta", 10000.0))
    rope_type = params.get("rope_type", params.get("type", "default"))
    if float(params.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ValueError(f"{field}: partial RoPE is not supported")
    if rope_type == "default":
        return theta, None
    if rope_type != "llama3":
        raise ValueError(f"{field}: rope_type {rope_type!r} is not supported (only 'default' and 'llama3')")
    try:
        scaling = Llama3RopeScaling(
            factor=float(params["factor"]),
            low_freq_factor=float(params["low_freq_factor"]),
            high_freq_factor=float(params["high_freq_factor"]),
            original_max_position_embeddings=int(
                params.get("original_max_position_embeddings", hf.get("max_position_embeddings"))
            ),
        )
    except (KeyError, TypeError) as e:
        raise ValueError(f"{field}: llama3 rope scaling is missing {e}") from None
    return theta, scaling
