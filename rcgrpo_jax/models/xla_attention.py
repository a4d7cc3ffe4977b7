"""XLA's grouped-query attention with its own backward: the kernel the CPU runs and the reference that
the fused kernels (`attention.py`: cuDNN, Pallas Triton) are tested against.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

_BIG_NEGATIVE = -0.7 * float(np.finfo(np.float32).max)  # a masked score: exp() underflows to 0, no inf - inf


def grouped_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, scale: float) -> jax.Array:
    """softmax(q k^T * scale) v with grouped KV heads: q [B, T, N, Dh], k/v [B, S, G, Dh] (N = G * R),
    mask [B, 1, T, S] -> [B, T, N, Dh]. Scores and softmax in float32; a row with no allowed key gets
    a uniform softmax (finite) and no gradient, as with `jax.nn.dot_product_attention`.

    Written out, with its own backward, for the layouts. XLA's CPU dot wants [batch, M, K] x
    [batch, K, N]; autodiff of the library's attention contracts the [T, S] probabilities over T
    with T in the M slot, so XLA copied every [T, S] tensor into a transposed layout (about as long
    as all the matmuls of the quickstart's SFT step; the figures are in docs/performance.md).
    Here every dot over a [T, S] tensor takes it as it is stored, [B, G, T, R, S]; only the small
    [., Dh] operands get transposed.
    """
    b, t, n, dh = q.shape
    g = k.shape[2]
    out = _attention(q.reshape(b, t, g, n // g, dh), k, v, mask[:, :, :, None, :], scale)  # [B, T, G, R, Dh]
    return out.reshape(b, t, n, dh)


def _dot(x, y, contract, batch):
    return jax.lax.dot_general(x, y, (contract, batch), preferred_element_type=jnp.float32)


def _probs(q, k, mask, scale):
    """[B, G, T, R, S] float32 softmax of the scaled scores (q [B, T, G, R, Dh], k [B, S, G, Dh])."""
    scores = _dot(q, k, ((4,), (3,)), ((0, 2), (0, 2))) * scale
    return jax.nn.softmax(jnp.where(mask, scores, _BIG_NEGATIVE), axis=-1)


def _weighted_values(probs, v):
    """[B, T, G, R, Dh]: probs [B, G, T, R, S] times v [B, S, G, Dh]."""
    out = _dot(probs.astype(v.dtype), v, ((4,), (1,)), ((0, 1), (0, 2)))  # [B, G, T, R, Dh]
    return jnp.transpose(out, (0, 2, 1, 3, 4)).astype(v.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _attention(q, k, v, mask, scale):
    return _weighted_values(_probs(q, k, mask, scale), v)


def _attention_fwd(q, k, v, mask, scale):
    probs = _probs(q, k, mask, scale)
    return _weighted_values(probs, v), (q, k, v, mask, probs)


def _attention_bwd(scale, res, d_out):
    q, k, v, mask, probs = res
    d_probs = _dot(d_out, v, ((4,), (3,)), ((0, 2), (0, 2)))  # [B, G, T, R, S]
    d_scores = probs * (d_probs - jnp.sum(d_probs * probs, axis=-1, keepdims=True))
    d_scores = jnp.where(mask, d_scores * scale, 0.0)
    d_q = jnp.transpose(_dot(d_scores.astype(k.dtype), k, ((4,), (1,)), ((0, 1), (0, 2))), (0, 2, 1, 3, 4))
    # d_k and d_v come out as [B, G, Dh, S]: the [T, S] operand stays on the right, as stored.
    d_k = jnp.transpose(_dot(q, d_scores.astype(q.dtype), ((1, 3), (2, 3)), ((0, 2), (0, 1))), (0, 3, 1, 2))
    d_v = jnp.transpose(_dot(d_out, probs.astype(v.dtype), ((1, 3), (2, 3)), ((0, 2), (0, 1))), (0, 3, 1, 2))
    return d_q.astype(q.dtype), d_k.astype(k.dtype), d_v.astype(v.dtype), None


_attention.defvjp(_attention_fwd, _attention_bwd)
