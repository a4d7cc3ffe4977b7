"""PNG plots of RL run metrics: one file per metric, one line per run.

Input is the trainers' metrics JSONL (one `{"step": s, name: value, ...}` dict per line). Missing
keys, non-numeric or non-finite values, blank lines and a torn last line (a run killed mid-write)
are skipped, not errors: a plot shows whatever each run logged.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from rcgrpo_jax.rl import diagnostics

# The variance diagnostics of the RC-GRPO argument, named as rcgrpo_jax.rl.diagnostics logs them.
DEFAULT_METRICS: tuple[str, ...] = (
    "reward_mean",
    "frac_zero_var_groups",
    "adv_std",
    "entropy_mean",
    "kl",
)


def read_jsonl(path: str) -> list[dict]:
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn line from an interrupted writer
            if isinstance(row, dict) and isinstance(row.get("step"), (int, float)):
                rows.append(row)
    return rows


def _number(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def series(rows: Sequence[Mapping], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of one metric, sorted by step, rows lacking a finite value left out."""
    pts = sorted((float(r["step"]), _number(r.get(key))) for r in rows)
    pts = [(s, v) for s, v in pts if v is not None]
    return [s for s, _ in pts], [v for _, v in pts]


def numeric_keys(rows: Sequence[Mapping]) -> list[str]:
    return sorted({k for r in rows for k, v in r.items() if k != "step" and _number(v) is not None})


def _filename(metric: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", metric) + ".png"


def plot_runs(
    runs: Mapping[str, str | Sequence[Mapping]], out_dir: str, metrics: Sequence[str] | None = DEFAULT_METRICS
) -> dict[str, str]:
    """One PNG per metric under out_dir (metric -> path), one line per run. `runs` maps a run label
    to its metrics JSONL path or to already-read rows. metrics=None plots every numeric key logged.
    A metric no run logged gets no file."""
    data = {label: read_jsonl(src) if isinstance(src, str) else list(src) for label, src in runs.items()}
    if metrics is None:
        metrics = sorted({k for rows in data.values() for k in numeric_keys(rows)})
    os.makedirs(out_dir, exist_ok=True)
    written = {}
    for metric in metrics:
        lines = {label: series(rows, metric) for label, rows in data.items()}
        lines = {label: xy for label, xy in lines.items() if xy[0]}
        if not lines:
            continue
        fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
        try:
            for label, (steps, values) in lines.items():
                ax.plot(steps, values, marker="." if len(steps) < 30 else None, label=label)
            ax.set_xlabel("step")
            ax.set_ylabel(metric)
            ax.set_title(metric)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
            path = os.path.join(out_dir, _filename(metric))
            fig.savefig(path, format="png", bbox_inches="tight")
        finally:
            plt.close(fig)
        written[metric] = path
    return written


# The paper's entropy-reward correlation (RC-GRPO rho = -0.15, GRPO +0.49): per-step mean entropy against
# per-step mean reward across training (rl.diagnostics.running_pearson), beside the within-step one.
ACROSS_STEPS = "entropy_reward_pearson_across_steps"
WITHIN_STEP = "entropy_reward_pearson"
ENTROPY_REWARD_FILE = "entropy_reward_correlation.png"


def entropy_reward_series(rows: Sequence[Mapping]) -> dict[str, tuple[list[float], list[float]]]:
    """{"across": (steps, values), "within": (steps, values)} of one run. The across-steps series is the
    logged one; a run that did not log it (written before it was) gets it computed from its per-step
    `entropy_mean` and `reward_mean` (steps where both are finite)."""

    across = series(rows, ACROSS_STEPS)
    if not across[0]:
        pts = sorted((float(r["step"]), _number(r.get("entropy_mean")), _number(r.get("reward_mean"))) for r in rows)
        pts = [p for p in pts if p[1] is not None and p[2] is not None]
        values = diagnostics.running_pearson([p[1] for p in pts], [p[2] for p in pts])
        across = ([p[0] for p in pts], [float(v) for v in values])
    return {"across": across, "within": series(rows, WITHIN_STEP)}


def plot_entropy_reward(runs: Mapping[str, str | Sequence[Mapping]], out_dir: str) -> str | None:
    """One PNG (out_dir/entropy_reward_correlation.png): per run, the across-steps correlation (solid) and
    the within-step one (dashed) in the run's colour. None when no run logged entropy and reward."""
    data = {label: read_jsonl(src) if isinstance(src, str) else list(src) for label, src in runs.items()}
    lines = {label: entropy_reward_series(rows) for label, rows in data.items()}
    lines = {k: v for k, v in lines.items() if v["across"][0] or v["within"][0]}
    if not lines:
        return None
    os.makedirs(out_dir, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    try:
        for i, (label, s) in enumerate(lines.items()):
            color = f"C{i % 10}"
            for key, style, what in (("across", "-", "across steps"), ("within", "--", "within step")):
                steps, values = s[key]
                if steps:
                    ax.plot(
                        steps,
                        values,
                        style,
                        color=color,
                        marker="." if len(steps) < 30 else None,
                        label=f"{label}, {what}",
                    )
        ax.axhline(0.0, color="0.6", lw=0.8)
        ax.set_ylim(-1.05, 1.05)
        ax.set_xlabel("step")
        ax.set_ylabel("Pearson(entropy, reward)")
        ax.set_title("entropy-reward correlation (paper: RC-GRPO -0.15, GRPO +0.49, across training)", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        path = os.path.join(out_dir, ENTROPY_REWARD_FILE)
        fig.savefig(path, format="png", bbox_inches="tight")
    finally:
        plt.close(fig)
    return path
