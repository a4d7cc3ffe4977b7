"""Which attention kernel a model call uses, and the call itself.

`attention` computes `xla_attention.grouped_attention`'s softmax(q k^T * scale) v over grouped KV heads through
one of four implementations (kernels, platforms, the default's reasons: docs/gpu.md, "Attention kernels"):

  "xla"     `xla_attention.grouped_attention`: dense float32 scores [B, G, T, R, S] with its own backward, laid
            out for XLA's CPU dots; every backend runs it; memory grows as T * S per layer.
  "cudnn"   `jax.nn.dot_product_attention(implementation="cudnn")`: cuDNN's fused flash kernel (O(T) memory).
            CUDA GPUs only, bf16/fp16, head_dim a multiple of 8 and at most 128; it cannot be lowered without
            a GPU, so on a CPU only its arguments are checked (`cudnn_arguments`).
  "pallas"  JAX's Pallas Triton flash attention (`pallas.ops.gpu.attention.mha`, its own custom VJP, O(T)
            memory): lowers for CUDA without a GPU (`benchmarks.cuda_lower`), runs in Pallas interpret mode off a
            GPU (slow; what the tests run); only the no-cache causal calls (`pallas_attention`).
  "tokamax" `tokamax.dot_product_attention` (tokamax 0.0.12): Mosaic GPU flash attention on sm90 / sm100 GPUs
            (an error on other GPUs, never a silent fallback), tokamax's XLA reference off a GPU; the mask as
            cuDNN takes it, GQA natively; it cannot be lowered for CUDA without a GPU.

`ModelConfig.attention_impl` picks (`select_implementation`): "auto" = on a GPU, for a dtype and head_dim the
fused kernels take, "pallas" for the no-cache causal calls (training) where JAX ships it (0.10, 0.11: the
kernel the lowering proof lowers) and "cudnn" otherwise; xla elsewhere. "xla", "cudnn", "pallas", "tokamax"
force one (an error where it cannot run); gpu_check times them all and prints the override to take. The masks
are `cache.attention_mask(valid, slots)`; how each fused call expresses them: `cudnn_arguments`,
`pallas_attention`. Under a mesh every fused kernel runs per shard (`shard_map`, `_per_shard`). Decoding and
the sampler's prefill do not go through here (`sampling.decode_step` has its own attention over its cache).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from rcgrpo_jax.models.xla_attention import grouped_attention
from rcgrpo_jax.sharding import BATCH_AXES

IMPLEMENTATIONS = ("auto", "xla", "cudnn", "pallas", "tokamax")
FOOTPRINT = "footprint"  # the dry run's memory plan: a fused kernel's memory, not its values (not a config choice)
TOKAMAX_GPU = "mosaic_gpu"  # tokamax's implementation on a GPU: its Mosaic GPU flash attention (sm90, sm100)
TOKAMAX_REFERENCE = "xla"  # off a GPU: tokamax's XLA reference implementation
FUSED_DTYPES = ("bfloat16", "float16")
FUSED_MAX_HEAD_DIM = 128  # 256 on Hopper and later; 128 holds on every GPU cuDNN's flash kernel supports
GPU_BACKENDS = ("gpu", "cuda")  # jax.default_backend() names CUDA (and ROCm) "gpu"; ROCm has no cuDNN
PALLAS_BLOCK = 128  # the flash kernel's forward query/key block; shorter sequences use one block
PALLAS_MIN_BLOCK = 16  # Triton's smallest dot tile
PALLAS_BACKWARD_BLOCK = 32  # its backward's blocks (JAX's defaults)

_LOWERING_PLATFORM: list[str] = []  # set by `lowering_for` while a program is traced for another platform


def pallas_mha_unavailable() -> str | None:
    """Why this JAX has no Pallas Triton flash kernel (`jax.experimental.pallas.ops.gpu.attention`), None when
    it has one: jax 0.10 and 0.11 ship it (0.11 deprecates it), jax 0.12 removed it (tokamax replaces it)."""
    import importlib.util

    if importlib.util.find_spec("jax.experimental.pallas.ops.gpu.attention") is None:
        return f"jax {jax.__version__} has no jax.experimental.pallas.ops.gpu.attention (removed in jax 0.12)"
    return None


@contextlib.contextmanager
def lowering_for(platform: str) -> Iterator[None]:
    """Within this context Pallas kernels are traced for `platform` ("cuda": compiled Triton kernels, not
    interpret mode) whatever the host's backend: `jax.export(..., platforms=["cuda"])` from a CPU host
    (`benchmarks.cuda_lower`). Implementation choices ("auto") still follow the host's backend. The choice is
    read at trace time and jit caches do not key on it: trace a fresh `jax.jit` inside the context."""
    _LOWERING_PLATFORM.append(str(platform))
    try:
        yield
    finally:
        _LOWERING_PLATFORM.pop()


def pallas_interpret() -> bool:
    """Whether Pallas GPU kernels run in interpret mode: off a GPU, unless traced `lowering_for` a GPU."""
    target = _LOWERING_PLATFORM[-1] if _LOWERING_PLATFORM else jax.default_backend()
    return str(target).lower() not in GPU_BACKENDS


def tokamax_unavailable() -> str | None:
    """Why tokamax cannot be imported here (None when it can): it is in setup.py's `gpu` and `test` extras."""
    import importlib.util

    if importlib.util.find_spec("tokamax") is None:
        return "tokamax is not installed (pip install tokamax==0.0.12: setup.py's gpu and test extras)"
    return None


