"""The SFT-length probe: how long stage 1's SFT trains, chosen on held-out tasks of the TRAIN distribution.

    python -m experiments.sft_probe --workdir runs/sft_probe --steps 128,256,512 [--budget quickstart]

For each length L the budget's SFT runs for L steps (its own learning-rate schedule over L) from the budget's
base checkpoint, then greedy success and pass@k (k samples at temperature T, `budget.passk`) are measured on
the world's 'dev' split (fresh tasks drawn as the train split's; never the test). The rule (issue 43): the
length whose pass@k - greedy is largest among those with greedy >= `MIN_GREEDY`; RL gains on what the policy
samples and greedy decoding misses. Prints one JSON line per length and the choice; writes workdir/probe.json.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Sequence

from experiments import ablation
from experiments import budgets as budgets_lib
from rcgrpo_jax.train import sft

MIN_GREEDY = 0.20


def choose(points: Sequence[dict]) -> dict | None:
    """The point with the largest pass_at_k - greedy among those with greedy >= MIN_GREEDY (ties: the
    shorter run); None when no point qualifies."""
    ok = [p for p in points if p["greedy"] >= MIN_GREEDY]
    return max(ok, key=lambda p: (round(p["pass_at_k"] - p["greedy"], 9), -p["steps"])) if ok else None


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default="runs/sft_probe")
    ap.add_argument("--steps", default="128,256,512", help="comma-separated SFT lengths")
    ap.add_argument("--budget", default="quickstart", choices=sorted(budgets_lib.BUDGETS))
    args = ap.parse_args(argv)
    budget = budgets_lib.get(args.budget)
    ablation.host_devices(budget.devices)
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    base = ablation.build_base(workdir, budget, seed=0)
    data_files = ablation.build_datasets(workdir, budget, seed=0)
    points = []
    for steps in (int(x) for x in args.steps.split(",")):
        overrides = {**budget.sft, "train.max_steps": steps}
        config = ablation.stage_config(
            "sft", budget, overrides, **{"model.path": base, "seed": 0, "data.path": data_files["sft"]}
        )
        run_dir = os.path.join(workdir, f"sft_{steps}")
        ablation.train_stage(sft.run, config, run_dir)
        model = os.path.join(run_dir, "hf")
        greedy = ablation.evaluate_row(model, os.path.join(run_dir, "dev_greedy.json"), budget, "dev")["overall"]
        k = ablation.pass_at_k(model, os.path.join(run_dir, "dev_passk.json"), budget, "dev", per_type=None)
        point = {"steps": steps, "greedy": greedy, "pass_at_k": k["pass_at_k"], "k": k["k"], "tasks": k["tasks"]}
        print(json.dumps(point), flush=True)
        points.append(point)
    chosen = choose(points)
    print(json.dumps({"chosen": chosen, "rule": f"max pass@k - greedy with greedy >= {MIN_GREEDY}"}), flush=True)
    with open(os.path.join(workdir, "probe.json"), "w") as f:
        json.dump({"points": points, "chosen": chosen}, f, indent=1)


if __name__ == "__main__":
    main()
