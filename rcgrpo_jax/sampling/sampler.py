"""Jitted prefill and decode over an explicit KV cache, and `generate()` on top of them.

Design (after gemma's sampler): `Sampler` is a frozen dataclass of static settings and the static
self of the jitted functions; the decode loop is one `lax.while_loop` over a `DecodeState` that
runs until every row is done or the static budget is spent. Prompts are LEFT-padded so every row
shares the cache's next write slot; padding is written but marked invalid, and positions are
explicit, so holes in the cache cost nothing but space. Caches are donated.

The lower-level `prefill` (append a left-padded block to a live cache) and `decode` are what the
multi-turn rollout engine reuses: after a tool result it appends only the new tokens, then decodes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from rcgrpo_jax import models, multihost, sharding
from rcgrpo_jax.models import KVCache, ModelConfig
from rcgrpo_jax.sampling import buckets, decode_step
from rcgrpo_jax.sampling.sample_fns import SamplingParams, sample
from rcgrpo_jax.sampling.state import DecodeOutput, DecodeState

PAD_ID = 0  # written into masked slots only; never attended to


@dataclasses.dataclass(frozen=True)
class Sampler:
    """Static settings of the jitted prefill/decode.

    max_new_tokens: static size of the decode buffers (per-row budgets may be smaller).
    prefill_chunk: prompts longer than this are prefilled in chunks of it (bounds the [T, S]
      attention scores of long BFCL prompts); a block is chunked only when its length is a multiple.
    """

    config: ModelConfig
    max_new_tokens: int
    sampling: SamplingParams = SamplingParams()
    prefill_chunk: int = 512

    def prefill(self, params, tokens, positions, token_mask, cache: KVCache) -> tuple[jax.Array, KVCache]:
        """Append a left-padded block [B, T] to the cache; returns last-column logits [B, V] f32."""
        return _prefill(self, params, tokens, positions, token_mask, cache)

    def decode(
        self, params, logits, positions, cache: KVCache, stop_ids, budgets, rng, span: int | None = None
    ) -> DecodeOutput:
        """Sample up to min(budgets[i], max_new_tokens) tokens per row from `logits` onward.

        span: static number of leading cache slots the loop works on (attends over); the caller
        guarantees index + max_new_tokens <= span. None = the whole cache.
        """
        span = cache.max_len if span is None else min(int(span), cache.max_len)
        return _decode(self, span, params, logits, positions, cache, stop_ids, budgets, rng)


def _logits_last(config: ModelConfig, params, hidden_last: jax.Array) -> jax.Array:
    emb = models.output_embedding(config, params)
    return jnp.dot(hidden_last, emb.astype(hidden_last.dtype), preferred_element_type=jnp.float32)


def _prefill_impl(s: Sampler, params, tokens, positions, token_mask, cache):
    config = s.config
    batch, length = tokens.shape
    chunk = s.prefill_chunk
    if length > chunk and length % chunk == 0:
        n = length // chunk
        split = lambda x: jnp.moveaxis(x.reshape(batch, n, chunk), 1, 0)

        def step(c, xs):
            t, p, m = xs
            h, c = models.forward(config, params, t, p, m, c, return_hidden=True)
            return c, h[:, -1]

        cache, last = jax.lax.scan(step, cache, (split(tokens), split(positions), split(token_mask)))
        hidden_last = last[-1]
    else:
        hidden, cache = models.forward(config, params, tokens, positions, token_mask, cache, return_hidden=True)
        hidden_last = hidden[:, -1]
    return _logits_last(config, params, hidden_last), cache


_prefill = jax.jit(_prefill_impl, static_argnums=0, donate_argnums=(5,))


def _decode_impl(s: Sampler, span: int, params, logits, positions, cache, stop_ids, budgets, rng) -> DecodeOutput:
    config, n = s.config, s.max_new_tokens
    batch = logits.shape[0]
    budgets = jnp.minimum(budgets.astype(jnp.int32), n)
    # Re-lay out weights and cache once per call, outside the loop (see decode_step's docstring).
    weights = decode_step.prepare_weights(params)
    init = DecodeState(
        step=jnp.zeros((), jnp.int32),
        done=budgets <= 0,
        stopped=jnp.zeros((batch,), bool),
        positions=positions.astype(jnp.int32),
        logits=logits.astype(jnp.float32),
        tokens=jnp.full((batch, n), PAD_ID, jnp.int32),
        logprobs=jnp.zeros((batch, n), jnp.float32),
        lengths=jnp.zeros((batch,), jnp.int32),
        budgets=budgets,
        stop_ids=stop_ids.astype(jnp.int32),
        cache=decode_step.prepare_kv(cache, span),
        rng=rng,
        index=cache.index,
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
        hidden, kv = decode_step.step(
            config, weights, st.cache, tok[:, None], st.positions[:, None], live[:, None], st.index
        )
        return st.replace(
            step=st.step + 1,
            done=st.done | hit_stop | (lengths >= st.budgets),
            stopped=st.stopped | hit_stop,
            positions=st.positions + live,
            logits=jnp.where(live[:, None], _logits_last(config, params, hidden), st.logits),
            tokens=jax.lax.dynamic_update_slice(st.tokens, tok[:, None], (0, st.step)),
            logprobs=jax.lax.dynamic_update_slice(st.logprobs, lp[:, None], (0, st.step)),
            lengths=lengths,
            cache=kv,
            rng=rng,
            index=st.index + 1,
        )

    st = jax.lax.while_loop(cond, body, init)
    return DecodeOutput(
        tokens=st.tokens,
        logprobs=st.logprobs,
        lengths=st.lengths,
        stopped=st.stopped,
        positions=st.positions,
        logits=st.logits,
        cache=decode_step.restore(cache, st.cache, st.index),
    )


_decode = jax.jit(_decode_impl, static_argnums=(0, 1), donate_argnums=(5,))


# ----------------------------------------------------------------------------- host-side helpers


def left_pad(seqs: Sequence[Sequence[int]], length: int, rows: int | None = None, start_positions=None):
    """Left-pad token lists into numpy (tokens, positions, mask) of shape [rows, length].

    Positions continue from `start_positions[i]` (default 0) over the real tokens only.
    """
    rows = len(seqs) if rows is None else rows
    tokens = np.full((rows, length), PAD_ID, np.int32)
    mask = np.zeros((rows, length), bool)
    positions = np.zeros((rows, length), np.int32)
    for i, seq in enumerate(seqs):
        k = len(seq)
        if k > length:
            raise ValueError(f"sequence of {k} tokens does not fit a block of {length}")
        if k:
            tokens[i, length - k :] = seq
            mask[i, length - k :] = True
        start = 0 if start_positions is None else int(start_positions[i])
        positions[i, length - k :] = start + np.arange(k)
        positions[i, : length - k] = start
    return tokens, positions, mask


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


def cache_sharding(config: ModelConfig, mesh: Mesh) -> KVCache:
    """Shardings for a KVCache: batch over data+fsdp, kv heads over tensor when they divide."""
    heads = "tensor" if config.num_kv_heads % mesh.shape.get("tensor", 1) == 0 else None
    kv = NamedSharding(mesh, P(None, sharding.BATCH_AXES, None, heads, None))
    return KVCache(k=kv, v=kv, mask=NamedSharding(mesh, P(sharding.BATCH_AXES, None)), index=NamedSharding(mesh, P()))


@functools.lru_cache(maxsize=64)
def _cache_maker(config: ModelConfig, batch: int, length: int, mesh: Mesh | None):
    make = functools.partial(models.init_cache, config, batch, length)
    if mesh is None:
        return jax.jit(make)
    return jax.jit(make, out_shardings=cache_sharding(config, mesh))


def new_cache(config: ModelConfig, batch: int, length: int, mesh: Mesh | None = None) -> KVCache:
    """An empty cache, created directly on its sharding when a mesh is given (one compilation per
    shape: the jitted maker is cached)."""
    return _cache_maker(config, batch, length, mesh)()


def put_batch(x, mesh: Mesh | None):
    """Place a host array with its leading (batch) axis split over data+fsdp."""
    if mesh is None:
        return jnp.asarray(x)
    return multihost.place(x, sharding.batch_sharding(mesh, np.ndim(x)))


def batch_multiple(mesh: Mesh | None) -> int:
    if mesh is None:
        return 1
    return int(np.prod([mesh.shape.get(a, 1) for a in sharding.BATCH_AXES]))


@dataclasses.dataclass
class GenerateResult:
    """Per prompt: generated ids (stop token included when hit), their log-probs, and whether it stopped."""

    tokens: list[list[int]]
    logprobs: list[np.ndarray]
    lengths: list[int]
    stopped: list[bool]


def generate(
    config: ModelConfig,
    params,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    stop_token_ids=(),
    rng: jax.Array | None = None,
    mesh: Mesh | None = None,
    rules: sharding.Rules = sharding.DECODE_RULES,
    prefill_chunk: int = 512,
) -> GenerateResult:
    """Sample continuations of a batch of token-id prompts (of any lengths).

    stop_token_ids: one tuple for all prompts, or one tuple per prompt. rng: a PRNG key (needed
    only when temperature > 0; defaults to key 0). With a mesh, the batch is split over data+fsdp,
    activations follow `rules.logical`, and params are used with the sharding they already carry
    (place them with `sharding.shard_params(params, mesh, rules)`).
    """
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("generate needs at least one prompt and no empty prompt")
    rows = buckets.batch_bucket(len(prompts), batch_multiple(mesh))
    length = buckets.length_bucket(max(len(p) for p in prompts))
    if length > prefill_chunk:
        length = -(-length // prefill_chunk) * prefill_chunk
    budget = buckets.length_bucket(max_new_tokens)
    sampler = Sampler(config, budget, SamplingParams(temperature, top_k, top_p), prefill_chunk)
    tokens, positions, mask = left_pad(prompts, length, rows)
    budgets = np.zeros((rows,), np.int32)
    budgets[: len(prompts)] = max_new_tokens
    next_pos = np.array([len(p) for p in prompts] + [0] * (rows - len(prompts)), np.int32)
    rng = jax.random.key(0) if rng is None else rng

    with mesh_context(mesh, rules):
        cache = new_cache(config, rows, length + budget, mesh)
        logits, cache = sampler.prefill(
            params, put_batch(tokens, mesh), put_batch(positions, mesh), put_batch(mask, mesh), cache
        )
        out = sampler.decode(
            params,
            logits,
            put_batch(next_pos, mesh),
            cache,
            put_batch(stop_table(stop_token_ids, rows), mesh),
            put_batch(budgets, mesh),
            rng,
        )
        toks, lps, lens, stopped = multihost.gather((out.tokens, out.logprobs, out.lengths, out.stopped))
    n = len(prompts)
    return GenerateResult(
        tokens=[toks[i, : lens[i]].tolist() for i in range(n)],
        logprobs=[lps[i, : lens[i]] for i in range(n)],
        lengths=[int(x) for x in lens[:n]],
        stopped=[bool(x) for x in stopped[:n]],
    )


@contextlib.contextmanager
def mesh_context(mesh: Mesh | None, rules: sharding.Rules = sharding.DECODE_RULES):
    """Enter the mesh and the activation logical-axis rules (nothing without a mesh)."""
    if mesh is None:
        yield
        return
    with jax.set_mesh(mesh), sharding.axis_rules(rules.logical):
        yield
