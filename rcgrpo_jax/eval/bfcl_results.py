"""BFCL's own result files, in and out: what `bfcl generate` writes and `bfcl evaluate` reads.

Layout (bfcl-eval 2026.3.23): ``<result_dir>/<model>/<group>/BFCL_v4_<category>_result.json``, ``<model>`` the
registry name with ``/`` -> ``_``, ``<group>`` non_live | live | multi_turn (`group_of`); JSON lines sorted by
entry index, one ``{"id", "result", ...metadata}`` per entry. ``result`` is the raw response text
(single-turn) or a list per user turn of each step's raw text (multi-turn). What the fields mean, a failed
inference's and a force-terminated run's results: docs/bfcl.md ("BFCL's result files").

Reading (`read_replay`): a folder (searched recursively for ``BFCL_v4_*_result.json``, as evaluate does),
one result file, or our own JSON lines ``{"id", "output"}`` (single-turn raw texts). Nothing raises on a
bad line: a malformed line, an id given twice or a result of the wrong shape becomes a `Problem` (kind,
file:line, id, message) and the entry counts as missing.

Multi-turn replay (`replay_multi_turn`): each step's raw text goes through the family parser; the steps
with calls are executed in our environment in order, turn by turn (steps without a decodable call are
skipped, as evaluate skips them), and the episode is scored by BFCL's `multi_turn_checker` on the decoded
calls (`decoded_call_strings`; `env_pass` keeps the verdict on the environment's own calls). The model is
never called. The environment's step and call caps are lifted; a result with another number of turns than
the task fails as force-terminated, as in evaluate.

Writing (`write_results`): eval records (single-turn `output`, multi-turn `messages`) in that layout for a
model name that evaluate knows and whose handler decodes the family's format (`MODEL_FOR_FAMILY`); a
multi-turn step's text is rebuilt from its parsed message with the family's `format`, so a call block that
did not parse is absent from the written text (evaluate would skip it too).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from rcgrpo_jax import jsonl
from rcgrpo_jax.envs import bfcl, dispatch, official
from rcgrpo_jax.envs.bfcl import EnvConfig

VERSION_PREFIX = "BFCL_v4"
RESULT_SUFFIX = "_result.json"
# A model name `bfcl evaluate` knows per tool-call family, whose handler decodes that family's text:
# QwenFCHandler reads `<tool_call>\n{"name", "arguments"}\n</tool_call>` blocks (bfcl-eval has no Qwen2.5 FC
# entry; its Qwen3 FC handler decodes the same blocks); LlamaHandler_3_1 reads `<|python_tag|>` JSON calls.
MODEL_FOR_FAMILY = {"hermes": "Qwen/Qwen3-0.6B-FC", "llama3_json": "meta-llama/Llama-3.1-8B-Instruct-FC"}
INFERENCE_ERROR_PREFIX = "Error during inference"

# Problem kinds.
MALFORMED_LINE = "malformed_line"  # not a JSON object with a string id
BAD_RESULT = "bad_result"  # result/output of the wrong shape for its category
DUPLICATE_ID = "duplicate_id"
UNKNOWN_ID = "unknown_id"  # no such entry or task (filled in by the caller)
MISSING_ID = "missing_id"
UNDECODABLE_STEP = "undecodable_step"
EMPTY_FILE = "empty_file"  # a result file with no line at all
# The kinds that leave an entry of the files without a result: replay and agree never score around them
# silently (`undecodable`, `report_undecodable`).
UNDECODABLE_KINDS = (MALFORMED_LINE, BAD_RESULT, EMPTY_FILE)  # a multi-turn step whose text the parser could not read
PROBLEM_KINDS = (MALFORMED_LINE, BAD_RESULT, DUPLICATE_ID, UNKNOWN_ID, MISSING_ID, UNDECODABLE_STEP)


def category_of_id(entry_id: str) -> str:
    """BFCL's `extract_test_category_from_id`: `multi_turn_base_3` -> `multi_turn_base`."""
    return entry_id.split(":")[0].rsplit("_", 1)[0]


def is_multi_turn_id(entry_id: str) -> bool:
    return category_of_id(entry_id).startswith("multi_turn_")


def group_of(category: str) -> str:
    """The folder `bfcl generate` puts a category's result file in (BFCL's `get_general_grouping`)."""
    if category.startswith("multi_turn_"):
        return "multi_turn"
    return "live" if category.startswith("live_") else "non_live"


def model_dir_name(model: str) -> str:
    return model.replace("/", "_")


def result_path(root: str | os.PathLike, model: str, category: str) -> Path:
    return Path(root) / model_dir_name(model) / group_of(category) / f"{VERSION_PREFIX}_{category}{RESULT_SUFFIX}"


