"""Per-token log-probs and entropy from hidden states, without materialising [B, T, V] logits.

The vocabulary is scanned in chunks with a streaming (online) logsumexp; with several chunks each scan
step is rematerialised in the backward pass, so neither the forward nor the gradient keeps more than one
[B, T, chunk] block of logits alive (a vocabulary of one chunk keeps its block for the backward). Optionally the sequence is chunked as well (then one
[B, seq_chunk, chunk] block).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rcgrpo_jax.models.layers import linear

Array = jax.Array

_NEG = -1e30  # finite "minus infinity": exp(_NEG - m) == 0 without inf - inf = nan


def logprobs_and_entropy(
    hidden: Array, embedding: Array, targets: Array, *, temperature: float = 1.0
) -> tuple[Array, Array]:
    """Reference computation with full logits: (log p(target) [B, T], entropy [B, T]), float32."""
    logits = jnp.einsum("btd,dv->btv", hidden, embedding, preferred_element_type=jnp.float32)
    logits = logits / temperature
    logz = jax.nn.logsumexp(logits, axis=-1)
    logp_all = logits - logz[..., None]
    logp = jnp.take_along_axis(logp_all, targets[..., None], axis=-1)[..., 0]
    entropy = -jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1)
    return logp, entropy


def _vocab_scan(hidden: Array, embedding: Array, targets: Array, chunk: int, temperature: float) -> tuple[Array, Array]:
    vocab = embedding.shape[1]
    n = -(-vocab // chunk)
    emb = jnp.pad(embedding, ((0, 0), (0, n * chunk - vocab)))
    emb = emb.reshape(emb.shape[0], n, chunk).transpose(1, 0, 2)  # [n, D, chunk]
    lead = targets.shape

    def step(carry, xs):
        # carry: running max m, sum s = sum exp(l - m), w = sum exp(l - m) (l - m), target logit t.
        m, s, w, t = carry
        emb_c, c = xs
        logits = linear(hidden, emb_c, jnp.float32)
        valid = c * chunk + jnp.arange(chunk) < vocab
        logits = jnp.where(valid, logits / temperature, _NEG)
        m_new = jnp.maximum(m, logits.max(axis=-1))
        decay = jnp.exp(m - m_new)
        e = jnp.exp(logits - m_new[..., None])
        # Re-reference the old partial sums to the new max: sum e (l - m_new) = sum e (l - m) + (m - m_new) sum e.
        w = decay * (w + s * (m - m_new)) + jnp.sum(e * (logits - m_new[..., None]), axis=-1)
        s = decay * s + e.sum(axis=-1)
        local = targets - c * chunk
        in_chunk = (local >= 0) & (local < chunk)
        hit = jnp.take_along_axis(logits, jnp.clip(local, 0, chunk - 1)[..., None], axis=-1)[..., 0]
        t = t + jnp.where(in_chunk, hit, 0.0)
        return (m_new, s, w, t), None

    zeros = jnp.zeros(lead, jnp.float32)
    init = (jnp.full(lead, _NEG, jnp.float32), zeros, zeros, zeros)
    # Rematerialised per chunk when there are several (one [B, T, chunk] block alive at a time); a single
    # chunk is the whole vocabulary anyway, so its logits are kept for the backward instead of recomputed.
    (m, s, w, t), _ = jax.lax.scan(jax.checkpoint(step) if n > 1 else step, init, (emb, jnp.arange(n)))
    log_s = jnp.log(s)
    return t - (m + log_s), log_s - w / s


def chunked_logprobs_and_entropy(
    hidden: Array,
    embedding: Array,
    targets: Array,
    chunk: int,
    *,
    seq_chunk: int | None = None,
    temperature: float = 1.0,
) -> tuple[Array, Array]:
    """(log p(target) [B, T], entropy [B, T]) in float32 from hidden [B, T, D], the output
    embedding [D, V] (`models.output_embedding`) and targets [B, T] int, scanning the vocabulary in
    chunks of `chunk` (V need not divide) and, with `seq_chunk`, the sequence in chunks too.
    Differentiable; equals `logprobs_and_entropy` to float32 rounding. chunk, seq_chunk and
    temperature are Python constants (static under jit)."""
    if seq_chunk is None or seq_chunk >= targets.shape[1]:
        return _vocab_scan(hidden, embedding, targets, chunk, temperature)
    b, t = targets.shape
    n = -(-t // seq_chunk)
    pad = n * seq_chunk - t
    h = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0))).reshape(b, n, seq_chunk, -1).swapaxes(0, 1)
    y = jnp.pad(targets, ((0, 0), (0, pad))).reshape(b, n, seq_chunk).swapaxes(0, 1)
    logp, ent = jax.lax.map(lambda xy: _vocab_scan(xy[0], embedding, xy[1], chunk, temperature), (h, y))
    unchunk = lambda a: a.swapaxes(0, 1).reshape(b, n * seq_chunk)[:, :t]
    return unchunk(logp), unchunk(ent)