def tokamax_implementation() -> str:
    """The tokamax implementation a call uses: `TOKAMAX_GPU` on a GPU backend or traced `lowering_for` a
    GPU, else `TOKAMAX_REFERENCE`."""
    return TOKAMAX_REFERENCE if pallas_interpret() else TOKAMAX_GPU


def fused_unsupported(dtype: Any = None, head_dim: int | None = None) -> str | None:
    """Why cuDNN's fused kernel cannot take this model (None when it can)."""
    if dtype is not None and jnp.dtype(dtype).name not in FUSED_DTYPES:
        return f"compute dtype {jnp.dtype(dtype).name} (cuDNN attention needs one of {FUSED_DTYPES})"
    if head_dim is not None and (head_dim % 8 or head_dim > FUSED_MAX_HEAD_DIM):
        return f"head_dim {head_dim} (cuDNN attention needs a multiple of 8, at most {FUSED_MAX_HEAD_DIM})"
    return None


def select_implementation(
    backend: str,
    config_value: str = "auto",
    *,
    dtype: Any = None,
    head_dim: int | None = None,
    causal: bool = True,
) -> str:
    """ "xla", "cudnn", "pallas" or "tokamax" for `ModelConfig.attention_impl` = `config_value` on `backend`
    (`jax.default_backend()`), given the compute `dtype` and `head_dim` when known, for a no-cache causal call
    (`causal`: training, full forwards) or a call over a cache.

    "auto": on a GPU backend where the dtype and head_dim suit the fused kernels (`fused_unsupported`), pallas
    for a causal call where this JAX ships the kernel (jax 0.10, 0.11), else cudnn; xla elsewhere. So on
    jax 0.10 and 0.11 every training program a GPU runs is the one `benchmarks.cuda_lower` lowers; on jax 0.12
    (no Pallas kernel) and for a call over a cache, cudnn. "xla": xla everywhere. "cudnn": cudnn, or a
    ValueError naming what stands in the way (a non-GPU backend, an unsupported dtype or head_dim), so a
    requested kernel is never silently replaced. "pallas": pallas on any backend (interpret mode off a GPU;
    the kernel pads head_dim to a power of two itself, so every head_dim lowers: 8, 64, 96, 128 and 200 were
    exported for CUDA). "tokamax": tokamax on any backend (its XLA reference off a GPU), or a ValueError where
    tokamax is not installed.
    """
    if config_value == FOOTPRINT:  # set by the dry run on the model it plans, never by a config
        return FOOTPRINT
    if config_value not in IMPLEMENTATIONS:
        raise ValueError(f"attention_impl: unknown value {config_value!r}; choose one of {IMPLEMENTATIONS}")
    if config_value == "xla":
        return "xla"
    if config_value == "tokamax":
        if why := tokamax_unavailable():
            raise ValueError(f"attention_impl: 'tokamax' cannot run here: {why}; use 'auto' or 'xla'")
        return "tokamax"
    if config_value == "pallas":
        if why := pallas_mha_unavailable():
            raise ValueError(f"attention_impl: 'pallas' cannot run here: {why}; use 'auto', 'xla' or 'tokamax'")
        return "pallas"
    on_gpu = str(backend).lower() in GPU_BACKENDS
    why_not = None if on_gpu else f"backend {backend!r} (cuDNN attention needs a CUDA GPU)"
    why_not = why_not or fused_unsupported(dtype, head_dim)
    if why_not is None:
        return "pallas" if config_value == "auto" and causal and pallas_mha_unavailable() is None else "cudnn"
    if config_value == "cudnn":
        raise ValueError(f"attention_impl: 'cudnn' cannot run here: {why_not}; use 'auto' or 'xla'")
    return "xla"


