"""Decoder building blocks: RMSNorm, RoPE (default and LLaMA 3.1 scaling), the GQA attention layer (with Qwen3's
per-head q/k RMSNorm; its kernels are in `attention.py`), SwiGLU MLP.

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

from rcgrpo_jax.models import attention as attention_lib
from rcgrpo_jax.models.config import ModelConfig
from rcgrpo_jax.sharding import constrain

INIT_STD = 0.02  # HF initializer_range for both families


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def linear(x: jax.Array, w: jax.Array, out_dtype=None) -> jax.Array:
    """x [..., K] @ w [K, N] -> [..., N] (the dot `nn.Dense` and the output layer use, with
    preferred_element_type=out_dtype; forward values unchanged), with a backward laid out for XLA's CPU dots.

    dx = dy w^T. The weight gradient dw = sum over the leading axes of x^T dy contracts the token axis,
    which is the major axis of both operands, so XLA copies one of them into a transposed layout. Autodiff
    writes dw = (dy^T x)^T, which transposes dy; here the transposed operand is the one with fewer
    features: dw = x^T dy when K <= N (MLP gate/up: D < F; the output layer: D < V), else (dy^T x)^T as
    autodiff does. Same sums as autodiff (products accumulated in out_dtype, then cast to x's and w's
    dtypes), possibly in another order: equal to float rounding.
    """
    return _linear_fwd(x, w, out_dtype)[0]


def _linear_fwd(x, w, out_dtype):
    y = jax.lax.dot_general(x, w, (((x.ndim - 1,), (0,)), ((), ())), preferred_element_type=out_dtype)
    return y, (x, w)


def _linear_bwd(out_dtype, res, dy):
    x, w = res
    dot = functools.partial(jax.lax.dot_general, preferred_element_type=out_dtype)
    dx = dot(dy, w, (((dy.ndim - 1,), (1,)), ((), ())))
    lead = tuple(range(x.ndim - 1))
    if x.shape[-1] <= dy.shape[-1]:
        dw = dot(x, dy, ((lead, lead), ((), ())))
    else:
        dw = dot(dy, x, ((lead, lead), ((), ()))).T
    return dx.astype(x.dtype), dw.astype(w.dtype)


linear.defvjp(_linear_fwd, _linear_bwd)


def _linear_dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
    """`nn.Dense`'s dot_general hook: its one contraction (last axis of x with the kernel's first) as `linear`."""
    contract, batch = dimension_numbers
    if batch != ((), ()) or tuple(map(tuple, contract)) != ((lhs.ndim - 1,), (0,)) or precision is not None:
        raise ValueError(f"linear: unexpected dot {dimension_numbers} (precision {precision})")
    return linear(lhs, rhs, preferred_element_type)


def _dense(config: ModelConfig, features: int, use_bias: bool, name: str) -> nn.Dense:
    return nn.Dense(
        features,
        use_bias=use_bias,
        dtype=config.jnp_dtype,
        param_dtype=config.jnp_param_dtype,
        kernel_init=nn.initializers.normal(INIT_STD),
        dot_general=_linear_dot_general,
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
    written at `index` and the queries attend over all S slots under `mask` [B, 1, T, S].

    q = RoPE(norm_q(x W_q + b_q)), k = RoPE(norm_k(x W_k + b_k)) per head, where norm_q/norm_k are
    RMSNorms over head_dim for Qwen3 (`config.qk_norm`) and the identity otherwise; the cache stores
    the normalised, rotated keys."""

    config: ModelConfig

    @nn.compact
    def __call__(self, x, positions, mask, kv, index):
        c = self.config
        b, t, _ = x.shape
        # Three dots, not one fused qkv kernel (nor a fused gate/up in the MLP): fused was slower on the CPU
        # (docs/performance.md, "The quickstart model's SFT step").
        q = _dense(c, c.num_heads * c.head_dim, c.attention_bias, "q_proj")(x)
        k = _dense(c, c.num_kv_heads * c.head_dim, c.attention_bias, "k_proj")(x)
        v = _dense(c, c.num_kv_heads * c.head_dim, c.attention_bias, "v_proj")(x)
        q = q.reshape(b, t, c.num_heads, c.head_dim)
        k = k.reshape(b, t, c.num_kv_heads, c.head_dim)
        v = v.reshape(b, t, c.num_kv_heads, c.head_dim)
        if c.qk_norm:  # Qwen3: per-head RMSNorm over head_dim, before RoPE
            q = RMSNorm(c.rms_norm_eps, c.jnp_dtype, c.jnp_param_dtype, name="q_norm")(q)
            k = RMSNorm(c.rms_norm_eps, c.jnp_dtype, c.jnp_param_dtype, name="k_norm")(k)
        inv_freq = rope_inv_freq(c)
        q = constrain(apply_rope(q, positions, inv_freq), ("batch", "seq", "act_heads", None))
        k = constrain(apply_rope(k, positions, inv_freq), ("batch", "seq", "act_kv_heads", None))
        v = constrain(v, ("batch", "seq", "act_kv_heads", None))  # as k: the fused kernels take q, k, v alike
        if kv is None:
            k_all, v_all = k, v
        else:
            k_cache, v_cache = kv
            k_all = jax.lax.dynamic_update_slice(k_cache, k.astype(k_cache.dtype), (0, index, 0, 0))
            v_all = jax.lax.dynamic_update_slice(v_cache, v.astype(v_cache.dtype), (0, index, 0, 0))
        out = attention_lib.attention(
            q,
            k_all.astype(q.dtype),
            v_all.astype(q.dtype),
            mask,
            1.0 / math.sqrt(c.head_dim),
            implementation=attention_lib.implementation_for(c, causal=kv is None),
            causal=kv is None,
        )
        out = _dense(c, c.hidden_size, c.o_proj_bias, "o_proj")(out.reshape(b, t, c.num_heads * c.head_dim))
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
