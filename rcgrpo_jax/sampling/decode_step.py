"""The sampler's own forward over its KV cache: a block of tokens per row (prefill, or one token in the
decode loop), in the layout the decode loop reads (the model's math, re-laid out).

Layout. `models.forward` scans the layers (`nn.scan`) over params and a cache stacked on a leading [L]
axis. Inside a decode `while_loop` that costs, every step, a copy of each layer's weight slice out of the
stack and of each layer's cache slice, and two transposes of it to the [B, Hkv, ., .] order the batched
attention dots want. So the sampler keeps, for the whole life of a session:
  - the decode weights as one pytree per layer (`decode_weights`, once per RL step, cast to the decode
    dtype and placed by the decode rules);
  - the cache (`DecodeCache`) as per-layer K^T [B, Hkv, Dh, S] and V [B, Hkv, S, Dh], which prefill and
    decode both read and write in place (donated): no per-call re-layout, no copy back.

Per-row slots. Row b's context token i sits at slot i, with RoPE position i: `lengths[b]` slots are
valid, a block appended to row b goes to slots [lengths[b], lengths[b] + count_b), and query slot p sees
the keys at slots <= p. There are no holes and no shared write index; the cache's span S (its slot axis)
only has to hold the longest row, and the session sizes it to a bucket of that (`buckets.span_bucket`).
Writes of padding tokens and of rows that are not live are dropped (scatter mode "drop"), so they never
touch a valid slot. The math follows `models.layers` (the same RMSNorm, RoPE and MLP modules, applied
per layer); greedy decoding stays token-for-token equal to HF (tests/sampling).
"""

from __future__ import annotations

import math
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from rcgrpo_jax.models import ModelConfig
from rcgrpo_jax.models.layers import MLP, RMSNorm, apply_rope, rope_inv_freq
from rcgrpo_jax.sharding import constrain

QUERY_BLOCK = 128  # a prefill block's queries attend in pieces of this many (scores [B, G, 128, R, S])


@flax.struct.dataclass
class DecodeCache:
    """Per-layer KV over S slots per row, in the order the attention dots read; row b holds lengths[b]."""

    k_t: tuple[jax.Array, ...]  # L x [B, Hkv, Dh, S]
    v: tuple[jax.Array, ...]  # L x [B, Hkv, S, Dh]
    lengths: jax.Array  # int32 [B]: valid slots of each row (= the RoPE position of its next token)

    @property
    def span(self) -> int:
        return self.k_t[0].shape[-1]

    @property
    def rows(self) -> int:
        return self.lengths.shape[0]


def init_cache(config: ModelConfig, rows: int, span: int, dtype: Any = None) -> DecodeCache:
    """An empty cache (every row of length 0) in the compute dtype unless `dtype` is given."""
    dt = jnp.dtype(dtype or config.dtype)
    g, dh = config.num_kv_heads, config.head_dim
    return DecodeCache(
        k_t=tuple(jnp.zeros((rows, g, dh, span), dt) for _ in range(config.num_layers)),
        v=tuple(jnp.zeros((rows, g, span, dh), dt) for _ in range(config.num_layers)),
        lengths=jnp.zeros((rows,), jnp.int32),
    )


def cache_bytes(config: ModelConfig, rows: int, span: int, dtype: Any = None) -> int:
    """Bytes of a `DecodeCache` (all devices together)."""
    itemsize = jnp.dtype(dtype or config.dtype).itemsize
    return 2 * config.num_layers * rows * config.num_kv_heads * config.head_dim * span * itemsize + 4 * rows


def cache_sharding(config: ModelConfig, mesh, batch_axes) -> DecodeCache:
    """Shardings of a DecodeCache: rows over `batch_axes`, kv heads over 'tensor' when they divide."""
    heads = "tensor" if config.num_kv_heads % mesh.shape.get("tensor", 1) == 0 else None
    kv = NamedSharding(mesh, P(batch_axes, heads, None, None))
    layers = (kv,) * config.num_layers
    return DecodeCache(k_t=layers, v=layers, lengths=NamedSharding(mesh, P(batch_axes)))


def layer_weights(params) -> dict[str, Any]:
    """Params with `layers` as a tuple of per-layer pytrees. Stacked params ([L] leading axis, the
    training layout) are split here, a copy per call; `decode_weights` output is taken as it is."""
    stacked = params["layers"]
    if isinstance(stacked, (tuple, list)):
        return params
    num_layers = jax.tree.leaves(stacked)[0].shape[0]
    layers = tuple(jax.tree.map(lambda a, i=i: a[i], stacked) for i in range(num_layers))
    return {**params, "layers": layers}


