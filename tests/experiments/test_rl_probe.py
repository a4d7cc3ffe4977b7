"""The RL probe's points and rule, by hand: parsing, the budget it runs, the largest mean dev gain."""

from __future__ import annotations

import pytest

from experiments import budgets as budgets_lib
from experiments import rl_probe
from experiments.rl_probe import Point


def test_parse_reads_types_pool_size_lr_and_steps():
    assert Point.parse("all:1e-4:20") == Point("", None, 1e-4, 20)
    assert Point.parse("fs_move+math_chain@160:3e-4:60") == Point("fs_move,math_chain", 160, 3e-4, 60)
    assert Point.parse("fs_move+math_chain@160:3e-4:60").tag == "fs_move+math_chain@160_lr0.0003_n60"
    for bad in ("all:1e-4", "all:x:20", "all@n:1e-4:20"):
        with pytest.raises(ValueError, match="TYPES"):
            Point.parse(bad)


def test_budget_at_changes_the_pool_lr_steps_and_dev_only():
    budget = budgets_lib.get("quickstart")
    at = rl_probe.budget_at(rl_probe.with_dev(budget, 32), Point("fs_read_then_act", 160, 3e-4, 60))
    assert at.world == {**budget.world, "rl_types": "fs_read_then_act", "rl_per_type": 160, "dev_per_type": 32}
    assert rl_probe.with_dev(budget, 32).world == {**budget.world, "dev_per_type": 32}
    assert at.rl == {**budget.rl, "optim.lr": 3e-4, "train.max_steps": 60, "rl.heldout.every": 0}
    assert (at.sft, at.rctp, at.model) == (budget.sft, budget.rctp, budget.model)
    # without a pool size the budget's stays
    assert rl_probe.budget_at(budget, Point("", None, 1e-4, 20)).world["rl_per_type"] == budget.world["rl_per_type"]
    own = rl_probe.budget_point(budget)
    assert (own.lr, own.steps) == (budget.rl["optim.lr"], budget.rl["train.max_steps"])


def test_choose_takes_the_largest_mean_gain_unless_the_budgets_point_is_within_the_margin():
    own, a, b = Point("", None, 1e-4, 20), Point("", None, 3e-4, 20), Point("x", 160, 1e-4, 20)
    results = [
        {"point": own, "gain": 0.0625},
        {"point": own, "gain": -0.03125},  # mean 0.015625
        {"point": a, "gain": 0.125},
        {"point": a, "gain": -0.0625},  # mean 0.03125: the largest, 0.015625 above own's
        {"point": b, "gain": 0.25},
        {"point": b, "gain": -0.25},  # mean 0
    ]
    chosen = rl_probe.choose(results, own, margin=0.01)
    assert chosen["point"] == a and chosen["mean_gain"] == pytest.approx(0.03125)
    assert rl_probe.choose(results, own, margin=1 / 64)["point"] == own  # beaten by exactly the margin: kept
    assert rl_probe.choose(results, own, margin=0.02)["point"] == own
    assert rl_probe.choose(results[2:], own, margin=0.02)["point"] == a  # own not probed: the best
    tie = [{"point": b, "gain": 0.0}, {"point": a, "gain": 0.0}]
    assert rl_probe.choose(tie, own, margin=0.0)["point"] == b  # equal means: the earlier


def test_main_stops_with_a_clear_error_without_stage_1_policies(tmp_path):
    with pytest.raises(SystemExit, match="no stage-1 policy"):
        rl_probe.main(["--init_dir", str(tmp_path), "--workdir", str(tmp_path / "w")])
    assert not (tmp_path / "w").exists()  # nothing written


def test_the_long_rl_budget_is_the_quickstart_at_the_probes_chosen_point():
    """`long_rl` runs the point the rule chose on `dev` (docs/experiments.md, "RL for 200 steps") and nothing else
    differs from the quickstart but the held-out curve's spacing and the planned seconds."""
    quickstart, long_rl = budgets_lib.get("quickstart"), budgets_lib.get("long_rl")
    at = rl_probe.budget_at(quickstart, Point.parse("all@400:3e-4:200"))
    assert at.world["rl_types"] == ""  # every trained type: the quickstart's pool, which names none
    assert long_rl.world == {k: v for k, v in at.world.items() if k != "rl_types"}
    assert long_rl.world == {**quickstart.world, "rl_per_type": 400}
    assert long_rl.rl == {**at.rl, "rl.heldout.every": 20}
    assert (long_rl.model, long_rl.pretrain, long_rl.sft, long_rl.rctp) == (
        quickstart.model, quickstart.pretrain, quickstart.sft, quickstart.rctp
    )  # fmt: skip
    assert long_rl.controls == quickstart.controls
