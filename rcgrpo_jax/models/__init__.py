"""Qwen2/Qwen2.5, Qwen3 and LLaMA 3/3.1 decoders in Flax linen, applied functionally over plain param dicts."""

from rcgrpo_jax.models.cache import KVCache, init_cache
from rcgrpo_jax.models.config import Llama3RopeScaling, ModelConfig
from rcgrpo_jax.models.hf_io import load_hf, save_hf
from rcgrpo_jax.models.reward_tokens import HIGH_REWARD_TOKEN, LOW_REWARD_TOKEN, REWARD_TOKENS, add_reward_tokens
from rcgrpo_jax.models.transformer import (
    abstract_params,
    apply,
    forward,
    init_params,
    output_embedding,
    positions_from_mask,
)

__all__ = [
    "KVCache",
    "init_cache",
    "Llama3RopeScaling",
    "ModelConfig",
    "load_hf",
    "save_hf",
    "HIGH_REWARD_TOKEN",
    "LOW_REWARD_TOKEN",
    "REWARD_TOKENS",
    "add_reward_tokens",
    "abstract_params",
    "apply",
    "forward",
    "init_params",
    "output_embedding",
    "positions_from_mask",
]
