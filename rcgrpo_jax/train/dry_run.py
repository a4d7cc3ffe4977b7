"""Will it fit? Each trainer kind's programs compiled against abstract parameters at the preset's
production shapes on the configured mesh (no weights are allocated), with XLA's memory analysis per
device, assembled into one memory plan (`model_prep.memory_plan`):

  XLA_FLAGS=--xla_force_host_platform_device_count=8 \\
  python -m rcgrpo_jax.main --config=configs/rc_grpo.py:qwen2_5_7b --dry_run

RL: the update (micro-batch gradient step and optimizer apply at the largest bucket), and the rollout
phase's prefill (a `rl.prefill_chunk`-wide block into a full-capacity cache) and decode (one
`max_step_tokens` decode call over a full-capacity cache), at `rl.rollout_chunk` rows (rounded as the
sampler rounds them). Resident: train state (params + AdamW moments), the frozen reference, the decode
weights (`model.decode_dtype`, decode shardings) and the KV cache (rows x capacity); the decode weights
and the KV cache live only during the rollout phase. SFT: the update only (prefill and decode are 0).
Each program is compiled once.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from rcgrpo_jax import sharding as sharding_lib
from rcgrpo_jax.train import model_prep, optim, rl_batch, rl_config, rl_step, sft
from rcgrpo_jax.train import state as state_lib


def decode_dtype(config) -> str:
    """`model.decode_dtype` (the dtype of the sampler's weights), defaulting to the compute dtype."""
    return str(config.model.get("decode_dtype", None) or config.model.dtype)


def _with_shardings(tree, shardings):
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), tree, shardings)


def rollout_shapes(config, mesh) -> dict[str, int]:
    """The rollout phase's largest shapes: rows of one engine call, the KV capacity per row (as
    `rollout.policies.ModelPolicy` sizes it), the prefill block and the decode budget."""
    from rcgrpo_jax.sampling import buckets
    from rcgrpo_jax.sampling.sampler import batch_multiple

    rl = config.rl
    episodes = int(config.train.batch_size)
    # Continuous batching streams every rollout through rl.rollout_rows rows; else one row per rollout of a chunk.
    chunk = int(rl.get("rollout_rows", 0) or 0) or int(rl.rollout_chunk) or episodes
    new_tokens = buckets.length_bucket(int(rl.max_step_tokens))
    return {
        "rows": buckets.batch_bucket(min(chunk, episodes), batch_multiple(mesh)),
        "capacity": int(rl.max_context) + max(int(rl.prefill_chunk), new_tokens),
        "prefill_width": int(rl.prefill_chunk),
        "max_new_tokens": new_tokens,
    }


def rollout_programs(config, model_cfg, abstract_params, mesh) -> dict[str, Any]:
    """Per-device GB of the rollout phase: prefill and decode (beyond the decode weights and KV cache they
    read, which are reported apart), compiled at `rollout_shapes` with abstract decode weights."""
    from rcgrpo_jax.sampling import SamplingParams, decode_step, sampler
    from rcgrpo_jax.sampling.sampler import Sampler, cache_sharding, mesh_context

    shapes = rollout_shapes(config, mesh)
    rows, capacity = shapes["rows"], shapes["capacity"]
    rl = config.rl
    dtype = jnp.dtype(decode_dtype(config))
    stacked_sh = model_prep.param_shardings(abstract_params, mesh, config.sharding.decode_rules)
    weights = jax.eval_shape(lambda p: decode_step._cast_and_split(p, dtype), abstract_params)
    per_layer = decode_step.split_shardings(stacked_sh)
    weights_sh = {**per_layer, "layers": (per_layer["layers"],) * len(weights["layers"])}
    weights = _with_shardings(weights, weights_sh)
    cache = _with_shardings(
        jax.eval_shape(lambda: decode_step.init_cache(model_cfg, rows, capacity)), cache_sharding(model_cfg, mesh)
    )

    def batch(shape, dt):
        return jax.ShapeDtypeStruct(shape, dt, sharding=sharding_lib.batch_sharding(mesh, len(shape)))

    top_p = float(rl.top_p) if float(rl.top_p or 1.0) < 1.0 else None
    sampling = SamplingParams(float(rl.temperature), int(rl.top_k or 0) or None, top_p)
    # kv_write="scatter": the program a GPU runs (on a CPU backend "auto" would pick the CPU's select).
    s = Sampler(model_cfg, shapes["max_new_tokens"], sampling, shapes["prefill_width"], kv_write="scatter")
    rules = model_prep.rules(config.sharding.decode_rules)
    with mesh_context(mesh, rules):
        prefill = sampler._prefill.lower(
            s,
            weights,
            batch((rows, shapes["prefill_width"]), jnp.int32),
            batch((rows,), jnp.int32),
            cache,
        ).compile()
        decode = sampler._decode.lower(
            s,
            weights,
            batch((rows, model_cfg.vocab_size), jnp.float32),
            cache,
            batch((rows, 2), jnp.int32),
            batch((rows,), jnp.int32),
            jax.random.key(0),
        ).compile()
    weights_b = model_prep.shard_bytes(weights, weights_sh)
    cache_b = model_prep.shard_bytes(cache, cache_sharding(model_cfg, mesh))
    return {
        **shapes,
        "decode_dtype": dtype.name,
        "decode_weights_gb": weights_b / 1e9,
        "kv_cache_gb": cache_b / 1e9,
        "prefill_gb": (model_prep.program_bytes(prefill) - weights_b - cache_b) / 1e9,
        "decode_gb": (model_prep.program_bytes(decode) - weights_b - cache_b) / 1e9,
    }