def _index(entry_id: str) -> int:
    """The entry's universal index (BFCL's `sort_key` within one category): `live_simple_19-3-15` -> 19."""
    tail = entry_id.split(":")[0].rsplit("_", 1)[-1]
    try:
        return int(tail.split("-")[0])
    except ValueError:
        return -1


# ------------------------------------------------------------------------------------------ reading


@dataclasses.dataclass(frozen=True)
class Problem:
    kind: str
    where: str  # file:line, or the entry id (and turn/step) for undecodable steps
    id: str | None
    message: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class ReplaySet:
    """Raw model outputs by id: `single` id -> text; `multi` id -> turns of step texts, or a string where
    the inference failed (BFCL's error text). `problems` names every line that could not be used."""

    single: dict[str, str] = dataclasses.field(default_factory=dict)
    multi: dict[str, list[list[str]] | str] = dataclasses.field(default_factory=dict)
    problems: list[Problem] = dataclasses.field(default_factory=list)
    files: list[str] = dataclasses.field(default_factory=list)

    def ids(self) -> set[str]:
        return set(self.single) | set(self.multi)

    def problem_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for p in self.problems:
            counts[p.kind] = counts.get(p.kind, 0) + 1
        return counts


def undecodable(problems: Iterable[Problem]) -> list[Problem]:
    """The problems that left an entry of the files without a usable result (`UNDECODABLE_KINDS`)."""
    return [p for p in problems if p.kind in UNDECODABLE_KINDS]


def report_undecodable(problems: Sequence[Problem], *, prefix: str, limit: int = 20, file=None) -> None:
    """Names each undecodable entry on `file` (stderr), one line each (`prefix: FILE:LINE: message`), the
    first `limit` of them, then their count."""
    file = file or sys.stderr
    bad = undecodable(problems)
    for p in bad[:limit]:
        print(f"{prefix}: {p.where}: {p.message}", file=file)
    if len(bad) > limit:
        print(f"{prefix}: ... and {len(bad) - limit} more", file=file)
    if bad:
        print(f"{prefix}: {len(bad)} undecodable entr{'y' if len(bad) == 1 else 'ies'} in the result files", file=file)


def result_files(path: str | os.PathLike) -> list[Path]:
    """The result files under a folder (recursively, as evaluate finds them), or [path] for a file."""
    p = Path(path)
    if p.is_dir():
        return sorted(p.rglob(f"{VERSION_PREFIX}_*{RESULT_SUFFIX}"))
    return [p]


def _multi_result(value: Any) -> tuple[list[list[str]] | str | None, str | None]:
    """A multi-turn result as turns of step texts, BFCL's inference-error string as is, else an error."""
    if isinstance(value, str):
        return value, None
    if not isinstance(value, list):
        return None, f"a multi-turn result must be a list of turns, got {type(value).__name__}"
    turns = []
    for t, turn in enumerate(value):
        if not isinstance(turn, list):
            return None, f"turn {t} must be a list of step responses, got {type(turn).__name__}"
        steps = []
        for s, step in enumerate(turn):
            if not isinstance(step, str):
                return None, f"turn {t} step {s}: a raw response must be a string, got {type(step).__name__}"
            steps.append(step)
        turns.append(steps)
    return turns, None


