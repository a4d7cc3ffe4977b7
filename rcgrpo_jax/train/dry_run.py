"""Will it fit? Each trainer kind's programs compiled against abstract parameters at the preset's production
shapes on the configured mesh (no weights allocated), XLA's memory analysis per device assembled into one
memory plan (`model_prep.memory_plan`):

  XLA_FLAGS=--xla_force_host_platform_device_count=8 \\
  python -m rcgrpo_jax.main --config=configs/rc_grpo.py:qwen2_5_7b --dry_run

The plan sizes the GPU's programs, not the CPU's, through the owning modules' seams (docs/sampling.md): the no-cache
forwards use `planned_model`'s attention (`models.attention.FOOTPRINT`, a fused kernel's memory) and the rollout's
programs a `Sampler(kv_write="footprint")` (every KV write an in-place write's memory).

Phases (each what its program needs beyond the resident buffers it reads) [resident during it]:
  update     the micro-batch gradient step or the optimizer apply, largest bucket   [train state, reference]
  reference  the reference (and recompute) log-prob pass, largest bucket            [train state, reference]
  cast       `decode_step.decode_weights`' cast on the training shards     [train state, reference, decode weights]
  prefill    the largest of the session's appends: `append_all`, `append_rows` (largest sub-batch),
             `prefill_packed` (one fresh row of a whole context), `append_packed`             [all four]
  session    the larger of its row copies: `copy_rows` (one layer's K or V) and `take_rows`   [all four]
  decode     one `max_step_tokens` decode call over the full-capacity cache                   [all four]
Resident: train state (params + AdamW moments), the frozen reference, the decode weights
(`model.decode_dtype`, decode shardings) and the KV cache (rows x capacity).

limit_gb is the allocator's limit: what the device reports, else XLA_PYTHON_CLIENT_MEM_FRACTION (JAX's default 0.75
when unset) x `memory.device_bytes` (141 GB, an H200). SFT: the update only. Each program compiles once. An RL config's
dry run adds the exploration stage's plan (`exploration`: its decode weights and KV cache; cast = the load's copy).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import jax.numpy as jnp

from rcgrpo_jax import config_checks
from rcgrpo_jax import sharding as sharding_lib
from rcgrpo_jax.config_fields import MemoryFitError
from rcgrpo_jax.models import attention as attention_lib
from rcgrpo_jax.models.transformer import abstract_params as abstract_params_of
from rcgrpo_jax.sampling import SamplingParams, decode_loop, decode_step, row_shards, session
from rcgrpo_jax.sampling.decode_loop import Sampler, batch_multiple, cache_sharding, mesh_context
from rcgrpo_jax.train import exploration as exploration_lib
from rcgrpo_jax.train import model_prep, rl_setup, sft
from rcgrpo_jax.train import state as state_lib

JAX_DEFAULT_MEM_FRACTION = 0.75  # XLA_PYTHON_CLIENT_MEM_FRACTION when unset (JAX's GPU memory docs)


def allocator_limit_bytes(config, env: dict | None = None) -> int:
    """Bytes JAX's allocator may use on one device: the device's own `bytes_limit` where it reports one
    (a GPU), else XLA_PYTHON_CLIENT_MEM_FRACTION (default 0.75) x `memory.device_bytes`."""
    env = os.environ if env is None else env
    raw = env.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "") or str(JAX_DEFAULT_MEM_FRACTION)
    try:
        fraction = float(raw)
    except ValueError:
        raise ValueError(f"XLA_PYTHON_CLIENT_MEM_FRACTION: {raw!r} is not a number") from None
    if not 0 < fraction <= 1:
        raise ValueError(f"XLA_PYTHON_CLIENT_MEM_FRACTION: {fraction} must be in (0, 1]")
    reported = model_prep.device_budget(config)
    if reported != int(config.memory.device_bytes):  # the device reported its allocator's limit
        return reported
    return int(fraction * int(config.memory.device_bytes))


def planned_model(model_cfg):
    """The model as the plan compiles its no-cache forwards (training, reference, SFT): attention
    `models.attention.FOOTPRINT`, a fused kernel's memory (`footprint_attention`), not the CPU's dense
    probabilities. Its values are meaningless: only compile it."""
    return dataclasses.replace(model_cfg, attention_impl=attention_lib.FOOTPRINT)


def decode_dtype(config) -> str:
    """`model.decode_dtype` (the dtype of the sampler's weights), defaulting to the compute dtype."""
    return str(config.model.get("decode_dtype", None) or config.model.dtype)


def _with_shardings(tree, shardings):
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), tree, shardings)


