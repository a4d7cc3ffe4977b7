"""Jitted prefill and decode over the sampler's KV cache, and `generate()` on top of them.

Design (after gemma's sampler): `Sampler` is a frozen dataclass of static settings and the static
self of the jitted functions; the decode loop is one `lax.while_loop` over a `DecodeState` that
runs until every row is done or the static budget is spent. The cache is a `decode_step.DecodeCache`:
per-layer K / V in the layout its decode attention reads ("xla": dense over the span; "ragged": the
Pallas GPU kernel over each row's own length), each row appending at its own length (slot = RoPE
position), so there is no padding in it, no holes and no shared write index. Caches are donated and
updated in place; the cache's span (slot axis) is what the dense attention attends over, and the caller
(`DecodeSession`) sizes it to a bucket of the longest row.

The lower-level `prefill` (append a block to a live cache) and `decode` are what the multi-turn
rollout engine reuses (through `DecodeSession`): after a tool result it appends only the new tokens,
then decodes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from rcgrpo_jax import models, multihost, sharding
from rcgrpo_jax.models import ModelConfig
from rcgrpo_jax.sampling import decode_step
from rcgrpo_jax.sampling.decode_step import DecodeCache
from rcgrpo_jax.sampling.next_token import SamplingParams, sample
from rcgrpo_jax.sampling.state import DecodeOutput, DecodeState

PAD_ID = 0  # fed for padding and for rows that are not live; their writes are dropped


@dataclasses.dataclass(frozen=True)
class Sampler:
    """Static settings of the jitted prefill/decode.

    max_new_tokens: static size of the decode buffers (per-row budgets may be smaller).
    prefill_chunk: the widest block one prefill call takes (`DecodeSession` splits longer deltas into
      pieces of it, which bounds the [T, S] attention scores of long BFCL prompts).
    kv_write: how a decode step writes its key/value (`decode_step.kv_write_for`; "auto" picks by backend
      and cache dtype). "footprint" makes every KV write of the sampler's and the session's programs an
      in-place write's memory without its values (`decode_step.footprint_write`): the dry run's memory plan
      compiles them so, and a program traced with it is its own (the Sampler is a static argument).
    """

    config: ModelConfig
    max_new_tokens: int
    sampling: SamplingParams = SamplingParams()
    prefill_chunk: int = 512
    kv_write: str = "auto"

    def prefill(self, params, tokens, counts, cache: DecodeCache) -> tuple[jax.Array, DecodeCache]:
        """Append tokens [B, T] to the cache, row b's first counts[b] of them (the rest is padding) at its
        own length; returns the logits after each row's last appended token [B, V] f32 (rows with counts 0:
        meaningless) and the cache. The caller keeps lengths + counts <= cache.span."""
        return prefill_jit(self, params, tokens, counts, cache)

    def decode(self, params, logits, cache: DecodeCache, stop_ids, budgets, rng) -> DecodeOutput:
        """Sample up to min(budgets[i], max_new_tokens) tokens per row from `logits` onward, each row writing
        at its own length. The caller keeps lengths + budgets <= cache.span (the span every step attends
        over)."""
        return decode_jit(self, params, logits, cache, stop_ids, budgets, rng)


def logits_last(config: ModelConfig, params, hidden_last: jax.Array) -> jax.Array:
    """The next-token logits [B, V] f32 of final-normed hidden states [B, D] (the output embedding)."""
    emb = models.output_embedding(config, params)
    return jnp.dot(hidden_last, emb.astype(hidden_last.dtype), preferred_element_type=jnp.float32)


def prefill_impl(s: Sampler, params, tokens, counts, cache):
    """`Sampler.prefill`'s program, unjitted: (logits [B, V] f32, cache)."""
    weights = decode_step.layer_weights(params)
    counts = counts.astype(jnp.int32)
    write = decode_step.block_write(s.kv_write)
    hidden, cache = decode_step.forward(s.config, weights, cache, tokens.astype(jnp.int32), counts, write)
    last = jnp.take_along_axis(hidden, jnp.maximum(counts - 1, 0)[:, None, None], axis=1)[:, 0]
    return logits_last(s.config, weights, last), cache


prefill_jit = jax.jit(prefill_impl, static_argnums=0, donate_argnums=(4,))


