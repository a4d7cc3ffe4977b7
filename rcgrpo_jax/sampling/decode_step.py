"""The sampler's own forward over its KV cache: a block of tokens per row (prefill, or one token in the
decode loop), in the layout the decode loop reads: the model's math (`models.layers`' RMSNorm, RoPE and MLP,
applied per layer) re-laid out; greedy decoding stays token-for-token equal to HF (tests/sampling).

Layout (why: docs/sampling.md). The decode weights are one pytree per layer (`decode_weights`, once per RL
step: cast to the decode dtype, placed by the decode rules; q, k, v, gate and up separate kernels); the
cache (`DecodeCache`) holds per-layer K and V in the order its decode attention reads, read and written in
place (donated) by prefill and decode alike.

Decode attention (`select_decode_attention`: auto | xla | ragged | tokamax), fixed when the cache is made
(`init_cache(layout=...)`):
  "xla"     K^T [B, Hkv, Dh, S], V [B, Hkv, S, Dh]: dense dots; every row attends over the whole span S
            (slots past its length masked), a step reads rows x S slots. The CPU's path.
  "ragged"  K and V [B, Hkv, S, Dh]: JAX's Pallas GPU decode kernel (`decode_attention.gqa`), row b over its
            first lengths[b] + 1 slots. "auto" picks it on a GPU backend when head_dim suits the kernel; off
            a GPU it runs in Pallas interpret mode (slow; the tests). Prefill blocks (T > 1), and spans the
            kernel cannot split into blocks, take the XLA attention over this layout.
  "tokamax" the ragged layout; one-token steps through tokamax's Triton attention with per-row key lengths
            (`sampling.tokamax_decode`), "auto"'s pick on a GPU where JAX lacks the Pallas kernel (0.12).

Per-row slots. Row b's context token i sits at slot i with RoPE position i: `lengths[b]` slots are valid, a
block appended to row b goes to slots [lengths[b], lengths[b] + count_b), and query slot p sees the keys at
slots <= p. No holes, no shared write index: the span only holds the longest row (the session sizes it,
`buckets.span_bucket`). Writes of padding tokens and of rows that are not live are dropped (scatter mode
"drop"). How a write happens: `write_kv` (`kv_write_for`: scatter | select | footprint, the dry run's).
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
from rcgrpo_jax.models.attention import pallas_interpret
from rcgrpo_jax.models.layers import MLP, RMSNorm, apply_rope, rope_inv_freq
from rcgrpo_jax.sampling import tokamax_decode
from rcgrpo_jax.sharding import BATCH_AXES, constrain

QUERY_BLOCK = 128  # a prefill block's queries attend in pieces of this many (scores [B, G, 128, R, S])


LAYOUTS = ("xla", "ragged", "tokamax")  # "tokamax" keeps the ragged layout
DECODE_ATTENTION = ("auto", "xla", "ragged", "tokamax")
GPU_BACKENDS = ("gpu", "cuda")  # jax.default_backend() names CUDA "gpu"
RAGGED_BLOCK_K = 128  # the kernel's key block (its default): a row reads roundup(len, block) slots
RAGGED_MAX_SPLITS = 16  # split-k programs per (row, kv head) at most (the kernel's default k_splits)


@flax.struct.dataclass
class DecodeCache:
    """Per-layer KV over S slots per row, in the order its decode attention reads; row b holds lengths[b].

    layout (static): "xla" = k holds K^T [B, Hkv, Dh, S]; "ragged" and "tokamax" = k holds K [B, Hkv, S, Dh].
    v is [B, Hkv, S, Dh] in all."""

    k: tuple[jax.Array, ...]  # L x [B, Hkv, Dh, S] ("xla") or [B, Hkv, S, Dh] ("ragged", "tokamax")
    v: tuple[jax.Array, ...]  # L x [B, Hkv, S, Dh]
    lengths: jax.Array  # int32 [B]: valid slots of each row (= the RoPE position of its next token)
    layout: str = flax.struct.field(pytree_node=False, default="xla")

    @property
    def k_slot_axis(self) -> int:
        return 3 if self.layout == "xla" else 2

    @property
    def span(self) -> int:
        return self.k[0].shape[self.k_slot_axis]

    @property
    def rows(self) -> int:
        return self.lengths.shape[0]

    def keys(self, layer: int) -> jax.Array:
        """Layer `layer`'s keys as [B, Hkv, S, Dh] whatever the layout (a copy for "xla"; to inspect)."""
        k = self.k[layer]
        return jnp.swapaxes(k, 2, 3) if self.layout == "xla" else k


