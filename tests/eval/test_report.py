"""Report math checked by hand, the Markdown table's exact cells, and the writers."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcgrpo_jax.eval.report import aggregate, markdown_table, summarize, write_report

RESULTS = [
    {"id": "fs_move_0", "category": "fs_move", "official_pass": True, "reward": 1.0, "error_kind": None},
    {"id": "fs_move_1", "category": "fs_move", "official_pass": True, "reward": 1.0, "error_kind": None},
    {
        "id": "fs_move_2",
        "category": "fs_move",
        "official_pass": False,
        "reward": 0.0,
        "error_kind": "multi_turn:instance_state_mismatch",
    },
    # no category: derived from the id as BFCL does
    {"id": "math_chain_7", "official_pass": True, "reward": 0.5, "error_kind": None},
]


def test_summary_by_hand():
    s = summarize(RESULTS)
    assert s["n"] == 4
    assert s["categories"]["fs_move"] == {"n": 3, "accuracy": pytest.approx(2 / 3), "reward_mean": pytest.approx(2 / 3)}
    assert s["categories"]["math_chain"] == {"n": 1, "accuracy": 1.0, "reward_mean": 0.5}
    # Unweighted over categories (BFCL), not over episodes (that would be 3/4).
    assert s["overall"] == pytest.approx((2 / 3 + 1.0) / 2)
    assert s["reward_mean"] == pytest.approx(2.5 / 4)
    assert s["error_kinds"] == {"multi_turn:instance_state_mismatch": 1}


def test_error_kinds_sorted_by_count():
    rs = [
        {"id": f"a_{i}", "official_pass": False, "reward": 0.0, "error_kind": k}
        for i, k in enumerate(["x", "y", "y", None, "y", "x", "z"])
    ]
    assert list(summarize(rs)["error_kinds"].items()) == [("y", 3), ("x", 2), ("z", 1)]


def test_empty_results_are_an_error():
    with pytest.raises(ValueError):
        summarize([])


def _run(acc_a: float, acc_b: float, reward: float) -> dict:
    return {
        "n": 2,
        "overall": (acc_a + acc_b) / 2,
        "reward_mean": reward,
        "error_kinds": {"e": 1},
        "categories": {
            "a": {"n": 1, "accuracy": acc_a, "reward_mean": reward},
            "b": {"n": 1, "accuracy": acc_b, "reward_mean": reward},
        },
    }


def test_aggregate_mean_and_sample_std():
    agg = aggregate([_run(0.4, 0.6, 0.2), _run(0.6, 0.8, 0.4)])
    assert agg["runs"] == 2
    assert agg["overall"]["mean"] == pytest.approx(0.6)
    assert agg["overall"]["std"] == pytest.approx(math.sqrt(2 * 0.1**2))  # ddof=1
    assert agg["categories"]["a"]["mean"] == pytest.approx(0.5)
    assert agg["reward_mean"]["std"] == pytest.approx(math.sqrt(2 * 0.1**2))
    assert agg["error_kinds"] == {"e": 2}


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from(["a", "b", "c"])), min_size=1, max_size=40))
def test_overall_is_mean_of_category_accuracies(eps):
    rs = [
        {"id": f"{c}_{i}", "official_pass": p, "reward": float(p), "error_kind": None} for i, (p, c) in enumerate(eps)
    ]
    s = summarize(rs)
    cats = {c for _, c in eps}
    per = [sum(p for p, c2 in eps if c2 == c) / sum(1 for _, c2 in eps if c2 == c) for c in cats]
    assert s["overall"] == pytest.approx(sum(per) / len(per))
    assert 0.0 <= s["overall"] <= 1.0
    assert s["reward_mean"] == pytest.approx(sum(p for p, _ in eps) / len(eps))


def test_markdown_table_cells():
    single = summarize(RESULTS)
    table = markdown_table(
        {"base": single, "RC-GRPO": [_run(0.4, 0.6, 0.2), _run(0.6, 0.8, 0.4)]},
        categories=["fs_move", "math_chain", "a"],
    )
    lines = table.strip().split("\n")
    assert lines[0] == "| Row | fs_move | math_chain | a | Overall | Reward |"
    assert lines[1] == "|---|---:|---:|---:|---:|---:|"
    assert lines[2] == "| base | 66.67 | 100.00 | - | 83.33 | 0.625 |"
    assert lines[3] == "| RC-GRPO | - | - | 50.00 ± 14.14 | 60.00 ± 14.14 | 0.300 ± 0.141 |"


def test_markdown_default_categories_are_the_union():
    table = markdown_table({"x": summarize(RESULTS), "y": _run(1.0, 0.0, 1.0)})
    assert table.split("\n")[0] == "| Row | a | b | fs_move | math_chain | Overall | Reward |"


def test_write_report(tmp_path):
    paths = write_report(
        str(tmp_path / "out"), {"base": summarize(RESULTS), "seeds": [_run(0.4, 0.6, 0.2)] * 2}, title="Ablation"
    )
    payload = json.loads(open(paths["json"]).read())
    assert payload["base"]["aggregate"]["overall"]["mean"] == pytest.approx(5 / 6)
    assert payload["seeds"]["aggregate"]["runs"] == 2 and len(payload["seeds"]["runs"]) == 2
    md = open(paths["markdown"]).read()
    assert md.startswith("# Ablation\n")
    assert "| base | - | - | 66.67 | 100.00 | 83.33 | 0.625 |" in md
    assert "| seeds | 40.00 ± 0.00 | 60.00 ± 0.00 | - | - | 50.00 ± 0.00 | 0.200 ± 0.000 |" in md
