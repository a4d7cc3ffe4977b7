"""The SFT probe: how long and at what learning rate stage 1's SFT trains, chosen on held-out tasks of the TRAIN
distribution.

    python -m experiments.sft_probe --workdir runs/sft_probe [--steps 128,256,512] [--lrs 1e-3,3e-3] [--budget quickstart]

For each length L (default: the budget's own, its epochs) and learning rate (default: the budget's) the budget's SFT
runs (its own learning-rate schedule over L) from the budget's base (the world's pretrained one when the budget
pretrains, `ablation.pretrained_base`), then greedy success and pass@k (k samples at temperature T, `budget.passk`)
are measured on the world's 'dev' split (fresh tasks drawn as the train split's; never the test). The rule (issue
43): the point whose pass@k - greedy is largest among those with greedy >= `MIN_GREEDY`; RL gains on what the
policy samples and greedy decoding misses. Prints one JSON line per point and the choice; writes workdir/probe.json.
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
    shorter run, then the smaller learning rate); None when no point qualifies."""
    ok = [p for p in points if p["greedy"] >= MIN_GREEDY]
    return (
        max(ok, key=lambda p: (round(p["pass_at_k"] - p["greedy"], 9), -p["steps"], -p.get("lr", 0.0))) if ok else None
    )


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default="runs/sft_probe")
    ap.add_argument("--steps", default="", help="comma-separated SFT lengths (default: the budget's)")
    ap.add_argument("--lrs", default="", help="comma-separated learning rates (default: the budget's)")
    ap.add_argument("--budget", default="quickstart", choices=sorted(budgets_lib.BUDGETS))
    args = ap.parse_args(argv)
    budget = budgets_lib.get(args.budget)
    ablation.host_devices(budget.devices)
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    ablation.compile_cache(workdir)
    base = ablation.pretrained_base(workdir, budget) if budget.pretrain else ablation.build_base(workdir, budget, 0)
    data_files = ablation.build_datasets(workdir, budget, seed=0)
    lengths = [int(x) for x in args.steps.split(",")] if args.steps else [None]
    lrs = [float(x) for x in args.lrs.split(",")] if args.lrs else [float(budget.sft["optim.lr"])]
    points = []
    for steps, lr in ((n, lr) for n in lengths for lr in lrs):
        overrides = {**budget.sft, "optim.lr": lr, **({"train.max_steps": steps} if steps else {})}
        config = ablation.stage_config(
            "sft", budget, overrides, **{"model.path": base, "seed": 0, "data.path": data_files["sft"]}
        )
        run_dir = os.path.join(workdir, f"sft_{steps or 'budget'}_lr{lr:g}")
        out = ablation.train_stage(sft.run, config, run_dir)
        model = os.path.join(run_dir, "hf")
        greedy = ablation.evaluate_row(model, os.path.join(run_dir, "dev_greedy.json"), budget, "dev")["overall"]
        k = ablation.pass_at_k(model, os.path.join(run_dir, "dev_passk.json"), budget, "dev", per_type=None)
        point = {"steps": int(out.get("step") or steps or 0), "lr": lr, "greedy": greedy, "pass_at_k": k["pass_at_k"],
                 "k": k["k"], "tasks": k["tasks"]}  # fmt: skip
        print(json.dumps(point), flush=True)
        points.append(point)
    chosen = choose(points)
    print(json.dumps({"chosen": chosen, "rule": f"max pass@k - greedy with greedy >= {MIN_GREEDY}"}), flush=True)
    with open(os.path.join(workdir, "probe.json"), "w") as f:
        json.dump({"points": points, "chosen": chosen}, f, indent=1)


if __name__ == "__main__":
    main()
