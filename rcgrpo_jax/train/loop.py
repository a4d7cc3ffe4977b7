"""The step loop both trainers share: run steps, log, guard non-finite updates, checkpoint every N
steps and on SIGTERM or SIGINT, and stop early on request (tests simulate a crash with `stop_after`).

The stop decision is taken by all processes together: SIGTERM may reach only one process (or reach them
at different steps), so after every step each process contributes its flag to `multihost.any_process`
and all of them stop after the same step, with one forced checkpoint of that step."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from absl import logging as absl_logging

from rcgrpo_jax import multihost
from rcgrpo_jax.train import checkpoint as ckpt_lib
from rcgrpo_jax.train import logging as log_lib


class StopRun(Exception):
    """Raised by a step function to end the run after a save: `reason` is the summary's reason (e.g.
    'judge_failures'), the message the one line the launcher prints. The state saved is the one the step was
    given, so a step raises it before its update consumes (donates) that state. Every process must raise it
    at the same step."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """The loop's part of a stage config (`runner.settings_of` reads it)."""

    log_every: int  # log.every_steps: write the metrics every this many steps (and at every non-finite one)
    max_nonfinite: int  # train.max_nonfinite: abort after this many non-finite steps in a row (0: never)


def run_steps(
    step_fn: Callable[[Any, int], tuple[Any, dict]],
    state: Any,
    *,
    start: int,
    n_steps: int,
    settings: LoopSettings,
    ckpt: ckpt_lib.Checkpointer,
    logger: log_lib.MetricsLogger,
    progress: log_lib.Progress,
    meta: Callable[[int], dict],
    stop_after: int | None = None,
    progress_keys: tuple[str, ...] | None = None,
) -> tuple[Any, int, str, dict]:
    """Runs `step_fn(state, step) -> (state, host metrics with a 'finite' flag)` from `start` to `n_steps`.

    Returns (state, step, reason, last logged metrics); reason is 'done' (final checkpoint forced), a
    `StopRun`'s reason (checkpoint of the state before that step forced; metrics = {'stop_message'}),
    'sigterm' / 'sigint' (checkpoint forced, then stop: the signal this process received; a process stopped
    by another process's signal reports 'sigterm') or 'stop_after' (no final save: a simulated crash).
    """
    last: dict[str, Any] = {}
    reason = "done"
    step = start
    with ckpt_lib.StopSignal() as stop:
        while step < n_steps:
            try:
                state, metrics = step_fn(state, step)
            except StopRun as e:
                ckpt.save(step, state, meta(step), force=True)
                last = {"stop_message": str(e)}
                reason = e.reason
                break
            step += 1
            if step % settings.log_every == 0 or not metrics["finite"]:
                last = logger.write(step, metrics)
            if progress_keys is None:
                progress.update(metrics)
            else:
                progress.update(metrics, keys=progress_keys)
            if not metrics["finite"]:
                absl_logging.warning("step %d: non-finite loss or gradient, update skipped", step)
            log_lib.check_nonfinite(step, int(metrics["nonfinite_in_row"]), settings.max_nonfinite)
            ckpt.save(step, state, meta(step))
            if multihost.any_process(stop.requested):  # a collective: every process, every step
                ckpt.save(step, state, meta(step), force=True)
                reason = stop.reason or "sigterm"
                break
            if stop_after is not None and step - start >= stop_after:
                reason = "stop_after"
                break
        if reason == "done":
            ckpt.save(step, state, meta(step), force=True)
    return state, step, reason, last
