"""One-token decode step in a layout made for the decode loop (the model's math, re-laid out).

Why this exists. `models.forward` scans the layers with `nn.scan` over params and cache stacked on a
leading [L] axis. Inside a decode `while_loop` that costs, on every step: a copy of each layer's weight
slice out of the stack (XLA's CPU dot cannot read a dynamic slice in place), a copy of each layer's
cache slice, and two transposes of it to the [B, Hkv, ., .] order the batched attention dots want.
On the tiny bench model these copies were ~3/4 of the step time.

So a decode call re-lays out once, outside the loop: `prepare` splits the stacked weights into one
pytree per layer and the cache's first `span` slots into per-layer K^T [B, Hkv, Dh, S] and V
[B, Hkv, S, Dh] arrays; `step` runs the layers unrolled on them (the new key/value is written in
place); `restore` writes the span back into the `KVCache` in its interface layout. The math follows
`models.layers` (the same RMSNorm, RoPE and MLP modules, applied per layer), and greedy decoding stays
token-for-token equal to `models.forward` and HF (tests/sampling).
"""

from __future__ import annotations

import math
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from rcgrpo_jax.models import KVCache, ModelConfig
from rcgrpo_jax.models.layers import MLP, RMSNorm, apply_rope, rope_inv_freq
from rcgrpo_jax.sharding import constrain


@flax.struct.dataclass
class LayerKV:
    """Per-layer cache over the first S slots of the KVCache, in the order the attention dots read."""

    k_t: tuple[jax.Array, ...]  # L x [B, Hkv, Dh, S]
    v: tuple[jax.Array, ...]  # L x [B, Hkv, S, Dh]
    mask: jax.Array  # [B, S] bool


def prepare_weights(params) -> dict[str, Any]:
    """Params with `layers` split into a tuple of per-layer pytrees (a one-off copy per decode call)."""
    stacked = params["layers"]
    num_layers = jax.tree.leaves(stacked)[0].shape[0]
    layers = tuple(jax.tree.map(lambda a, i=i: a[i], stacked) for i in range(num_layers))
    return {**params, "layers": layers}


def prepare_kv(cache: KVCache, span: int) -> LayerKV:
    k = cache.k[:, :, :span]
    v = cache.v[:, :, :span]
    return LayerKV(
        k_t=tuple(jnp.transpose(k[i], (0, 2, 3, 1)) for i in range(k.shape[0])),
        v=tuple(jnp.transpose(v[i], (0, 2, 1, 3)) for i in range(v.shape[0])),
        mask=cache.mask[:, :span],
    )


def restore(cache: KVCache, kv: LayerKV, index: jax.Array) -> KVCache:
    """The KVCache with its first S slots replaced by `kv` (in place when the cache is donated)."""
    k = jnp.stack([jnp.transpose(x, (0, 3, 1, 2)) for x in kv.k_t])
    v = jnp.stack([jnp.transpose(x, (0, 2, 1, 3)) for x in kv.v])
    return KVCache(
        k=jax.lax.dynamic_update_slice(cache.k, k.astype(cache.k.dtype), (0, 0, 0, 0, 0)),
        v=jax.lax.dynamic_update_slice(cache.v, v.astype(cache.v.dtype), (0, 0, 0, 0, 0)),
        mask=jax.lax.dynamic_update_slice(cache.mask, kv.mask, (0, 0)),
        index=index,
    )


def _proj(p, x: jax.Array, dtype) -> jax.Array:
    """nn.Dense's computation: x @ kernel (+ bias), in the compute dtype."""
    y = jnp.dot(x.astype(dtype), p["kernel"].astype(dtype))
    return y + p["bias"].astype(dtype) if "bias" in p else y


def _attention(c: ModelConfig, p, x, positions, k_t, v, mask, index):
    """x [B, 1, D] at slot `index`: writes its key/value there and attends over the valid slots."""
    b = x.shape[0]
    dt, h, g, dh = c.jnp_dtype, c.num_heads, c.num_kv_heads, c.head_dim
    q = _proj(p["q_proj"], x, dt).reshape(b, 1, h, dh)
    k = _proj(p["k_proj"], x, dt).reshape(b, 1, g, dh)
    if c.qk_norm:  # Qwen3: per-head RMSNorm over head_dim, before RoPE (as models.layers.Attention)
        norm = RMSNorm(c.rms_norm_eps, dt, c.jnp_param_dtype)
        q = norm.apply({"params": p["q_norm"]}, q)
        k = norm.apply({"params": p["k_norm"]}, k)
    val = _proj(p["v_proj"], x, dt).reshape(b, g, 1, dh)
    inv_freq = rope_inv_freq(c)
    q = apply_rope(q, positions, inv_freq).reshape(b, g, h // g, dh)
    k = apply_rope(k, positions, inv_freq).reshape(b, g, dh, 1)
    k_t = jax.lax.dynamic_update_slice(k_t, k.astype(k_t.dtype), (0, 0, 0, index))
    v = jax.lax.dynamic_update_slice(v, val.astype(v.dtype), (0, 0, index, 0))
    scores = jnp.einsum("bgrd,bgds->bgrs", q, k_t.astype(dt), preferred_element_type=jnp.float32)
    scores = jnp.where(mask[:, None, None, :], scores / math.sqrt(dh), -jnp.inf)
    weights = jax.nn.softmax(scores, axis=-1).astype(dt)
    out = jnp.einsum("bgrs,bgsd->bgrd", weights, v.astype(dt)).reshape(b, 1, h * dh)
    return _proj(p["o_proj"], out, dt), k_t, v


def step(
    c: ModelConfig, weights, kv: LayerKV, tokens: jax.Array, positions: jax.Array, live: jax.Array, index: jax.Array
) -> tuple[jax.Array, LayerKV]:
    """Feed tokens [B, 1] at `positions` [B, 1] into slot `index`; returns (final hidden [B, D], kv).

    A row that is not `live` still writes its slot (so shapes stay static) but marks it invalid. Its
    own query always sees its own slot, as in `models.cache.attention_mask`, so its softmax is finite.
    """
    dt = c.jnp_dtype
    mask = jax.lax.dynamic_update_slice(kv.mask, live, (0, index))
    attend = mask | (jnp.arange(mask.shape[1]) == index)[None]
    norm = RMSNorm(c.rms_norm_eps, dt, c.jnp_param_dtype)
    x = jnp.take(weights["embed"]["embedding"], tokens, axis=0).astype(dt)
    k_all, v_all = list(kv.k_t), list(kv.v)
    for i, p in enumerate(weights["layers"]):
        h = norm.apply({"params": p["input_norm"]}, x)
        a, k_all[i], v_all[i] = _attention(c, p["attn"], h, positions, k_all[i], v_all[i], attend, index)
        x = x + a
        x = x + MLP(c).apply({"params": p["mlp"]}, norm.apply({"params": p["post_attn_norm"]}, x))
        x = constrain(x, ("batch", "seq", "hidden"))
    x = norm.apply({"params": weights["final_norm"]}, x[:, 0])
    return x, LayerKV(k_t=tuple(k_all), v=tuple(v_all), mask=mask)
