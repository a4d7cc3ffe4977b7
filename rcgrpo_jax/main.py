"""The launcher: one entry point for every stage, driven by an ml_collections config file.

  python -m rcgrpo_jax.main --config=configs/sft.py:tiny --workdir=/tmp/sft [--config.train.max_steps=10]
  python -m rcgrpo_jax.main --config=configs/sft.py:qwen2_5_7b --dry_run     # will it fit? (no weights)

The config is locked (a misspelt override fails), validated at start-up (config_checks: the error
names the field), and dispatched by `config.stage` to the trainer registered in STAGES. A run resumes
from the latest checkpoint in --workdir.
"""

from __future__ import annotations

import importlib
import json
import os

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Stage config file and preset: configs/<stage>.py:<preset>.", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory: checkpoints, metrics, exported model.")
_DRY_RUN = flags.DEFINE_bool(
    "dry_run",
    False,
    "Compile the update step on abstract parameters and print the "
    "per-device memory from XLA's memory analysis; allocates no model.",
)

# stage -> "module:function" taking (config, workdir); RL stages are filled in by the RL trainer.
STAGES = {
    "sft": "rcgrpo_jax.train.sft:run",
    "rctp_ft": "rcgrpo_jax.train.sft:run",
    "grpo": "rcgrpo_jax.train.rl:run",
    "rc_grpo": "rcgrpo_jax.train.rl:run",
    "dr_grpo": "rcgrpo_jax.train.rl:run",
    "dapo": "rcgrpo_jax.train.rl:run",
    "awpo": "rcgrpo_jax.train.rl:run",
    "eval": "rcgrpo_jax.eval.run:run",
}
DRY_RUNS = {
    "sft": "rcgrpo_jax.train.sft:dry_run",
    "rctp_ft": "rcgrpo_jax.train.sft:dry_run",
    "grpo": "rcgrpo_jax.train.rl:dry_run",
    "rc_grpo": "rcgrpo_jax.train.rl:dry_run",
    "dr_grpo": "rcgrpo_jax.train.rl:dry_run",
    "dapo": "rcgrpo_jax.train.rl:dry_run",
    "awpo": "rcgrpo_jax.train.rl:dry_run",
}

# Environment variables that mean "this process is one of several": then jax.distributed is initialised.
_MULTIPROCESS_ENV = ("JAX_COORDINATOR_ADDRESS", "COORDINATOR_ADDRESS")


def _resolve(target: str):
    module, fn = target.split(":")
    return getattr(importlib.import_module(module), fn)


def wants_distributed(mode: str, environ=os.environ) -> bool:
    """`multihost.initialize`: always / never / auto (a coordinator address is set, or SLURM runs more than
    one task, or Open MPI more than one rank)."""
    if mode in ("always", "never"):
        return mode == "always"
    if any(environ.get(k) for k in _MULTIPROCESS_ENV):
        return True
    for k in ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"):
        if int(environ.get(k, "1") or 1) > 1:
            return True
    return False


def main(argv) -> None:
    del argv
    config = _CONFIG.value
    if config is None:
        raise app.UsageError("--config=configs/<stage>.py:<preset> is required")
    import jax

    if wants_distributed(config.multihost.initialize):
        jax.distributed.initialize()  # reads SLURM / coordinator settings from the environment
    logging.info(
        "process %d of %d, %d devices (%d local)",
        jax.process_index(),
        jax.process_count(),
        jax.device_count(),
        jax.local_device_count(),
    )
    from rcgrpo_jax import config_checks

    if config.stage not in STAGES:
        raise config_checks.ConfigError("stage", f"unknown stage {config.stage!r}; known: {', '.join(STAGES)}")
    if _DRY_RUN.value:
        if config.stage not in DRY_RUNS:
            raise config_checks.ConfigError("stage", f"no dry run for stage {config.stage!r}")
        report = _resolve(DRY_RUNS[config.stage])(config)
        if jax.process_index() == 0:
            print(json.dumps({"stage": config.stage, "preset": config.get("preset"), **report}))
        config_checks.check_memory("memory.device_bytes", int(report["peak_gb"] * 1e9), int(report["budget_gb"] * 1e9))
        return
    if not _WORKDIR.value:
        raise app.UsageError("--workdir is required")
    summary = _resolve(STAGES[config.stage])(config, _WORKDIR.value)
    if jax.process_index() == 0:
        logging.info("finished: %s", summary)
        print(json.dumps({k: v for k, v in summary.items() if k != "metrics"}))


if __name__ == "__main__":
    app.run(main)