def ragged_kernel_unavailable() -> str | None:
    """Why this JAX has no Pallas GPU decode kernel (`jax.experimental.pallas.ops.gpu.decode_attention`), None
    when it has one: jax 0.10 and 0.11 ship it (0.11 deprecates it), jax 0.12 removed it (where "auto" takes
    "tokamax" instead when it can run: docs/gpu.md)."""
    import importlib.util

    if importlib.util.find_spec("jax.experimental.pallas.ops.gpu.decode_attention") is None:
        return f"jax {jax.__version__} has no jax.experimental.pallas.ops.gpu.decode_attention (removed in jax 0.12)"
    return None


def ragged_unsupported(head_dim: int) -> str | None:
    """Why the Pallas decode kernel cannot take this head_dim (None when it can): this JAX must ship it
    (`ragged_kernel_unavailable`), and its Triton tiles are [16, head_dim] and [block_k, head_dim], so
    head_dim must be a power of two, at least 16."""
    if why := ragged_kernel_unavailable():
        return why
    if head_dim < 16 or head_dim & (head_dim - 1):
        return f"head_dim {head_dim} (the Pallas decode kernel needs a power of two >= 16)"
    return None


def select_decode_attention(backend: str, value: str = "auto", *, head_dim: int | None = None) -> str:
    """ "xla", "ragged" or "tokamax" for a session's `decode_attention` = `value` on `backend`
    (`jax.default_backend()`).

    "auto": on a GPU backend ragged when head_dim suits the kernel, else tokamax when it can run
    (`tokamax_decode.unavailable`: jax 0.12 with tokamax >= 0.0.13), else xla; off a GPU xla (the CPU's
    path). "xla": xla everywhere. "ragged": ragged, also off a GPU (the kernel in Pallas interpret mode:
    tests), or a ValueError when head_dim does not suit the kernel. "tokamax": tokamax, also off a GPU (its
    XLA reference), or a ValueError naming what it lacks (a requested path is never silently replaced)."""
    if value not in DECODE_ATTENTION:
        raise ValueError(f"decode_attention: unknown value {value!r}; choose one of {DECODE_ATTENTION}")
    on_gpu = str(backend).lower() in GPU_BACKENDS
    why_not = ragged_unsupported(head_dim) if head_dim is not None else ragged_kernel_unavailable()
    if value == "ragged" and why_not:
        raise ValueError(f"decode_attention: 'ragged' cannot run: {why_not}; use 'auto' or 'xla'")
    why_not_tokamax = tokamax_decode.unavailable(gpu=on_gpu)
    if value == "tokamax" and why_not_tokamax:
        raise ValueError(f"decode_attention: 'tokamax' cannot run: {why_not_tokamax}; use 'auto' or 'xla'")
    if value != "auto":
        return value
    if not on_gpu:
        return "xla"
    return "ragged" if why_not is None else "tokamax" if why_not_tokamax is None else "xla"


def cache_layout(config: ModelConfig, value: str = "auto", backend: str | None = None) -> str:
    """The cache layout of `select_decode_attention` for a model on `backend` (default: JAX's default)."""
    backend = jax.default_backend() if backend is None else backend
    return select_decode_attention(backend, value, head_dim=config.head_dim)


