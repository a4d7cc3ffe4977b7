"""Will it fit? Each trainer kind's programs compiled against abstract parameters at the preset's production
shapes on the configured mesh (no weights allocated), XLA's memory analysis per device assembled into one
memory plan (`memory.memory_plan`):

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
import hashlib
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
from rcgrpo_jax.train import memory, model_prep, rl_config, rl_setup, sft
from rcgrpo_jax.train import state as state_lib


def planned_model(model_cfg):
    """The model as the plan compiles its no-cache forwards (training, reference, SFT): attention
    `models.attention.FOOTPRINT`, a fused kernel's memory (`footprint_attention`), not the CPU's dense
    probabilities. Its values are meaningless: only compile it."""
    return dataclasses.replace(model_cfg, attention_impl=attention_lib.FOOTPRINT)


def _with_shardings(tree, shardings):
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), tree, shardings)


class ProgramBytes:
    """Per-device bytes of lowered programs (`memory.program_bytes`), each distinct program compiled once: a
    program lowered again to the same text (the same shapes, shardings and static arguments, e.g. the RL
    step's and the exploration stage's rollout programs where their shapes coincide) takes the first one's
    figure. `compiled` counts the programs compiled."""

    def __init__(self):
        self._bytes: dict[str, int] = {}
        self.compiled = 0

    def __call__(self, lowered) -> int:
        key = hashlib.sha256(lowered.as_text().encode()).hexdigest()
        if key not in self._bytes:
            self._bytes[key] = memory.program_bytes(lowered.compile())
            self.compiled += 1
        return self._bytes[key]


@dataclasses.dataclass(frozen=True)
class RolloutOperands:
    """The abstract operands of the rollout phase's programs, on their shardings (`rollout_operands`)."""

    mesh: Any
    sampler: Sampler  # the programs' static argument, its KV writes a GPU's in-place writes' memory
    weights: Any  # the decode weights, split per layer, on the decode shardings
    cache: Any  # the KV cache of the session's rows at the full capacity
    cache_sh: Any
    logits: jax.ShapeDtypeStruct  # the session's next-token logits
    weights_bytes: int  # on one device
    cache_bytes: int  # the cache and the logits, on one device

    @property
    def resident_bytes(self) -> int:
        """What every rollout program reads, on one device: the decode weights, the cache and the logits."""
        return self.weights_bytes + self.cache_bytes

    def batch(self, shape, dt) -> jax.ShapeDtypeStruct:
        """A row-sharded operand."""
        return jax.ShapeDtypeStruct(shape, dt, sharding=sharding_lib.batch_sharding(self.mesh, len(shape)))

    def whole(self, shape, dt) -> jax.ShapeDtypeStruct:
        """A small index array on every device (`DecodeSession._replicated`)."""
        return jax.ShapeDtypeStruct(shape, dt, sharding=sharding_lib.replicated(self.mesh))


def rollout_operands(
    model_cfg,
    abstract_params,
    mesh,
    shapes: rl_setup.RolloutShapes,
    *,
    decode_rules: sharding_lib.Rules,
    dtype,
    sampling,
) -> RolloutOperands:
    """The decode weights (`abstract_params` cast to `dtype`, split per layer, on `decode_rules`' shardings), the
    KV cache at `shapes.rows` x `shapes.capacity`, the logits, and the sampler at `shapes`' decode budget."""
    stacked_sh = decode_rules.shardings(abstract_params, mesh)
    weights = jax.eval_shape(lambda p: decode_step.cast_and_split(p, dtype), abstract_params)
    per_layer = decode_step.split_shardings(stacked_sh)
    weights_sh = {**per_layer, "layers": (per_layer["layers"],) * len(weights["layers"])}
    cache_sh = cache_sharding(model_cfg, mesh)
    init = lambda: decode_step.init_cache(model_cfg, shapes.rows, shapes.capacity)  # noqa: E731
    cache = _with_shardings(jax.eval_shape(init), cache_sh)
    logits_sh = sharding_lib.batch_sharding(mesh, 2)
    logits = jax.ShapeDtypeStruct((shapes.rows, model_cfg.vocab_size), jnp.float32, sharding=logits_sh)
    # kv_write="footprint": every KV write of these programs (the decode's, the appends', the row copies')
    # is the memory of the in-place scatter a GPU runs (`decode_step.footprint_write`; XLA's CPU backend
    # expands a scatter into a loop over a copy of its operand), and the programs trace apart from the
    # session's own (the Sampler is their static argument).
    sampler = Sampler(model_cfg, shapes.max_new_tokens, sampling, shapes.prefill_width, kv_write=decode_step.FOOTPRINT)
    return RolloutOperands(
        mesh,
        sampler,
        _with_shardings(weights, weights_sh),
        cache,
        cache_sh,
        logits,
        weights_bytes=memory.shard_bytes(weights, weights_sh),
        cache_bytes=memory.shard_bytes(cache, cache_sh) + memory.shard_bytes(logits, logits_sh),
    )


