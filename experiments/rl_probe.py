"""The RL probe: which RL settings move a stage-1 policy on held-out tasks of the TRAIN distribution, chosen before
the test is read.

    python -m experiments.rl_probe --init_dir RUN/s0 --workdir runs/rl_probe \
        [--points all:1e-4:20,fs_read_then_act@160:3e-4:20] [--rows sft:grpo,rctp_ft:rc_grpo] [--dev_per_type 32]

`--init_dir` is one seed's directory of an ablation run (`experiments.ablation`, `launch/reproduce.sh`): its
stage-1 policies `sft/hf` and `rctp_ft/hf`. Each point (`Point.parse`: the RL pool's types, optionally `@` its size
per type, then the learning rate and the number of RL steps) runs each row (stage-1 init, RL config file) at the
budget's RL settings with those replaced (`budget_at` on `with_dev`'s budget), through the same `ablation.rl_row` as
the table's rows; the final policy and its init are evaluated greedily on the world's 'dev' split enlarged to
`--dev_per_type` tasks a type (the split's first tasks are the RL curves' own, the rest are the same stream's next
ones; never the test).
The held-out curve is off (`rl.heldout.every` 0): the enlarged split is evaluated once, at the end.

Prints one JSON line per row and point, then the choice (`choose`: the largest mean gain over the inits, unless the
budget's own point is within one dev task of it); writes workdir/probe.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from typing import Sequence

from experiments import ablation
from experiments import budgets as budgets_lib


@dataclasses.dataclass(frozen=True)
class Point:
    """One setting of the probe: the RL pool's types ("" = every trained type) and size per type (None = the
    budget's), the learning rate and the number of RL steps."""

    types: str
    per_type: int | None
    lr: float
    steps: int

    @classmethod
    def parse(cls, text: str) -> Point:
        """'TYPES[@PER_TYPE]:LR:STEPS', TYPES 'all' or type names joined by '+' (fs_move+math_chain)."""
        try:
            pool, lr, steps = text.split(":")
            types, _, per_type = pool.partition("@")
            return cls(
                types="" if types == "all" else types.replace("+", ","),
                per_type=int(per_type) if per_type else None,
                lr=float(lr),
                steps=int(steps),
            )
        except ValueError as e:
            raise ValueError(f"a probe point is TYPES[@PER_TYPE]:LR:STEPS (e.g. all:1e-4:20), got {text!r}") from e

    @property
    def tag(self) -> str:
        pool = (self.types.replace(",", "+") or "all") + (f"@{self.per_type}" if self.per_type else "")
        return f"{pool}_lr{self.lr:g}_n{self.steps}"


def with_dev(budget: budgets_lib.Budget, dev_per_type: int) -> budgets_lib.Budget:
    """The budget with its 'dev' split enlarged (or cut) to `dev_per_type` tasks a type; the split's first tasks
    are the same whatever the size."""
    return dataclasses.replace(budget, world={**budget.world, "dev_per_type": dev_per_type})


def budget_at(budget: budgets_lib.Budget, point: Point) -> budgets_lib.Budget:
    """The budget with the point's RL pool, learning rate and steps and the RL held-out curve off; everything else
    (every other RL setting, the 'dev' split) the budget's."""
    world = {**budget.world, "rl_types": point.types}
    if point.per_type is not None:
        world["rl_per_type"] = point.per_type
    rl = {**budget.rl, "optim.lr": point.lr, "train.max_steps": point.steps, "rl.heldout.every": 0}
    return dataclasses.replace(budget, world=world, rl=rl)


def budget_point(budget: budgets_lib.Budget) -> Point:
    """The budget's own RL settings as a probe point."""
    w = budget.world
    return Point(
        str(w.get("rl_types", "") or ""), None, float(budget.rl["optim.lr"]), int(budget.rl["train.max_steps"])
    )


def choose(results: Sequence[dict], own: Point, margin: float) -> dict:
    """The point with the largest mean gain (dev accuracy after RL minus its init's, over the probed rows), earlier
    points first on a tie; the budget's own point `own` instead when it was probed and the best beats it by no more
    than `margin` (one dev task: 1 / the dev tasks; a smaller difference is a task or less, not a setting).
    `results`: one dict a row and point with "point" (a Point) and "gain"."""
    gains: dict[Point, list[float]] = {}
    for r in results:
        gains.setdefault(r["point"], []).append(r["gain"])
    mean = {p: sum(g) / len(g) for p, g in gains.items()}
    best = max(mean, key=lambda p: round(mean[p], 9))  # max keeps the first of equal keys
    if own in mean and mean[best] - mean[own] <= margin + 1e-9:
        best = own
    return {"point": best, "mean_gain": mean[best], "margin": margin}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--init_dir", required=True, help="one seed's directory of an ablation run (sft/hf, rctp_ft/hf)")
    ap.add_argument("--workdir", default="runs/rl_probe")
    ap.add_argument("--points", default="", help="comma-separated TYPES[@PER_TYPE]:LR:STEPS (default: the budget's)")
    ap.add_argument("--rows", default="sft:grpo,rctp_ft:rc_grpo", help="comma-separated INIT:RL_FILE")
    ap.add_argument("--dev_per_type", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", default="quickstart", choices=sorted(budgets_lib.BUDGETS))
    args = ap.parse_args(argv)
    budget = budgets_lib.get(args.budget)
    own = budget_point(budget)
    points = [Point.parse(p) for p in args.points.split(",")] if args.points else [own]
    rows = [tuple(r.split(":")) for r in args.rows.split(",")]
    stage1 = {init: os.path.join(args.init_dir, init, "hf") for init, _ in rows}
    missing = [p for p in stage1.values() if not os.path.isdir(p)]
    if missing:
        raise SystemExit(f"--init_dir: no stage-1 policy at {', '.join(missing)}")
    ablation.host_devices(budget.devices)
    workdir = os.path.abspath(args.workdir)
    os.makedirs(os.path.join(workdir, "eval"), exist_ok=True)
    ablation.compile_cache(workdir)
    dev_budget = with_dev(budget, args.dev_per_type)
    init_dev = {
        init: ablation.evaluate_row(path, os.path.join(workdir, "eval", f"{init}_init.json"), dev_budget, "dev")
        for init, path in stage1.items()
    }
    results = []
    for point in points:
        at = budget_at(dev_budget, point)
        for init, rl_file in rows:
            summary, _, _ = ablation.rl_row(workdir, at, args.seed, init, rl_file, at.rl, "dev", point.tag, stage1)
            r = {
                "point": point,
                "init": init,
                "rl": rl_file,
                "dev": summary["overall"],
                "gain": summary["overall"] - init_dev[init]["overall"],
                "by_type": {k: v["accuracy"] for k, v in summary["categories"].items()},
                "init_by_type": {k: v["accuracy"] for k, v in init_dev[init]["categories"].items()},
            }
            print(json.dumps({**r, "point": dataclasses.asdict(point)}), flush=True)
            results.append(r)
    chosen = choose(results, own, margin=1.0 / min(s["n"] for s in init_dev.values()))
    rule = "largest mean dev gain; the budget's own point unless beaten by more than one dev task"
    out = {"chosen": {**chosen, "point": dataclasses.asdict(chosen["point"])}, "rule": rule}
    print(json.dumps(out), flush=True)
    with open(os.path.join(workdir, "probe.json"), "w") as f:
        json.dump({"results": [{**r, "point": dataclasses.asdict(r["point"])} for r in results], **out}, f, indent=1)


if __name__ == "__main__":
    main()
