"""The evaluation stage: the scripted oracle scores 100% in every category through the launcher's own
command path (world and BFCL test splits); a random model's greedy episodes all fail with a named
error kind; reward-token selection, error kinds and the held-out line checked by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import transformers

from configs import eval as eval_configs
from rcgrpo_jax import models
from rcgrpo_jax.data import sources
from rcgrpo_jax.eval import report
from rcgrpo_jax.eval import run as eval_run
from rcgrpo_jax.models.tiny import build_tiny_checkpoint
from rcgrpo_jax.rollout.episode import Episode

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _main(workdir, *overrides) -> dict:
    """`python -m rcgrpo_jax.main --config=configs/eval.py:tiny ...`; returns its JSON summary line."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")  # one device, as a user's run
    cmd = [sys.executable, "-m", "rcgrpo_jax.main", "--config=configs/eval.py:tiny", f"--workdir={workdir}", *overrides]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("source", ["world", "bfcl"])
def test_oracle_scores_100_through_the_command(tmp_path, source):
    summary = _main(
        tmp_path,
        "--config.eval.policy=oracle",
        f"--config.data.source={source}",
        "--config.eval.max_context=1000000",
        "--config.eval.max_step_tokens=100000",
    )
    want = {
        "world": {"fs_move", "fs_read_then_act", "math_chain", "fs_count_math"},
        "bfcl": {"base", "miss_func", "miss_param", "long_context"},
    }[source]
    assert set(summary["categories"]) == want
    assert all(acc == 1.0 for acc in summary["categories"].values()), summary
    assert summary["overall"] == 1.0 and summary["reward_mean"] == 1.0 and summary["error_kinds"] == {}
    assert summary["n"] == (64 if source == "world" else 80)
    assert summary["heldout"] == (1.0 if source == "world" else None)  # compose_heldout, reported apart
    written = json.loads((tmp_path / "eval.json").read_text())
    assert len(written["episodes"]) == 80  # world: 64 trained-type tasks + 16 held-out
    assert all(e["official_pass"] and e["error_kind"] is None for e in written["episodes"])
    md = (tmp_path / "eval.md").read_text()
    assert "| oracle |" in md and "100.00" in md


@pytest.fixture(scope="module")
def tiny_world_model(tmp_path_factory):
    cfg = eval_configs.get_config("tiny")
    path = build_tiny_checkpoint(
        str(tmp_path_factory.mktemp("tiny_world")),
        arch="qwen2",
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=64,
        corpus=sources.tokenizer_corpus(cfg.data),
    )
    return path


def test_random_model_run_writes_report(tiny_world_model, tmp_path):
    cfg = eval_configs.get_config("tiny")
    cfg.model.path = tiny_world_model
    cfg.eval.max_tasks = 6
    cfg.eval.batch_size = 4  # two rollout batches
    cfg.eval.max_step_tokens = 16
    cfg.eval.max_context = 1024
    cfg.log.progress = False
    out = eval_run.run(cfg, str(tmp_path))
    written = json.loads((tmp_path / "eval.json").read_text())
    eps = written["episodes"]
    assert len(eps) == 6 and out["n"] == 6
    assert written["reward_token"] is None  # the plain tokenizer has no reward tokens: auto -> none
    for e in eps:
        assert e["official_pass"] is False and e["reward"] == 0.0
        assert e["error_kind"] in ("empty_turn", "state_mismatch", "response_mismatch", "force_terminated", "truncated")
        assert e["reward_token"] is None and e["steps"] >= 1
    assert sum(out["error_kinds"].values()) == 6 and out["overall"] == 0.0


def test_missing_model_path_names_the_field(tmp_path):
    from rcgrpo_jax.config_checks import ConfigError

    cfg = eval_configs.get_config("tiny")
    with pytest.raises(ConfigError, match="config.model.path"):
        eval_run.run(cfg, str(tmp_path))


def test_reward_token_modes(tiny_world_model):
    tok = transformers.AutoTokenizer.from_pretrained(tiny_world_model)
    assert eval_run.reward_token_for("auto", tok) is None
    assert eval_run.reward_token_for("high", tok) == "<|high_reward|>"
    assert eval_run.reward_token_for("low", tok) == "<|low_reward|>"
    assert eval_run.reward_token_for("none", tok) is None
    config, params = models.load_hf(tiny_world_model, dtype="float32")
    _, _, tok2, ids = models.add_reward_tokens(config, params, tok)
    assert eval_run.reward_token_for("auto", tok2) == "<|high_reward|>" and "<|high_reward|>" in ids
    with pytest.raises(ValueError, match="eval.reward_token"):
        eval_run.reward_token_for("always", tok)


def _episode(verdict, reason="completed"):
    e = Episode("fs_move_0", 0, 0, None)
    e.finish(reason)
    e.verdict = verdict
    return e


@pytest.mark.parametrize(
    "verdict,reason,kind",
    [
        ({"valid": True}, "completed", None),
        ({"valid": False, "error_type": "multi_turn:empty_turn_model_response"}, "completed", "empty_turn"),
        ({"valid": False, "error_type": "multi_turn:instance_state_mismatch"}, "completed", "state_mismatch"),
        ({"valid": False, "error_type": "multi_turn:execution_response_mismatch"}, "completed", "response_mismatch"),
        ({"valid": False, "error_type": "multi_turn:force_terminated"}, "env_done", "force_terminated"),
        ({"valid": False, "error_type": "multi_turn:force_terminated"}, "max_context", "truncated"),
        (
            {"valid": False, "error_type": "multi_turn:method_invoke_order_mismatch"},
            "completed",
            "multi_turn:method_invoke_order_mismatch",
        ),
        ({"error": "KeyError: x"}, "completed", "scorer_error"),
    ],
)
def test_error_kinds(verdict, reason, kind):
    assert eval_run.error_kind(_episode(verdict, reason)) == kind


def test_heldout_is_reported_apart():
    rs = [
        {"id": "a_0", "category": "a", "official_pass": True, "reward": 1.0, "error_kind": None},
        {"id": "a_1", "category": "a", "official_pass": False, "reward": 0.0, "error_kind": "empty_turn"},
        {"id": "b_0", "category": "b", "official_pass": True, "reward": 1.0, "error_kind": None},
        {"id": "h_0", "category": "h", "official_pass": True, "reward": 1.0, "error_kind": None},
    ]
    s = eval_run.summarize(rs, heldout=("h",))
    assert s["overall"] == pytest.approx((0.5 + 1.0) / 2)  # h is not in the mean
    assert set(s["categories"]) == {"a", "b"} and s["n"] == 3
    assert s["heldout"]["overall"] == 1.0 and s["heldout"]["n"] == 1
    table = eval_run.summary_table({"x": s, "y": [s, s]})
    header, _, row_x, row_y = table.strip().splitlines()
    assert header == "| Row | a | b | Overall | Reward | h |"
    assert row_x == "| x | 50.00 | 100.00 | 75.00 | 0.667 | 100.00 |"
    assert row_y == "| y | 50.00 ± 0.00 | 100.00 ± 0.00 | 75.00 ± 0.00 | 0.667 ± 0.000 | 100.00 ± 0.00 |"
    assert eval_run.summarize(rs)["heldout"] is None
    assert report.summarize(rs)["overall"] == pytest.approx((0.5 + 1 + 1) / 3)
