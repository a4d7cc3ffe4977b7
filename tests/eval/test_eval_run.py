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
from rcgrpo_jax.config_fields import InputError
from rcgrpo_jax.data import sources
from rcgrpo_jax.eval import report
from rcgrpo_jax.eval import run as eval_run
from rcgrpo_jax.models.tiny import build_tiny_checkpoint
from rcgrpo_jax.rollout.episode import Episode

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _main(workdir, *overrides) -> dict:
    """`python -m rcgrpo_jax.main --config=configs/eval.py:tiny ...`; returns its JSON summary line."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")  # one device, as a user's run
    cmd = [sys.executable, "-m", "rcgrpo_jax.main", "--config=configs/eval.py:tiny", f"--workdir={workdir}", *overrides]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


UNANSWERABLE = [  # shipped single-turn answers that no output can satisfy (single_turn_oracle.unanswerable)
    "live_multiple_862-181-3",
    "live_multiple_964-207-0",
    "live_simple_106-63-0",
    "live_simple_112-68-0",
    "simple_java_36",
    "simple_java_65",
]


def test_world_oracle_scores_100_through_the_command(tmp_path):
    summary = _main(
        tmp_path,
        "--config.eval.policy=oracle",
        "--config.data.source=world",
        "--config.eval.max_context=1000000",
        "--config.eval.max_step_tokens=100000",
    )
    assert set(summary["categories"]) == {"fs_move", "fs_read_then_act", "math_chain", "fs_count_math"}
    assert all(acc == 1.0 for acc in summary["categories"].values()), summary
    assert summary["overall"] == 1.0 and summary["reward_mean"] == 1.0 and summary["error_kinds"] == {}
    assert summary["groups"] == {"multi_turn": 1.0} and summary["suite"] == "multi_turn"
    assert summary["n"] == 64
    assert summary["heldout"] == 1.0  # compose_heldout, reported apart
    written = json.loads((tmp_path / "eval.json").read_text())
    assert len(written["episodes"]) == 80  # world: 64 trained-type tasks + 16 held-out
    assert all(e["official_pass"] and e["error_kind"] is None for e in written["episodes"])
    md = (tmp_path / "eval.md").read_text()
    assert "| oracle |" in md and "100.00" in md


def test_bfcl_v4_oracle_through_the_command(tmp_path, tiny_world_model):
    """Every suite at once: the 80 multi-turn test tasks and every single-turn entry, all through the
    official checkers; the oracle passes everything but the entries no output can pass."""
    from rcgrpo_jax.eval import aggregate, single_turn

    summary = _main(
        tmp_path,
        "--config.eval.policy=oracle",
        "--config.eval.suite=bfcl_v4",
        "--config.data.source=bfcl",
        f"--config.model.path={tiny_world_model}",  # only its tokenizer and template are used
        "--config.eval.max_context=1000000",
        "--config.eval.max_step_tokens=100000",
    )
    cats = summary["categories"]
    assert set(cats) == set(single_turn.CATEGORIES) | set(aggregate.MULTI_TURN)
    assert summary["n"] == 80 + 3641 and summary["oracle_unanswerable"] == UNANSWERABLE
    counts = single_turn.ENTRY_COUNTS
    for c, acc in cats.items():
        bad = sum(u.rsplit("_", 1)[0] == c for u in UNANSWERABLE)
        assert acc == pytest.approx(1.0 - bad / counts[c] if c in counts else 1.0), c
    assert summary["overall_covers"] == ["non_live", "live", "irrelevance", "multi_turn"]
    assert summary["groups"]["multi_turn"] == 1.0 and summary["groups"]["irrelevance"] == 1.0
    want = (summary["groups"]["non_live"] + summary["groups"]["live"] + 1.0 + 3 * 1.0) / 6
    assert summary["overall"] == pytest.approx(want)
    assert summary["overall_with_agentic_zero"] == pytest.approx(want * 0.6)
    assert sum(summary["error_kinds"].values()) == len(UNANSWERABLE)
    written = json.loads((tmp_path / "eval.json").read_text())
    eps = written["episodes"]
    assert len(eps) == 80 + 3641 and written["suite"] == "bfcl_v4"
    assert all({"id", "category", "official_pass", "error_kind"} <= set(e) for e in eps)
    assert sorted(e["id"] for e in eps if not e["official_pass"]) == UNANSWERABLE
    assert sum(e["category"].startswith("multi_turn_") for e in eps) == 80
    assert "overall (non_live + live + irrelevance + multi_turn)" in (tmp_path / "eval.md").read_text()


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
    from rcgrpo_jax.config_fields import ConfigError

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


def _single_turn_config(model_path, **eval_fields):
    cfg = eval_configs.get_config("tiny")
    cfg.model.path = model_path
    cfg.eval.suite = "single_turn"
    cfg.log.progress = False
    for k, v in eval_fields.items():
        cfg.eval[k] = v
    return cfg


def test_replay_scores_outputs_made_elsewhere(tiny_world_model, tmp_path, capsys):
    from rcgrpo_jax import chat
    from rcgrpo_jax.eval import single_turn, single_turn_oracle

    parser = chat.get_parser("hermes")  # the tiny checkpoint is a qwen2: its family's format
    entries = [e for c in single_turn.CATEGORIES for e in single_turn.load_entries([c])[:2]]
    given = entries[:-3]  # the last three ids have no output
    rows = [{"id": e.id, "output": single_turn_oracle.oracle_text(e, parser)} for e in given[1:]]
    rows.append({"id": given[0].id, "output": "I would rather not."})
    rows.append({"id": "simple_python_99999", "output": "an id the suite does not have"})
    path = tmp_path / "outputs.jsonl"
    lines = [json.dumps(r) for r in rows]
    lines.insert(2, lines[2][:15])  # a line cut mid-way: its entry is named, not silently dropped
    path.write_text("".join(line + "\n" for line in lines))
    cfg = _single_turn_config(tiny_world_model, policy="replay", replay_path=str(path), max_tasks=2)
    with pytest.raises(InputError) as e:  # missing input is never turned into a score ...
        eval_run.run(cfg, str(tmp_path / "stopped"))
    assert str(e.value).startswith("replay: 3 of 26 entries have no result (1 undecodable in the files")
    err = capsys.readouterr()
    assert f"replay: {path}:3: not valid JSON" in err.err and "replay: 1 undecodable entry" in err.err
    assert "| Category |" not in err.out  # no table
    stopped = json.loads((tmp_path / "stopped" / "eval.json").read_text())  # ... and nothing is lost
    assert stopped["summary"]["incomplete"] and stopped["summary"]["undecodable"] == 1
    cfg.eval.allow_missing = True  # unless asked: then the table shows what is missing
    out = eval_run.run(cfg, str(tmp_path / "run"))
    missing = [e.id for e in entries[-3:]]
    assert out["n"] == 26 and out["missing"] == 3 and out["missing_ids"] == missing and out["unknown_ids"] == 1
    assert out["error_kinds"] == {
        "missing_output": 3,
        "wrong_count": 1,
    }  # (the two-per-category cut holds no unanswerable entry)
    assert out["categories"][given[0].category] == 0.5 and out["categories"]["live_relevance"] == 0.0
    written = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert written["missing_ids"] == missing and written["policy"] == "replay"
    by_id = {e["id"]: e for e in written["episodes"]}
    assert all(by_id[i]["error_kind"] == "missing_output" and not by_id[i]["official_pass"] for i in missing)
    assert by_id[given[0].id]["output"] == "I would rather not."
    table = capsys.readouterr().out
    assert "| Category | replay | missing |" in table
    cats = [e.category for e in entries[-3:]]
    assert out["missing_by_category"] == {c: cats.count(c) for c in out["categories"]}
    assert f"| {cats[-1]} | 0.00 | {cats.count(cats[-1])} |" in table


def test_random_model_single_turn(tiny_world_model, tmp_path):
    cfg = _single_turn_config(tiny_world_model, max_tasks=1, max_step_tokens=8, max_context=1536, batch_size=8)
    out = eval_run.run(cfg, str(tmp_path))
    from rcgrpo_jax.eval import single_turn, single_turn_run

    assert out["n"] == 13 and set(out["categories"]) == set(single_turn.CATEGORIES)
    eps = json.loads((tmp_path / "eval.json").read_text())["episodes"]
    assert len(eps) == 13
    for e in eps:
        assert e["error_kind"] in (None, *single_turn.ERROR_KINDS)
        if e["error_kind"] != "truncated":
            assert isinstance(e["output"], str)  # what the model wrote, kept
    truncated = [e for e in eps if e["error_kind"] == "truncated"]
    assert all(not e["official_pass"] for e in truncated) and len(truncated) < 13
    # The greedy message of a few entries equals HF transformers' greedy generation from the same prompt.
    import torch

    from rcgrpo_jax import chat

    tok = transformers.AutoTokenizer.from_pretrained(tiny_world_model)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tiny_world_model, torch_dtype=torch.float32)
    stop = list(chat.end_of_turn_ids(tok))
    by_id = {e.id: e for e in single_turn.load_entries()}
    scored = [e for e in eps if e["error_kind"] != "truncated"][:3]
    texts, _ = single_turn_run.render_prompts([by_id[e["id"]] for e in scored], tok, None)
    for e, text in zip(scored, texts):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        out = hf.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False, eos_token_id=stop, pad_token_id=0)
        new = out[0, len(ids) :].tolist()
        new = new[:-1] if new and new[-1] in stop else new
        assert e["output"] == tok.decode(new, skip_special_tokens=False), e["id"]
    assert any(e["output"] for e in scored)  # not only empty messages


@pytest.mark.parametrize(
    "fields,field",
    [
        ({"suite": "everything"}, "eval.suite"),
        ({"policy": "replay", "replay_path": "/nonexistent_dir", "suite": "multi_turn"}, "eval.replay_path"),
        ({"policy": "replay", "replay_path": ""}, "eval.replay_path"),
        ({"policy": "replay", "replay_path": "/nonexistent.jsonl"}, "eval.replay_path"),
        ({"policy": "oracle", "split": "train"}, "eval.split"),
        ({"policy": "oracle", "split": "dev"}, "eval.split"),  # the world's; single-turn has test (= all) only
        ({"policy": "oracle", "split": "validation"}, "eval.split"),
    ],
)
def test_bad_eval_config_names_the_field(tiny_world_model, tmp_path, fields, field):
    from rcgrpo_jax.config_fields import ConfigError

    cfg = _single_turn_config(tiny_world_model, **fields)
    with pytest.raises(ConfigError, match=f"config.{field}"):
        eval_run.run(cfg, str(tmp_path))


def test_suite_summary_by_hand():
    def rec(cat, ok, n=1):
        return [
            {
                "id": f"{cat}_{i}",
                "category": cat,
                "official_pass": ok,
                "reward": float(ok),
                "error_kind": None if ok else "x",
            }
            for i in range(n)
        ]

    single = (
        rec("simple_python", True, 3)
        + rec("simple_python", False)
        + rec("irrelevance", True)
        + rec("live_irrelevance", False)
    )
    s = eval_run.suite_summary(single, "single_turn")
    assert s["categories"] == {"simple_python": 0.75, "irrelevance": 1.0, "live_irrelevance": 0.0}
    assert s["groups"] == {"irrelevance": 0.5}  # non_live lacks five of its categories: not reported
    assert s["overall"] == 0.5 and s["overall_covers"] == ["irrelevance"] and s["n"] == 6
    assert s["overall_with_agentic_zero"] == pytest.approx(0.5 * 10 / 100)
    assert s["error_kinds"] == {"x": 2} and s["reward_mean"] is None
    multi = rec("multi_turn_base", True) + rec("multi_turn_miss_func", False) + rec("compose_heldout", True)
    m = eval_run.suite_summary(multi, "multi_turn", heldout=("compose_heldout",))
    assert m["groups"] == {"multi_turn": 0.5} and m["overall"] == 0.5 and m["heldout"] == 1.0 and m["n"] == 2
    assert eval_run.suite_summary(rec("simple_python", True), "single_turn")["overall"] is None