def rollout_programs(config, model_cfg, abstract_params, mesh, shapes: rl_setup.RolloutShapes) -> dict[str, Any]:
    """Per-device GB of the rollout phase's programs beyond the decode weights and KV cache they read
    (reported apart): the decode weights' cast, the session's appends and row copies, the decode call;
    compiled at `shapes` (`rl_setup.rollout_shapes`) with abstract decode weights, as the session runs them on
    a GPU (scatter KV writes, donated cache)."""

    rows, capacity, width = shapes.rows, shapes.capacity, shapes.prefill_width
    rl = config.rl
    dtype = jnp.dtype(decode_dtype(config))
    stacked_sh = model_prep.param_shardings(abstract_params, mesh, config.sharding.decode_rules)
    weights = jax.eval_shape(lambda p: decode_step.cast_and_split(p, dtype), abstract_params)
    per_layer = decode_step.split_shardings(stacked_sh)
    weights_sh = {**per_layer, "layers": (per_layer["layers"],) * len(weights["layers"])}
    weights = _with_shardings(weights, weights_sh)
    cache_sh = cache_sharding(model_cfg, mesh)
    cache = _with_shardings(jax.eval_shape(lambda: decode_step.init_cache(model_cfg, rows, capacity)), cache_sh)

    def batch(shape, dt):
        return jax.ShapeDtypeStruct(shape, dt, sharding=sharding_lib.batch_sharding(mesh, len(shape)))

    def whole(shape, dt):  # a small index array on every device (`DecodeSession._replicated`)
        return jax.ShapeDtypeStruct(shape, dt, sharding=sharding_lib.replicated(mesh))

    top_p = float(rl.top_p) if float(rl.top_p or 1.0) < 1.0 else None
    sampling = SamplingParams(float(rl.temperature), int(rl.top_k or 0) or None, top_p)
    # kv_write="footprint": every KV write of these programs (the decode's, the appends', the row copies')
    # is the memory of the in-place scatter a GPU runs (`decode_step.footprint_write`; XLA's CPU backend
    # expands a scatter into a loop over a copy of its operand), and the programs trace apart from the
    # session's own (the Sampler is their static argument).
    s = Sampler(model_cfg, shapes.max_new_tokens, sampling, width, kv_write=decode_step.FOOTPRINT)
    # The session's programs (donated cache and logits, outputs on their shardings) and the sampler's decode.
    programs = {**session.programs(model_cfg, mesh, "xla"), "decode": decode_loop.decode_jit}
    logits = batch((rows, model_cfg.vocab_size), jnp.float32)
    rules = model_prep.rules(config.sharding.decode_rules)
    weights_b = model_prep.shard_bytes(weights, weights_sh)
    cache_b = model_prep.shard_bytes(cache, cache_sh)
    logits_b = model_prep.shard_bytes(logits, sharding_lib.batch_sharding(mesh, 2))
    # beyond the decode weights, the cache and its logits (resident: counted apart)
    beyond = lambda compiled: (model_prep.program_bytes(compiled) - weights_b - cache_b - logits_b) / 1e9  # noqa: E731
    out: dict[str, Any] = {}
    with mesh_context(mesh, rules):
        whole_batch = programs["append_all"].lower(
            s, weights, cache, logits, batch((rows, width), jnp.int32), batch((rows,), jnp.int32)
        )
        out["append_all_gb"] = beyond(whole_batch.compile())
        sub = shapes.sub_batch_rows
        if sub:
            rows_c = programs["append_rows"].lower(
                s,
                weights,
                cache,
                logits,
                batch((sub,), jnp.int32),  # shard-local row indices (`row_shards.shard_local_rows`)
                batch((sub, width), jnp.int32),
                batch((sub,), jnp.int32),
            )
            out["append_rows_gb"] = beyond(rows_c.compile())
        # The token-packed prefill of one fresh row of a whole context, split over the row shards.
        n_packed = shapes.packed_tokens
        packed_c = programs["prefill_packed"].lower(
            s,
            weights,
            cache,
            logits,
            *(batch((n_packed,), jnp.int32) for _ in range(3)),  # tokens, rows, slots (row-sharded)
            *(
                batch((batch_multiple(mesh) * shapes.prefill_pairs,), jnp.int32) for _ in range(2)
            ),  # its pairs (row-sharded)
            *(whole((1,), jnp.int32) for _ in range(3)),  # the row's last token, its row, its count
        )
        out["prefill_packed_gb"] = beyond(packed_c.compile())
        # The largest packed append: as many tokens, every block on one row shard, over the whole capacity.
        n_blocks = batch_multiple(mesh) * shapes.append_blocks
        n_pairs = batch_multiple(mesh) * shapes.append_pairs
        append_c = programs["append_packed"].lower(
            s,
            weights,
            cache,
            logits,
            *(batch((n_packed,), jnp.int32) for _ in range(3)),  # tokens, rows, slots (row-sharded)
            *(batch((n_blocks,), jnp.int32) for _ in range(4)),  # the attention blocks (row-sharded)
            *(batch((n_pairs,), jnp.int32) for _ in range(3)),  # their (block, key block) pairs (row-sharded)
            *(whole((1,), jnp.int32) for _ in range(3)),  # the row's last token, its row, its new length
        )
        out["append_packed_gb"] = beyond(append_c.compile())
        # The sibling copy runs one layer's K (then V, then the logits) at a time (`DecodeSession.copy_rows`):
        # its transient is the sources' windows of one array, beside the cache.
        n_copy = shapes.copy_rows
        layer = cache.v[0]  # [rows, kv heads, slots, head dim]; a layer's K holds as many
        at = (decode_step.kv_heads_axis(model_cfg.num_kv_heads, mesh),)
        copy = jax.jit(
            row_shards.copy_rows, static_argnums=(3, 4, 5, 6), donate_argnums=0, out_shardings=cache_sh.v[0]
        ).lower(layer, whole((n_copy,), jnp.int32), whole((n_copy,), jnp.int32), capacity, 2, at, decode_step.FOOTPRINT)
        layer_b = model_prep.shard_bytes(layer, cache_sh.v[0])
        out["copy_rows_gb"] = (model_prep.program_bytes(copy.compile()) - layer_b) / 1e9
        # take_rows: one layer's K (then V) at the new row count, placed on the cache's sharding, beside the
        # old cache; at the same row count (the largest new one a shrink makes).
        take = session.take_program(cache_sh.k[0]).lower(layer, whole((rows,), jnp.int32)).compile()
        out["take_rows_gb"] = (model_prep.program_bytes(take) - model_prep.shard_bytes(layer, cache_sh.k[0])) / 1e9
        decode = (
            programs["decode"]
            .lower(
                s,
                weights,
                logits,
                cache,
                batch((rows, 2), jnp.int32),
                batch((rows,), jnp.int32),
                jax.random.key(0),
            )
            .compile()
        )
        out["decode_gb"] = beyond(decode)
    # The cast: from the training parameters (float32, training shards) to the decode dtype on the same
    # shards; `decode_weights` then moves that copy onto the decode shards (donated), so at its peak the
    # cast copy and the decode weights both exist.
    train_sh = model_prep.param_shardings(abstract_params, mesh, config.sharding.train_rules)
    train_params = _with_shardings(abstract_params, train_sh)
    cast = decode_step.cast_and_split_jit.lower(train_params, dtype).compile()
    out["cast_gb"] = (model_prep.program_bytes(cast) - model_prep.shard_bytes(train_params, train_sh)) / 1e9
    return {
        **dataclasses.asdict(shapes),
        "decode_dtype": dtype.name,
        "decode_weights_gb": weights_b / 1e9,
        "kv_cache_gb": (cache_b + logits_b) / 1e9,  # the cache and the session's next-token logits
        "prefill_gb": max(
            out["append_all_gb"], out.get("append_rows_gb", 0.0), out["prefill_packed_gb"], out["append_packed_gb"]
        ),
        "session_gb": max(out["copy_rows_gb"], out["take_rows_gb"]),
        "programs_gb": out,
    }