def split_shardings(params_shardings):
    """Shardings of `layer_weights(params)` from those of the stacked params (the [L] axis dropped)."""

    def drop_layer_axis(s):
        return NamedSharding(s.mesh, P(*tuple(s.spec)[1:]))

    return {**params_shardings, "layers": jax.tree.map(drop_layer_axis, params_shardings["layers"])}


def _cast_and_split(params, dtype):
    return layer_weights(jax.tree.map(lambda a: a.astype(dtype), params))


_cast_and_split_jit = jax.jit(_cast_and_split, static_argnums=1)  # one compilation per params shape and dtype


def decode_weights(params, dtype, shardings=None):
    """The sampler's weights for one RL step: every leaf cast to `dtype` (the run's `model.decode_dtype`),
    the layers split into per-layer pytrees, placed on `shardings` (those of the stacked params under the
    decode rules; None = where they are). The cast runs where the params live (their training shards),
    so only `dtype`-sized data moves and no float32 copy is kept."""
    dtype = jnp.dtype(dtype)
    cast = _cast_and_split_jit(params, dtype)
    if shardings is None:
        return cast
    num_layers = len(cast["layers"])
    per_layer = split_shardings(shardings)
    target = {**per_layer, "layers": (per_layer["layers"],) * num_layers}
    return jax.device_put(cast, target, donate=True)


def _proj(p, x: jax.Array, dtype) -> jax.Array:
    """nn.Dense's computation: x @ kernel (+ bias), in the compute dtype."""
    y = jnp.dot(x.astype(dtype), p["kernel"].astype(dtype))
    return y + p["bias"].astype(dtype) if "bias" in p else y


KV_WRITES = ("auto", "scatter", "select")


def kv_write_for(value: str, backend: str | None = None) -> str:
    """How a one-token step writes its key/value: "scatter" (one scatter per layer, in place: what a GPU
    runs) or "select" (a where over the row's slots: XLA's CPU scatter copies the cache, so on a CPU
    this is faster). "auto": select on the CPU backend, scatter elsewhere."""
    if value not in KV_WRITES:
        raise ValueError(f"kv_write must be one of {KV_WRITES}, got {value!r}")
    if value != "auto":
        return value
    backend = jax.default_backend() if backend is None else backend
    return "select" if str(backend).lower() == "cpu" else "scatter"


def _write(cache_x: jax.Array, new: jax.Array, slots: jax.Array, axis: int, mode: str = "scatter") -> jax.Array:
    """cache_x [B, ...] (its slots on `axis`) with row b's new[b, t] ([B, T, G, Dh]: the cache's other
    axes, in order) written at slot slots[b, t]; slots >= S are dropped.

    "scatter": a vmap over rows, so the scatter's batch axis stays the rows' (and their sharding); in
    place in a donated cache. (XLA's CPU backend runs a bf16 scatter in float32, on a float32 copy of the
    layer's cache, which the CPU dry run counts; GPUs scatter bf16 natively.) "select" (one token per
    row only): where(slot == slots[b], new, cache), elementwise."""
    if mode == "select" and new.shape[1] == 1:
        hit = jnp.arange(cache_x.shape[axis])[None, :] == slots  # [B, S]; slots [B, 1]
        n = new[:, 0].astype(cache_x.dtype)  # [B, G, Dh]
        if axis == 3:  # [B, G, Dh, S]
            return jnp.where(hit[:, None, None, :], n[..., None], cache_x)
        return jnp.where(hit[:, None, :, None], n[:, :, None, :], cache_x)  # [B, G, S, Dh]

    def one(x, n, s):
        idx = (slice(None),) * (axis - 1) + (s,)
        return x.at[idx].set(jnp.moveaxis(n, 0, axis - 1).astype(x.dtype), mode="drop")

    return jax.vmap(one)(cache_x, new, slots)


