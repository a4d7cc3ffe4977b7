"""Orbax checkpoints of the train state plus a small JSON record (data position, run facts), and a
SIGTERM guard so a preempted run leaves a checkpoint.

Resume is exact because everything a step depends on lives in the state (params, moments, step, rng,
non-finite counter) and the data order is a pure function of (seed, step): restoring step k and
continuing replays steps k+1.. bit for bit.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import orbax.checkpoint as ocp

from rcgrpo_jax.train.state import TrainState


class Checkpointer:
    """A thin wrapper over `ocp.CheckpointManager` with two items: `state` (pytree) and `meta` (JSON)."""

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

    def wait(self) -> None:
        self._mngr.wait_until_finished()

    def close(self) -> None:
        self._mngr.wait_until_finished()
        self._mngr.close()


class StopSignal:
    """Turns SIGTERM (preemption, scancel, `kill`) into a flag the train loop polls after each step, so the
    loop can write a checkpoint and exit cleanly. Restores the previous handler on exit."""

    def __init__(self, signals=(signal.SIGTERM,)):
        self._signals = signals
        self._previous: dict[int, Any] = {}
        self.requested = False

    def _handle(self, signum, frame):  # noqa: ARG002
        self.requested = True

    def __enter__(self) -> "StopSignal":
        if threading.current_thread() is threading.main_thread():  # handlers can only be set there
            for s in self._signals:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._previous.items():
            signal.signal(s, h)
