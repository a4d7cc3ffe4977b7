"""Replay inputs that are not scores: an empty or cut result file is named with its count, and `agree` stops
before `bfcl evaluate` unless --allow-missing (then the report counts what is missing per category). The
eval stage's replay (exit, table) is in tests/eval/test_eval_run.py."""

from __future__ import annotations

import json

from rcgrpo_jax.eval import agree, bfcl_results

MODEL = "Qwen/Qwen3-0.6B-FC"


def test_an_empty_result_file_is_a_problem_that_leaves_entries_missing(tmp_path):
    path = tmp_path / "BFCL_v4_simple_python_result.json"
    path.write_text("")
    rs = bfcl_results.read_replay(path)
    assert [(p.kind, p.where) for p in rs.problems] == [(bfcl_results.EMPTY_FILE, str(path))]
    assert bfcl_results.undecodable(rs.problems) == rs.problems


def test_report_names_each_undecodable_entry_and_the_count(tmp_path, capsys):
    path = tmp_path / "BFCL_v4_simple_python_result.json"
    path.write_text(json.dumps({"id": "simple_python_0", "result": "ok"}) + "\n" + '{"id": "simple_py\n' + "x\n")
    rs = bfcl_results.read_replay(path)
    bfcl_results.report_undecodable(rs.problems, prefix="replay", limit=1)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"replay: {path}:2: not valid JSON")
    assert err[1:] == ["replay: ... and 1 more", "replay: 2 undecodable entries in the result files"]


def _results(tmp_path) -> tuple[str, str]:
    folder = tmp_path / "res" / bfcl_results.model_dir_name(MODEL) / "non_live"
    folder.mkdir(parents=True)
    path = folder / "BFCL_v4_simple_python_result.json"
    good = json.dumps({"id": "simple_python_0", "result": "plain text"})
    path.write_text(good + "\n" + good[:20] + "\n")  # the second entry cut mid-line
    return str(tmp_path / "res"), str(path)


def test_agree_stops_on_undecodable_entries_before_bfcl_evaluate(tmp_path, capsys, monkeypatch):
    root, path = _results(tmp_path)
    monkeypatch.setattr(agree, "run_bfcl", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran evaluate")))
    code = agree.main(["--results", root, "--model", MODEL, "--bfcl-python", "python"])
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    assert err[0].startswith(f"agree: {path}:2: not valid JSON") and err[1] == (
        "agree: 1 undecodable entry in the result files"
    )
    assert err[-1].startswith("error: agree: 1 entries of the result files could not be decoded")


def test_agree_with_allow_missing_counts_them_per_category(tmp_path, capsys, monkeypatch):
    root, _ = _results(tmp_path)
    bfcl = {MODEL: {"simple_python": {"accuracy": 0.0, "total": 1, "failed": {"simple_python_0"}}}}
    monkeypatch.setattr(agree, "run_bfcl", lambda *a, **k: (bfcl, ""))
    code = agree.main(["--results", root, "--model", MODEL, "--bfcl-python", "python", "--allow-missing"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out[0].split() == ["category", "n", "bfcl", "ours", "missing", "disagreeing", "ids"]
    assert out[1].split()[:5] == ["simple_python", "1", "0.00", "0.00", "1"]