def implementation_for(config, backend: str | None = None, *, causal: bool = True) -> str:
    """`select_implementation` for a `ModelConfig` on `backend` (default: JAX's default backend), for a
    no-cache causal call or (`causal=False`) one over a cache. Called at trace time, so a program exported
    for CUDA from a CPU host (jax.export) keeps the xla path unless the config names a kernel."""
    backend = jax.default_backend() if backend is None else backend
    return select_implementation(
        backend, config.attention_impl, dtype=config.dtype, head_dim=config.head_dim, causal=causal
    )


def row_lengths(mask: jax.Array) -> jax.Array:
    """[B] int32: the per-row key count cuDNN's padding mask uses for a no-cache causal mask [B, 1, T, T]
    of right-padded rows: the keys the last query may see (its valid keys and its own slot)."""
    return jnp.sum(mask[:, 0, -1, :], axis=-1, dtype=jnp.int32)


def cudnn_arguments(q, k, v, mask, scale: float, *, causal: bool) -> dict[str, Any]:
    """The keyword arguments of `jax.nn.dot_product_attention` (all but `implementation`) that compute
    `grouped_attention(q, k, v, mask, scale)` at every real query: causal=True gives is_causal plus per-row
    lengths and no mask; causal=False the mask. The same arguments given to the library's "xla"
    implementation reproduce `grouped_attention` (tests/models/test_attention_select.py).

    How the cuDNN call expresses the mask. The model's masks are `cache.attention_mask(valid, slots)`:
      - no cache (training, full forwards; `causal=True`): T == S and query t may see valid keys s <= t. The
        trainers' batches are right-padded (each row's tokens are a prefix: `sft` and `rl_step` packing), so
        the mask is causal plus a per-row length, which the fused kernel takes as `is_causal` and
        `query_seq_lengths = key_value_seq_lengths = n`, with no [T, S] tensor at all. Causality alone
        already hides a right-padded row's padding from its real queries; the lengths let the kernel skip
        the padded tail's tiles (and zero the padding queries). n is read off the mask's last query row (its
        valid keys plus its own slot): for a row of L < T real tokens that is L + 1, which changes only what
        padding queries see. A left-padded or holed row without a cache would get wrong values here: such
        calls (HF-style `models.apply` with left padding) must use "xla".
      - with a cache (prefill; `causal=False`): queries sit at slots index.. of a longer cache and rows
        may hold holes, so the mask is passed as it is (cuDNN adds it as a bias); exact for any mask."""
    return _cudnn_keywords(q, k, v, fused_mask(q, k, mask, causal=causal), scale, causal=causal)


