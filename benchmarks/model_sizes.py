"""The benchmark models, one table for every bench module: HF config.json fields, `model_type` naming the family
(`model_families`), so a figure in one benchmark names the same model as in another. The CPU peers build the HF
model from an entry (`hf_model`) and we load its weights; the GPU check and the lowering proof size our decoder
from it (`models.ModelConfig.from_hf`).

No entry is written twice: `world` is the quickstart's model, built from its budget (experiments/budgets.py
QUICKSTART: `budget.arch` and `budget.model`, through `models.tiny.tiny_architecture`; its vocabulary is the BPE
target, the built checkpoint adds the family's special tokens), `qwen2.5-7b` the published architecture of the
7B preset (`config_lib.common.hf_architecture`). `lowering` is no whole model: the sizes the lowering proof's
tiny stand-in puts on a production config, keeping its family and GQA ratio (`benchmarks.cuda_lower.tiny_model`).
"""

from __future__ import annotations

from typing import Any

from experiments import budgets
from rcgrpo_jax import model_families
from rcgrpo_jax.config_lib import common as config_common
from rcgrpo_jax.models import tiny

# A Qwen2.5-shaped model as the GPU check builds it: q/k/v biases, RoPE theta 1e6, tied embeddings.
_QWEN2_5 = dict(model_type="qwen2", rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True)

MODELS: dict[str, dict[str, Any]] = {
    # The CPU benchmarks' Qwen2s (benchmarks.sampler, .train, .grpo_step): untied, the HF config's other defaults.
    "tiny": dict(
        model_type="qwen2",
        tie_word_embeddings=False,
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=704,
        vocab_size=1024,
    ),
    "world": tiny.tiny_architecture(budgets.QUICKSTART.arch, **budgets.QUICKSTART.model),
    "medium": dict(
        model_type="qwen2",
        tie_word_embeddings=False,
        hidden_size=1024,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=8,
        intermediate_size=2816,
        vocab_size=32000,
    ),
    # The GPU check's (benchmarks.gpu): Qwen2.5-1.5B's published shape, its --tiny stand-in, Qwen2.5-7B.
    "qwen2.5-1.5b": dict(
        _QWEN2_5,
        vocab_size=151936,
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        max_position_embeddings=32768,
    ),
    "gpu_tiny": dict(
        _QWEN2_5,
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32768,
    ),
    "qwen2.5-7b": config_common.hf_architecture("qwen2_5_7b"),
    # The lowering proof's stand-in sizes (no family, no query heads: those are the production config's).
    "lowering": dict(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_key_value_heads=2,
        head_dim=16,
    ),
}


def hf_model(name: str, **overrides: Any):
    """A random-init transformers model of `MODELS[name]` with `overrides` on top (e.g. max_position_embeddings):
    its family's config and model classes (`model_families`). Seed torch before calling for a fixed init."""
    import transformers

    fields = {**MODELS[name], **overrides}
    family = model_families.get(fields.pop("model_type"))
    config = getattr(transformers, family.hf_config_class)(**fields)
    return getattr(transformers, family.hf_architecture)(config)


def builder_arch(name: str) -> dict[str, Any]:
    """`MODELS[name]` in the tiny-checkpoint builder's names (`tiny_checkpoint.build_tiny`), without the vocab (the
    builder trains its own tokenizer)."""
    m = MODELS[name]
    return dict(
        hidden_size=m["hidden_size"],
        num_layers=m["num_hidden_layers"],
        num_heads=m["num_attention_heads"],
        num_kv_heads=m["num_key_value_heads"],
        intermediate_size=m["intermediate_size"],
    )
