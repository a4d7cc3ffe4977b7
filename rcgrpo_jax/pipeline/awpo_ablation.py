"""AWPO's ablation (the paper's Table 4) in miniature, on the CPU world with the `rule` judge:

    python -m rcgrpo_jax.pipeline.awpo_ablation [--workdir runs/awpo] [--budget quickstart|smoke] [--seeds N]

One SFT policy (the quickstart's stage 1, through the same code), then RL rows with equal budgets from it:
GRPO (outcome reward only), the naive mixed reward (GRPO on r + s: no gate, no difficulty weight, no clip
change), AWPO, and AWPO without each of its three parts (gate always open; difficulty weight 1; a fixed
clip radius). Every row is scored greedily by BFCL's official checker on the world's test split; the report
(workdir/awpo_report.md, .json, plots/) gives the table, the per-step AWPO diagnostics and what they show.

The judge here is `rule`, a deterministic rubric over the step's calls: a stand-in for the paper's
Qwen3-235B judge, so this shows the mechanics of the estimator (when the gate opens, how the weights move),
not what a reasoning judge adds.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any, Mapping, Sequence

from rcgrpo_jax.pipeline import ablation
from rcgrpo_jax.pipeline import budgets as budgets_lib

# row -> (RL config file, overrides of rl.advantage): the paper's Table 4 rows.
ROWS: dict[str, tuple[str, Mapping[str, Any]]] = {
    "GRPO": ("grpo", {}),
    "mixed reward (GRPO on r + s)": (
        "awpo",
        {"gate": "always", "saturation_gate": False, "difficulty": "none", "clip_tighten": 0.0},
    ),
    "AWPO": ("awpo", {}),
    "AWPO w/o gate": ("awpo", {"gate": "always"}),
    "AWPO w/o difficulty weight": ("awpo", {"difficulty": "none"}),
    "AWPO w/o dynamic clip": ("awpo", {"clip_tighten": 0.0}),
}
# Logged per RL step (rl.diagnostics and the AWPO estimator's metrics); absent ones are skipped.
DIAGNOSTICS = (
    "reward_mean",
    "frac_zero_var_groups",
    "judge_score_mean",
    "estimator/gate_open_frac",
    "estimator/difficulty_mean",
    "estimator/clip_scale_mean",
)


def row_config(row: str, budget: budgets_lib.Budget, init: str, seed: int):
    """The RL config of `row`: its stage file's tiny preset, the budget's RL overrides, the SFT init."""
    stage_file, options = ROWS[row]
    fields = {"model.path": init, "reference.path": init, "seed": seed}
    fields.update({f"rl.advantage.awpo.{k}": v for k, v in options.items()})
    return ablation.stage_config(stage_file, budget, budget.rl, **fields)


def run(workdir: str, *, budget_name: str = "quickstart", seeds: int = 1, quiet: bool = False) -> dict:
    """The whole AWPO ablation; returns the report's payload (also workdir/awpo_report.json)."""
    import jax

    from rcgrpo_jax.train import rl, rl_config, sft

    budget = budgets_lib.get(budget_name)
    for row in ROWS:  # every override names an existing field with a valid value, before anything trains
        rl_config.choices(row_config(row, budget, None, 0))
    workdir = os.path.abspath(workdir)
    os.makedirs(workdir, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", os.path.join(workdir, ".xla_cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    p = budget.plan_s
    plan = [("world + tiny checkpoint", p["setup"]), ("SFT", p["sft"]), ("evaluate SFT", p["eval"])]
    plan += [(f"{row} seed {s}", p["rl"] + p["eval"]) for s in range(seeds) for row in ROWS] + [("report", 5)]
    console = ablation.Console(plan, enabled=not quiet)
    ev_dir = os.path.join(workdir, "eval")

    t = console.start("world + tiny checkpoint")
    base = ablation.build_base(workdir, budget)
    data_files = ablation.build_datasets(workdir, budget)
    console.end("world + tiny checkpoint", t, base)
    t = console.start("SFT")
    config = ablation.stage_config("sft", budget, budget.sft, **{"model.path": base, "data.path": data_files["sft"]})
    ablation.train_stage(sft.run, config, os.path.join(workdir, "sft"))
    init = os.path.join(workdir, "sft", "hf")
    console.end("SFT", t)
    t = console.start("evaluate SFT")
    evals: dict[str, list[dict]] = {
        "SFT": [ablation.evaluate_row(init, os.path.join(ev_dir, "sft.json"), budget, "test")]
    }
    console.end("evaluate SFT", t)

    rl_metrics: dict[str, str] = {}
    for seed in range(seeds):
        for i, row in enumerate(ROWS):
            t = console.start(f"{row} seed {seed}")
            run_dir = os.path.join(workdir, "rl", f"row{i}_s{seed}")
            ablation.train_stage(rl.run, row_config(row, budget, init, seed), run_dir)
            rl_metrics[f"{row} s{seed}"] = os.path.join(run_dir, "metrics.jsonl")
            s = ablation.evaluate_row(
                os.path.join(run_dir, "hf"), os.path.join(ev_dir, f"row{i}_s{seed}.json"), budget, "test"
            )
            evals.setdefault(row, []).append(s)
            console.end(f"{row} seed {seed}", t, f"overall {100 * s['overall']:.1f}%")
    t = console.start("report")
    payload = write_report(
        workdir, evals, rl_metrics, budget=budget, seeds=seeds, total_s=time.perf_counter() - console.t0
    )
    console.end("report", t, os.path.join(workdir, "awpo_report.md"))
    if not quiet:
        print("\n" + payload["table"] + "\n" + payload["verdict"], flush=True)
    return payload


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def diagnostics(path: str) -> dict[str, float | None]:
    """Each DIAGNOSTICS key's mean over the run's steps (None when the run did not log it)."""
    from rcgrpo_jax.eval import plots

    rows = plots.read_jsonl(path) if os.path.exists(path) else []
    return {k: _mean(plots.series(rows, k)[1]) for k in DIAGNOSTICS}


def verdict(evals: Mapping[str, Sequence[Mapping[str, Any]]], diag: Mapping[str, Mapping[str, float | None]]) -> str:
    """What the table shows, in plain words, whatever it shows."""
    n = evals["SFT"][0]["n"]
    resolution = 100.0 / max(n, 1)
    overall = {row: 100 * _mean([s["overall"] for s in runs]) for row, runs in evals.items()}
    best = max((r for r in ROWS if r in overall), key=lambda r: overall[r])
    spread = max(overall[r] for r in ROWS if r in overall) - min(overall[r] for r in ROWS if r in overall)
    gate = diag.get("AWPO", {}).get("estimator/gate_open_frac")
    lines = [
        f"One test episode is {resolution:.2f} points. The rows span {spread:.1f} points; the best is {best} "
        f"({overall[best]:.1f}% against SFT's {overall['SFT']:.1f}%).",
    ]
    if spread <= 2 * resolution:
        lines.append("Every row is within two test episodes of the others: at this scale the table cannot rank them.")
    if gate is not None:
        lines.append(
            f"AWPO's gate was open in {100 * gate:.0f}% of the groups on average (closed where the outcome had no "
            "spread or was saturated, and where the judge inflated the spread)."
        )
    lines.append(
        "The judge is the `rule` stand-in, a deterministic rubric, not an LLM reading the reasoning: this "
        "miniature shows the estimator's mechanics, not the paper's result."
    )
    return " ".join(lines)


def write_report(workdir, evals, rl_metrics, *, budget, seeds: int, total_s: float) -> dict[str, Any]:
    from rcgrpo_jax.eval import plots

    diag = {row: diagnostics(rl_metrics[f"{row} s0"]) for row in ROWS if f"{row} s0" in rl_metrics}
    head = "| row | overall (%) | " + " | ".join(DIAGNOSTICS) + " |\n|---|---:|" + "---:|" * len(DIAGNOSTICS)
    lines = [head]
    for row, runs in evals.items():
        cells = [f"{100 * _mean([s['overall'] for s in runs]):.1f}"]
        cells += ["-" if diag.get(row, {}).get(k) is None else f"{diag[row][k]:.3f}" for k in DIAGNOSTICS]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    text = verdict(evals, diag)
    written = plots.plot_runs(rl_metrics, os.path.join(workdir, "plots"), metrics=DIAGNOSTICS)
    md = [
        f"# AWPO ablation in miniature ({budget.name} budget, {seeds} seed{'s' if seeds > 1 else ''}, {total_s / 60:.1f} min)",
        "",
        "Test accuracy by BFCL's official multi-turn checker on the world's test split; diagnostics are means "
        "over the RL steps of seed 0. Every RL row starts from the same SFT policy with the same budget.",
        "",
        table,
        "## What it shows",
        "",
        text,
        "",
        "## Plots",
        "",
        *[f"![{m}](plots/{os.path.basename(p)})" for m, p in written.items()],
        "",
    ]
    with open(os.path.join(workdir, "awpo_report.md"), "w") as f:
        f.write("\n".join(md))
    payload = {
        "rows": {
            row: {"test_overall": _mean([s["overall"] for s in runs]), "per_seed": [s["overall"] for s in runs]}
            for row, runs in evals.items()
        },
        "diagnostics": diag,
        "verdict": text,
        "table": table,
        "plots": written,
        "minutes": total_s / 60,
        "seeds": seeds,
    }
    with open(os.path.join(workdir, "awpo_report.json"), "w") as f:
        json.dump({k: v for k, v in payload.items() if k != "table"}, f, indent=1)
    return payload


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="AWPO's Table 4 in miniature on the CPU (see module doc).")
    ap.add_argument("--workdir", default="runs/awpo")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--budget", default="quickstart", choices=sorted(budgets_lib.BUDGETS))
    args = ap.parse_args(argv)
    if args.seeds < 1:
        ap.error("--seeds must be at least 1")
    run(args.workdir, budget_name=args.budget, seeds=args.seeds)


if __name__ == "__main__":
    main()
