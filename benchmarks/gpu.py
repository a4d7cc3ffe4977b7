"""The accelerator check: decode throughput and RL-update MFU of a Qwen2.5-1.5B-shaped model, random init.

    PYTHONPATH=$PWD python3 -m benchmarks.gpu            # one H200 (launch/gpu_check.sh)
    python -m benchmarks.gpu --tiny                      # tiny shapes on CPU (tests/bench)

Everything runs through the package's own code paths: `rcgrpo_jax.models`, `sampling.Sampler` (jitted
prefill, then the while_loop decode), the RL trainer's micro-batch gradient and guarded apply (`train.rl_step`:
"ppo_clip" with the RC-GRPO KL penalty over chunked token log-probs), AdamW (`train.optim`), per-layer remat.

One JSON line per measurement, each guarded (a failure prints an "error" row and the rest still run): a
"machine" row (backend, device, the peaks the fractions divide by), then, most wanted first (a row not started
by --deadline-s is reported as skipped), attention, ragged_decode, packed_attention, rl_step, prod_decode, decode:
  decode    per batch size: prefill and decode times (compilation apart), decode tok/s, fraction of the HBM bound
  prod_decode  Qwen2.5-7B-shaped, 40 rows (rc_grpo's 160 over 4 batch shards) each reading an 8k-slot span,
            64 tokens: tok/s, fraction of the HBM bound, peak memory
  ragged_decode  prod_decode's shapes with rows of different lengths, on both decode attentions
            (`sampling.decode_step`, "xla" and "ragged"): tok/s, KV slots read, HBM fraction, log-prob difference
  packed_attention  the packed append's block pairs against dense attention over the span on one row shard
            (`bench_packed_attention`): times, pairs computed, the pairs' TFLOP/s, largest difference
  rl_step   one update step on [batch, seq] tokens: step time, tokens/s, model FLOPs, MFU against the bf16 peak
  attention (with --attention) per length (4k, 16k): a Qwen2.5-7B-shaped causal attention layer through
            `models.attention`, XLA path against cuDNN's fused kernel (`fused_impl` says which ran): forward
            and forward+backward times, largest relative differences.
What each row measures exactly, and the expected time of each on one H200: docs/gpu.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import time
from typing import Any

from benchmarks import common, model_sizes
from rcgrpo_jax import hardware, models
from rcgrpo_jax.models import ModelConfig, attention
from rcgrpo_jax.models.cache import attention_mask
from rcgrpo_jax.sampling import (
    Sampler,
    SamplingParams,
    block_attention,
    decode_step,
    decode_weights,
    new_cache,
    packed_append,
    stop_table,
)
from rcgrpo_jax.sampling import decode_loop as sampler_mod
from rcgrpo_jax.sampling.decode_step import DecodeCache
from rcgrpo_jax.train import optim as optim_lib
from rcgrpo_jax.train import rl_step
from rcgrpo_jax.train import state as state_lib
from rcgrpo_jax.train.rl_batch import RolloutBatch


def model_config(shape: str, *, param_dtype: str, dtype: str, remat: bool) -> ModelConfig:
    """Our decoder's config of `model_sizes.MODELS[shape]` at these dtypes and remat."""
    config = ModelConfig.from_hf(model_sizes.MODELS[shape])
    return dataclasses.replace(config, param_dtype=param_dtype, dtype=dtype, remat=remat)


def attention_heads(shape: str) -> tuple[int, int, int]:
    """(query heads, KV heads, head_dim) of `model_sizes.MODELS[shape]`."""
    c = ModelConfig.from_hf(model_sizes.MODELS[shape])
    return c.num_heads, c.num_kv_heads, c.head_dim


@dataclasses.dataclass(frozen=True)
class Plan:
    """What to measure (`shape`, `prod_shape`: `model_sizes.MODELS` names); `--tiny` swaps in shapes a CPU
    finishes in seconds."""

    shape: str = "qwen2.5-1.5b"
    decode_batches: tuple[int, ...] = (64,)  # the last row; --decode-batches 1,16,64 for the sweep
    prompt: int = 128
    new_tokens: int = 128
    rl_batch: int = 8
    rl_seq: int = 4096
    logprob_chunk: int = 8192
    repeats: int = 3
    deadline_s: float = 420.0  # measurements not started by then are reported as skipped
    attn_seqs: tuple[int, ...] = (4096, 16384)
    # Qwen2.5-7B's: query heads, KV heads, head_dim
    attn_heads: tuple[int, int, int] = attention_heads("qwen2.5-7b")
    # The production decode (configs/rc_grpo.py:qwen2_5_7b): 160 rows over 4 batch shards = 40 rows per
    # device, each row reading an 8k-slot span (the mean of BFCL's 2k-16k contexts), bf16 weights and cache.
    # One H200 holds the whole model (the production mesh splits it over tensor=2: half the weight bytes).
    prod_shape: str = "qwen2.5-7b"
    prod_rows: int = 40
    prod_span: int = 8192
    prod_new: int = 64
    # The packed append's attention on one row shard of the production decode (`sampling.packed_append`):
    # packed_rows of its prod_rows rows get packed_tokens each (a tool output), over that span.
    packed_rows: int = 16
    packed_tokens: int = 96


