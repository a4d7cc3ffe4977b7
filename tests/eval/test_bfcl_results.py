"""BFCL result files offline: the layout `bfcl generate` writes, a write -> read round trip, multi-turn
replay through our environment and the official checker, and malformed input counted and named."""

from __future__ import annotations

import json

import pytest

from rcgrpo_jax import chat
from rcgrpo_jax.envs import bfcl
from rcgrpo_jax.eval import agree, bfcl_results, single_turn, single_turn_oracle

PARSER = chat.get_parser("hermes")
MODEL = bfcl_results.MODEL_FOR_FAMILY["hermes"]


def _tasks(n_per_category=2):
    tasks = bfcl.load_tasks()
    return [t for c in bfcl.CATEGORIES for t in [x for x in tasks if x.category == c][:n_per_category]]


def _entries(n_per_category=1):
    return [e for c in single_turn.CATEGORIES for e in single_turn.load_entries([c])[:n_per_category]]


def test_layout_and_names_follow_bfcl_generate(tmp_path):
    assert bfcl_results.group_of("simple_java") == "non_live" and bfcl_results.group_of("irrelevance") == "non_live"
    assert (
        bfcl_results.group_of("live_irrelevance") == "live" and bfcl_results.group_of("multi_turn_base") == "multi_turn"
    )
    assert bfcl_results.category_of_id("live_simple_19-3-15") == "live_simple"
    path = bfcl_results.result_path(tmp_path, "Qwen/Qwen3-0.6B-FC", "multi_turn_miss_func")
    assert path == tmp_path / "Qwen_Qwen3-0.6B-FC" / "multi_turn" / "BFCL_v4_multi_turn_miss_func_result.json"
    # Lines are sorted by entry index (as generate leaves them), not as strings.
    rows = [{"id": f"simple_python_{i}", "result": str(i)} for i in (10, 2, 1)]
    (written,) = bfcl_results.write_entries(tmp_path, MODEL, rows)
    lines = [json.loads(x) for x in written.read_text().splitlines()]
    assert [r["id"] for r in lines] == ["simple_python_1", "simple_python_2", "simple_python_10"]


def test_round_trip_of_eval_records(tmp_path):
    """Eval records (single-turn output, multi-turn conversation) -> result files -> read back."""
    entries = _entries()
    singles = [
        {"id": e.id, "category": e.category, "output": single_turn_oracle.oracle_text(e, PARSER)} for e in entries
    ]
    singles[0]["output"] = "<think>\nhmm\n</think>\n\n" + singles[0]["output"]  # reasoning kept apart
    singles.append({"id": "simple_python_5", "output": None, "error_kind": "truncated", "error_message": "too long"})
    task = _tasks(1)[0]
    script = bfcl.ground_truth_script(task)
    messages = [{"role": "system", "content": "s"}]
    for steps in script:
        messages.append({"role": "user", "content": "u"})
        for calls in steps:
            tool_calls = [{"type": "function", "function": dict(c)} for c in calls]
            messages.append({"role": "assistant", "content": "", "tool_calls": tool_calls})
            messages += [{"role": "tool", "name": c["name"], "content": "r"} for c in calls]
        messages.append({"role": "assistant", "content": "Done."})
    multi = {"id": task.id, "category": "multi_turn_base", "messages": messages}
    model, files = bfcl_results.write_results(tmp_path, [*singles, multi], PARSER)
    assert model == MODEL and len(files) == len(single_turn.CATEGORIES) + 1
    rs = bfcl_results.read_replay(tmp_path)
    assert rs.problems == [] and len(rs.files) == len(files)
    assert rs.single[entries[1].id] == singles[1]["output"]
    assert rs.single[entries[0].id] == single_turn_oracle.oracle_text(entries[0], PARSER)  # text after </think>
    line = json.loads(bfcl_results.result_path(tmp_path, MODEL, entries[0].category).read_text().splitlines()[0])
    assert line["reasoning_content"] == "hmm" and set(line) >= {"id", "result", "latency"}
    assert rs.single["simple_python_5"].startswith("Error during inference: truncated")
    turns = rs.multi[task.id]
    assert len(turns) == task.num_turns
    assert [len(t) for t in turns] == [len(s) + 1 for s in script]  # call steps, then the answer
    record, problems = bfcl_results.replay_multi_turn(task, turns, PARSER)
    assert record["official_pass"] and record["error_kind"] is None and problems == []
    # One result file, and our own {"id", "output"} lines, are accepted too.
    one = bfcl_results.read_replay(files[0])
    assert set(one.single) <= set(rs.single) and one.single
    own = tmp_path / "own.jsonl"
    own.write_text(json.dumps({"id": entries[2].id, "output": "plain text"}) + "\n")
    assert bfcl_results.read_replay(own).single == {entries[2].id: "plain text"}


