"""One stage runner for every trainer: checkpointer, restore-or-init, the data fingerprint check, the
metrics logger and progress bar, the step loop (train/loop.py), and the final export.

A trainer is anything with this small protocol (SFT/RCTP-FT in sft.py, the GRPO family in rl_trainer.py):

    stage: str; total_steps: int; mesh: Mesh; progress_keys: tuple[str, ...] | None
    init_state() -> TrainState                       a fresh state (step 0)
    restore_target() -> TrainState                   abstract state with shardings, for orbax
    fingerprint() -> str                             identifies the data order; a resume must match it
    step(state, step) -> (state, host metrics)       one optimizer step (metrics carry 'finite')
    export(state, path) -> None                      the final policy as an HF directory

What the runner reads of a stage's config (checkpoint cadence, logging, the non-finite limit) is read once into
a `Settings` (`settings_of(config)`): the runner and the step loop never see the config.

`run` returns {step, reason, metrics, total_steps}; reason is 'done', 'sigterm', 'sigint', 'stop_after' or
the reason of a `loop.StopRun` a step raised (then also `message`, e.g. reason 'judge_failures').
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any, Protocol

import jax

from rcgrpo_jax.config_fields import ConfigError
from rcgrpo_jax.train import checkpoint as ckpt_lib
from rcgrpo_jax.train import logging as log_lib
from rcgrpo_jax.train import loop as loop_lib


class Trainer(Protocol):
    stage: str
    total_steps: int
    mesh: Any
    progress_keys: tuple[str, ...] | None

    def init_state(self) -> Any: ...

    def restore_target(self) -> Any: ...

    def fingerprint(self) -> str: ...

    def step(self, state: Any, step: int) -> tuple[Any, dict[str, Any]]: ...

    def export(self, state: Any, path: str) -> None: ...


@dataclasses.dataclass(frozen=True)
class Settings:
    """The runner's part of a stage config (`settings_of`)."""

    checkpoint_every: int  # checkpoint.every_steps
    max_to_keep: int  # checkpoint.max_to_keep
    async_save: bool  # checkpoint.async_save
    export_hf: bool  # checkpoint.export_hf: the final policy as workdir/hf
    loop: loop_lib.LoopSettings  # log.every_steps, train.max_nonfinite
    tensorboard: bool  # log.tensorboard
    progress: bool  # log.progress


def settings_of(config) -> Settings:
    """The runner's `Settings`, read from `checkpoint`, `log` and `train.max_nonfinite` of a stage config."""
    ck, log = config.checkpoint, config.log
    return Settings(
        checkpoint_every=int(ck.every_steps),
        max_to_keep=int(ck.max_to_keep),
        async_save=bool(ck.async_save),
        export_hf=bool(ck.export_hf),
        loop=loop_lib.LoopSettings(log_every=int(log.every_steps), max_nonfinite=int(config.train.max_nonfinite)),
        tensorboard=bool(log.tensorboard),
        progress=bool(log.progress),
    )


def run(trainer: Trainer, settings: Settings, workdir: str, *, stop_after: int | None = None) -> dict[str, Any]:
    """Trains from the newest readable checkpoint in `workdir/checkpoints` (`Checkpointer.restore_latest`: each
    unreadable one named in one line on stderr; "resumed from step K of N" printed) or from
    `trainer.init_state()`, logging to
    workdir/metrics.jsonl (+ TensorBoard), and exports workdir/hf when the run completes. `stop_after` ends
    this call after that many steps without a final save (tests use it to simulate a crash)."""
    os.makedirs(workdir, exist_ok=True)
    is_main = jax.process_index() == 0
    ckpt = ckpt_lib.Checkpointer(
        os.path.join(workdir, "checkpoints"),
        every_steps=settings.checkpoint_every,
        max_to_keep=settings.max_to_keep,
        async_save=settings.async_save,
    )
    fingerprint = trainer.fingerprint()
    n_steps = trainer.total_steps

    def report(line: str) -> None:
        if is_main:
            print(line, file=sys.stderr, flush=True)

    with jax.set_mesh(trainer.mesh):
        try:
            restored = ckpt.restore_latest(trainer.restore_target(), report=report) if ckpt.all_steps() else None
        except BaseException:
            ckpt.close()
            raise
        if restored is None:
            state, start = trainer.init_state(), 0
        else:
            state, start = restored.state, restored.step
            if restored.meta.get("data_fingerprint") != fingerprint:
                ckpt.close()
                raise ConfigError("data", "the data differ from those of the checkpoint being resumed")
            report(f"resumed from step {start} of {n_steps} ({ckpt.directory}/{start})")
    logger = log_lib.MetricsLogger(
        workdir, is_main=is_main, tensorboard=settings.tensorboard, resume_step=start if start > 0 else None
    )
    progress = log_lib.Progress(n_steps, start, enabled=is_main and settings.progress, desc=trainer.stage)

    def meta(s: int) -> dict[str, Any]:
        return {
            "step": int(s),
            "data_position": int(s),
            "data_fingerprint": fingerprint,
            "total_steps": n_steps,
            "stage": trainer.stage,
        }

    try:
        with jax.set_mesh(trainer.mesh):
            state, step, reason, last = loop_lib.run_steps(
                trainer.step,
                state,
                start=start,
                n_steps=n_steps,
                settings=settings.loop,
                ckpt=ckpt,
                logger=logger,
                progress=progress,
                meta=meta,
                stop_after=stop_after,
                progress_keys=trainer.progress_keys,
            )
    finally:
        ckpt.close()
        logger.close()
        progress.close()
    if reason == "done" and settings.export_hf:
        trainer.export(state, os.path.join(workdir, "hf"))
    out = {"step": step, "reason": reason, "metrics": last, "total_steps": n_steps}
    if "stop_message" in last:  # a StopRun: the line the launcher prints
        out["message"] = last["stop_message"]
    return out