def _appends(ops: RolloutOperands, programs, shapes: rl_setup.RolloutShapes, beyond) -> dict[str, float]:
    """The session's appends: the whole batch's, the largest sub-batch's, the token-packed prefill of one fresh
    row of a whole context, and the largest packed append."""
    s, width, m = ops.sampler, shapes.prefill_width, batch_multiple(ops.mesh)
    head = (s, ops.weights, ops.cache, ops.logits)
    rows, sub, i32 = shapes.rows, shapes.sub_batch_rows, jnp.int32
    out = {
        "append_all_gb": beyond(
            programs["append_all"].lower(*head, ops.batch((rows, width), i32), ops.batch((rows,), i32))
        )
    }
    if sub:  # shard-local row indices (`row_shards.shard_local_rows`), their tokens and counts
        args = (ops.batch((sub,), i32), ops.batch((sub, width), i32), ops.batch((sub,), i32))
        out["append_rows_gb"] = beyond(programs["append_rows"].lower(*head, *args))
    n_packed = shapes.packed_tokens
    tokens = tuple(ops.batch((n_packed,), i32) for _ in range(3))  # tokens, rows, slots (row-sharded)
    last = tuple(ops.whole((1,), i32) for _ in range(3))  # the row's last token, its row, its count / new length
    pairs = tuple(ops.batch((m * shapes.prefill_pairs,), i32) for _ in range(2))  # its pairs (row-sharded)
    out["prefill_packed_gb"] = beyond(programs["prefill_packed"].lower(*head, *tokens, *pairs, *last))
    # The largest packed append: as many tokens, every block on one row shard, over the whole capacity.
    blocks = tuple(ops.batch((m * shapes.append_blocks,), i32) for _ in range(4))  # the attention blocks
    block_pairs = tuple(ops.batch((m * shapes.append_pairs,), i32) for _ in range(3))  # (block, key block) pairs
    out["append_packed_gb"] = beyond(programs["append_packed"].lower(*head, *tokens, *blocks, *block_pairs, *last))
    return out


def _row_copies(ops: RolloutOperands, model_cfg, shapes: rl_setup.RolloutShapes, program_bytes) -> dict[str, float]:
    """The session's row copies, each beyond the layer it reads: the sibling copy runs one layer's K (then V,
    then the logits) at a time (`DecodeSession.copy_rows`), its transient the sources' windows of one array
    beside the cache; take_rows places one layer's K (then V) at the new row count on the cache's sharding,
    beside the old cache, at the same row count (the largest new one a shrink makes)."""
    layer = ops.cache.v[0]  # [rows, kv heads, slots, head dim]; a layer's K holds as many
    at = (decode_step.kv_heads_axis(model_cfg.num_kv_heads, ops.mesh),)
    n_copy, i32 = shapes.copy_rows, jnp.int32
    copy = jax.jit(
        row_shards.copy_rows, static_argnums=(3, 4, 5, 6), donate_argnums=0, out_shardings=ops.cache_sh.v[0]
    ).lower(layer, ops.whole((n_copy,), i32), ops.whole((n_copy,), i32), shapes.capacity, 2, at, decode_step.FOOTPRINT)
    take = session.take_program(ops.cache_sh.k[0]).lower(layer, ops.whole((shapes.rows,), i32))
    return {
        "copy_rows_gb": (program_bytes(copy) - memory.shard_bytes(layer, ops.cache_sh.v[0])) / 1e9,
        "take_rows_gb": (program_bytes(take) - memory.shard_bytes(layer, ops.cache_sh.k[0])) / 1e9,
    }