def test_multi_turn_replay_scores_like_the_checker():
    tasks = _tasks(2)
    rows = {r["id"]: r["result"] for r in agree.oracle_multi(tasks, PARSER)}
    for task in tasks:
        record, problems = bfcl_results.replay_multi_turn(task, rows[task.id], PARSER)
        assert record["official_pass"], (task.id, record)
        assert record["tool_calls"] == sum(len(t) for t in task.ground_truth) and problems == []
    task = tasks[0]
    turns = rows[task.id]
    # An empty response in a turn with ground truth: the checker's empty-turn failure.
    empty = [[""] if t == 0 else s for t, s in enumerate(turns)]
    record, _ = bfcl_results.replay_multi_turn(task, empty, PARSER)
    assert not record["official_pass"] and record["error_kind"] == "empty_turn"
    # Fewer turns than the task (generate's step limit): force-terminated, nothing executed.
    record, _ = bfcl_results.replay_multi_turn(task, turns[:-1], PARSER)
    assert record["error_kind"] == "force_terminated" and not record["official_pass"]
    # An undecodable step is named (task:turn:step) and skipped; the rest of the turn still counts.
    bad = [["<tool_call>\n{not json\n</tool_call>", *s] if t == 0 else s for t, s in enumerate(turns)]
    record, problems = bfcl_results.replay_multi_turn(task, bad, PARSER)
    assert record["official_pass"]
    assert [(p.kind, p.where) for p in problems] == [(bfcl_results.UNDECODABLE_STEP, f"{task.id}:turn0:step0")]
    # BFCL's inference-error string and a missing id fail with a named kind.
    assert bfcl_results.replay_multi_turn(task, "Error during inference: x", PARSER)[0]["error_kind"] == (
        "inference_error"
    )
    record, problems = bfcl_results.replay_multi_turn(task, None, PARSER)
    assert record["error_kind"] == "missing_output" and problems[0].kind == bfcl_results.MISSING_ID


def test_malformed_input_is_counted_and_named(tmp_path):
    path = tmp_path / "BFCL_v4_simple_python_result.json"
    lines = [
        json.dumps({"id": "simple_python_0", "result": "ok"}),
        "{not json",
        json.dumps(["a list"]),
        json.dumps({"result": "no id"}),
        json.dumps({"id": "simple_python_0", "result": "again"}),
        json.dumps({"id": "simple_python_1", "result": [{"f": {}}]}),  # an API model's decoded list
        json.dumps({"id": "multi_turn_base_0", "result": [["ok"], "not a turn"]}),
        json.dumps({"id": "multi_turn_base_1", "result": [[{"role": "x"}]]}),
        json.dumps({"id": "simple_python_2"}),
        "",
        json.dumps({"id": "multi_turn_base_2", "result": [["a", "b"], []]}),
    ]
    path.write_text("\n".join(lines) + "\n")
    rs = bfcl_results.read_replay(path)
    assert rs.single == {"simple_python_0": "ok"} and rs.multi == {"multi_turn_base_2": [["a", "b"], []]}
    got = [(p.kind, p.where.rsplit(":", 1)[1], p.id) for p in rs.problems]
    assert got == [
        (bfcl_results.MALFORMED_LINE, "2", None),
        (bfcl_results.MALFORMED_LINE, "3", None),
        (bfcl_results.MALFORMED_LINE, "4", None),
        (bfcl_results.DUPLICATE_ID, "5", "simple_python_0"),
        (bfcl_results.BAD_RESULT, "6", "simple_python_1"),
        (bfcl_results.BAD_RESULT, "7", "multi_turn_base_0"),
        (bfcl_results.BAD_RESULT, "8", "multi_turn_base_1"),
        (bfcl_results.MALFORMED_LINE, "9", "simple_python_2"),
    ]
    assert all(p.where.startswith(str(path)) for p in rs.problems)
    assert rs.problem_counts() == {"malformed_line": 4, "duplicate_id": 1, "bad_result": 3}
    with pytest.raises(FileNotFoundError, match="eval.replay_path"):
        bfcl_results.read_replay(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="BFCL_v4_"):
        bfcl_results.read_replay(tmp_path / "empty")


def test_perturbations_change_the_calls():
    calls = [{"name": "f", "arguments": {"a": 1, "b": "x"}}, {"name": "g", "arguments": {"c": [1]}}]
    assert agree.perturb_calls(calls, "drop_call") == calls[:1]
    assert agree.perturb_calls(calls, "duplicate_call") == [*calls, calls[1]]
    assert agree.perturb_calls(calls, "reorder_calls") == calls[::-1]
    assert agree.perturb_calls(calls, "wrong_value")[0]["arguments"] == {"a": 8, "b": "x"}
    assert agree.perturb_calls(calls, "wrong_type")[0]["arguments"] == {"a": "1", "b": "x"}
    assert calls[0]["arguments"] == {"a": 1, "b": "x"}  # the input is not changed


def test_checker_input_keeps_wrongly_typed_calls_and_refuses_other_names():
    """evaluate executes every decoded call: a call our environment refuses for its argument types still
    reaches the checker; a name outside the task's classes (a builtin here) never does."""
    from rcgrpo_jax.envs import official

    task = next(t for t in _tasks(1) if "GorillaFileSystem" in t.involved_classes)
    script = [
        [
            [
                {"name": "cd", "arguments": {"folder": 7}},  # schema: a string
                {"name": "open", "arguments": {"file": "x", "mode": "w"}},
                {"name": "cd", "arguments": {"folder": "document"}},
            ]
        ]
    ]
    assert bfcl_results.decoded_call_strings(task, script) == [
        [["cd(folder=7)", official.REJECTED_CALL, "cd(folder='document')"]]
    ]