def supervised(config) -> dict[str, Any]:
    """Per-device memory of the SFT update step at the largest bucket, without allocating the model, its
    attention sized as the GPU's fused kernel (`planned_model`)."""

    config = config_checks.resolved(config, jax.device_count())
    mesh = sharding_lib.make_mesh(sft.check(model_prep.dry_run_config(config), jax.device_count()))
    model_cfg = model_prep.abstract_model_config(config, extra_tokens=2 if config.get("add_reward_tokens") else 0)
    model_cfg = planned_model(model_cfg)
    _, state_sh, abstract, step_fn = sft.optimizer_and_state(
        config, model_cfg, abstract_params_of(model_cfg), mesh, 1000
    )
    micro = config.train.batch_size // config.train.grad_accum
    length = int(config.data.buckets[-1])
    logical = model_prep.rules(config.sharding.train_rules).logical
    compiled = sft.compile_step(step_fn, abstract, state_sh, (config.train.grad_accum, micro, length), mesh, logical)
    report = model_prep.memory_report(compiled, abstract, state_sh)
    budget_gb = allocator_limit_bytes(config) / 1e9
    train_state = report["params_gb"] + report["opt_state_gb"]
    plan = model_prep.memory_plan(
        phases={"update": report["peak_gb"] - train_state},
        resident={"train_state": train_state},
        resident_during={"update": ["train_state"]},
        limit_gb=budget_gb,
    )
    report.update(
        {
            "devices": jax.device_count(),
            "seq_len": length,
            "micro_batch": micro,
            "grad_accum": int(config.train.grad_accum),
            "budget_gb": budget_gb,
            "peak_gb": plan["per_device_gb"]["peak"],
            "attention": ATTENTION_NOTE,
        }
    )
    return {**report, **plan}


