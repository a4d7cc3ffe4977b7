"""Plots: one valid PNG per logged metric, one line per run; gaps in the logs tolerated."""

from __future__ import annotations

import json

import matplotlib.image
import pytest

from rcgrpo_jax.eval.plots import DEFAULT_METRICS, numeric_keys, plot_runs, read_jsonl, series

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs")
    grpo = d / "grpo.jsonl"
    rc = d / "rc.jsonl"
    grpo.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"step": 2, "reward_mean": 0.5, "kl": 0.01, "frac_zero_var_groups": 0.7},
                {"step": 1, "reward_mean": 0.25, "entropy_mean": 1.5},
                {"step": 3, "reward_mean": float("nan"), "kl": 0.02},  # NaN: written by json as NaN
            ]
        )
        + "\n\n"
        + '{"step": 4, "reward_me'
    )  # torn last line
    rc.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"step": 1, "reward_mean": 0.3, "adv_std": 0.9, "note": "text"},
                {"step": 2, "reward_mean": 0.6, "adv_std": 0.8, "flag": True},
            ]
        )
        + "\n"
    )
    return {"GRPO": str(grpo), "RC-GRPO": str(rc)}


def test_read_and_series(runs):
    rows = read_jsonl(runs["GRPO"])
    assert [r["step"] for r in rows] == [2, 1, 3]
    assert series(rows, "reward_mean") == ([1.0, 2.0], [0.25, 0.5])  # sorted, NaN dropped
    assert series(rows, "kl") == ([2.0, 3.0], [0.01, 0.02])
    assert series(rows, "adv_std") == ([], [])
    assert numeric_keys(read_jsonl(runs["RC-GRPO"])) == ["adv_std", "reward_mean"]  # no text, no bools


def test_plots_are_png_files(runs, tmp_path):
    written = plot_runs(runs, str(tmp_path))
    assert set(written) == set(DEFAULT_METRICS)  # each default metric is logged by at least one run
    for path in written.values():
        with open(path, "rb") as f:
            assert f.read(8) == PNG_MAGIC
        img = matplotlib.image.imread(path)
        assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100


def test_missing_metric_gets_no_file_and_all_keys_mode(runs, tmp_path):
    assert plot_runs(runs, str(tmp_path / "a"), metrics=["grad_norm"]) == {}
    written = plot_runs(
        {"x": [{"step": 0, "loss/total": 1.0}, {"step": 1, "loss/total": 0.5}]}, str(tmp_path / "b"), metrics=None
    )
    assert list(written) == ["loss/total"]
    assert written["loss/total"].endswith("loss_total.png")


def test_entropy_reward_correlation_plot(tmp_path):
    from rcgrpo_jax.eval import plots

    # Entropy 1, 2, 3 and reward 1, 3, 2 over three steps: the running correlation is 0, 1, 1/2 (by hand:
    # centred (-1, 0, 1) and (-1, 1, 0) give 1 / sqrt(2 * 2)). The logged key wins when a run has it.
    old = [
        {"step": s, "entropy_mean": e, "reward_mean": r} for s, e, r in ((1, 1.0, 1.0), (2, 2.0, 3.0), (3, 3.0, 2.0))
    ]
    s = plots.entropy_reward_series(old)
    assert s["across"][0] == [1.0, 2.0, 3.0] and s["across"][1] == pytest.approx([0.0, 1.0, 0.5], rel=1e-12)
    assert s["within"] == ([], [])
    logged = [{**r, plots.ACROSS_STEPS: -0.25, plots.WITHIN_STEP: 0.1} for r in old]
    s = plots.entropy_reward_series(logged)
    assert s["across"][1] == [-0.25] * 3 and s["within"][1] == [0.1] * 3
    path = plots.plot_entropy_reward({"GRPO": old, "RC-GRPO": logged}, str(tmp_path))
    assert path.endswith(plots.ENTROPY_REWARD_FILE)
    with open(path, "rb") as f:
        assert f.read(8) == PNG_MAGIC
    assert plots.plot_entropy_reward({"x": [{"step": 1, "kl": 0.1}]}, str(tmp_path / "none")) is None
