"""Tiny random HF causal LMs (torch, CPU, fp32) with non-trivial weights, and their logits: the oracle the
model, cache and Qwen3 tests compare our decoder against."""

from __future__ import annotations

import numpy as np
import torch
import transformers

torch.set_num_threads(1)

VOCAB = 128
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    # Small, so the test positions cover the scaled, smoothed and unscaled frequency bands.
    "original_max_position_embeddings": 16,
}

# Five architectures; GQA ratios 2, 4, 4, 2 and 4; explicit head_dim != hidden/heads for llama and both
# Qwen3s (24 > 64/4 and 16 > 64/8). qwen3_tied has no attention biases (as the published Qwen3s);
# qwen3_untied sets attention_bias, which in Qwen3 covers q, k, v and o.
ARCHS: dict[str, tuple[type, dict]] = {
    "qwen2_tied": (
        transformers.Qwen2Config,
        dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True, rope_theta=10000.0),
    ),
    "qwen2_untied": (
        transformers.Qwen2Config,
        dict(num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=False, rope_theta=1e6),
    ),
    "llama3": (
        transformers.LlamaConfig,
        dict(
            num_attention_heads=8,
            num_key_value_heads=2,
            head_dim=16,
            tie_word_embeddings=False,
            rope_theta=500000.0,
            rope_scaling=LLAMA3_ROPE,
            bos_token_id=1,
            eos_token_id=[2, 3],
        ),
    ),
    "qwen3_tied": (
        transformers.Qwen3Config,
        dict(num_attention_heads=4, num_key_value_heads=2, head_dim=24, tie_word_embeddings=True, rope_theta=1e6),
    ),
    "qwen3_untied": (
        transformers.Qwen3Config,
        dict(
            num_attention_heads=8,
            num_key_value_heads=2,
            head_dim=16,
            attention_bias=True,
            tie_word_embeddings=False,
            rope_theta=10000.0,
        ),
    ),
}


def build_hf_model(arch: str, vocab_size: int = VOCAB, seed: int = 0) -> transformers.PreTrainedModel:
    """A tiny fp32 HF causal LM whose weights (biases and norms included) are all non-trivial."""
    config_cls, kwargs = ARCHS[arch]
    config = config_cls(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        **kwargs,
    )
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif "embed" in name:
                p.copy_(0.5 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return model.eval()


def hf_logits(model: transformers.PreTrainedModel, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.as_tensor(np.asarray(ids), dtype=torch.long)).logits.float().numpy()