ATTENTION_NOTE = (
    "no-cache attention compiled as a fused-kernel stand-in (O(B*T*H*Dh) temporaries: the GPU's cuDNN/Pallas "
    "flash kernel never allocates the CPU attention's [B,G,T,R,S] f32 probabilities); the rollout's cached "
    "forwards as the GPU runs them (decode_step's own blocked attention)"
)


def rl(config) -> dict[str, Any]:
    """An RL config's per-device memory plan of one step (`rl_run`), without weights: checked as a dry run
    (`rl_setup.plan`), at `model.path`'s or the preset's published architecture (`rl_setup.abstract_model`)."""
    run = rl_setup.plan(config, jax.device_count(), dry=True)
    return rl_run(run, rl_setup.abstract_model(run))


def rl_run(run: rl_setup.RunPlan, model_cfg) -> dict[str, Any]:
    """Per-device memory plan of one RL step of a checked run (the module docstring's phases) at `model_cfg` (the
    trainer's start-up check passes the model it loaded), without weights: the run's programs (`rl_setup.build`)
    at `planned_model(model_cfg)`."""

    config, c, mesh, micro, length = run.config, run.choices, run.mesh, run.micro, run.length
    setup = rl_setup.build(run, planned_model(model_cfg))  # the training programs' attention: a fused kernel's
    abstract, state_sh, abstract_params = setup.abstract_state, setup.state_shardings, setup.abstract_params
    with jax.set_mesh(mesh), sharding_lib.axis_rules(setup.logical):
        grads_c, apply_c = setup.updater.lower(state_lib.with_shardings(abstract, state_sh), run.abstract_micro())
        tok = sharding_lib.batch_sharding(mesh, 2)
        ref_c = setup.logprobs.lower(
            _with_shardings(abstract_params, setup.param_shardings),
            jax.ShapeDtypeStruct((micro, length), jnp.int32, sharding=tok),
            jax.ShapeDtypeStruct((micro, length), jnp.bool_, sharding=tok),
        ).compile()
    # The update: the micro-batch gradient step (its activations, its float32 gradient output and the
    # gradient accumulator) or the optimizer apply, beyond the train state they read.
    report = model_prep.memory_report(grads_c, abstract, state_sh)
    apply_peak = model_prep.memory_report(apply_c, abstract, state_sh)["peak_gb"]
    params_gb, opt_gb = report["params_gb"], report["opt_state_gb"]
    accum_gb = params_gb * 4 / jnp.dtype(model_cfg.param_dtype).itemsize
    update_gb = max(report["peak_gb"] - params_gb + accum_gb, apply_peak - params_gb - opt_gb)
    reference_gb = model_prep.program_bytes(ref_c) / 1e9 - params_gb  # beyond the parameters it reads
    rollout = rollout_programs(config, model_cfg, abstract_params, mesh, setup.rollout)
    budget_gb = allocator_limit_bytes(config) / 1e9
    resident = {
        "train_state": params_gb + opt_gb,
        "reference": params_gb if c.use_ref else 0.0,
        "decode_weights": rollout["decode_weights_gb"],
        "kv_cache": rollout["kv_cache_gb"],
    }
    rollout_resident = list(resident)
    training = ["train_state", "reference"]
    plan = model_prep.memory_plan(
        phases={
            "update": update_gb,
            "reference": reference_gb if (c.use_ref or config.rl.recompute_old_logprobs) else 0.0,
            "cast": rollout["programs_gb"]["cast_gb"],
            "prefill": rollout["prefill_gb"],
            "session": rollout["session_gb"],
            "decode": rollout["programs_gb"]["decode_gb"],
        },
        resident=resident,
        resident_during={
            "update": training,
            "reference": training,
            "cast": [*training, "decode_weights"],
            "prefill": rollout_resident,
            "session": rollout_resident,
            "decode": rollout_resident,
        },
        limit_gb=budget_gb,
    )
    report.update(
        {
            "devices": jax.device_count(),
            "seq_len": length,
            "micro_batch": micro,
            "budget_gb": budget_gb,
            "peak_gb": plan["per_device_gb"]["peak"],
            "rollout": {k: v for k, v in rollout.items() if not k.endswith("_gb")},
            "programs_gb": rollout["programs_gb"],
            "attention": ATTENTION_NOTE,
        }
    )
    return {**report, **plan}


