"""Stage dispatch as data: one table from a config's trainer kind (`config.trainer`) to its entry points.

A config file sets `trainer` (rcgrpo_jax/config_lib/common.py `base`); `config.stage` is the run's name (logs,
checkpoint metadata), free to choose. Each entry point is "module:function", imported on use:

  run(config, workdir) -> summary dict      check(config, num_devices) -> mesh shape (start-up validation)
  dry_run(config) -> memory report           (None: the kind has no dry run)
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable

from rcgrpo_jax.config_fields import ConfigError


@dataclasses.dataclass(frozen=True)
class TrainerKind:
    run: str
    check: str
    dry_run: str | None = None


TRAINERS: dict[str, TrainerKind] = {
    "supervised": TrainerKind(
        run="rcgrpo_jax.train.sft:run",
        check="rcgrpo_jax.train.sft:check",
        dry_run="rcgrpo_jax.train.dry_run:supervised",
    ),
    "rl": TrainerKind(
        run="rcgrpo_jax.train.rl_trainer:run",
        check="rcgrpo_jax.train.rl_config:check",
        dry_run="rcgrpo_jax.train.dry_run:rl_with_exploration",
    ),
    "eval": TrainerKind(run="rcgrpo_jax.eval.run:run", check="rcgrpo_jax.config_checks:check"),
}


def resolve(target: str) -> Callable[..., Any]:
    module, fn = target.split(":")
    return getattr(importlib.import_module(module), fn)


def kind_of(config) -> TrainerKind:

    name = config.get("trainer")
    if name not in TRAINERS:
        raise ConfigError("trainer", f"{name!r} is not one of {', '.join(TRAINERS)}")
    return TRAINERS[name]