def supervised(config) -> dict[str, Any]:
    """Per-device memory of the SFT update step at the largest bucket, without allocating the model."""
    from rcgrpo_jax import config_checks
    from rcgrpo_jax.models.transformer import abstract_params as abstract_params_of

    config = config_checks.resolved(config, jax.device_count())
    mesh = sharding_lib.make_mesh(sft.check(model_prep.dry_run_config(config), jax.device_count()))
    model_cfg = model_prep.abstract_model_config(config, extra_tokens=2 if config.get("add_reward_tokens") else 0)
    _, state_sh, abstract, step_fn = sft.optimizer_and_state(
        config, model_cfg, abstract_params_of(model_cfg), mesh, 1000
    )
    micro = config.train.batch_size // config.train.grad_accum
    length = int(config.data.buckets[-1])
    logical = model_prep.rules(config.sharding.train_rules).logical
    compiled = sft.compile_step(step_fn, abstract, state_sh, (config.train.grad_accum, micro, length), mesh, logical)
    report = model_prep.memory_report(compiled, abstract, state_sh)
    budget_gb = model_prep.device_budget(config) / 1e9
    train_state = report["params_gb"] + report["opt_state_gb"]
    plan = model_prep.memory_plan(
        phases={"update": report["peak_gb"] - train_state, "prefill": 0.0, "decode": 0.0},
        resident={"train_state": train_state},
        resident_during={"update": ["train_state"], "prefill": [], "decode": []},
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
        }
    )
    return {**report, **plan}


def rl(config) -> dict[str, Any]:
    """Per-device memory plan of one RL step: rollout prefill and decode, and one PPO mini-batch update at
    the largest bucket, without weights."""
    from rcgrpo_jax import config_checks
    from rcgrpo_jax.models.transformer import abstract_params as abstract_params_of

    config = config_checks.resolved(rl_config.resolve_config(config), jax.device_count())
    mesh = sharding_lib.make_mesh(rl_config.check(model_prep.dry_run_config(config), jax.device_count()))
    c = rl_config.choices(config)
    model_cfg = model_prep.abstract_model_config(
        config, extra_tokens=2 if config.rl.reward_conditioning == "sampled" else 0
    )
    abstract_params = abstract_params_of(model_cfg)
    p_sh = model_prep.param_shardings(abstract_params, mesh, config.sharding.train_rules)
    tx = optim.make_optimizer(config.optim, 1000)
    abstract = state_lib.abstract_state(abstract_params, tx)
    state_sh = state_lib.state_shardings(abstract, mesh, p_sh, tx)
    chunk, temp = int(config.train.logprob_chunk), float(config.rl.temperature)
    updater = rl_step.Updater(model_cfg, tx, c.loss, c.loss_options, chunk, state_sh, mesh, temp)
    micro = int(config.train.batch_size) // int(config.train.grad_accum)
    length = int(config.data.buckets[-1])
    with jax.set_mesh(mesh), sharding_lib.axis_rules(model_prep.rules(config.sharding.train_rules).logical):
        micro_shapes = rl_batch.abstract_batch(mesh, micro, length, with_ref=c.use_ref)
        grads_c, apply_c = updater.lower(state_lib.with_shardings(abstract, state_sh), micro_shapes)
    # The update: the micro-batch gradient step (its activations, its float32 gradient output and the
    # gradient accumulator) or the optimizer apply, beyond the train state they read.
    report = model_prep.memory_report(grads_c, abstract, state_sh)
    apply_peak = model_prep.memory_report(apply_c, abstract, state_sh)["peak_gb"]
    params_gb, opt_gb = report["params_gb"], report["opt_state_gb"]
    accum_gb = params_gb * 4 / jnp.dtype(model_cfg.param_dtype).itemsize
    update_gb = max(report["peak_gb"] - params_gb + accum_gb, apply_peak - params_gb - opt_gb)
    rollout = rollout_programs(config, model_cfg, abstract_params, mesh)
    budget_gb = model_prep.device_budget(config) / 1e9
    resident = {
        "train_state": params_gb + opt_gb,
        "reference": params_gb if c.use_ref else 0.0,
        "decode_weights": rollout["decode_weights_gb"],
        "kv_cache": rollout["kv_cache_gb"],
    }
    rollout_resident = list(resident)
    plan = model_prep.memory_plan(
        phases={"update": update_gb, "prefill": rollout["prefill_gb"], "decode": rollout["decode_gb"]},
        resident=resident,
        resident_during={
            "update": ["train_state", "reference"],
            "prefill": rollout_resident,
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
        }
    )
    return {**report, **plan}