def ragged_blocks(span: int) -> tuple[int, int] | None:
    """(block_k, k_splits) of the Pallas kernel for a span: the largest power of two <= RAGGED_BLOCK_K
    dividing the span (at least 16), and the most splits <= RAGGED_MAX_SPLITS that divide its blocks.
    None when no such block exists (the XLA attention over the ragged layout is used then). The session's
    spans (multiples of 128 from 256 on) all give block_k = 128."""
    block = RAGGED_BLOCK_K
    while block >= 16 and span % block:
        block //= 2
    if block < 16:
        return None
    blocks = span // block
    return block, max(d for d in range(1, min(blocks, RAGGED_MAX_SPLITS) + 1) if blocks % d == 0)


def init_cache(config: ModelConfig, rows: int, span: int, dtype: Any = None, layout: str = "xla") -> DecodeCache:
    """An empty cache (every row of length 0) in the compute dtype unless `dtype` is given."""
    if layout not in LAYOUTS:
        raise ValueError(f"cache layout must be one of {LAYOUTS}, got {layout!r}")
    dt = jnp.dtype(dtype or config.dtype)
    g, dh = config.num_kv_heads, config.head_dim
    k_shape = (rows, g, dh, span) if layout == "xla" else (rows, g, span, dh)
    return DecodeCache(
        k=tuple(jnp.zeros(k_shape, dt) for _ in range(config.num_layers)),
        v=tuple(jnp.zeros((rows, g, span, dh), dt) for _ in range(config.num_layers)),
        lengths=jnp.zeros((rows,), jnp.int32),
        layout=layout,
    )


def cache_bytes(config: ModelConfig, rows: int, span: int, dtype: Any = None) -> int:
    """Bytes of a `DecodeCache` (all devices together)."""
    itemsize = jnp.dtype(dtype or config.dtype).itemsize
    return 2 * config.num_layers * rows * config.num_kv_heads * config.head_dim * span * itemsize + 4 * rows


def kv_heads_axis(num_kv_heads: int, mesh) -> str | None:
    """The mesh axis a cache's kv heads are split over: 'tensor' when it divides them, else none."""
    return "tensor" if "tensor" in mesh.shape and num_kv_heads % mesh.shape["tensor"] == 0 else None


def cache_sharding(config: ModelConfig, mesh, batch_axes, layout: str = "xla") -> DecodeCache:
    """Shardings of a DecodeCache: rows over `batch_axes`, kv heads over 'tensor' when they divide."""
    kv = NamedSharding(mesh, P(batch_axes, kv_heads_axis(config.num_kv_heads, mesh), None, None))
    layers = (kv,) * config.num_layers
    return DecodeCache(k=layers, v=layers, lengths=NamedSharding(mesh, P(batch_axes)), layout=layout)


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


def cast_and_split(params, dtype):
    """Every leaf cast to `dtype`, the layers split (`layer_weights`): `decode_weights`' cast, unplaced."""
    return layer_weights(jax.tree.map(lambda a: a.astype(dtype), params))


cast_and_split_jit = jax.jit(cast_and_split, static_argnums=1)  # one compilation per params shape and dtype


def decode_weights(params, dtype, shardings=None):
    """The sampler's weights for one RL step: every leaf cast to `dtype` (the run's `model.decode_dtype`),
    the layers split into per-layer pytrees, placed on `shardings` (those of the stacked params under the
    decode rules; None = where they are). The cast runs where the params live (their training shards),
    so only `dtype`-sized data moves and no float32 copy is kept."""
    dtype = jnp.dtype(dtype)
    cast = cast_and_split_jit(params, dtype)
    if shardings is None:
        return cast
    num_layers = len(cast["layers"])
    per_layer = split_shardings(shardings)
    target = {**per_layer, "layers": (per_layer["layers"],) * num_layers}
    return jax.device_put(cast, target, donate=True)


def dense(p, x: jax.Array, dtype) -> jax.Array:
    """nn.Dense's computation: x @ kernel (+ bias), in the compute dtype."""
    y = jnp.dot(x.astype(dtype), p["kernel"].astype(dtype))
    return y + p["bias"].astype(dtype) if "bias" in p else y


