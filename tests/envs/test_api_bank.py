"""API-Bank's environment on a copy written here: the prompt's messages and tools per level, the oracle's calls
all correct, and perturbed calls judged as the benchmark's evaluator and the API classes' own checks say."""

from __future__ import annotations

import socket

import pytest

from rcgrpo_jax.data import api_bank as data
from rcgrpo_jax.envs import api_bank as env_lib
from tests.helpers import api_bank_fixture as fx


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    return {t.id: t for t in data.load(fx.write_copy(str(tmp_path_factory.mktemp("api_bank"))))}


def _verdict(task, calls):
    env = env_lib.ApiBankEnv(task)
    env.reset()
    if calls is None:
        env.end_turn()
    else:
        env.step(calls)
    assert env.done
    return env.official_verdict()


def test_oracle_is_right_on_every_call(tasks):
    assert len(tasks) == 7
    for t in tasks.values():
        v = _verdict(t, [{"name": t.api_name, "arguments": t.param_dict}])
        assert v["valid"] and v["error_type"] is None, (t.id, v)
        assert v.get("by_name_only", False) == (t.api_name == "ToolSearcher")


def test_prompt_per_level(tasks):
    env = env_lib.ApiBankEnv(tasks["level-1/AddNote-level-1-1.jsonl#5"])
    messages, tools = env.reset()
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "tool", "assistant"]
    assert messages[4]["tool_calls"][0]["function"] == {
        "name": "GetUserToken",
        "arguments": {"username": "ada", "password": "pw1"},
    }
    assert messages[5]["content"] == '{"token": "tok-ada-1"}'
    assert [t["function"]["name"] for t in tools] == ["AddNote", "GetUserToken"]  # level 1: the dialogue's APIs
    add = tools[0]["function"]["parameters"]
    assert add["required"] == ["token", "content", "date"] and add["properties"]["date"]["type"] == "string"
    _, tools = env_lib.ApiBankEnv(tasks["level-2/CountWords-level-2-1.jsonl#2"]).reset()
    assert [t["function"]["name"] for t in tools] == ["ToolSearcher"]  # level 2: only the searcher ...
    _, tools = env_lib.ApiBankEnv(tasks["level-2/CountWords-level-2-1.jsonl#3"]).reset()
    assert [t["function"]["name"] for t in tools] == ["ToolSearcher", "CountWords"]  # ... and what it revealed
    assert tools[1]["function"]["parameters"]["properties"]["min_length"]["type"] == "integer"
    messages, tools = env_lib.ApiBankEnv(tasks["level-3/0#0"]).reset()
    assert messages[1] == {"role": "user", "content": "Tell me what the sky is like in Oslo today."}
    assert [t["function"]["name"] for t in tools] == ["ToolSearcher"]


NOTE = "level-1/AddNote-level-1-1.jsonl#5"
TOKEN = "level-1/AddNote-level-1-1.jsonl#3"
COUNT = "level-1/CountWords-level-1-1.jsonl#1"
CALL = {"token": "tok-ada-1", "content": "call the plumber", "date": "2023-03-04"}


@pytest.mark.parametrize(
    "tid, name, args, valid, kind",
    [
        (NOTE, "AddNote", {**CALL, "content": "call the plumber today"}, True, None),  # the class's own overlap rule
        (NOTE, "AddNote", {**CALL, "content": "plumber"}, False, "input_mismatch"),  # overlap 1/3: too far
        (NOTE, "AddNote", {**CALL, "date": "2023-03-05"}, False, "input_mismatch"),
        (NOTE, "AddNote", {**CALL, "date": "March 4"}, False, "has_exception"),  # the API raised inside
        (NOTE, "AddNote", {**CALL, "token": "tok-bo-2"}, True, None),  # its check does not compare the token
        (NOTE, "AddNotes", CALL, False, "api_name_mismatch"),
        (NOTE, "AddNote", {**CALL, "colour": "red"}, False, "invalid_input_parameter"),
        (NOTE, "AddNote", {"token": "tok-ada-1", "content": "call the plumber"}, False, "missing_input_argument"),
        (TOKEN, "GetUserToken", {"username": "ada", "password": "nope"}, False, "has_exception"),
        (COUNT, "CountWords", {"text": "the cat sat on a warm mat", "min_length": "4"}, True, None),  # digit string
        (COUNT, "CountWords", {"text": "the cat sat on a warm mat", "min_length": 4.0}, True, None),
        (
            COUNT,
            "CountWords",
            {"text": "the cat sat on a warm mat", "min_length": "four"},
            False,
            "invalid_input_parameter",
        ),
        (COUNT, "CountWords", {"text": "a cat on a cold mat", "min_length": 4}, True, None),  # same output: its check
        (COUNT, "CountWords", {"text": "the cat sat on a warm mat", "min_length": 3}, False, "output_mismatch"),
        ("level-2/CountWords-level-2-1.jsonl#2", "ToolSearcher", {"keywords": "anything"}, True, None),  # by name
        ("level-3/0#1", "CityWeather", {"city": "Lima"}, False, "output_mismatch"),
        ("level-3/0#1", "CityWeather", {"city": "Paris"}, False, "has_exception"),
    ],
)
def test_perturbed_calls(tasks, tid, name, args, valid, kind):
    v = _verdict(tasks[tid], [{"name": name, "arguments": args}])
    assert (v["valid"], v["error_type"]) == (valid, kind), v


def test_no_call_and_bad_call(tasks):
    assert _verdict(tasks[COUNT], None)["error_type"] == "no_api_call"
    assert _verdict(tasks[COUNT], [{"name": 3, "arguments": {}}])["error_type"] == "no_api_call"
    # only the first call of a step is the prediction (the benchmark extracts one call)
    right = {"name": "CountWords", "arguments": {"text": "the cat sat on a warm mat", "min_length": 4}}
    assert _verdict(tasks[COUNT], [right, {"name": "AddNote", "arguments": {}}])["valid"]
    assert not _verdict(tasks[COUNT], [{"name": "AddNote", "arguments": {}}, right])["valid"]


def test_fresh_state_per_prediction_and_databases_untouched(tasks):
    catalog = env_lib.load_catalog(tasks[NOTE].root, "apis")
    before = dict(catalog.databases["Note"])
    for _ in range(2):
        assert _verdict(tasks[NOTE], [{"name": "AddNote", "arguments": CALL}])["valid"]
    assert catalog.databases["Note"] == before


def test_unavailable_modules_are_reported(tasks):
    catalog = env_lib.load_catalog(tasks[NOTE].root, "apis")
    assert set(catalog.classes) == {"AddNote", "CheckToken", "CountWords", "GetUserToken"}
    assert list(catalog.unavailable) == ["apis.tool_search"]
    assert "a_package_that_is_not_installed_here" in catalog.unavailable["apis.tool_search"]


def test_no_network_while_apis_run():
    with env_lib.no_network():
        with pytest.raises(OSError, match="network access is refused"):
            socket.create_connection(("127.0.0.1", 9))
    assert socket.create_connection is not None and env_lib.socket.create_connection.__name__ == "create_connection"
