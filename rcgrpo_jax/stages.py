"""Stage dispatch as data: one table from a config's trainer kind (`config.trainer`, one of
`config_lib.common.TRAINERS`) to its entry points, imported here so that the launcher's import of this table
is the arrow to the code it runs.

A config file sets `trainer` (rcgrpo_jax/config_lib/common.py `base`); `config.stage` is the run's name (logs,
checkpoint metadata), free to choose. Each kind's entry points:

  run(config, workdir) -> summary dict      (checks the config first of all: the launcher checks nothing twice)
  dry_run(config) -> memory report           (None: the kind has no dry run)

The eval kind runs every suite that `eval.suites` holds; the package's own suite modules are imported here,
which registers them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from rcgrpo_jax import config_checks
from rcgrpo_jax.eval import api_bank_run, mmlu_pro_run  # noqa: F401  (register their suites in eval.suites)
from rcgrpo_jax.eval import run as eval_run
from rcgrpo_jax.train import dry_run, rl_trainer, sft


@dataclasses.dataclass(frozen=True)
class TrainerKind:
    run: Callable[[Any, str], dict[str, Any]]
    dry_run: Callable[[Any], dict[str, Any]] | None = None


TRAINERS: dict[str, TrainerKind] = {
    "supervised": TrainerKind(run=sft.run, dry_run=dry_run.supervised),
    "rl": TrainerKind(run=rl_trainer.run, dry_run=dry_run.rl_with_exploration),
    "eval": TrainerKind(run=eval_run.run),
}


def kind_of(config) -> TrainerKind:
    """The entry points of `config.trainer` (a name outside the table raises ConfigError naming the field)."""
    return TRAINERS[config_checks.trainer_kind(config)]
