"""Several suites in one eval command (BFCL's, API-Bank, MMLU-Pro) on fixtures written here: the oracle scores
100% on each through the command line, a tiny model runs all three end to end, bad input stops with one line
and exit 2 before any model loads; the API-Bank summary by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rcgrpo_jax import main as main_lib
from rcgrpo_jax import stages
from rcgrpo_jax.config_fields import ConfigError
from rcgrpo_jax.eval import api_bank_run, mmlu_pro_run, suites
from rcgrpo_jax.eval import run as eval_run
from tests.helpers import api_bank_fixture, mmlu_pro_fixture

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_suites_of():
    assert eval_run.suites_of("bfcl_v4, api_bank,mmlu_pro") == ["bfcl_v4", "api_bank", "mmlu_pro"]
    assert eval_run.suites_of("multi_turn") == ["multi_turn"]
    for bad, msg in [
        ("", "names no suite"),
        ("api_bank,nope", "'nope' is not one of"),
        ("mmlu_pro,mmlu_pro", "names a suite twice"),
        ("single_turn,bfcl_v4", "at most one of multi_turn, single_turn, bfcl_v4"),
    ]:
        with pytest.raises(ConfigError, match=msg):
            eval_run.suites_of(bad)


def test_the_suite_modules_register_themselves_and_the_launchers_table_imports_them():
    assert suites.names() == ("api_bank", "mmlu_pro")
    assert suites.get("api_bank") is api_bank_run.SUITE and suites.get("mmlu_pro") is mmlu_pro_run.SUITE
    assert stages.TRAINERS["eval"].run is eval_run.run
    assert suites.get("api_bank").records is api_bank_run.records  # what eval.run calls for `eval.suite=api_bank`
    with pytest.raises(KeyError, match="unknown eval suite 'nope'; registered: api_bank, mmlu_pro"):
        suites.get("nope")


def test_a_second_suite_of_a_taken_name_is_refused():
    other = suites.Suite("api_bank", load_checked=len, records=lambda *a, **k: ([], {}), markdown=lambda s, label: "")
    with pytest.raises(ValueError, match="'api_bank' is already registered by rcgrpo_jax.eval.api_bank_run"):
        suites.register(other)
    assert suites.get("api_bank") is api_bank_run.SUITE


def test_api_bank_summary_by_hand():
    def rec(i, level, ok, api="X", kind=None, dialogue="d"):
        return {
            "id": i,
            "category": f"level_{level}",
            "official_pass": ok,
            "error_kind": kind,
            "expected_api": api,
            "dialogue": dialogue,
        }

    recs = [
        rec("a", 1, True),
        rec("b", 1, False, kind="api_name_mismatch"),
        rec("c", 2, True, api="ToolSearcher"),
        rec("d", 3, True, dialogue="0"),
        rec("e", 3, False, kind="truncated", dialogue="0"),
        rec("f", 3, True, dialogue="1"),
    ]
    s = api_bank_run.summarize(recs, [])
    assert s["levels"] == {"level_1": 0.5, "level_2": 1.0, "level_3": 2 / 3}
    assert s["overall"] == 4 / 6 and s["mean_of_levels"] == pytest.approx((0.5 + 1 + 2 / 3) / 3)
    assert s["level_3_dialogues"] == {"n": 2, "accuracy": 0.5}
    assert s["tool_searcher_by_name"] == 1 and s["unscored_ids"] == {"truncated": ["e"]}
    assert s["error_kinds"] == {"api_name_mismatch": 1, "truncated": 1}


@pytest.mark.parametrize(
    "overrides, line",
    [
        (["--config.eval.suite=api_bank"], "error: config.eval.api_bank.path: the api_bank suite needs a copy"),
        (["--config.eval.suite=mmlu_pro", "--config.eval.mmlu_pro.path=/no/such"], "mmlu_pro.path: no such file"),
        (["--config.eval.suite=api_bank", "--config.eval.api_bank.path=/no/such"], "api_bank.path: no such folder"),
        (["--config.eval.suite=single_turn,api_bank", "--config.eval.policy=replay"], "config.eval.replay_path"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, overrides, line):
    argv = ["main", "--config=configs/eval.py:tiny", "--config.eval.policy=oracle", f"--workdir={tmp_path}", *overrides]
    assert main_lib.cli(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and line in err[0], err
    assert not (tmp_path / "tiny_model").exists()  # stopped before any model was built or loaded


def test_malformed_record_stops_before_the_model(tmp_path, capsys):
    rows = mmlu_pro_fixture.test_records()
    rows[2]["answer"] = "Z"
    path = mmlu_pro_fixture.write_jsonl(str(tmp_path / "test.jsonl"), rows)
    argv = [
        "main",
        "--config=configs/eval.py:tiny",
        "--config.eval.policy=oracle",
        "--config.eval.suite=mmlu_pro",
        f"--config.eval.mmlu_pro.path={path}",
        f"--workdir={tmp_path}",
    ]
    assert main_lib.cli(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "config.eval.mmlu_pro.path:" in err and "record 2: field 'answer': expected the letter" in err


def _main(workdir, *overrides) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")
    cmd = [sys.executable, "-m", "rcgrpo_jax.main", "--config=configs/eval.py:tiny", f"--workdir={workdir}", *overrides]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_three_suites_through_the_command(tmp_path):
    """The oracle: 100% on the world's multi-turn tasks, every API-Bank level and every MMLU-Pro subject; then a
    tiny random model (the checkpoint the oracle run built) greedily through all three."""
    copy = api_bank_fixture.write_copy(str(tmp_path / "api-bank"))
    mmlu = mmlu_pro_fixture.write_release(str(tmp_path / "mmlu-pro"))
    data = [
        "--config.eval.suite=multi_turn,api_bank,mmlu_pro",
        "--config.eval.max_tasks=2",
        f"--config.eval.api_bank.path={copy}",
        f"--config.eval.mmlu_pro.path={mmlu}",
        "--config.eval.mmlu_pro.shots=1",
        "--config.log.progress=False",
    ]
    oracle = _main(tmp_path / "oracle", "--config.eval.policy=oracle", "--config.eval.max_context=100000", *data)
    assert oracle["overall"] == 1.0 and oracle["n"] == 2  # BFCL's part: the world's first 2 test tasks
    ab, mp = oracle["api_bank"], oracle["mmlu_pro"]
    assert ab["levels"] == {"level_1": 1.0, "level_2": 1.0, "level_3": 1.0} and ab["calls"] == 6
    assert ab["tool_searcher_by_name"] == 2 and ab["unscored"] == {}
    assert mp["categories"] == {"biology": 1.0, "law": 1.0, "math": 1.0} and mp["questions"] == 5
    written = json.loads((tmp_path / "oracle" / "eval.json").read_text())
    assert written["suite"] == "multi_turn,api_bank,mmlu_pro" and len(written["api_bank"]["records"]) == 6
    assert len(written["mmlu_pro"]["records"]) == 5 and len(written["episodes"]) == 2
    md = (tmp_path / "oracle" / "eval.md").read_text()
    assert "| API-Bank | oracle | calls |" in md and "| MMLU-Pro subject | oracle | n |" in md

    model = _main(
        tmp_path / "model",
        f"--config.model.path={tmp_path / 'oracle' / 'tiny_model'}",
        "--config.eval.max_step_tokens=8",
        "--config.eval.mmlu_pro.max_new_tokens=8",
        *data,
    )
    assert model["api_bank"]["calls"] == 6 and sum(model["api_bank"]["n"].values()) == 6
    assert sum(model["api_bank"]["error_kinds"].values()) == 6 - sum(model["api_bank"]["correct"].values())
    assert model["mmlu_pro"]["questions"] == 5 and model["n"] == 2
    recs = json.loads((tmp_path / "model" / "eval.json").read_text())["mmlu_pro"]["records"]
    assert all(isinstance(r["output"], str) for r in recs)  # every question decoded and scored