def exploration(config, settings: exploration_lib.Settings = exploration_lib.DEFAULT) -> dict[str, Any]:
    """Per-device memory plan of the exploration stage played by the RL config `config` at `settings` (the
    command's defaults unless given; `train.exploration.stage_config`), without weights: resident the decode
    weights (model.decode_dtype, decode shardings) and one batch's KV cache; phases the load's cast (the weights
    as `load_policy_model` places them, model.dtype on the decode shardings, beside their per-layer copy) and the
    rollout programs at exploration's shapes (`rollout_programs`). The policy is the base model (no reward tokens)."""

    rc = exploration_lib.stage_config(config, settings)
    mesh = sharding_lib.make_mesh(config_checks.mesh_shape(rc.mesh, jax.device_count()))
    dtype = str(rc.model.dtype)  # the loaded weights' dtype (`eval.run.load_policy_model`)
    model_cfg = dataclasses.replace(model_prep.abstract_model_config(rc), dtype=dtype, param_dtype=dtype)
    loaded = abstract_params_of(model_cfg)
    rollout = rollout_programs(rc, model_cfg, loaded, mesh, rl_setup.rollout_shapes(rc, mesh))
    loaded_gb = model_prep.shard_bytes(loaded, model_prep.param_shardings(loaded, mesh, rc.sharding.decode_rules))
    resident = {"decode_weights": rollout["decode_weights_gb"], "kv_cache": rollout["kv_cache_gb"]}
    decoding = list(resident)
    plan = model_prep.memory_plan(
        phases={
            "cast": loaded_gb / 1e9,
            "prefill": rollout["prefill_gb"],
            "session": rollout["session_gb"],
            "decode": rollout["programs_gb"]["decode_gb"],
        },
        resident=resident,
        resident_during={"cast": ["decode_weights"], "prefill": decoding, "session": decoding, "decode": decoding},
        limit_gb=allocator_limit_bytes(rc) / 1e9,
    )
    programs = {k: v for k, v in rollout["programs_gb"].items() if k != "cast_gb"}  # RL's cast, from train shards
    return {
        "devices": jax.device_count(),
        "mesh": dict(mesh.shape),
        "settings": dataclasses.asdict(settings),
        "rollout": {k: v for k, v in rollout.items() if not k.endswith("_gb")},
        "programs_gb": programs,
        "budget_gb": plan["limit_gb"],
        "peak_gb": plan["per_device_gb"]["peak"],
        **plan,
    }


def rl_with_exploration(config) -> dict[str, Any]:
    """An RL config's `--dry_run` (`stages.TRAINERS`): the RL step's plan (`rl`) with the exploration stage's
    (`exploration`, at the command's defaults) under "exploration"; a MemoryFitError names the stage that does
    not fit. Exploration plays by the RL stages' config (`train.exploration`, launch/pipeline.sh)."""
    report = rl(config)
    explore = exploration(config)
    if not explore["fits"]:
        raise MemoryFitError(
            "memory.device_bytes",
            f"exploration (train.exploration at its defaults) needs {explore['peak_gb']:.2f} GB per device, over "
            f"the {explore['budget_gb']:.2f} GB budget (fewer tasks per batch or a shorter --max-context)",
        )
    return {**report, "exploration": explore}