def fused_mask(q: jax.Array, k: jax.Array, mask: jax.Array, *, causal: bool) -> jax.Array:
    """What cuDNN's and tokamax's calls take for `mask` (`cudnn_arguments`): the per-row lengths [B] int32 of
    a no-cache causal call (`row_lengths`; a ValueError unless T == S), else the mask [B, 1, T, S] itself."""
    if not causal:
        return mask
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"causal attention needs as many queries as keys, got {q.shape[1]} and {k.shape[1]}")
    return row_lengths(mask)


def _cudnn_keywords(q, k, v, extra, scale: float, *, causal: bool) -> dict[str, Any]:
    """`jax.nn.dot_product_attention`'s keywords from `fused_mask`'s `extra` (lengths or mask)."""
    args: dict[str, Any] = {"query": q, "key": k, "value": v, "scale": float(scale)}
    if causal:
        args.update(is_causal=True, query_seq_lengths=extra, key_value_seq_lengths=extra)
    else:
        args.update(mask=extra)
    return args


def cudnn_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, scale: float, *, causal: bool
) -> jax.Array:
    """cuDNN's fused kernel on `cudnn_arguments`: q [B, T, N, Dh], k/v [B, S, G, Dh], mask [B, 1, T, S] ->
    [B, T, N, Dh], per shard under a mesh (`_per_shard`). So q, k and v reach the kernel with one spec (rows
    over the batch axes, heads over 'tensor' or whole; sequence and head_dim whole, as JAX's cuDNN
    partitioner demands), and inside a shard_map over every mesh axis the fused call lowers per device
    without that partitioner (jax's custom_partitioning inlines it there)."""

    def fn(q, k, v, extra):
        args = _cudnn_keywords(q, k, v, extra, scale, causal=causal)
        return jax.nn.dot_product_attention(**args, implementation="cudnn")

    return _per_shard(fn, q, k, v, fused_mask(q, k, mask, causal=causal))


def segment_ids(mask: jax.Array) -> jax.Array:
    """[B, T] int32 segment ids (1 real, 0 padding) of a no-cache mask [B, 1, T, T] for the Pallas
    kernel (`pallas_attention`): the mask's last query row."""
    return mask[:, 0, -1, :].astype(jnp.int32)


def _pallas_block(t: int) -> int:
    """The forward block for a length-t sequence: PALLAS_BLOCK, or the power of two >= t below it."""
    block = PALLAS_MIN_BLOCK
    while block < min(t, PALLAS_BLOCK):
        block *= 2
    return block


