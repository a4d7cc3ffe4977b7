"""BFCL aggregates: ours against the package's own leaderboard code on synthetic score tables.

`bfcl_eval.eval_checker.eval_runner_helper` cannot be imported in our install (it imports pandas and
the model registry, which imports every API client). The test therefore reads the installed module's
source, keeps its function definitions unchanged, and runs them with the module-level names they use
stubbed (a one-model registry entry, no format-sensitivity configs, a CSV writer that records the rows
instead of writing them). `generate_leaderboard_csv` -- the leaderboard's grouping, weights and
overall -- is the package's code; only I/O is replaced.
"""

from __future__ import annotations

import ast
import importlib.resources
import os
import statistics
import types
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcgrpo_jax.eval import aggregate

MODEL = "synthetic-model"
ALL_CATEGORIES = (
    aggregate.SIMPLE
    + aggregate.NON_LIVE_PARTS
    + aggregate.IRRELEVANCE
    + aggregate.LIVE
    + ("live_relevance",)
    + aggregate.MULTI_TURN
    + aggregate.WEB_SEARCH
    + aggregate.MEMORY
)


def _package_leaderboard():
    """(namespace of the package's helper functions, list the CSV rows get recorded into)."""
    path = Path(str(importlib.resources.files("bfcl_eval"))) / "eval_checker" / "eval_runner_helper.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    tree.body = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    from bfcl_eval.constants import column_headers

    written: list[tuple[str, list, list]] = []
    entry = types.SimpleNamespace(
        display_name=MODEL, url="-", org="-", license="-", input_price=None, output_price=None
    )

    def no_dataset(*a, **k):
        raise AssertionError("every category is in the synthetic table: no dataset should be read")

    ns = {
        "os": os,
        "np": np,
        "statistics": statistics,
        "MODEL_CONFIG_MAPPING": {MODEL: entry},
        "get_all_format_sensitivity_configs": lambda: [],
        "load_dataset_entry": no_dataset,
        **{k: v for k, v in vars(column_headers).items() if k.startswith("COLUMNS")},
    }
    exec(compile(tree, str(path), "exec"), ns)  # the package's own function definitions, nothing else
    ns["write_score_csv_file"] = lambda data, file_path, header, **kw: written.append(
        (Path(file_path).name, list(header), [list(r) for r in data])
    )
    return ns, written


def _package_scores(table: dict[str, aggregate.Score]) -> dict[str, float]:
    ns, written = _package_leaderboard()
    board = {MODEL: {c: {"accuracy": s.accuracy, "total_count": s.count} for c, s in table.items()}}
    ns["generate_leaderboard_csv"](board, Path("/nonexistent"))
    rows = {name: dict(zip(header, data[0])) for name, header, data in written}
    return {
        "non_live": rows["data_non_live.csv"]["Non-Live Overall Acc"],
        "live": rows["data_live.csv"]["Live Overall Acc"],
        "irrelevance": rows["data_overall.csv"]["Irrelevance Detection"],
        "multi_turn": rows["data_multi_turn.csv"]["Multi Turn Overall Acc"],
        "agentic": rows["data_agentic.csv"]["Agentic Overall Acc"],
        "overall": rows["data_overall.csv"]["Overall Acc"],
    }


_scores = st.builds(
    aggregate.Score,
    accuracy=st.floats(0.0, 1.0, allow_nan=False),
    count=st.integers(1, 2000),
)


@settings(max_examples=25, deadline=None)
@given(st.fixed_dictionaries({c: _scores for c in ALL_CATEGORIES}))
def test_groups_and_overall_match_the_package(table):
    want = _package_scores(table)
    gs = aggregate.groups(table)
    assert set(gs) == set(aggregate.WEIGHTS)
    for name in aggregate.WEIGHTS:
        assert gs[name].accuracy == pytest.approx(want[name], rel=1e-12, abs=1e-12), name
    assert aggregate.overall(gs).accuracy == pytest.approx(want["overall"], rel=1e-12, abs=1e-12)