def _attention(c: ModelConfig, p, x, slots, write_slots, k_t, v, write: str):
    """x [B, T, D] at `slots` [B, T]: writes its keys/values at `write_slots` and attends over the slots
    <= its own. Returns (out [B, T, D], k_t, v)."""
    b, t, _ = x.shape
    dt, h, g, dh = c.jnp_dtype, c.num_heads, c.num_kv_heads, c.head_dim
    q = _proj(p["q_proj"], x, dt).reshape(b, t, h, dh)
    k = _proj(p["k_proj"], x, dt).reshape(b, t, g, dh)
    if c.qk_norm:  # Qwen3: per-head RMSNorm over head_dim, before RoPE (as models.layers.Attention)
        norm = RMSNorm(c.rms_norm_eps, dt, c.jnp_param_dtype)
        q = norm.apply({"params": p["q_norm"]}, q)
        k = norm.apply({"params": p["k_norm"]}, k)
    val = _proj(p["v_proj"], x, dt).reshape(b, t, g, dh)
    inv_freq = rope_inv_freq(c)
    q = apply_rope(q, slots, inv_freq).reshape(b, t, g, h // g, dh)
    k = apply_rope(k, slots, inv_freq)
    k_t = _write(k_t, k, write_slots, 3, write)  # k_t [B, G, Dh, S]: slots on axis 3
    v = _write(v, val, write_slots, 2, write)  # v [B, G, S, Dh]: slots on axis 2
    q = jnp.transpose(q, (0, 2, 1, 3, 4))  # [B, G, T, R, Dh]
    k_read, v_read = k_t.astype(dt), v.astype(dt)

    def attend(q_blk, slots_blk):  # [B, G, Tb, R, Dh], [B, Tb] -> [B, G, Tb, R, Dh]
        scores = jnp.einsum("bgtrd,bgds->bgtrs", q_blk, k_read, preferred_element_type=jnp.float32)
        allowed = jnp.arange(k_read.shape[-1])[None, None, :] <= slots_blk[:, :, None]  # [B, Tb, S]
        scores = jnp.where(allowed[:, None, :, None, :], scores / math.sqrt(dh), -jnp.inf)
        weights = jax.nn.softmax(scores, axis=-1).astype(dt)
        return jnp.einsum("bgtrs,bgsd->bgtrd", weights, v_read)

    if t > QUERY_BLOCK:  # bounds the [T, S] scores of a wide prefill block (padded to whole blocks)
        n = -(-t // QUERY_BLOCK)
        extra = n * QUERY_BLOCK - t
        q_pad = jnp.pad(q, ((0, 0), (0, 0), (0, extra), (0, 0), (0, 0)))
        s_pad = jnp.pad(slots, ((0, 0), (0, extra)), mode="edge")
        q_blocks = jnp.moveaxis(q_pad.reshape(b, g, n, QUERY_BLOCK, h // g, dh), 2, 0)
        s_blocks = jnp.moveaxis(s_pad.reshape(b, n, QUERY_BLOCK), 1, 0)
        out = jax.lax.map(lambda xs: attend(*xs), (q_blocks, s_blocks))  # [n, B, G, Tb, R, Dh]
        out = jnp.moveaxis(out, 0, 2).reshape(b, g, n * QUERY_BLOCK, h // g, dh)[:, :, :t]
    else:
        out = attend(q, slots)
    out = jnp.transpose(out, (0, 2, 1, 3, 4)).reshape(b, t, h * dh)
    return _proj(p["o_proj"], out, dt), k_t, v


def forward(
    c: ModelConfig, weights, cache: DecodeCache, tokens: jax.Array, counts: jax.Array, write: str = "scatter"
) -> tuple[jax.Array, DecodeCache]:
    """Append tokens [B, T] (row b's first counts[b] are real, the rest padding) to each row at its own
    length. Returns (final-normed hidden [B, T, D], cache with lengths += counts).

    Query t of row b sits at slot lengths[b] + t and sees the slots <= it; a padding query sees stale
    (finite) slots of its row, and its output is meaningless but finite. `weights` = `layer_weights(...)`.
    """
    b, t = tokens.shape
    dt = c.jnp_dtype
    slots = cache.lengths[:, None] + jnp.arange(t, dtype=jnp.int32)[None]  # [B, T]
    write_slots = jnp.where(jnp.arange(t)[None] < counts[:, None], slots, cache.span)  # padding: dropped
    norm = RMSNorm(c.rms_norm_eps, dt, c.jnp_param_dtype)
    x = jnp.take(weights["embed"]["embedding"], tokens, axis=0).astype(dt)
    k_all, v_all = list(cache.k_t), list(cache.v)
    for i, p in enumerate(weights["layers"]):
        h = norm.apply({"params": p["input_norm"]}, x)
        a, k_all[i], v_all[i] = _attention(c, p["attn"], h, slots, write_slots, k_all[i], v_all[i], write)
        x = x + a
        x = x + MLP(c).apply({"params": p["mlp"]}, norm.apply({"params": p["post_attn_norm"]}, x))
        x = constrain(x, ("batch", "seq", "hidden"))
    x = norm.apply({"params": weights["final_norm"]}, x)
    lengths = cache.lengths + counts.astype(jnp.int32)
    return x, DecodeCache(k_t=tuple(k_all), v=tuple(v_all), lengths=lengths)