def decode_impl(s: Sampler, params, logits, cache, stop_ids, budgets, rng) -> DecodeOutput:
    """`Sampler.decode`'s program, unjitted (the while_loop over `DecodeState`)."""
    config, n = s.config, s.max_new_tokens
    write = decode_step.kv_write_for(s.kv_write, dtype=cache.v[0].dtype)
    batch = logits.shape[0]
    budgets = jnp.minimum(budgets.astype(jnp.int32), n)
    weights = decode_step.layer_weights(params)  # per-layer already when given `decode_weights`
    init = DecodeState(
        step=jnp.zeros((), jnp.int32),
        done=budgets <= 0,
        stopped=jnp.zeros((batch,), bool),
        logits=logits.astype(jnp.float32),
        tokens=jnp.full((batch, n), PAD_ID, jnp.int32),
        logprobs=jnp.zeros((batch, n), jnp.float32),
        lengths=jnp.zeros((batch,), jnp.int32),
        budgets=budgets,
        stop_ids=stop_ids.astype(jnp.int32),
        cache=cache,
        rng=rng,
    )

    def cond(st: DecodeState):
        return (st.step < n) & ~jnp.all(st.done)

    def body(st: DecodeState):
        rng, key = jax.random.split(st.rng)
        tok, lp = sample(st.logits, key, s.sampling)
        live = ~st.done
        tok = jnp.where(live, tok, PAD_ID)
        lp = jnp.where(live, lp, 0.0)
        lengths = st.lengths + live
        hit_stop = live & jnp.any(tok[:, None] == st.stop_ids, axis=-1)
        # The sampled token goes into the cache even when it ends the row: the engine appends after it.
        hidden, kv = decode_step.forward(config, weights, st.cache, tok[:, None], live.astype(jnp.int32), write)
        return st.replace(
            step=st.step + 1,
            done=st.done | hit_stop | (lengths >= st.budgets),
            stopped=st.stopped | hit_stop,
            logits=jnp.where(live[:, None], logits_last(config, weights, hidden[:, 0]), st.logits),
            tokens=jax.lax.dynamic_update_slice(st.tokens, tok[:, None], (0, st.step)),
            logprobs=jax.lax.dynamic_update_slice(st.logprobs, lp[:, None], (0, st.step)),
            lengths=lengths,
            cache=kv,
            rng=rng,
        )

    st = jax.lax.while_loop(cond, body, init)
    return DecodeOutput(
        tokens=st.tokens,
        logprobs=st.logprobs,
        lengths=st.lengths,
        stopped=st.stopped,
        logits=st.logits,
        cache=st.cache,
    )


decode_jit = jax.jit(decode_impl, static_argnums=0, donate_argnums=(3,))


# ----------------------------------------------------------------------------- host-side helpers


def right_pad(seqs: Sequence[Sequence[int]], width: int, rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Token lists as a right-padded numpy block [rows, width] int32 and their counts [rows] int32."""
    rows = len(seqs) if rows is None else rows
    tokens = np.full((rows, width), PAD_ID, np.int32)
    counts = np.zeros((rows,), np.int32)
    for i, seq in enumerate(seqs):
        k = len(seq)
        if k > width:
            raise ValueError(f"sequence of {k} tokens does not fit a block of {width}")
        tokens[i, :k] = seq
        counts[i] = k
    return tokens, counts


def stop_table(stop_token_ids, rows: int) -> np.ndarray:
    """[rows, K] int32 table from one shared tuple or one tuple per row (-1 = unused)."""
    per_row = stop_token_ids and isinstance(next(iter(stop_token_ids)), (list, tuple))
    lists = [tuple(x) for x in stop_token_ids] if per_row else [tuple(stop_token_ids)] * rows
    lists += [()] * (rows - len(lists))
    width = max(1, max(len(x) for x in lists))
    table = np.full((rows, width), -1, np.int32)
    for i, ids in enumerate(lists):
        table[i, : len(ids)] = ids
    return table


def cache_sharding(config: ModelConfig, mesh: Mesh, layout: str = "xla") -> DecodeCache:
    """Shardings of a DecodeCache: rows over data+fsdp, kv heads over tensor when they divide."""
    return decode_step.cache_sharding(config, mesh, sharding.BATCH_AXES, layout)


@functools.lru_cache(maxsize=64)
def _cache_maker(config: ModelConfig, rows: int, span: int, mesh: Mesh | None, layout: str):
    make = functools.partial(decode_step.init_cache, config, rows, span, layout=layout)
    if mesh is None:
        return jax.jit(make)
    return jax.jit(make, out_shardings=cache_sharding(config, mesh, layout))


def new_cache(config: ModelConfig, rows: int, span: int, mesh: Mesh | None = None, layout: str = "xla") -> DecodeCache:
    """An empty cache of `span` slots per row in `layout` ("xla" | "ragged": `decode_step.DecodeCache`),
    created directly on its sharding when a mesh is given (one compilation per shape: the jitted maker
    is cached)."""
    return _cache_maker(config, rows, span, mesh, layout)()


def put_batch(x, mesh: Mesh | None):
    """Place a host array with its leading (batch) axis split over data+fsdp."""
    if mesh is None:
        return jnp.asarray(x)
    return multihost.place(x, sharding.batch_sharding(mesh, np.ndim(x)))


def batch_multiple(mesh: Mesh | None) -> int:
    if mesh is None:
        return 1
    return int(np.prod([mesh.shape.get(a, 1) for a in sharding.BATCH_AXES]))


@contextlib.contextmanager
def mesh_context(mesh: Mesh | None, rules: sharding.Rules = sharding.DECODE_RULES):
    """Enter the mesh and the activation logical-axis rules (nothing without a mesh)."""
    if mesh is None:
        yield
        return
    with jax.set_mesh(mesh), sharding.axis_rules(rules.logical):
        yield
