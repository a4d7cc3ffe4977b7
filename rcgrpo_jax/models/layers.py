"""Decoder building blocks: RMSNorm, RoPE (default and LLaMA 3.1 scaling), GQA attention, SwiGLU MLP.

Parameters are created in `param_dtype` and computed in `dtype`. Kernels are stored [in, out] with the
heads flattened into the out dim ([D, H * Dh]), which is the HF layout transposed. Activation sharding
is expressed with logical axis names only (see `rcgrpo_jax.sharding.constrain`).
"""
from __future__ import annotations

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rcgrpo_jax.models.config import ModelConfig
from rcgrpo_jax.sharding import constrain

INIT_STD = 0.02  # HF initializer_range for both families


def _dense(config: ModelConfig, features: int, use_bias: bool, name: str) -> nn.Dense:
    return nn.Dense(
        features,
        use_bias=use_bias,
        dtype=config.jnp_dtype,
        param_dtype=config.jnp_param_dtype,
        kernel_init=nn.initializers.normal(INIT_STD),
        name=name,
    )


class RMSNorm(nn.Module):
    eps: float
    dtype: jnp.dtype
    param_dtype: jnp.dtype

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],), self.param_dtype)
        # Normalise in float32 and cast back before the scale, as HF does.
        x32 = x.astype(jnp.float32)
        x32 = x32 * jax.lax.rsqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + self.eps)
        return scale.astype(self.dtype) * x32.astype(self.dtype)


def rope_inv_freq(config: ModelConfig) -> np.ndarray:
    """Inverse frequencies [Dh/2] in float32, following HF's float32 arithmetic (incl. llama3 scaling)."""
    dim = config.head_dim
    exponents = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    inv_freq = (1.0 / (np.float32(config.rope_theta) ** exponents)).astype(np.float32)
    s = config.rope_scaling
    if s is None:
        return inv_freq
    low_freq_wavelen = s.original_max_position_embeddings / s.low_freq_factor
    high_freq_wavelen = s.original_max_position_embeddings / s.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq)
    smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (
        s.high_freq_factor - s.low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def apply_rope(x: jax.Array, positions: jax.Array, inv_freq: np.ndarray) -> jax.Array:
    """Rotates x [B, T, H, Dh] by explicit positions [B, T] (HF's rotate-half layout)."""
    freqs = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)  # [B, T, Dh/2]
    angles = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]
    cos, sin = jnp.cos(angles).astype(x.dtype), jnp.sin(angles).astype(x.dtype)
    x1, x2 = jnp.split(x, 2, axis=-1)
    return x * cos + jnp.concatenate([-x2, x1], axis=-1) * sin


class Attention(nn.Module):
    """Grouped-query attention; with `kv` (this layer's cache [B, S, Hkv, Dh] pair) the new keys are
    written at `index` and the queries attend over all S slots under `mask` [B, 1, T, S]."""

    config: ModelConfig

    @nn.compact
    def __call__(self, x, positions, mask, kv, index):
        c = self.config
        b, t, _ = x.shape
        q = _dense(c, c.num_heads * c.head_dim, c.attention_bias, "q_proj")(x)
        k = _dense(c, c.num_kv_heads * c.head_dim, c.attention_bias, "k_proj")(x)
        v = _dense(c, c.num_kv_heads * c.head_dim, c.attention_bias, "v_proj")(x)
        q = q.reshape(b, t, c.num_heads, c.head_dim)
        k = k.reshape(b, t, c.num_kv_heads, c.head_dim)
        v = v.reshape(b, t, c.num_kv_heads, c.head_dim)
        inv_freq = rope_inv_freq(c)
        q = constrain(apply_rope(q, positions, inv_freq), ("batch", "seq", "act_heads", None))
        k = constrain(apply_rope(k, positions, inv_freq), ("batch", "seq", "act_kv_heads", None))
        if kv is None:
            k_all, v_all = k, v
        else:
            k_cache, v_cache = kv
            k_all = jax.lax.dynamic_update_slice(k_cache, k.astype(k_cache.dtype), (0, index, 0, 0))
            v_all = jax.lax.dynamic_update_slice(v_cache, v.astype(v_cache.dtype), (0, index, 0, 0))
        out = jax.nn.dot_product_attention(
            q, k_all.astype(q.dtype), v_all.astype(q.dtype), mask=mask, scale=1.0 / math.sqrt(c.head_dim)
        )
        out = _dense(c, c.hidden_size, False, "o_proj")(out.reshape(b, t, c.num_heads * c.head_dim))
        return out, (k, v)


class MLP(nn.Module):
    config: ModelConfig

    @nn.compact
    def __call__(self, x):
        c = self.config
        gate = _dense(c, c.intermediate_size, False, "gate_proj")(x)
        up = _dense(c, c.intermediate_size, False, "up_proj")(x)
        h = constrain(nn.silu(gate) * up, ("batch", "seq", "act_mlp"))
        return _dense(c, c.hidden_size, False, "down_proj")(h)


class Block(nn.Module):
    """Pre-norm decoder layer. Scanned over layers, so it returns (carry, per-layer output)."""

    config: ModelConfig

    @nn.compact
    def __call__(self, x, positions, mask, kv, index):
        c = self.config
        norm = functools.partial(RMSNorm, c.rms_norm_eps, c.jnp_dtype, c.jnp_param_dtype)
        h, new_kv = Attention(c, name="attn")(norm(name="input_norm")(x), positions, mask, kv, index)
        x = x + h
        x = x + MLP(c, name="mlp")(norm(name="post_attn_norm")(x))
        return constrain(x, ("batch", "seq", "hidden")), new_kv