FOOTPRINT = "footprint"  # the memory plan's KV write: an in-place write's memory, not its values
KV_WRITES = ("auto", "scatter", "select", FOOTPRINT)


def kv_write_for(value: str, backend: str | None = None, dtype: Any = None) -> str:
    """How a one-token step writes its key/value: "scatter" (one scatter per layer, in place) or "select"
    (a where over the row's slots: it reads and writes the layer's whole cache). "auto": scatter, except
    for a 16-bit cache on the CPU backend (`dtype`, the cache's; None = 16-bit), where XLA's CPU scatter
    converts the layer's cache to float32 and back: select (measured on the tiny bench model, 8 rows x 256
    slots per step: bf16 select 3.6 ms vs scatter 5.8 ms; float32 scatter 2.12 ms vs select 2.23 ms, and
    5.4 vs 6.1 ms at 1024 slots). Both write the same values. "footprint": `footprint_write` (the dry run)."""
    if value not in KV_WRITES:
        raise ValueError(f"kv_write must be one of {KV_WRITES}, got {value!r}")
    if value != "auto":
        return value
    backend = jax.default_backend() if backend is None else backend
    narrow = dtype is None or jnp.dtype(dtype).itemsize < 4
    return "select" if str(backend).lower() == "cpu" and narrow else "scatter"


def block_write(kv_write: str) -> str:
    """The write of a multi-token block (prefill, appends, row copies) under a `Sampler.kv_write`: a scatter,
    or the footprint stand-in when the sampler plans memory."""
    return FOOTPRINT if kv_write == FOOTPRINT else "scatter"


def footprint_write(x: jax.Array, update: jax.Array) -> jax.Array:
    """x updated in place by an elementwise op that reads all of `update` (a sum): the memory of a scatter
    into a donated buffer (nothing beyond the operand and the update), sharding-neutral (x keeps its
    sharding; the update reduces to a scalar). Values are wrong: only programs that are compiled for their
    memory analysis (the dry run's plan) write this way. Why: XLA's CPU backend expands every scatter into a
    loop over a copy of its operand (a donated, in-bounds row scatter of a [32, 4, 128, 4096] bf16 array:
    0.27 GB of temporaries, 2x the array; the same update as a dynamic_update_slice: 0), where a GPU
    scatters into the donated buffer in place. Every KV write of the sampler's programs (this module's
    `write_kv`, the session's row writes, `row_shards.put_tokens` and `copy_rows`) takes this mode, so none is
    left out of the plan."""
    return x + (jnp.sum(update.astype(jnp.float32)) * 0.0).astype(x.dtype)


def write_kv(cache_x: jax.Array, new: jax.Array, slots: jax.Array, axis: int, mode: str = "scatter") -> jax.Array:
    """cache_x [B, ...] (its slots on `axis`) with row b's new[b, t] ([B, T, G, Dh]: the cache's other
    axes, in order) written at slot slots[b, t]; slots >= S are dropped.

    "scatter": a vmap over rows, so the scatter's batch axis stays the rows' (and their sharding); in
    place in a donated cache. (XLA's CPU backend runs a bf16 scatter in float32, on a float32 copy of the
    layer's cache; GPUs scatter bf16 natively.) "select" (one token per row only): where(slot == slots[b],
    new, cache), elementwise. "footprint": `footprint_write`."""
    if mode == FOOTPRINT:
        return footprint_write(cache_x, new)
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