def _flash(q, k, v, seg, scale: float, interpret: bool):
    """`mha` on one shard: q [B, T, N, Dh], k/v [B, T, G, Dh], seg [B, T] -> [B, T, N, Dh]."""
    from jax.experimental.pallas.ops.gpu import attention as pallas_attention

    b, t, n, _ = q.shape
    reps = n // k.shape[2]
    if reps > 1:  # head h = g * R + r reads kv head g, as `grouped_attention`
        k, v = jnp.repeat(k, reps, axis=2), jnp.repeat(v, reps, axis=2)
    block = _pallas_block(t)
    padded = -(-t // block) * block
    if padded != t:  # the tail: segment 0, after every real query (causal), so no real query sees it
        pad = ((0, 0), (0, padded - t), (0, 0), (0, 0))
        q, k, v = jnp.pad(q, pad), jnp.pad(k, pad), jnp.pad(v, pad)
        seg = jnp.pad(seg, ((0, 0), (0, padded - t)))
    back = min(PALLAS_BACKWARD_BLOCK, block)
    blocks = pallas_attention.BlockSizes(
        block_q=block, block_k=block, block_q_dkv=back, block_kv_dkv=back, block_q_dq=back, block_kv_dq=back
    )
    out = pallas_attention.mha(
        q, k, v, seg, sm_scale=float(scale), causal=True, block_sizes=blocks, interpret=interpret
    )
    return out[:, :t]


def pallas_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, scale: float) -> jax.Array:
    """The Pallas flash kernel for a no-cache causal call: q [B, T, N, Dh], k/v [B, T, G, Dh], mask
    [B, 1, T, T] from `cache.attention_mask(valid, arange(T))` -> [B, T, N, Dh], equal to `grouped_attention`
    at every real query. Per shard under a mesh.

    How the Pallas call expresses the mask. `mha` takes `causal` (query t sees keys s <= t, both counted from
    0, so T == S) and one segment id per token (query t sees key s only if their ids are equal). A no-cache
    mask `attention_mask(valid, arange(T))` becomes causal plus segment ids = valid (1 real, 0 padding), read
    off the mask's last query row (exact for s < T - 1; slot T - 1 reads as 1, which only the last query can
    see, and there it gives that query what XLA gives it). A real query then sees exactly the real keys at or
    before it, with any padding pattern (right-padded, left-padded or holed rows). A padding query sees the
    padding keys at or before it instead of the real ones: its output differs from XLA's, and nothing real
    reads it (real queries never attend to padding keys; losses mask padding). T is padded up to whole kernel
    blocks (the tail gets segment 0, past every real query), and kv heads are repeated to the query heads
    (the kernel has no GQA; autodiff of the repeat sums their gradients back). A cache call (queries at an
    offset into a longer cache) is not expressible by `mha`'s causal mask: "pallas" refuses it with an error
    (no production program makes one: the sampler's prefill is `decode_step`'s own attention)."""

    t = q.shape[1]
    if k.shape[1] != t:
        raise ValueError(
            f"attention_impl 'pallas' takes only no-cache causal attention (as many keys as queries), got "
            f"{t} queries over {k.shape[1]} keys; use 'xla' for a forward over a cache"
        )
    fn = functools.partial(_flash, scale=scale, interpret=pallas_interpret())
    return _per_shard(fn, q, k, v, segment_ids(mask))


def _per_shard(fn, q: jax.Array, k: jax.Array, v: jax.Array, extra: jax.Array) -> jax.Array:
    """fn(q, k, v, extra) per shard of the current mesh (`shard_map`; XLA cannot partition a custom call):
    rows over the batch axes when they divide the batch, heads over 'tensor' when it divides both head
    counts; `extra`'s leading axis is the rows'. Called directly without a mesh."""
    b, _, n, _ = q.shape
    g = k.shape[2]
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1:
        return fn(q, k, v, extra)
    rows = tuple(a for a in BATCH_AXES if a in mesh.shape)
    row_shards = 1
    for a in rows:
        row_shards *= mesh.shape[a]
    rows = rows if rows and b % row_shards == 0 else None
    tp = mesh.shape.get("tensor", 1)
    heads = "tensor" if tp > 1 and n % tp == 0 and g % tp == 0 else None
    qkv = P(rows, None, heads, None)
    extra_spec = P(rows, *([None] * (extra.ndim - 1)))
    return jax.shard_map(fn, mesh=mesh, in_specs=(qkv, qkv, qkv, extra_spec), out_specs=qkv, check_vma=False)(
        q, k, v, extra
    )