def cast_program(abstract_params, param_shardings, dtype, program_bytes) -> float:
    """GB of the RL step's cast beyond the training parameters it reads: from the training parameters (float32,
    on `param_shardings`, the training shards) to the decode dtype on the same shards; `decode_weights` then
    moves that copy onto the decode shards (donated), so at its peak the cast copy and the decode weights both
    exist."""
    train_params = _with_shardings(abstract_params, param_shardings)
    cast = decode_step.cast_and_split_jit.lower(train_params, dtype)
    return (program_bytes(cast) - memory.shard_bytes(train_params, param_shardings)) / 1e9


def rollout_programs(
    model_cfg,
    abstract_params,
    mesh,
    shapes: rl_setup.RolloutShapes,
    decode_rules: sharding_lib.Rules,
    *,
    sampling: SamplingParams,
    decode_dtype: str,
    program_bytes: ProgramBytes | None = None,
) -> dict[str, Any]:
    """Per-device GB of the rollout phase's programs beyond the decode weights and KV cache they read
    (reported apart): the session's appends and row copies, the decode call; compiled at `shapes`
    (`rl_setup.rollout_shapes`) with abstract decode weights (`decode_dtype`, on `decode_rules`' shardings),
    sampling by `sampling`, as the session runs them on a GPU (scatter KV writes, donated cache), each distinct
    program once (`program_bytes`). The decode weights' cast is the RL step's alone (`cast_program`)."""
    program_bytes = program_bytes or ProgramBytes()
    dtype = jnp.dtype(decode_dtype)
    ops = rollout_operands(
        model_cfg, abstract_params, mesh, shapes, decode_rules=decode_rules, dtype=dtype, sampling=sampling
    )
    beyond = lambda lowered: (program_bytes(lowered) - ops.resident_bytes) / 1e9  # noqa: E731
    # The session's programs (donated cache and logits, outputs on their shardings) and the sampler's decode.
    programs = session.programs(model_cfg, mesh, "xla")
    with mesh_context(mesh, decode_rules):
        out = _appends(ops, programs, shapes, beyond)
        out.update(_row_copies(ops, model_cfg, shapes, program_bytes))
        i32 = jnp.int32
        decode_args = (ops.batch((shapes.rows, 2), i32), ops.batch((shapes.rows,), i32), jax.random.key(0))
        out["decode_gb"] = beyond(
            decode_loop.decode_jit.lower(ops.sampler, ops.weights, ops.logits, ops.cache, *decode_args)
        )
    return {
        **dataclasses.asdict(shapes),
        "decode_dtype": dtype.name,
        "decode_weights_gb": ops.weights_bytes / 1e9,
        "kv_cache_gb": ops.cache_bytes / 1e9,  # the cache and the session's next-token logits
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
    report = memory.memory_report(compiled, abstract, state_sh)
    budget_gb = memory.allocator_limit_bytes(int(config.memory.device_bytes)) / 1e9
    train_state = report["params_gb"] + report["opt_state_gb"]
    plan = memory.memory_plan(
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


def rl(config, program_bytes: ProgramBytes | None = None) -> dict[str, Any]:
    """An RL config's per-device memory plan of one step (`rl_run`), without weights: checked as a dry run
    (`dry_plan`), at `model.path`'s or the preset's published architecture (`rl_setup.abstract_model`)."""
    run = dry_plan(config)
    return rl_run(run, rl_setup.abstract_model(run), program_bytes)


def dry_plan(config) -> rl_setup.RunPlan:
    """An RL config's `rl_setup.plan` on this process's devices, checked as a dry run (no weights)."""
    return rl_setup.plan(config, jax.device_count(), dry=True)


def _training_phases(setup: rl_setup.RLSetup, program_bytes: ProgramBytes) -> tuple[dict[str, float], float, float]:
    """(the update's memory report, the update's GB, the reference pass's GB), each beyond the train state it
    reads: the update is the larger of the micro-batch gradient step (its activations, its float32 gradient
    output and the gradient accumulator) and the optimizer apply; the reference (and recompute) log-prob pass
    is beyond the parameters it reads."""
    run, abstract, state_sh = setup.run, setup.abstract_state, setup.state_shardings
    micro, length = run.micro, run.length
    with jax.set_mesh(run.mesh), sharding_lib.axis_rules(setup.logical):
        grads_c, apply_c = setup.updater.lower(state_lib.with_shardings(abstract, state_sh), run.abstract_micro())
        tok = sharding_lib.batch_sharding(run.mesh, 2)
        ref_lowered = setup.logprobs.lower(
            _with_shardings(setup.abstract_params, setup.param_shardings),
            jax.ShapeDtypeStruct((micro, length), jnp.int32, sharding=tok),
            jax.ShapeDtypeStruct((micro, length), jnp.bool_, sharding=tok),
        )
        reference_gb = program_bytes(ref_lowered) / 1e9
    report = memory.memory_report(grads_c, abstract, state_sh)
    apply_peak = memory.memory_report(apply_c, abstract, state_sh)["peak_gb"]
    params_gb, opt_gb = report["params_gb"], report["opt_state_gb"]
    accum_gb = params_gb * 4 / jnp.dtype(setup.model_cfg.param_dtype).itemsize
    update_gb = max(report["peak_gb"] - params_gb + accum_gb, apply_peak - params_gb - opt_gb)
    reference_gb -= params_gb  # beyond the parameters it reads
    return report, update_gb, reference_gb


def rl_run(run: rl_setup.RunPlan, model_cfg, program_bytes: ProgramBytes | None = None) -> dict[str, Any]:
    """Per-device memory plan of one RL step of a checked run at `model_cfg`, without weights: `rl_plan` of the
    run's set-up at that model (`rl_setup.build`)."""
    return rl_plan(rl_setup.build(run, model_cfg), program_bytes)


def rl_plan(setup: rl_setup.RLSetup, program_bytes: ProgramBytes | None = None) -> dict[str, Any]:
    """Per-device memory plan of one RL step of a built set-up (the module docstring's phases; the trainer's
    start-up check passes its own), without weights: its training programs at `planned_model(setup.model_cfg)`
    (`rl_setup.at_model`), its rollout programs at `setup.rollout`, all on its shardings, each distinct program
    compiled once (`program_bytes`)."""
    program_bytes = program_bytes or ProgramBytes()
    run, c = setup.run, setup.run.choices
    config = run.config
    # The training programs' attention: a fused kernel's.
    report, update_gb, reference_gb = _training_phases(
        rl_setup.at_model(setup, planned_model(setup.model_cfg)), program_bytes
    )
    rollout = rollout_programs(
        setup.model_cfg,
        setup.abstract_params,
        run.mesh,
        setup.rollout,
        run.decode_rules,
        sampling=run.sampling,
        decode_dtype=run.decode_dtype,
        program_bytes=program_bytes,
    )
    dtype = jnp.dtype(rollout["decode_dtype"])
    cast_gb = cast_program(setup.abstract_params, setup.param_shardings, dtype, program_bytes)
    params_gb = report["params_gb"]
    resident = {
        "train_state": params_gb + report["opt_state_gb"],
        "reference": params_gb if c.use_ref else 0.0,
        "decode_weights": rollout["decode_weights_gb"],
        "kv_cache": rollout["kv_cache_gb"],
    }
    rollout_resident, training = list(resident), ["train_state", "reference"]
    plan = memory.memory_plan(
        phases={
            "update": update_gb,
            "reference": reference_gb if (c.use_ref or config.rl.recompute_old_logprobs) else 0.0,
            "cast": cast_gb,
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
        limit_gb=memory.allocator_limit_bytes(int(config.memory.device_bytes)) / 1e9,
    )
    report.update(
        {
            "devices": jax.device_count(),
            "seq_len": run.length,
            "micro_batch": run.micro,
            "budget_gb": plan["limit_gb"],
            "peak_gb": plan["per_device_gb"]["peak"],
            "rollout": {k: v for k, v in rollout.items() if not k.endswith("_gb")},
            "programs_gb": {**rollout["programs_gb"], "cast_gb": cast_gb},
            "attention": ATTENTION_NOTE,
        }
    )
    return {**report, **plan}


def check_rl_fit(setup: rl_setup.RLSetup) -> dict[str, Any]:
    """The RL trainer's start-up check (`memory.check_fit`): `rl_plan` of the set-up the trainer built (at the
    model it loaded); raises `MemoryFitError` naming `memory.device_bytes` when its peak is over the allocator's
    budget."""
    fit = rl_plan(setup)
    config_checks.check_memory("memory.device_bytes", int(fit["peak_gb"] * 1e9), int(fit["budget_gb"] * 1e9))
    return fit


def exploration(
    config,
    settings: exploration_lib.Settings = exploration_lib.DEFAULT,
    *,
    mesh=None,
    program_bytes: ProgramBytes | None = None,
) -> dict[str, Any]:
    """Per-device memory plan of the exploration stage played by the RL config `config` at `settings` (the
    command's defaults unless given; `train.exploration.stage_config`), without weights: resident the decode
    weights (model.decode_dtype, decode shardings) and one batch's KV cache; phases the load's cast (the weights
    as `load_policy_model` places them, model.dtype on the decode shardings, beside their per-layer copy) and the
    rollout programs at exploration's shapes (`rollout_programs`). The policy is the base model (no reward tokens).
    `mesh`: the RL run's (`rl_with_exploration`), else made from `config.mesh`."""

    rc = exploration_lib.stage_config(config, settings)
    if mesh is None:
        mesh = sharding_lib.make_mesh(config_checks.mesh_shape(rc.mesh, jax.device_count()))
    dtype = str(rc.model.dtype)  # the loaded weights' dtype (`eval.run.load_policy_model`)
    model_cfg = dataclasses.replace(model_prep.abstract_model_config(rc), dtype=dtype, param_dtype=dtype)
    loaded = abstract_params_of(model_cfg)
    shapes = rl_setup.rollout_shapes(rc, mesh)
    decode_rules = model_prep.rules(rc.sharding.decode_rules, "sharding.decode_rules")
    rollout = rollout_programs(
        model_cfg,
        loaded,
        mesh,
        shapes,
        decode_rules,
        sampling=rl_config.sampling(rc.rl),
        decode_dtype=rl_config.decode_dtype(rc),
        program_bytes=program_bytes,
    )
    loaded_gb = memory.shard_bytes(loaded, decode_rules.shardings(loaded, mesh))
    resident = {"decode_weights": rollout["decode_weights_gb"], "kv_cache": rollout["kv_cache_gb"]}
    decoding = list(resident)
    plan = memory.memory_plan(
        phases={
            "cast": loaded_gb / 1e9,
            "prefill": rollout["prefill_gb"],
            "session": rollout["session_gb"],
            "decode": rollout["programs_gb"]["decode_gb"],
        },
        resident=resident,
        resident_during={"cast": ["decode_weights"], "prefill": decoding, "session": decoding, "decode": decoding},
        limit_gb=memory.allocator_limit_bytes(int(rc.memory.device_bytes)) / 1e9,
    )
    return {
        "devices": jax.device_count(),
        "mesh": dict(mesh.shape),
        "settings": dataclasses.asdict(settings),
        "rollout": {k: v for k, v in rollout.items() if not k.endswith("_gb")},
        "programs_gb": rollout["programs_gb"],
        "budget_gb": plan["limit_gb"],
        "peak_gb": plan["per_device_gb"]["peak"],
        **plan,
    }


def rl_with_exploration(config) -> dict[str, Any]:
    """An RL config's `--dry_run` (`stages.TRAINERS`): the RL step's plan (`rl`) with the exploration stage's
    (`exploration`, at the command's defaults) under "exploration"; a MemoryFitError names the stage that does
    not fit. Exploration plays by the RL stages' config (`train.exploration`, launch/pipeline.sh), on the RL
    run's mesh (its plan, `dry_plan`, made once); a rollout program whose shapes coincide with one of the RL
    step's is compiled once (`ProgramBytes`)."""
    run, program_bytes = dry_plan(config), ProgramBytes()
    report = rl_run(run, rl_setup.abstract_model(run), program_bytes)
    explore = exploration(run.config, mesh=run.mesh, program_bytes=program_bytes)
    if not explore["fits"]:
        raise MemoryFitError(
            "memory.device_bytes",
            f"exploration (train.exploration at its defaults) needs {explore['peak_gb']:.2f} GB per device, over "
            f"the {explore['budget_gb']:.2f} GB budget (fewer tasks per batch or a shorter --max-context)",
        )
    return {**report, "exploration": explore}
