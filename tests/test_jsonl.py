"""The one JSON-lines reader (rcgrpo_jax/jsonl.py) and the stages that read through it: a bad line stops
with `FILE:LINE: what is wrong` and exit 2 at start-up, an empty file says it is empty."""

from __future__ import annotations

import json

import pytest

from rcgrpo_jax import jsonl, main
from rcgrpo_jax.config_fields import InputError
from rcgrpo_jax.data import steps

GOOD = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}


def _write(tmp_path, *lines: str, name="data.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def test_read_returns_rows_and_skips_blank_lines(tmp_path):
    path = _write(tmp_path, json.dumps(GOOD), "", "   ", json.dumps(GOOD))
    assert jsonl.read(path, what="conversations", check=jsonl.conversation) == [GOOD, GOOD]


@pytest.mark.parametrize(
    "bad,line,message",
    [
        ('{"messages": [{"role": "user"', 2, "not valid JSON (Expecting ',' delimiter at column 30)"),  # cut short
        ("not json", 2, "not valid JSON ("),
        ('{"x": 1}', 2, "no 'messages' field"),
        ("[1, 2]", 2, "expected a JSON object, got list"),
        ('{"messages": []}', 2, "'messages' must be a non-empty list"),
        ('{"messages": [{"content": "no role"}]}', 2, "messages[0] is not an object with a string 'role'"),
    ],
)
def test_a_bad_line_is_named_by_file_and_line(tmp_path, bad, line, message):
    path = _write(tmp_path, json.dumps(GOOD), bad, json.dumps(GOOD))
    with pytest.raises(InputError) as e:
        jsonl.read(path, what="conversations", check=jsonl.conversation)
    assert str(e.value).startswith(f"{path}:{line}: ") and message in str(e.value)
    assert "\n" not in str(e.value)


def test_not_utf8_is_a_bad_line(tmp_path):
    path = tmp_path / "bin.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b"\n\xff\xfe\n")
    with pytest.raises(InputError, match=r":2: not UTF-8 text"):
        jsonl.read(path)


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_an_empty_file_says_it_is_empty(tmp_path, content):
    path = tmp_path / "empty.jsonl"
    path.write_text(content)
    with pytest.raises(InputError, match=r"empty\.jsonl: empty: no conversations"):
        jsonl.read(path, what="conversations")
    assert jsonl.read(path, allow_empty=True) == []


def test_a_missing_file_or_a_directory_says_so(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        jsonl.read(tmp_path / "nope.jsonl")
    with pytest.raises(InputError, match="is a directory"):
        jsonl.read(tmp_path)


def test_scan_reports_every_bad_line_in_order(tmp_path):
    path = _write(tmp_path, json.dumps(GOOD), "{", json.dumps([1]), "x")
    items = list(jsonl.scan(path))
    assert [type(i).__name__ for i in items] == ["Line", "BadLine", "Line", "BadLine"]
    assert [i.where for i in items] == [f"{path}:{n}" for n in (1, 2, 3, 4)]


def test_step_data_reads_through_it(tmp_path):
    empty = _write(tmp_path, name="steps.jsonl")
    with pytest.raises(steps.StepDataError, match=r"steps\.jsonl: empty: no trajectories"):
        steps.load_jsonl(empty)
    bad = _write(tmp_path, "{oops", name="bad_steps.jsonl")
    with pytest.raises(steps.StepDataError, match=r"bad_steps\.jsonl:1: not valid JSON"):
        steps.load_jsonl(bad)


def _cli(capsys, *args) -> tuple[int, list[str]]:
    rc = main.cli(["main", *args])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    return rc, err


@pytest.mark.parametrize(
    "preset,field",
    [("configs/sft.py:tiny", "data.path"), ("configs/rctp_ft.py:tiny", "data.exploration_path")],
)
def test_a_stage_stops_at_start_up_with_one_line(tmp_path, capsys, preset, field):
    path = _write(tmp_path, json.dumps({**GOOD, "kind": "failure"}), '{"messages": [', name="in.jsonl")
    workdir = tmp_path / "run"
    rc, err = _cli(capsys, f"--config={preset}", f"--workdir={workdir}", f"--config.{field}={path}")
    assert rc == main.USAGE_EXIT and len(err) == 1 and err[0].startswith(f"error: {path}:2: not valid JSON")
    assert not (workdir / "checkpoints").exists() and not (workdir / "tiny_model").exists()  # nothing built


def test_empty_step_data_says_it_is_empty(tmp_path, capsys):
    path = _write(tmp_path, name="steps.jsonl")
    rc, err = _cli(
        capsys,
        "--config=configs/awpo.py:tiny",
        f"--workdir={tmp_path / 'run'}",
        "--config.data.source=steps",
        "--config.data.steps.trajectories=jsonl",
        f"--config.data.steps.path={path}",
    )
    assert rc == main.USAGE_EXIT and len(err) == 1
    assert err[0].startswith(f"error: config.data.steps.path: {path}: empty: no trajectories")
