"""Metrics out of the train loop: a JSONL file and TensorBoard events in the workdir (process 0 only),
a tqdm progress bar with ETA, and the host-side guard that aborts after K non-finite steps in a row.

Metric names: plain names are the deterministic quantities of a step (loss, grad_norm, lr, ...);
names under `time/` (seconds, tokens/s) vary between runs and are left out when runs are compared.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

import numpy as np

METRICS_FILE = "metrics.jsonl"


def _scalar(v: Any) -> float | int:
    a = np.asarray(v)
    if a.dtype.kind in "iub":
        return int(a)
    return float(a)


class MetricsLogger:
    """Writes `{"step": s, **metrics}` lines and TensorBoard scalars. On resume from step k, lines for
    steps after k (written before a crash) are dropped first, so the file reads as one uninterrupted run."""

    def __init__(self, workdir: str, *, is_main: bool = True, tensorboard: bool = True, resume_step: int | None = None):
        self.is_main = is_main
        self._file = None
        self._tb = None
        if not is_main:
            return
        os.makedirs(workdir, exist_ok=True)
        self.path = os.path.join(workdir, METRICS_FILE)
        if resume_step is not None and os.path.exists(self.path):
            kept = [line for line in read_metrics(self.path) if line["step"] <= resume_step]
            with open(self.path, "w") as f:
                f.writelines(json.dumps(line) + "\n" for line in kept)
        elif resume_step is None and os.path.exists(self.path):
            os.remove(self.path)  # a fresh run starts a fresh file
        self._file = open(self.path, "a", buffering=1)
        if tensorboard:
            from tensorboardX import SummaryWriter  # imported lazily: only process 0 needs it

            self._tb = SummaryWriter(os.path.join(workdir, "tb"))

    def write(self, step: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
        row = {"step": int(step), **{k: _scalar(v) for k, v in metrics.items()}}
        if self._file is not None:
            self._file.write(json.dumps(row, allow_nan=True) + "\n")
        if self._tb is not None:
            for k, v in row.items():
                if k != "step":
                    self._tb.add_scalar(k, v, int(step))
        return row

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def read_metrics(path: str) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def deterministic(row: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a metrics row that must repeat exactly between runs (drops `time/...`)."""
    return {k: v for k, v in row.items() if not k.startswith("time/")}


class Progress:
    """tqdm bar with ETA on process 0; a no-op elsewhere or when disabled."""

    def __init__(self, total: int, initial: int = 0, *, enabled: bool = True, desc: str = "train"):
        self._bar = None
        if enabled:
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, desc=desc, dynamic_ncols=True, smoothing=0.1)

    def update(self, metrics: Mapping[str, Any], keys=("loss", "grad_norm", "lr")) -> None:
        if self._bar is None:
            return
        self._bar.set_postfix({k: f"{_scalar(metrics[k]):.4g}" for k in keys if k in metrics}, refresh=False)
        self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class NonFiniteError(RuntimeError):
    pass


def check_nonfinite(step: int, in_a_row: int, limit: int) -> None:
    """The jitted step skips a non-finite update and counts it; the host aborts once the count reaches
    `limit` (the skipped steps are already in the metrics file)."""
    if limit > 0 and in_a_row >= limit:
        raise NonFiniteError(f"{in_a_row} non-finite steps in a row (train.max_nonfinite={limit}) at step {step}")