def read_replay(path: str | os.PathLike) -> ReplaySet:
    """Read `path` (a folder of BFCL result files, one result file, or our {"id", "output"} JSON lines).
    A missing path raises FileNotFoundError; everything wrong inside the files is a `Problem`."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"eval.replay_path: no such file or folder: {path}")
    out = ReplaySet()
    files = result_files(p)
    if p.is_dir() and not files:
        raise FileNotFoundError(f"eval.replay_path: no {VERSION_PREFIX}_*{RESULT_SUFFIX} files under {path}")
    for f in files:
        out.files.append(str(f))
        _read_file(f, out)
    return out


def _read_file(path: Path, out: ReplaySet) -> None:
    n_lines = 0
    for item in jsonl.scan(path):  # the package's one JSON-lines reader, lenient: bad lines become Problems
        n_lines += 1
        where = item.where
        if isinstance(item, jsonl.BadLine):
            out.problems.append(Problem(MALFORMED_LINE, where, None, item.message))
            continue
        row = item.value
        if not isinstance(row, dict) or not isinstance(row.get("id"), str):
            out.problems.append(Problem(MALFORMED_LINE, where, None, "expected a JSON object with a string 'id'"))
            continue
        eid = row["id"]
        if eid in out.single or eid in out.multi:
            out.problems.append(Problem(DUPLICATE_ID, where, eid, f"id {eid!r} appears twice; the first is kept"))
            continue
        if "result" in row:
            value = row["result"]
        elif "output" in row:
            value = row["output"]
        else:
            out.problems.append(Problem(MALFORMED_LINE, where, eid, "neither 'result' nor 'output'"))
            continue
        if is_multi_turn_id(eid):
            turns, err = _multi_result(value)
            if err:
                out.problems.append(Problem(BAD_RESULT, where, eid, err))
            else:
                out.multi[eid] = turns
        elif isinstance(value, str):
            out.single[eid] = value
        else:
            out.problems.append(
                Problem(BAD_RESULT, where, eid, f"a single-turn result must be a string, got {type(value).__name__}")
            )
    if n_lines == 0:
        out.problems.append(Problem(EMPTY_FILE, str(path), None, "empty: no result lines"))


# ------------------------------------------------------------------------------- multi-turn replay


def _replay_env_config():

    # evaluate has no step or call cap (generate's step limit shows as a shorter result) and no output cap.
    return EnvConfig(max_steps_per_turn=10**9, max_tool_calls=None, max_output_chars=None)


def replay_multi_turn(task, result: list[list[str]] | str | None, parser) -> tuple[dict[str, Any], list[Problem]]:
    """One multi-turn task replayed from its raw step texts: (record, problems). The record has the fields
    of an eval episode (id, category, official_pass, reward, error_kind, error_message, calls, turns)."""

    base = {"id": task.id, "category": task.category, "reward": 0.0, "official_pass": False}
    if result is None:
        return {**base, "error_kind": "missing_output", "error_message": "no result for this id"}, [
            Problem(MISSING_ID, task.id, task.id, "no result for this id")
        ]
    base["bfcl_result"] = result  # the raw turns, as read (write_results writes them back)
    if isinstance(result, str):  # BFCL's inference error text: evaluate fails it (multi_turn:inference_error)
        return {**base, "error_kind": "inference_error", "error_message": result[:300]}, []
    problems = []
    script = []
    for t, turn in enumerate(result):
        steps = []
        for s, text in enumerate(turn):
            parsed = parser.parse(text)
            if parsed.errors and not parsed.calls:
                problems.append(
                    Problem(UNDECODABLE_STEP, f"{task.id}:turn{t}:step{s}", task.id, "; ".join(parsed.errors)[:300])
                )
            if parsed.calls:
                steps.append([dict(c) for c in parsed.calls])
        script.append(steps)
    n_calls = sum(len(c) for turn in script for c in turn)
    if len(result) != task.num_turns:
        verdict = official.force_terminated(
            f"the result has {len(result)} turns of {task.num_turns} (force-terminated during inference)"
        )
        return {
            **base,
            "error_kind": "force_terminated",
            "error_message": verdict["error_message"],
            "steps": sum(len(t) for t in script),
            "tool_calls": n_calls,
        }, problems
    env = bfcl.run_script(bfcl.BFCLEnv(task, _replay_env_config()), script)
    strings = decoded_call_strings(task, script)
    if env.done_reason in bfcl.FORCE_TERMINATIONS:  # a call ran past its time limit in our environment
        verdict = env.official_verdict()
    else:
        verdict = official.official_check(task.entry, task.ground_truth, strings)
    valid = verdict.get("valid") is True
    etype = verdict.get("error_type")
    return {
        **base,
        "official_pass": valid,
        "reward": float(env.reward()),
        "error_kind": None if valid else official.ERROR_KINDS.get(etype, etype),
        "error_message": None if valid else (verdict.get("error_message") and str(verdict["error_message"])[:300]),
        "steps": sum(len(t) for t in script),
        "tool_calls": n_calls,
        "call_strings": strings,
        "env_pass": env.official_verdict().get("valid") is True,  # the verdict on the environment's own calls
    }, problems


def decoded_call_strings(task, script: Sequence[Sequence[Sequence[Mapping[str, Any]]]]) -> list[list[list[str]]]:
    """The checker's input for a replay: every decoded call of every step, as evaluate passes it (the
    handler's `decode_execute` output), including calls our environment refuses for their arguments
    (a wrong type, a missing required value): evaluate executes those, so the checker must too. Two
    exceptions keep model output from being run as code: a name that is not a public function of the
    task's classes (evaluate would `eval` it, a Python builtin included) and a call our cost guards stop
    become the inert `official.REJECTED_CALL`; the arguments are always formatted from plain JSON values
    (`official.format_call`)."""

    specs = bfcl.all_specs(task)
    out = []
    for turn in script:
        steps = []
        for calls in turn:
            step = []
            for call in calls:
                name, arguments = call.get("name"), call.get("arguments")
                spec = specs.get(name) if isinstance(name, str) else None
                text = official.REJECTED_CALL
                if spec is not None and isinstance(arguments, Mapping):
                    guard = dispatch.COST_GUARDS.get((spec.class_name, name))
                    try:
                        stopped = bool(guard and guard(arguments))
                    except Exception:  # noqa: BLE001 - a guard on wrongly typed arguments: nothing runs
                        stopped = True
                    if not stopped:
                        try:
                            text = official.format_call(name, arguments)
                        except ValueError:
                            pass
                step.append(text)
            if step:
                steps.append(step)
        out.append(steps)
    return out


# ------------------------------------------------------------------------------------------ writing


def bfcl_clean(text: str) -> tuple[str, str]:
    """(response, reasoning) as BFCL's Qwen handler splits a raw text at ``</think>``."""
    if "</think>" not in text:
        return text, ""
    parts = text.split("</think>")
    return parts[-1].lstrip("\n"), parts[0].rstrip("\n").split("<think>")[-1].lstrip("\n")


