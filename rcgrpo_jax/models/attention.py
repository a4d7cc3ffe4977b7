"""Which attention kernel a model call uses, and the call itself.

Two implementations of the same softmax(q k^T * scale) v over grouped KV heads:

  "xla"    `layers.grouped_attention`: dense scores [B, G, T, R, S] in float32 with its own backward,
           laid out for XLA's CPU dots. Every backend can run it; memory grows as T * S per layer.
  "cudnn"  `jax.nn.dot_product_attention(implementation="cudnn")`: cuDNN's fused (flash) kernel, which
           never materialises the scores (O(T) memory, forward and backward). Only on CUDA GPUs, only in
           bf16/fp16, head_dim a multiple of 8 and at most 128. It cannot be lowered without a GPU
           ("cuDNN is not detected"), so on a CPU only its arguments can be checked: `cudnn_arguments`
           builds them, and the same arguments given to the library's "xla" implementation reproduce
           `grouped_attention` (tests/models/test_attention_select.py).

`ModelConfig.attention_impl` picks: "auto" (cudnn where it can run: a GPU backend and a supported dtype
and head_dim; else xla), "xla", or "cudnn" (an error where it cannot run). Decoding does not go through
here (`sampling.decode_step` has its own single-token attention).

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
    may hold holes, so the mask is passed as it is (cuDNN adds it as a bias); exact for any mask.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

IMPLEMENTATIONS = ("auto", "xla", "cudnn")
FUSED_DTYPES = ("bfloat16", "float16")
FUSED_MAX_HEAD_DIM = 128  # 256 on Hopper and later; 128 holds on every GPU cuDNN's flash kernel supports
GPU_BACKENDS = ("gpu", "cuda")  # jax.default_backend() names CUDA (and ROCm) "gpu"; ROCm has no cuDNN


def fused_unsupported(dtype: Any = None, head_dim: int | None = None) -> str | None:
    """Why cuDNN's fused kernel cannot take this model (None when it can)."""
    if dtype is not None and jnp.dtype(dtype).name not in FUSED_DTYPES:
        return f"compute dtype {jnp.dtype(dtype).name} (cuDNN attention needs one of {FUSED_DTYPES})"
    if head_dim is not None and (head_dim % 8 or head_dim > FUSED_MAX_HEAD_DIM):
        return f"head_dim {head_dim} (cuDNN attention needs a multiple of 8, at most {FUSED_MAX_HEAD_DIM})"
    return None


def select_implementation(
    backend: str, config_value: str = "auto", *, dtype: Any = None, head_dim: int | None = None
) -> str:
    """ "xla" or "cudnn" for `ModelConfig.attention_impl` = `config_value` on `backend`
    (`jax.default_backend()`), given the compute `dtype` and `head_dim` when known.

    "auto": cudnn on a GPU backend when the dtype and head_dim are supported, else xla. "xla": xla
    everywhere. "cudnn": cudnn, or a ValueError naming what stands in the way (a non-GPU backend, an
    unsupported dtype or head_dim), so a requested kernel is never silently replaced.
    """
    if config_value not in IMPLEMENTATIONS:
        raise ValueError(f"attention_impl: unknown value {config_value!r}; choose one of {IMPLEMENTATIONS}")
    if config_value == "xla":
        return "xla"
    on_gpu = str(backend).lower() in GPU_BACKENDS
    why_not = None if on_gpu else f"backend {backend!r} (cuDNN attention needs a CUDA GPU)"
    why_not = why_not or fused_unsupported(dtype, head_dim)
    if why_not is None:
        return "cudnn"
    if config_value == "cudnn":
        raise ValueError(f"attention_impl: 'cudnn' cannot run here: {why_not}; use 'auto' or 'xla'")
    return "xla"


def implementation_for(config, backend: str | None = None) -> str:
    """`select_implementation` for a `ModelConfig` on `backend` (default: JAX's default backend). Called
    at trace time, so a program exported for CUDA from a CPU host (jax.export) keeps the xla path."""
    backend = jax.default_backend() if backend is None else backend
    return select_implementation(backend, config.attention_impl, dtype=config.dtype, head_dim=config.head_dim)


def row_lengths(mask: jax.Array) -> jax.Array:
    """[B] int32: the per-row key count cuDNN's padding mask uses for a no-cache causal mask [B, 1, T, T]
    of right-padded rows: the keys the last query may see (its valid keys and its own slot)."""
    return jnp.sum(mask[:, 0, -1, :], axis=-1, dtype=jnp.int32)


def cudnn_arguments(q, k, v, mask, scale: float, *, causal: bool) -> dict[str, Any]:
    """The keyword arguments of `jax.nn.dot_product_attention` (all but `implementation`) that compute
    `grouped_attention(q, k, v, mask, scale)` at every real query, under the contract in the module
    docstring: causal=True gives is_causal plus per-row lengths and no mask; causal=False the mask."""
    args: dict[str, Any] = {"query": q, "key": k, "value": v, "scale": float(scale)}
    if causal:
        if q.shape[1] != k.shape[1]:
            raise ValueError(f"causal attention needs as many queries as keys, got {q.shape[1]} and {k.shape[1]}")
        lengths = row_lengths(mask)
        args.update(is_causal=True, query_seq_lengths=lengths, key_value_seq_lengths=lengths)
    else:
        args.update(mask=mask)
    return args


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
    """`layers.grouped_attention`'s contract: q [B, T, N, Dh], k/v [B, S, G, Dh], mask [B, 1, T, S]
    -> [B, T, N, Dh]. implementation "xla" is `grouped_attention` itself (values unchanged); "cudnn"
    the fused kernel with `cudnn_arguments` (`causal`: the no-cache mask of right-padded rows). A
    single-query call (T == 1) stays on xla: nothing to fuse."""
    if implementation == "cudnn" and q.shape[1] > 1:
        return jax.nn.dot_product_attention(
            **cudnn_arguments(q, k, v, mask, scale, causal=causal), implementation="cudnn"
        )
    if implementation not in ("xla", "cudnn"):
        raise ValueError(f"attention implementation {implementation!r}: expected 'xla' or 'cudnn'")
    from rcgrpo_jax.models.layers import grouped_attention  # layers imports this module

    return grouped_attention(q, k, v, mask, scale)