def test_package_weights_are_ours():
    """The weights in the package's source are the ones we use (read from its `generate_leaderboard_csv`)."""
    path = Path(str(importlib.resources.files("bfcl_eval"))) / "eval_checker" / "eval_runner_helper.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "generate_leaderboard_csv")
    calls = [
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "calculate_percentage_weighted_accuracy"
    ]
    assert len(calls) == 1
    groups_arg, weights_arg = calls[0].args[:2]
    names = [e.id for e in groups_arg.elts]
    assert names == [
        "overall_accuracy_non_live",
        "overall_accuracy_live",
        "total_irrelevance",
        "overall_accuracy_multi_turn",
        "overall_accuracy_agentic",
    ]
    assert ast.literal_eval(weights_arg) == list(aggregate.WEIGHTS.values())


def test_offline_overall_against_the_package_with_agentic_zero():
    """With the agentic categories at 0, the package's overall is overall_offline x 60/100."""
    rng = np.random.default_rng(0)
    table = {c: aggregate.Score(float(rng.uniform()), int(rng.integers(1, 900))) for c in ALL_CATEGORIES}
    for c in aggregate.WEB_SEARCH + aggregate.MEMORY:
        table[c] = aggregate.Score(0.0, 100)
    want = _package_scores(table)["overall"]
    offline = {c: s for c, s in table.items() if c not in aggregate.WEB_SEARCH + aggregate.MEMORY}
    out = aggregate.summary(offline)
    assert out["overall_offline_covers"] == ["non_live", "live", "irrelevance", "multi_turn"]
    assert out["overall"] is None and "agentic" not in out["groups"]
    assert out["overall_with_agentic_zero"] == pytest.approx(want, rel=1e-12)
    assert out["overall_offline"] == pytest.approx(want / 0.6, rel=1e-12)
    assert out["overall_offline_weights"] == pytest.approx(
        {"non_live": 1 / 6, "live": 1 / 6, "irrelevance": 1 / 6, "multi_turn": 1 / 2}
    )


def test_hand_computed_groups():
    s = aggregate.Score
    table = {
        "simple_python": s(0.9, 400),
        "simple_java": s(0.6, 100),
        "simple_javascript": s(0.3, 50),
        "multiple": s(0.8, 200),
        "parallel": s(0.7, 200),
        "parallel_multiple": s(0.5, 200),
        "live_simple": s(1.0, 100),
        "live_multiple": s(0.0, 300),
        "live_parallel": s(0.5, 50),
        "live_parallel_multiple": s(0.5, 50),
        "irrelevance": s(0.2, 240),
        "live_irrelevance": s(0.4, 884),
    }
    gs = aggregate.groups(table)
    assert set(gs) == {"non_live", "live", "irrelevance"}  # no multi-turn categories: no multi_turn group
    assert gs["non_live"].accuracy == pytest.approx((0.6 + 0.8 + 0.7 + 0.5) / 4)  # simple = (0.9+0.6+0.3)/3
    assert gs["live"].accuracy == pytest.approx((100 + 0 + 25 + 25) / 500)
    assert gs["irrelevance"].accuracy == pytest.approx(0.3)
    out = aggregate.summary(table)
    assert out["overall_offline_covers"] == ["non_live", "live", "irrelevance"]
    assert out["overall_offline"] == pytest.approx((0.65 + 0.3 + 0.3) / 3)  # weights 10, 10, 10
    assert out["overall_with_agentic_zero"] == pytest.approx((0.65 + 0.3 + 0.3) * 10 / 100)
    partial = {k: v for k, v in table.items() if k != "simple_java"}
    assert "non_live" not in aggregate.groups(partial)  # a group with a category missing is not reported
    with pytest.raises(ValueError, match="agentic"):
        aggregate.overall(gs)