def turns_of_messages(messages: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """The assistant messages of an episode's conversation, grouped by user turn: a turn starts at a
    user/system message that follows an assistant or tool message (or opens the conversation)."""
    turns: list[list[Mapping[str, Any]]] = []
    prev = None
    for m in messages:
        role = m.get("role")
        if role in ("user", "system") and prev not in ("user", "system"):
            turns.append([])
        elif role == "assistant":
            if not turns:
                turns.append([])
            turns[-1].append(m)
        prev = role
    return turns


def step_text(message: Mapping[str, Any], parser) -> str:
    """The raw text of one assistant step, rebuilt from its parsed message by the family's format."""
    calls = [
        {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
        for c in message.get("tool_calls") or ()
    ]
    return parser.format(calls, content=(message.get("content") or "").strip())


def bfcl_entry(record: Mapping[str, Any], parser) -> dict[str, Any]:
    """One eval record as the line `bfcl generate` writes for it."""
    eid = record["id"]
    if is_multi_turn_id(eid) and not record.get("messages"):
        # A replayed task keeps its raw turns; one with nothing to write is generate's inference error.
        result = record.get("bfcl_result")
        if result is None:
            result = f"{INFERENCE_ERROR_PREFIX}: {record.get('error_kind')}: {record.get('error_message') or ''}"
        return {"id": eid, "result": result}
    if is_multi_turn_id(eid):
        turns = [[step_text(m, parser) for m in turn] for turn in turns_of_messages(record.get("messages") or ())]
        reasoning = [
            [(m.get("reasoning_content") or "") for m in turn]
            for turn in turns_of_messages(record.get("messages") or ())
        ]
        zeros = [[0 for _ in turn] for turn in turns]
        entry: dict[str, Any] = {
            "id": eid,
            "result": turns,
            "input_token_count": zeros,
            "output_token_count": zeros,
            "latency": zeros,
        }
        if any(r for turn in reasoning for r in turn):
            entry["reasoning_content"] = reasoning
        return entry
    if record.get("output") is None:  # no output (truncated prompt, render error): generate's error text
        why = f"{record.get('error_kind')}: {record.get('error_message') or ''}".strip()
        return {
            "id": eid,
            "result": f"{INFERENCE_ERROR_PREFIX}: {why}",
            "input_token_count": 0,
            "output_token_count": 0,
            "latency": 0,
        }
    text, reasoning = bfcl_clean(record["output"])
    entry = {"id": eid, "result": text, "input_token_count": 0, "output_token_count": 0, "latency": 0}
    if reasoning:
        entry["reasoning_content"] = reasoning
    return entry


def write_entries(root: str | os.PathLike, model: str, entries: Iterable[Mapping[str, Any]]) -> list[Path]:
    """Write BFCL result lines (each with an id) into the layout of `bfcl generate`; returns the files."""
    by_file: dict[Path, list[Mapping[str, Any]]] = {}
    for e in entries:
        by_file.setdefault(result_path(root, model, category_of_id(e["id"])), []).append(e)
    for path, rows in by_file.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = sorted(rows, key=lambda r: _index(r["id"]))
        with open(path, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    return sorted(by_file)


def write_results(root: str | os.PathLike, records: Sequence[Mapping[str, Any]], parser, model: str | None = None):
    """Write eval records (single-turn with `output`, multi-turn with `messages` or, replayed, their raw
    `bfcl_result`) as `bfcl generate` would
    for `model` (default: the family's `MODEL_FOR_FAMILY`). A single-turn record without an output
    (truncated prompt, render error) is written as generate's inference-error text. Returns (model, files)."""
    model = model or MODEL_FOR_FAMILY[parser.family]
    return model, write_entries(root, model, [bfcl_entry(r, parser) for r in records])