def per_shard(attend, q: jax.Array, k: jax.Array, v: jax.Array, kv_len: jax.Array) -> jax.Array:
    """attend(q, k, v, kv_len) -> q's shape, with q [B, G or H, ...] and k, v [B, G, S, Dh] (the ragged
    layout), under the current mesh per shard (`shard_map`: rows over the batch axes, kv heads (and their
    query heads) over 'tensor' when they divide; XLA cannot partition a custom call); as it is without one."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1:
        return attend(q, k, v, kv_len)
    rows = tuple(a for a in BATCH_AXES if a in mesh.shape) or None
    heads = kv_heads_axis(k.shape[1], mesh)
    q_spec, kv_spec = P(rows, heads, *(None,) * (q.ndim - 2)), P(rows, heads, None, None)
    return jax.shard_map(
        attend,
        mesh=mesh,
        in_specs=(q_spec, kv_spec, kv_spec, P(rows)),
        out_specs=q_spec,
        check_vma=False,
    )(q, k, v, kv_len)


def _ragged_attention(q: jax.Array, k: jax.Array, v: jax.Array, kv_len: jax.Array, blocks: tuple[int, int]):
    """The Pallas decode kernel: q [B, H, Dh] (head h = g * R + r) over k, v [B, G, S, Dh] (the ragged
    layout), row b over its first kv_len[b] slots -> [B, H, Dh]; per shard under a mesh (`per_shard`).
    Interpret mode off a GPU."""
    from jax.experimental.pallas.ops.gpu import decode_attention

    block_k, k_splits = blocks
    interpret = pallas_interpret()  # off a GPU, unless traced `attention.lowering_for("cuda")`

    def attend(q, k, v, n):
        # gqa takes [B, S, G, Dh] and swaps to [B, G, S, Dh] for the kernel: the two swaps cancel (no copy).
        return decode_attention.gqa(
            q,
            jnp.swapaxes(k, 1, 2),
            jnp.swapaxes(v, 1, 2),
            kv_seq_len=n,
            sm_scale=1.0 / math.sqrt(q.shape[-1]),
            block_k=block_k,
            k_splits=k_splits,
            interpret=interpret,
        )

    return per_shard(attend, q, k, v, kv_len)


def project_qkv(c: ModelConfig, p, x: jax.Array, positions: jax.Array):
    """One layer's queries, keys and values of x [B, T, D] at RoPE `positions` [B, T]: q [B, T, G, R, Dh]
    (head h = g * R + r), k and v [B, T, G, Dh], in the compute dtype (Qwen3's q/k norm before RoPE)."""
    b, t, _ = x.shape
    dt, h, g, dh = c.jnp_dtype, c.num_heads, c.num_kv_heads, c.head_dim
    q = dense(p["q_proj"], x, dt).reshape(b, t, h, dh)
    k = dense(p["k_proj"], x, dt).reshape(b, t, g, dh)
    if c.qk_norm:  # Qwen3: per-head RMSNorm over head_dim, before RoPE (as models.layers.Attention)
        norm = RMSNorm(c.rms_norm_eps, dt, c.jnp_param_dtype)
        q = norm.apply({"params": p["q_norm"]}, q)
        k = norm.apply({"params": p["k_norm"]}, k)
    v = dense(p["v_proj"], x, dt).reshape(b, t, g, dh)
    inv_freq = rope_inv_freq(c)
    return apply_rope(q, positions, inv_freq).reshape(b, t, g, h // g, dh), apply_rope(k, positions, inv_freq), v


def layer_attention(c: ModelConfig, p, x, slots, write_slots, kv_len, k_c, v, layout: str, write: str):
    """x [B, T, D] at `slots` [B, T]: writes its keys/values at `write_slots` and attends over the slots
    <= its own (k_c, v: one layer of a `layout` cache; kv_len [B]: the slots each row attends over after
    the write, 0 for a row that writes nothing). Returns (out [B, T, D], k_c, v)."""
    b, t, _ = x.shape
    dt, h, g, dh = c.jnp_dtype, c.num_heads, c.num_kv_heads, c.head_dim
    q, k, val = project_qkv(c, p, x, slots)
    k_axis = 3 if layout == "xla" else 2  # k_c [B, G, Dh, S] ("xla") or [B, G, S, Dh] ("ragged")
    k_c = write_kv(k_c, k, write_slots, k_axis, write)
    v = write_kv(v, val, write_slots, 2, write)  # v [B, G, S, Dh]: slots on axis 2
    blocks = ragged_blocks(v.shape[2]) if layout == "ragged" and t == 1 else None
    if blocks is not None:  # one token per row: the Pallas kernel over each row's own slots
        out = _ragged_attention(q.reshape(b, h, dh).astype(v.dtype), k_c, v, kv_len, blocks)
        return dense(p["o_proj"], out.reshape(b, t, h * dh), dt), k_c, v
    if layout == "tokamax" and t == 1:  # one token per row: tokamax's kernel over each row's own slots
        out = per_shard(tokamax_decode.attend, q[:, 0].astype(v.dtype), k_c, v, kv_len)  # [B, G, R, Dh]
        return dense(p["o_proj"], out.reshape(b, t, h * dh), dt), k_c, v
    q = jnp.transpose(q, (0, 2, 1, 3, 4))  # [B, G, T, R, Dh]
    k_read, v_read = k_c.astype(dt), v.astype(dt)
    score_eq = "bgtrd,bgds->bgtrs" if layout == "xla" else "bgtrd,bgsd->bgtrs"

    def attend(q_blk, slots_blk):  # [B, G, Tb, R, Dh], [B, Tb] -> [B, G, Tb, R, Dh]
        scores = jnp.einsum(score_eq, q_blk, k_read, preferred_element_type=jnp.float32)
        allowed = jnp.arange(v_read.shape[2])[None, None, :] <= slots_blk[:, :, None]  # [B, Tb, S]
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
    return dense(p["o_proj"], out, dt), k_c, v


def forward(
    c: ModelConfig, weights, cache: DecodeCache, tokens: jax.Array, counts: jax.Array, write: str = "scatter"
) -> tuple[jax.Array, DecodeCache]:
    """Append tokens [B, T] (row b's first counts[b] are real, the rest padding) to each row at its own
    length. Returns (final-normed hidden [B, T, D], cache with lengths += counts).

    Query t of row b sits at slot lengths[b] + t and sees the slots <= it; a padding query sees stale
    (finite) slots of its row, and its output is meaningless but finite. `weights` = `layer_weights(...)`.
    The attention follows the cache's layout (module docstring): on a "ragged" ("tokamax") cache a one-token
    block goes through the Pallas (tokamax) kernel, row b over lengths[b] + 1 slots when counts[b] > 0, none
    otherwise (its output is then meaningless, finite).
    """
    b, t = tokens.shape
    dt = c.jnp_dtype
    slots = cache.lengths[:, None] + jnp.arange(t, dtype=jnp.int32)[None]  # [B, T]
    write_slots = jnp.where(jnp.arange(t)[None] < counts[:, None], slots, cache.span)  # padding: dropped
    norm = RMSNorm(c.rms_norm_eps, dt, c.jnp_param_dtype)
    x = jnp.take(weights["embed"]["embedding"], tokens, axis=0).astype(dt)
    kv_len = jnp.where(counts > 0, cache.lengths + counts, 0).astype(jnp.int32)  # the kernel's per-row span
    k_all, v_all = list(cache.k), list(cache.v)
    for i, p in enumerate(weights["layers"]):
        h = norm.apply({"params": p["input_norm"]}, x)
        a, k_all[i], v_all[i] = layer_attention(
            c, p["attn"], h, slots, write_slots, kv_len, k_all[i], v_all[i], cache.layout, write
        )
        x = x + a
        x = x + MLP(c).apply({"params": p["mlp"]}, norm.apply({"params": p["post_attn_norm"]}, x))
        x = constrain(x, ("batch", "seq", "hidden"))
    x = norm.apply({"params": weights["final_norm"]}, x)
    lengths = cache.lengths + counts.astype(jnp.int32)
    return x, DecodeCache(k=tuple(k_all), v=tuple(v_all), lengths=lengths, layout=cache.layout)
