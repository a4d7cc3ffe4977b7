"""Orbax checkpoints of the train state plus a small JSON record (data position, run facts), and a
SIGTERM/SIGINT guard so a preempted or interrupted run leaves a checkpoint (the launcher then exits with
`rcgrpo_jax.main.PREEMPTED_EXIT`).

Resume is exact because everything a step depends on lives in the state (params, moments, step, rng,
non-finite counter) and the data order is a pure function of (seed, step): restoring step k and
continuing replays steps k+1.. bit for bit.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
from typing import Any

import jax
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from rcgrpo_jax import multihost
from rcgrpo_jax.config_fields import InputError
from rcgrpo_jax.train.state import TrainState


@dataclasses.dataclass(frozen=True)
class Restored:
    """A checkpoint that read: its step, state and JSON record; `skipped` lists the newer unreadable steps."""

    step: int
    state: TrainState
    meta: dict[str, Any]
    skipped: tuple[int, ...] = ()


def _one_line(e: BaseException, limit: int = 160) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    first = (lines[0] if lines else "").split(" See full TensorStore details")[0]  # the rest is a repr
    text = f"{type(e).__name__}: {first}".rstrip(": ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Checkpointer:
    """A thin wrapper over `ocp.CheckpointManager` with two items: `state` (pytree) and `meta` (JSON).

    A save is atomic on a local or network file system: orbax writes `<step>.orbax-checkpoint-tmp-*` and
    renames it to `<step>` only once every item is written, so a save cut short (SIGKILL, a full disk)
    leaves a temporary directory that `latest_step` never lists (it stays on disk, untouched; the same step
    can be saved again beside it). `restore_latest` falls back past a checkpoint that no longer reads."""

    def __init__(self, directory: str, *, every_steps: int, max_to_keep: int, async_save: bool = False):
        every = max(int(every_steps), 1)
        # An explicit cadence: orbax's default policy would also save the first step of every run.
        options = ocp.CheckpointManagerOptions(
            should_save_fn=lambda step, last_saved: step % every == 0,
            max_to_keep=max_to_keep,
            enable_async_checkpointing=async_save,
            create=True,
        )
        self.directory = os.path.abspath(directory)
        self._mngr = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "meta"))

    def latest_step(self) -> int | None:
        return self._mngr.latest_step()

    def all_steps(self) -> list[int]:
        return list(self._mngr.all_steps())

    def save(self, step: int, state: TrainState, meta: dict[str, Any], *, force: bool = False) -> bool:
        """Saves when `step` is on the cadence (or `force`, unless `step` is saved already); returns whether a
        save started."""
        if force and self._mngr.latest_step() == int(step):
            return False
        return self._mngr.save(
            int(step),
            args=ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)),
            force=force,
        )

    def restore(self, step: int, target: TrainState) -> tuple[TrainState, dict[str, Any]]:
        """`target`: the state as ShapeDtypeStructs with shardings, so each array lands on its devices."""
        out = self._mngr.restore(
            int(step), args=ocp.args.Composite(state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore())
        )
        return out.state, dict(out.meta)

    def restore_latest(self, target: TrainState, *, report=print) -> Restored | None:
        """The newest checkpoint that reads, or None when the directory holds none.

        Steps are tried newest first. One that fails to read (a truncated data or metadata file, a missing
        item) is reported in one line through `report` and moved, whole, to `unreadable_dir` (the run must be
        able to save that step again; nothing is deleted), and the next older one is tried. When every
        checkpoint fails, nothing is moved and `InputError` names the directory.
        """
        steps = sorted(self.all_steps(), reverse=True)
        failed: list[tuple[int, str]] = []
        for step in steps:
            why = None
            try:
                state, meta = self.restore(step, target)
            except Exception as e:  # orbax raises ValueError, KeyError, JSONDecodeError, OSError, ...
                why = _one_line(e)
            # Every process takes the same decision (a damaged shard may fail on one process only).
            if multihost.any_process(why is not None):
                failed.append((step, why or "unreadable on another process"))
                continue
            for bad, why in failed:
                moved = self._move_aside(bad)
                report(f"checkpoint {self.directory}/{bad} is unreadable ({why}); moved to {moved}; using step {step}")
            if failed:
                self._mngr.reload()
            return Restored(step=step, state=state, meta=meta, skipped=tuple(s for s, _ in failed))
        if failed:
            for bad, why in failed:
                report(f"checkpoint {self.directory}/{bad} is unreadable ({why})")
            raise InputError(
                f"{self.directory}: no readable checkpoint (steps {', '.join(str(s) for s, _ in failed)}; each "
                "named above); move the directory away to start the run afresh"
            )
        return None

    @property
    def unreadable_dir(self) -> str:
        """Where `restore_latest` moves unreadable checkpoints: `checkpoints_unreadable` beside the directory."""
        return self.directory.rstrip(os.sep) + "_unreadable"

    def _move_aside(self, step: int) -> str:
        src = os.path.join(self.directory, str(step))
        dest = os.path.join(self.unreadable_dir, str(step))
        if jax.process_index() == 0:
            os.makedirs(self.unreadable_dir, exist_ok=True)
            n = 1
            while os.path.exists(dest):
                dest, n = os.path.join(self.unreadable_dir, f"{step}.{n}"), n + 1
            os.rename(src, dest)
        if jax.process_count() > 1:
            multihost_utils.sync_global_devices(f"checkpoint_move_{step}")
        return dest

    def wait(self) -> None:
        self._mngr.wait_until_finished()

    def close(self) -> None:
        self._mngr.wait_until_finished()
        self._mngr.close()


class StopSignal:
    """Turns SIGTERM (preemption, scancel, `kill`) and SIGINT (Ctrl-C) into a flag the train loop polls after
    each step, so the loop can write a checkpoint and exit cleanly. `reason` is 'sigterm' or 'sigint' (the
    first signal that arrived), None before any. A second SIGINT raises KeyboardInterrupt at once (a user
    who presses Ctrl-C twice does not wait for the step to end). Restores the previous handlers on exit."""

    def __init__(self, signals=(signal.SIGTERM, signal.SIGINT)):
        self._signals = signals
        self._previous: dict[int, Any] = {}
        self.requested = False
        self.reason: str | None = None

    def _handle(self, signum, frame):  # noqa: ARG002
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = True
        if self.reason is None:
            self.reason = signal.Signals(signum).name.lower()

    def __enter__(self) -> "StopSignal":
        if threading.current_thread() is threading.main_thread():  # handlers can only be set there
            for s in self._signals:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._previous.items():
            signal.signal(s, h)