TINY = Plan(
    shape="gpu_tiny",
    prompt=16,
    new_tokens=8,
    rl_batch=2,
    rl_seq=64,
    logprob_chunk=128,
    repeats=1,
    attn_seqs=(64, 128),
    attn_heads=attention_heads("gpu_tiny"),
    prod_shape="gpu_tiny",
    prod_rows=8,
    prod_span=256,  # two 128-slot kernel blocks: the ragged row's rows read one or two
    prod_new=8,
    packed_rows=4,
    packed_tokens=40,
)


def tree_bytes(tree) -> int:
    import jax

    return sum(int(x.size) * x.dtype.itemsize for x in jax.tree.leaves(tree))


def peak_memory_gb() -> float | None:
    import jax

    try:
        stats = jax.devices()[0].memory_stats() or {}
    except Exception:  # noqa: BLE001 - CPU devices do not report
        return None
    peak = stats.get("peak_bytes_in_use")
    return peak / 1e9 if peak else None


# ------------------------------------------------------------------------------------------- decode


def bench_decode(config, params, batch: int, plan: Plan, hbm_bw: float) -> dict[str, Any]:
    """Prefill `plan.prompt` random tokens per row, then decode `plan.new_tokens` at temperature 1
    (no stop tokens, so every row runs the full budget); both phases timed apart, medians of repeats."""
    import jax
    import numpy as np

    sampler = Sampler(config, plan.new_tokens, SamplingParams(temperature=1.0))
    rng = np.random.default_rng(batch)
    tokens = jax.numpy.asarray(rng.integers(1, config.vocab_size, (batch, plan.prompt)), jax.numpy.int32)
    counts = jax.numpy.full((batch,), plan.prompt, jax.numpy.int32)
    stops = jax.numpy.asarray(stop_table((), batch))
    budgets = jax.numpy.full((batch,), plan.new_tokens, jax.numpy.int32)

    def once(seed: int) -> tuple[float, float]:
        cache = jax.block_until_ready(new_cache(config, batch, plan.prompt + plan.new_tokens))
        t0 = time.perf_counter()
        logits, cache = jax.block_until_ready(sampler.prefill(params, tokens, counts, cache))
        t1 = time.perf_counter()
        out = sampler.decode(params, logits, cache, stops, budgets, jax.random.key(seed))
        jax.block_until_ready(out.tokens)
        t2 = time.perf_counter()
        assert int(out.lengths.min()) == plan.new_tokens, "a row stopped early"
        return t1 - t0, t2 - t1

    t = time.perf_counter()
    once(0)  # compiles prefill and decode
    compile_s = time.perf_counter() - t
    runs = [once(i + 1) for i in range(plan.repeats)]
    prefill_s = sorted(r[0] for r in runs)[len(runs) // 2]
    decode_s = sorted(r[1] for r in runs)[len(runs) // 2]
    weights = tree_bytes(params)
    kv_itemsize = jax.numpy.dtype(config.dtype).itemsize
    step_bytes = common.decode_step_bytes(weights, config, batch, plan.prompt + plan.new_tokens // 2, kv_itemsize)
    step_s = decode_s / plan.new_tokens
    return {
        "batch": batch,
        "prompt": plan.prompt,
        "new_tokens": plan.new_tokens,
        "first_call_s": compile_s,
        "prefill_s": prefill_s,
        "prefill_tok_s": batch * plan.prompt / prefill_s,
        "decode_s": decode_s,
        "decode_step_ms": step_s * 1e3,
        "decode_tok_s": batch * plan.new_tokens / decode_s,
        "weight_bytes": weights,
        "bytes_per_step": step_bytes,
        "achieved_bytes_s": step_bytes / step_s,
        "hbm_bound_fraction": step_bytes / step_s / hbm_bw,
    }


def production_model(plan: Plan, holder: dict[str, Any]):
    """(config, bf16 decode weights split once, init seconds) of the production decode rows, made once
    and kept in `holder` (the prod_decode and ragged_decode rows share them)."""
    import jax
    import jax.numpy as jnp

    if "prod" not in holder:
        config = model_config(plan.prod_shape, param_dtype="bfloat16", dtype="bfloat16", remat=False)
        t = time.perf_counter()
        params = decode_weights(models.init_params(config, jax.random.key(0)), jnp.bfloat16)
        params = jax.block_until_ready(params)
        holder["prod"] = (config, params, time.perf_counter() - t)
    return holder["prod"]


def bench_production_decode(plan: Plan, hbm_bw: float, holder: dict[str, Any] | None = None) -> dict[str, Any]:
    """The production decode step: `plan.prod_rows` rows whose cache already holds span - new tokens
    (no prefill: a decode step's bytes do not depend on the values), `plan.prod_new` tokens sampled at
    temperature 1 through the session's own decode program, bf16 weights split once (`decode_weights`).
    Bytes per step = every weight once + the whole span of every row (what the dense decode reads)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    config, params, init_s = production_model(plan, {} if holder is None else holder)
    rows, span, new = plan.prod_rows, plan.prod_span, plan.prod_new
    sampler = Sampler(config, new, SamplingParams(temperature=1.0))
    stops = jnp.asarray(stop_table((), rows))
    budgets = jnp.full((rows,), new, jnp.int32)
    logits = jnp.asarray(np.random.default_rng(0).standard_normal((rows, config.vocab_size)), jnp.float32)

    def once(seed: int) -> float:
        empty = new_cache(config, rows, span)
        cache = empty.replace(lengths=jnp.full((rows,), span - new, jnp.int32))
        jax.block_until_ready(cache)
        t0 = time.perf_counter()
        out = sampler.decode(params, logits, cache, stops, budgets, jax.random.key(seed))
        jax.block_until_ready(out.tokens)
        assert int(np.min(np.asarray(out.lengths))) == new, "a row stopped early"
        return time.perf_counter() - t0

    t = time.perf_counter()
    once(0)
    compile_s = time.perf_counter() - t
    decode_s = sorted(once(i + 1) for i in range(plan.repeats))[plan.repeats // 2]
    weights = tree_bytes(params)
    step_bytes = common.decode_step_bytes(weights, config, rows, span, 2)
    step_s = decode_s / new
    return {
        "shape": plan.prod_shape,
        "rows": rows,
        "span": span,
        "new_tokens": new,
        "init_s": init_s,
        "first_call_s": compile_s,
        "decode_s": decode_s,
        "decode_step_ms": step_s * 1e3,
        "decode_tok_s": rows * new / decode_s,
        "weight_bytes": weights,
        "bytes_per_step": step_bytes,
        "hbm_bound_fraction": step_bytes / step_s / hbm_bw,
        "peak_memory_gb": peak_memory_gb(),
    }


@functools.lru_cache(maxsize=4)
def _random_cache_maker(config, rows: int, span: int, layout: str):
    import jax
    import jax.numpy as jnp

    g, dh = config.num_kv_heads, config.head_dim

    def make(key, lengths):
        ks, vs = [], []
        for i in range(config.num_layers):
            k_key, v_key = jax.random.split(jax.random.fold_in(key, i))
            k = jax.random.normal(k_key, (rows, g, span, dh), jnp.bfloat16)
            ks.append(jnp.swapaxes(k, 2, 3) if layout == "xla" else k)
            vs.append(jax.random.normal(v_key, (rows, g, span, dh), jnp.bfloat16))
        return DecodeCache(k=tuple(ks), v=tuple(vs), lengths=lengths.astype(jnp.int32), layout=layout)

    return jax.jit(make)


def random_cache(config, rows: int, span: int, lengths, layout: str, seed: int):
    """A `DecodeCache` of `layout` whose every slot holds standard-normal keys and values (bf16), the same
    values whatever the layout for one seed, rows holding `lengths` tokens (one compilation per shape)."""
    import jax
    import jax.numpy as jnp

    return _random_cache_maker(config, rows, span, layout)(jax.random.key(seed), jnp.asarray(lengths))


def cache_sized_ops(hlo_text: str, dims: tuple[int, ...]) -> dict[str, int]:
    """Opcode -> count of the HLO instructions (compiled text) whose array result has `dims` in any order,
    parameters, get-tuple-element and bitcasts aside."""
    import collections
    import re

    want = sorted(dims)
    ops: collections.Counter = collections.Counter()
    for shape, opcode in re.findall(r"= \w+\[([\d,]+)\](?:\{[^}]*\})? ([\w-]+)\(", hlo_text):
        if sorted(int(d) for d in shape.split(",")) == want and opcode not in (
            "parameter",
            "get-tuple-element",
            "bitcast",
        ):
            ops[opcode] += 1
    return dict(sorted(ops.items()))


def bench_ragged_decode(plan: Plan, hbm_bw: float, holder: dict[str, Any] | None = None) -> dict[str, Any]:
    """The production decode row's shapes (`plan.prod_rows` rows, span `plan.prod_span`, `plan.prod_new`
    tokens at temperature 1, bf16) with rows of different lengths, spread evenly over [span / 8, span - new],
    on the "xla" and the "ragged" decode attention (`sampling.decode_step`), each from a random cache in
    its own layout (the same values) and the same key. Medians of `plan.repeats` after a warm-up call.

    KV slots read per step: xla rows x span; ragged sum_b roundup(len_b + 1, block_k) (the kernel skips
    the blocks past a row's length), averaged over the call's steps. Bytes per step = every weight once
    + those slots (K and V, all layers, bf16). max_rel_diff_logprobs: max |ragged - xla| over the tokens
    both paths sampled alike (each row up to its first differing token), over the largest |log-prob|.
    {path}_cache_sized_ops: the opcodes (and counts) of the compiled decode program's instructions whose
    result has one cache layer's size in any axis order (a copy or transpose there is a per-step re-layout
    or copy of the cache; in-place writes show as scatter / dynamic-update-slice or fusions). Both paths
    write the cache with a scatter, the GPU's write, on every backend."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    config, params, init_s = production_model(plan, {} if holder is None else holder)
    rows, span, new = plan.prod_rows, plan.prod_span, plan.prod_new
    lengths = np.linspace(span // 8, span - new, rows).astype(np.int32)
    # The GPU's cache write ("scatter", what kv_write="auto" picks there) on every backend, so the compiled
    # program is the GPU's. (The CPU's bf16 "select" write gets 4 cache-sized copies from jax 0.11's XLA CPU:
    # the select is fused into both the carried cache and the interpreted kernel's read of it, one fusion
    # writes the loop buffer in place, so copy insertion copies the buffer first. No copy with scatter.)
    sampler = Sampler(config, new, SamplingParams(temperature=1.0), kv_write="scatter")
    stops = jnp.asarray(stop_table((), rows))
    budgets = jnp.full((rows,), new, jnp.int32)
    logits = jnp.asarray(np.random.default_rng(0).standard_normal((rows, config.vocab_size)), jnp.float32)
    block = (decode_step.ragged_blocks(span) or (span, 1))[0]
    steps = np.arange(1, new + 1)
    slots_read = {
        "xla": rows * span,
        "ragged": float(np.mean([np.sum(-(-(lengths + t) // block) * block) for t in steps])),
    }
    slot_bytes = 2 * config.num_layers * config.num_kv_heads * config.head_dim * 2
    weights = tree_bytes(params)
    row: dict[str, Any] = {
        "shape": plan.prod_shape,
        "rows": rows,
        "span": span,
        "new_tokens": new,
        "mean_length": float(lengths.mean()),
        "block_k": block,
        "init_s": init_s,
        "backend": jax.default_backend(),
        "ragged_interpret": jax.default_backend().lower() not in decode_step.GPU_BACKENDS,
    }
    useful = rows * (float(np.mean(lengths)) + (new + 1) / 2)  # per step: each row's slots, its new token's included
    row["kv_read_utilisation_xla"] = useful / slots_read["xla"]
    row["kv_read_utilisation_ragged"] = useful / slots_read["ragged"]
    outs = {}
    for path in ("xla", "ragged"):
        t = time.perf_counter()
        example = random_cache(config, rows, span, lengths, path, 7)
        compiled = sampler_mod.decode_jit.lower(sampler, params, logits, example, stops, budgets, jax.random.key(0))
        compiled = compiled.compile()
        del example
        row[f"{path}_compile_s"] = time.perf_counter() - t
        dims = (rows, config.num_kv_heads, span, config.head_dim)
        row[f"{path}_cache_sized_ops"] = cache_sized_ops(compiled.as_text(), dims)

        def once(seed: int, path=path, compiled=compiled):
            cache = jax.block_until_ready(random_cache(config, rows, span, lengths, path, 7))
            t0 = time.perf_counter()
            out = compiled(params, logits, cache, stops, budgets, jax.random.key(seed))
            jax.block_until_ready(out.tokens)
            assert int(np.min(np.asarray(out.lengths))) == new, "a row stopped early"
            return time.perf_counter() - t0, out

        t = time.perf_counter()
        _, first = once(0)
        row[f"{path}_first_call_s"] = time.perf_counter() - t
        outs[path] = jax.device_get((first.tokens, first.logprobs))
        decode_s = sorted(once(i + 1)[0] for i in range(plan.repeats))[plan.repeats // 2]
        step_s = decode_s / new
        step_bytes = weights + slots_read[path] * slot_bytes
        row.update(
            {
                f"{path}_decode_s": decode_s,
                f"{path}_decode_step_ms": step_s * 1e3,
                f"{path}_decode_tok_s": rows * new / decode_s,
                f"{path}_kv_slots_read_per_step": slots_read[path],
                f"{path}_bytes_per_step": step_bytes,
                f"{path}_hbm_bound_fraction": step_bytes / step_s / hbm_bw,
            }
        )
    (tok_x, lp_x), (tok_r, lp_r) = outs["xla"], outs["ragged"]
    same = np.cumprod(tok_x == tok_r, axis=1).astype(bool)  # each row up to its first differing token
    row["tokens_alike"] = float(same.mean())
    row["max_rel_diff_logprobs"] = float(np.max(np.abs(lp_r - lp_x)[same]) / max(np.max(np.abs(lp_x)), 1e-30))
    row["ragged_speedup"] = row["xla_decode_s"] / row["ragged_decode_s"]
    row["weight_bytes"] = weights
    row["peak_memory_gb"] = peak_memory_gb()
    return row


# ------------------------------------------------------------------------------------------ RL step


def bench_packed_attention(plan: Plan) -> dict[str, Any]:
    """The packed append's attention on one row shard (`sampling.packed_append`), at the production decode's
    shapes: `plan.packed_rows` of `plan.prod_rows` rows get `plan.packed_tokens` tokens each after contexts
    spread evenly over [span / 8, span - tokens] of a `plan.prod_span`-slot cache (Qwen2.5-7B's heads, all on
    this device, bf16, the GPU's [rows, kv heads, slots, head dim] layout). Two ways over the same query
    blocks (`AppendForward.blocks`: 32 queries of one row each):

      pairs  `block_attention.attend` over the blocks' (block, key block) pairs (`AppendForward.pairs`):
             what the session runs
      dense  every block over its row's whole span, masked (the design before the pairs)

    Medians of `plan.repeats` after a warm-up call; (query, key) pairs each computes and the real ones (a
    token at slot p sees p + 1 keys); the pairs path's TFLOP/s over the pairs it computes and over the real
    ones (4 x heads x head_dim FLOPs a pair); the largest |pairs - dense| over real queries relative to the
    dense output's largest magnitude."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    n_heads, g, dh = plan.attn_heads
    r, w = n_heads // g, packed_append.BLOCK
    rows, span, count = plan.prod_rows, plan.prod_span, plan.packed_tokens
    stepping = list(range(0, rows, rows // plan.packed_rows))[: plan.packed_rows]
    bases = np.linspace(span // 8, span - count, len(stepping)).astype(int)
    fwd = packed_append.AppendForward(tuple(stepping), (count,) * len(stepping), tuple(int(b) for b in bases))
    bk = packed_append.key_block(span)
    (blocks,), (pairs,) = fwd.blocks(1, rows), fwd.pairs(1, rows, bk)
    k_blocks, p_size = fwd.blocks_per_shard(1, rows), fwd.pairs_per_shard(1, rows, bk)
    b_rows, _, b_count, b_start = (np.array([b[i] for b in blocks], np.int32) for i in range(4))
    t = np.arange(w)
    valid = t[None] < b_count[:, None]
    q_pos = np.full((k_blocks, w), -1, np.int32)
    q_pos[: len(blocks)] = np.where(valid, b_start[:, None] + t[None], -1)
    q_rows = np.full((k_blocks,), rows, np.int32)
    q_rows[: len(blocks)] = b_rows
    q_ids = np.repeat(q_rows[:, None], w, 1)
    pair_q, pair_src, pair_start = block_attention.pad_pairs(*np.asarray(pairs, np.int32).T, p_size, k_blocks)
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.standard_normal((k_blocks, w, g, r, dh), np.float32), jnp.bfloat16)
    k, v = (jnp.asarray(rng.standard_normal((rows, g, span, dh), np.float32), jnp.bfloat16) for _ in range(2))
    k_ids = np.repeat(np.arange(rows, dtype=np.int32)[:, None], span, 1)
    k_pos = np.repeat(np.arange(span, dtype=np.int32)[None], rows, 0)

    @jax.jit
    def by_pairs(q, k, v):
        return block_attention.attend(
            q, q_ids, q_pos, k, v, k_ids, k_pos, pair_q, pair_src, pair_start, block_k=bk, k_axis=2
        )

    @jax.jit
    def dense(q, k, v):
        row = jnp.minimum(jnp.asarray(q_rows), rows - 1)
        kb, vb = jnp.take(k, row, axis=0), jnp.take(v, row, axis=0)  # [K, G, S, Dh]
        s = jnp.einsum("bwgrd,bgsd->bgrws", q, kb, preferred_element_type=jnp.float32) / float(np.sqrt(dh))
        sees = jnp.arange(span)[None, None, :] <= jnp.asarray(q_pos)[:, :, None]  # [K, W, S]
        s = jnp.where(sees[:, None, None], s, -jnp.inf)
        p = jnp.where(sees[:, None, None], jax.nn.softmax(s, axis=-1), 0.0).astype(q.dtype)
        # The bf16 probabilities and values summed in float32, as the pairs and a GPU's bf16 dots do: jax 0.11's
        # CPU dot sums a bf16 x bf16 -> bf16 product in bf16 (0.026 of the magnitude off at a 256-slot span, the
        # pairs 0.002), and its CPU dot has no bf16 x bf16 -> f32 form here, so the operands are widened.
        f32 = jnp.float32
        return jnp.einsum("bgrws,bgsd->bwgrd", p.astype(f32), vb.astype(f32)).astype(q.dtype)

    row: dict[str, Any] = dict(
        rows=rows, span=span, stepping_rows=len(stepping), tokens_per_row=count, blocks=k_blocks, block_k=bk
    )
    out = {}
    for name, fn in (("pairs", by_pairs), ("dense", dense)):
        t0 = time.perf_counter()
        out[name] = jax.block_until_ready(fn(q, k, v))
        row[f"{name}_first_call_s"] = time.perf_counter() - t0
        sec, _ = common.time_call(lambda fn=fn: jax.block_until_ready(fn(q, k, v)), repeats=plan.repeats)
        row[f"{name}_ms"] = sec * 1e3
    per_pair = 4 * n_heads * dh
    real = int(sum(count * b + count * (count + 1) // 2 for b in bases))
    row.update(
        real_pairs=real,
        pairs_computed=p_size * w * bk,
        dense_pairs_computed=k_blocks * w * span,
        pairs_tflop_s=per_pair * p_size * w * bk / (row["pairs_ms"] / 1e3) / 1e12,
        pairs_real_tflop_s=per_pair * real / (row["pairs_ms"] / 1e3) / 1e12,
        speedup=row["dense_ms"] / row["pairs_ms"],
    )
    keep = jnp.asarray(q_pos >= 0)[:, :, None, None, None]
    ref = out["dense"].astype(jnp.float32)
    diff = float(jnp.max(jnp.where(keep, jnp.abs(out["pairs"].astype(jnp.float32) - ref), 0.0)))
    row["max_rel_diff"] = diff / max(float(jnp.max(jnp.abs(ref))), 1e-30)
    return row


def make_rl_step(config, tx, chunk: int, loss_config: dict[str, Any]):
    """`step(state, batch) -> (state, metrics)`: the RL trainer's own update on one micro-batch
    (`train.rl_step`: ppo_clip with the KL to the reference, token log-probs by vocabulary chunks,
    then the guarded AdamW step), composed into one function so the whole update is one compilation."""

    grads_fn = rl_step.make_micro_grads(config, "ppo_clip", loss_config, chunk)
    apply_fn = rl_step.make_apply(tx)

    def step(state, batch):
        grads, sums = grads_fn(state.params, batch)
        return apply_fn(state, grads, {k: sums[k] for k in rl_step.SCALAR_SUMS})

    return step


def random_rollout_batch(config, batch: int, seq: int, seed: int = 0):
    """A `train.rl_batch.RolloutBatch` of random tokens; the first quarter of each row is prompt (no loss),
    the rest sampled tokens."""
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(seed)
    loss_mask = np.zeros((batch, seq - 1), np.float32)  # targets: column t is token t + 1
    loss_mask[:, seq // 4 - 1 :] = 1
    return RolloutBatch(
        tokens=jnp.asarray(rng.integers(1, config.vocab_size, (batch, seq)), jnp.int32),
        token_mask=jnp.ones((batch, seq), bool),
        loss_mask=jnp.asarray(loss_mask),
        old_logp=jnp.asarray(rng.uniform(-3, -0.1, (batch, seq - 1)), jnp.float32),
        ref_logp=jnp.asarray(rng.uniform(-3, -0.1, (batch, seq - 1)), jnp.float32),
        advantages=jnp.asarray(rng.choice([-1.0, 1.0], batch), jnp.float32),
        per_rollout={k: jnp.asarray(v) for k, v in common.rollout_inputs("rc_grpo", batch).items()},
    )


def bench_rl_step(plan: Plan, peak_flops: float) -> dict[str, Any]:
    """One RC-GRPO update (float32 master weights, bf16 compute, remat per layer) on rl_batch x rl_seq."""
    import jax

    config = model_config(plan.shape, param_dtype="float32", dtype="bfloat16", remat=True)
    tx = optim_lib.make_optimizer(common.constant_optim(1e-6), 1000)
    t = time.perf_counter()
    state = jax.jit(lambda k: state_lib.create(models.init_params(config, k), tx, jax.random.PRNGKey(0)))(
        jax.random.key(0)
    )
    n_params = common.param_count(state.params)
    state = jax.block_until_ready(state)
    init_s = time.perf_counter() - t
    batch = random_rollout_batch(config, plan.rl_batch, plan.rl_seq)
    step = jax.jit(
        make_rl_step(config, tx, min(plan.logprob_chunk, config.vocab_size), {"kl_beta": 0.1}), donate_argnums=(0,)
    )
    t = time.perf_counter()
    compiled = step.lower(state, batch).compile()
    compile_s = time.perf_counter() - t
    holder = {"state": state}

    def run():
        holder["state"], metrics = compiled(holder["state"], batch)
        jax.block_until_ready(metrics["loss"])
        return metrics

    step_s, _ = common.time_call(run, repeats=plan.repeats)
    metrics = jax.device_get(run())
    flops = common.train_flops(n_params, config, plan.rl_batch, plan.rl_seq)
    return {
        "batch": plan.rl_batch,
        "seq": plan.rl_seq,
        "params": n_params,
        "remat": True,
        "logprob_chunk": min(plan.logprob_chunk, config.vocab_size),
        "init_s": init_s,
        "compile_s": compile_s,
        "step_s": step_s,
        "tok_s": plan.rl_batch * plan.rl_seq / step_s,
        "tflop_per_step": flops / 1e12,
        "achieved_tflop_s": flops / step_s / 1e12,
        "mfu": flops / step_s / peak_flops,
        "loss": float(metrics["loss"]),
        "finite": bool(metrics["finite"]),
        "peak_memory_gb": peak_memory_gb(),
    }


# ---------------------------------------------------------------------------------------- attention


def bench_attention(seq: int, plan: Plan, row: dict[str, Any] | None = None) -> dict[str, Any]:
    """One row of `seq` tokens (the last seq/16 are padding) of causal GQA attention in bf16, the training
    call (causal=True) of `models.attention.attention`, on two paths:

      xla    implementation "xla" (`xla_attention.grouped_attention`, what the CPU runs)
      fused  implementation "cudnn" on a CUDA GPU; elsewhere, as a stand-in that checks the argument
             mapping (and this script), the library's XLA attention given the very arguments built for
             cuDNN (`fused_impl` says which ran)
      tokamax  implementation "tokamax" where tokamax is installed (its Mosaic GPU kernel on a GPU, its
             XLA reference elsewhere)
      pallas implementation "pallas" on a GPU where JAX ships the kernel (jax 0.10, 0.11; off a GPU its
             interpret mode would only time the interpreter)

    `fastest_fwd_bwd` names the implementation whose forward + backward was fastest among those that ran
    and agreed with xla (differences under 2e-2). `auto_impl` is what `attention_impl=auto` picks there (the
    Pallas kernel on jax 0.10/0.11: the one the lowering proof lowers); on a GPU where another is fastest,
    `override` is the flag that takes it (`--config.model.attention_impl=cudnn`), else None.

    Times are medians over `plan.repeats` after a warm-up call (its time, with compilation, reported
    apart); differences are max |fused - xla| over real queries divided by max |xla| (output and dq).
    Fills and returns `row` (so a path that fails leaves the other's figures in it)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    n, g, dh = plan.attn_heads
    real = seq - seq // 16
    rng = np.random.default_rng(seq)
    q, k, v = (jnp.asarray(rng.standard_normal((1, seq, h, dh), np.float32), jnp.bfloat16) for h in (n, g, g))
    cotangent = jnp.asarray(rng.standard_normal((1, seq, n, dh), np.float32), jnp.bfloat16)
    valid = jnp.arange(seq)[None] < real  # [1, T]
    scale = 1.0 / float(np.sqrt(dh))
    backend = jax.default_backend()
    auto = attention.select_implementation(backend, "auto", dtype="bfloat16", head_dim=dh)
    on_gpu = str(backend).lower() in attention.GPU_BACKENDS and not attention.fused_unsupported("bfloat16", dh)

    def make(path: str):
        def attend(q, k, v):
            mask = attention_mask(valid, jnp.arange(seq))  # built inside the program, as in the model
            if path in ("tokamax", "pallas"):
                return attention.attention(q, k, v, mask, scale, implementation=path, causal=True)
            if path == "xla" or on_gpu:
                impl = "xla" if path == "xla" else "cudnn"
                return attention.attention(q, k, v, mask, scale, implementation=impl, causal=True)
            args = attention.cudnn_arguments(q, k, v, mask, scale, causal=True)
            return jax.nn.dot_product_attention(**args, implementation="xla")

        def train(q, k, v):
            out, vjp = jax.vjp(attend, q, k, v)
            return out, vjp(cotangent)[0]

        return jax.jit(attend), jax.jit(train)

    paths = ["xla", "fused"]
    if not attention.tokamax_unavailable():
        paths.append("tokamax")
    if on_gpu and not attention.pallas_mha_unavailable():
        paths.append("pallas")
    row = {} if row is None else row
    row.update(
        seq=seq,
        paths=paths,
        real_tokens=real,
        heads=n,
        kv_heads=g,
        head_dim=dh,
        fused_impl="cudnn" if on_gpu else "xla_with_cudnn_arguments",
    )
    results = {}
    for path in paths:
        try:  # one path failing (the dense XLA backward at 16k may not fit) still measures the other
            fwd, train = make(path)
            t = time.perf_counter()
            results[path] = jax.block_until_ready(train(q, k, v))
            row[f"{path}_first_call_s"] = time.perf_counter() - t
            fwd_s, _ = common.time_call(lambda: jax.block_until_ready(fwd(q, k, v)), repeats=plan.repeats)
            train_s, _ = common.time_call(lambda: jax.block_until_ready(train(q, k, v)), repeats=plan.repeats)
            row[f"{path}_fwd_ms"], row[f"{path}_fwd_bwd_ms"] = fwd_s * 1e3, train_s * 1e3
        except Exception as e:  # noqa: BLE001 - reported in the row
            results.pop(path, None)
            row[f"{path}_error"] = f"{type(e).__name__}: {e}"[:300]
    if "xla" not in results or "fused" not in results:
        raise RuntimeError(f"attention at {seq}: {'; '.join(str(row[k]) for k in row if k.endswith('_error'))}")
    keep = valid[:, :, None, None]
    agree = {"xla"}
    for path in results:
        if path == "xla":
            continue
        suffix = "" if path == "fused" else f"_{path}"
        for name, i in (("out", 0), ("dq", 1)):
            ref, got = (results[p][i].astype(jnp.float32) for p in ("xla", path))
            diff = float(jnp.max(jnp.where(keep, jnp.abs(got - ref), 0.0)))
            row[f"max_rel_diff_{name}{suffix}"] = diff / max(float(jnp.max(jnp.abs(ref))), 1e-30)
        if max(row[f"max_rel_diff_out{suffix}"], row[f"max_rel_diff_dq{suffix}"]) < 2e-2:
            agree.add(path)
    row["fwd_speedup"] = row["xla_fwd_ms"] / row["fused_fwd_ms"]
    row["fwd_bwd_speedup"] = row["xla_fwd_bwd_ms"] / row["fused_fwd_bwd_ms"]
    fastest = min(agree, key=lambda p: row[f"{p}_fwd_bwd_ms"])
    row["fastest_fwd_bwd"] = row["fused_impl"] if fastest == "fused" else fastest
    row["auto_impl"] = auto
    best = row["fastest_fwd_bwd"]
    row["override"] = f"--config.model.attention_impl={best}" if on_gpu and best != auto else None
    row["peak_memory_gb"] = peak_memory_gb()
    failed = [p for p in paths if p not in results]
    if failed:  # after the figures of the paths that ran
        raise RuntimeError(f"attention at {seq}: {'; '.join(str(row[p + '_error']) for p in failed)}")
    return row


# ------------------------------------------------------------------------------------------- driver


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (CPU check of this script)")
    ap.add_argument(
        "--skip",
        default="",
        help="comma list of phases to skip: decode,prod_decode,ragged_decode,packed_attention,rl_step,attention",
    )
    ap.add_argument("--attention", action="store_true", help="also compare fused (cuDNN) and XLA attention")
    ap.add_argument("--attn-seqs", default=None, help="e.g. 4096,16384")
    ap.add_argument("--decode-batches", default=None, help="e.g. 1,16,64")
    ap.add_argument("--rl-batch", type=int, default=None)
    ap.add_argument("--rl-seq", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--deadline-s", type=float, default=None)
    ap.add_argument("--hbm-bytes-s", type=float, default=hardware.H200.hbm_bytes_s)
    ap.add_argument("--peak-flops", type=float, default=hardware.H200.bf16_flops)
    args = ap.parse_args(argv)
    plan = TINY if args.tiny else Plan()
    overrides = {
        "decode_batches": tuple(int(b) for b in args.decode_batches.split(",")) if args.decode_batches else None,
        "rl_batch": args.rl_batch,
        "rl_seq": args.rl_seq,
        "repeats": args.repeats,
        "deadline_s": args.deadline_s,
        "attn_seqs": tuple(int(t) for t in args.attn_seqs.split(",")) if args.attn_seqs else None,
    }
    plan = dataclasses.replace(plan, **{k: v for k, v in overrides.items() if v is not None})
    skip = set(filter(None, args.skip.split(",")))
    start = time.perf_counter()
    rows: list[dict[str, Any]] = []

    def measure(row: dict[str, Any], fn) -> None:
        with common.guarded(row):
            if time.perf_counter() - start > plan.deadline_s:
                row["skipped"] = f"deadline of {plan.deadline_s:.0f}s passed"
            else:
                row.update(fn())
        rows.append(row)

    info: dict[str, Any] = {"bench": "machine", "shape": plan.shape}
    measure(
        info,
        lambda: {
            **common.machine_info(),
            "hbm_bytes_s": args.hbm_bytes_s,
            "peak_flops": args.peak_flops,
            "peaks_from": "H200 spec sheet (override with flags)",
        },
    )

    # Most wanted first (a row not started by the deadline is reported as skipped): the attention paths,
    # the ragged decode, the RL update's MFU; then the dense production decode (the ragged row's "xla" side
    # measures most of it already) and the 1.5B decode sweep. The production model stays built from the
    # ragged row to the prod_decode row (15 GB of bf16 weights held through rl_step: ~60 GB at most).
    if args.attention and "attention" not in skip:
        for seq in plan.attn_seqs:
            row = {"bench": "attention", "seq": seq}
            measure(row, lambda seq=seq, row=row: bench_attention(seq, plan, row))
    prod: dict[str, Any] = {}  # the production model, shared by the two production decode rows
    if "ragged_decode" not in skip:
        measure({"bench": "ragged_decode"}, lambda: bench_ragged_decode(plan, args.hbm_bytes_s, prod))
    if "packed_attention" not in skip:
        measure({"bench": "packed_attention"}, lambda: bench_packed_attention(plan))
    if "rl_step" not in skip:
        measure({"bench": "rl_step", "shape": plan.shape}, lambda: bench_rl_step(plan, args.peak_flops))
    if "prod_decode" not in skip:
        measure({"bench": "prod_decode"}, lambda: bench_production_decode(plan, args.hbm_bytes_s, prod))
    prod.clear()
    if "decode" not in skip:
        holder: dict[str, Any] = {}

        def setup():
            import jax

            config = model_config(plan.shape, param_dtype="bfloat16", dtype="bfloat16", remat=False)
            t = time.perf_counter()
            holder["config"] = config
            holder["params"] = jax.block_until_ready(models.init_params(config, jax.random.key(0)))
            return {
                "params": common.param_count(holder["params"]),
                "weight_bytes": tree_bytes(holder["params"]),
                "init_s": time.perf_counter() - t,
            }

        measure({"bench": "decode_setup", "shape": plan.shape}, setup)
        for b in plan.decode_batches:
            measure(
                {"bench": "decode", "shape": plan.shape, "batch": b},
                lambda b=b: bench_decode(holder["config"], holder["params"], b, plan, args.hbm_bytes_s),
            )
        holder.clear()
    common.emit(
        {"bench": "done", "total_s": time.perf_counter() - start, "errors": sum(1 for r in rows if "error" in r)}
    )
    return rows


if __name__ == "__main__":
    main()
