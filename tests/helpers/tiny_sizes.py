"""The tiny random Qwen2 sizes the sampler-side tests share (the session, its row programs, the packed prefill)."""

from rcgrpo_jax.models import ModelConfig

TINY_QWEN2 = ModelConfig(
    model_type="qwen2",
    vocab_size=96,
    hidden_size=32,
    intermediate_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    attention_bias=True,
)
