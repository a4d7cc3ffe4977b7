"""Will it fit? Each trainer kind's update step compiled against abstract parameters at the largest
bucket on the configured mesh (no weights are allocated), with XLA's memory analysis per device.

  XLA_FLAGS=--xla_force_host_platform_device_count=8 \
  python -m rcgrpo_jax.main --config=configs/sft.py:qwen2_5_7b --dry_run
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rcgrpo_jax import sharding as sharding_lib
from rcgrpo_jax.train import model_prep, optim, rl_batch, rl_config, rl_step, sft
from rcgrpo_jax.train import state as state_lib


def supervised(config) -> dict[str, float]:
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
    report.update(
        {
            "devices": jax.device_count(),
            "seq_len": length,
            "micro_batch": micro,
            "grad_accum": int(config.train.grad_accum),
            "budget_gb": model_prep.device_budget(config) / 1e9,
        }
    )
    return report


def rl(config) -> dict[str, float]:
    """Per-device memory of one PPO mini-batch update at the largest bucket, without weights."""
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
    # Peak: the micro-batch gradient step (params + activations + its float32 gradient output) while the
    # optimizer moments, the gradient accumulator and the frozen reference are resident too.
    report = model_prep.memory_report(grads_c, abstract, state_sh)
    apply_peak = model_prep.memory_report(apply_c, abstract, state_sh)["peak_gb"]
    accum_gb = report["params_gb"] * 4 / jnp.dtype(model_cfg.param_dtype).itemsize
    ref_gb = report["params_gb"] if c.use_ref else 0.0
    report["peak_gb"] = max(report["peak_gb"] + report["opt_state_gb"] + accum_gb + ref_gb, apply_peak + ref_gb)
    report.update(
        {
            "devices": jax.device_count(),
            "seq_len": length,
            "micro_batch": micro,
            "budget_gb": model_prep.device_budget(config) / 1e9,
        }
    )
    return report