def tokamax_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, scale: float, *, causal: bool
) -> jax.Array:
    """`tokamax.dot_product_attention` with `cudnn_arguments`' mask contract: q [B, T, N, Dh], k/v
    [B, S, G, Dh], mask [B, 1, T, S] -> [B, T, N, Dh], equal to `grouped_attention` at every real query
    (`causal`: the no-cache mask of right-padded rows, as causal plus per-row lengths). The implementation
    is `tokamax_implementation()`; per shard under a mesh."""
    import tokamax
    from absl import flags

    # tokamax reads its options (tokamax.config) from absl flags and, where the process has not parsed them,
    # parses sys.argv itself: the host program's own arguments (pytest's, a launcher's). Mark them parsed,
    # at their defaults, instead; a program that parses its flags later still does.
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    impl = tokamax_implementation()
    extra = fused_mask(q, k, mask, causal=causal)
    if causal:

        def fn(q, k, v, n):
            return tokamax.dot_product_attention(
                q,
                k,
                v,
                scale=float(scale),
                is_causal=True,
                query_seq_lengths=n,
                key_value_seq_lengths=n,
                implementation=impl,
            )

    else:

        def fn(q, k, v, m):
            return tokamax.dot_product_attention(q, k, v, mask=m, scale=float(scale), implementation=impl)

    if impl == TOKAMAX_REFERENCE:
        return fn(q, k, v, extra)
    with tokamax.config.cross_compile(True):  # lowered for a GPU that may not be this host's
        return _per_shard(fn, q, k, v, extra)


def footprint_attention(q, k, v, mask, scale):
    """A fused attention's memory without its arithmetic: q [B, T, N, Dh], k/v [B, S, G, Dh], mask
    [B, 1, T, S] -> [B, T, N, Dh], every temporary O(B x (T x N + S x G) x Dh) (reductions over S, no
    [T, S] tensor), differentiable in q, k and v (gradients of their shapes, as a flash backward's). Values
    are meaningless: the dry run compiles the training programs with it (`attention_impl="footprint"`) for
    their memory analysis, since on a CPU backend "xla" holds [B, G, T, R, S] f32 probabilities that the
    GPU's fused kernels never allocate."""
    n, g = q.shape[2], k.shape[2]
    rows = jnp.sum(mask[:, 0, -1, :], axis=-1).astype(jnp.float32)  # the row lengths a fused kernel reads
    kv = jnp.mean(k.astype(jnp.float32), axis=1) * jnp.mean(v.astype(jnp.float32), axis=1)  # [B, G, Dh]
    kv = jnp.repeat(kv, n // g, axis=1) * (scale * rows)[:, None, None]  # [B, N, Dh]
    return (q.astype(jnp.float32) * kv[:, None]).astype(q.dtype)


def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: jax.Array,
    scale: float,
    *,
    implementation: str = "xla",
    causal: bool = False,
) -> jax.Array:
    """`xla_attention.grouped_attention`'s contract: q [B, T, N, Dh], k/v [B, S, G, Dh], mask [B, 1, T, S]
    -> [B, T, N, Dh]. implementation "xla" is `grouped_attention` itself (values unchanged); "cudnn"
    `cudnn_attention` (`causal`: the no-cache mask of right-padded rows); "pallas"
    `pallas_attention` (`causal` only: a cache call is refused); "tokamax" `tokamax_attention`. A single-query call (T == 1) stays on
    xla: nothing to fuse. "footprint" (the dry run's plan): `footprint_attention`, every call."""
    if implementation == FOOTPRINT:
        return footprint_attention(q, k, v, mask, scale)
    if implementation == "pallas":
        if not causal:
            raise ValueError(
                "attention_impl 'pallas' takes only no-cache causal attention (its kernel's causal mask "
                "counts queries and keys from slot 0); use 'xla' for a forward over a cache"
            )
        if q.shape[1] > 1:
            return pallas_attention(q, k, v, mask, scale)
    if implementation == "tokamax" and q.shape[1] > 1:
        return tokamax_attention(q, k, v, mask, scale, causal=causal)
    if implementation == "cudnn" and q.shape[1] > 1:
        return cudnn_attention(q, k, v, mask, scale, causal=causal)
    if implementation not in IMPLEMENTATIONS[1:]:  # "auto" is resolved by `implementation_for`
        raise ValueError(f"attention implementation {implementation!r}: expected one of {IMPLEMENTATIONS[1:]}")
    return grouped_attention(q, k, v, mask, scale)
