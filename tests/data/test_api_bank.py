"""API-Bank's data: tasks per level from a copy written here, the task source, and bad layouts or records
named by file, line or sample, and field."""

from __future__ import annotations

import json
import os
import shutil

import ml_collections
import pytest

from rcgrpo_jax.data import api_bank as data
from rcgrpo_jax.data import sources
from tests.helpers import api_bank_fixture as fx


@pytest.fixture()
def copy(tmp_path):
    return fx.write_copy(str(tmp_path / "api-bank"))


def test_tasks_per_level(copy):
    tasks = data.load(copy)
    assert [t.category for t in tasks] == ["level_1"] * 3 + ["level_2"] * 2 + ["level_3"] * 2
    note = next(t for t in tasks if t.id == "level-1/AddNote-level-1-1.jsonl#5")
    assert [i["role"] for i in note.context] == ["User", "AI", "User", "API", "AI"]  # everything before the call
    assert note.dialogue_apis == ("AddNote", "GetUserToken") and note.result["output"] == "success"
    l3 = [t for t in tasks if t.level == 3]
    assert [t.api_name for t in l3] == ["ToolSearcher", "CityWeather"]
    assert l3[1].context[0] == {"role": "User", "text": "Tell me what the sky is like in Oslo today."}
    assert l3[1].context[1]["api_name"] == "ToolSearcher" and l3[1].param_dict == {"city": "Oslo"}
    assert [t.id for t in data.load(copy, (3,))] == ["level-3/0#0", "level-3/0#1"]
    assert data.expert(l3[1]) == [[[{"name": "CityWeather", "arguments": {"city": "Oslo"}}]]]


def test_registered_task_source(copy):
    cfg = ml_collections.ConfigDict({"api_bank": {"path": copy, "levels": "2"}})
    source = sources.get("api_bank")
    tasks = source.tasks(cfg, "test")
    assert [t.id for t in tasks] == ["level-2/CountWords-level-2-1.jsonl#2", "level-2/CountWords-level-2-1.jsonl#3"]
    env = source.make_env(tasks[1], None)
    messages, tools = env.reset()
    assert messages[0]["role"] == "system" and tools[0]["function"]["name"] == "ToolSearcher"


def test_levels_parse():
    assert data.parse_levels("3,1") == (1, 3) and data.parse_levels(2) == (2,)
    for bad in ("", "0", "1,4", "one"):
        with pytest.raises(ValueError, match="expected levels among 1,2,3"):
            data.parse_levels(bad)


def _rewrite(path, lines):
    with open(path, "w") as f:
        f.writelines(lines)


@pytest.mark.parametrize(
    "edit, expected",
    [
        (lambda c: shutil.rmtree(os.path.join(c, "lv3_apis")), r"no lv3_apis/ folder"),
        (lambda c: shutil.rmtree(os.path.join(c, "init_database")), r"no init_database/ folder"),
        (lambda c: shutil.rmtree(os.path.join(c, "lv1-lv2-samples")), r"no level-1 dialogues: expected the folder"),
        (
            lambda c: os.remove(os.path.join(c, "test-data", "level-3.json")),
            r"no level-3 data: expected test-data/level-3",
        ),
    ],
)
def test_wrong_layout_is_named(copy, edit, expected):
    edit(copy)
    with pytest.raises(data.ApiBankDataError, match=expected):
        data.load(copy)


def test_malformed_records_name_the_line_and_field(copy):
    path = os.path.join(copy, "lv1-lv2-samples", "level-1-given-desc", "CountWords-level-1-1.jsonl")
    lines = open(path).readlines()
    _rewrite(path, [lines[0], "{not json\n"])
    with pytest.raises(data.ApiBankDataError, match=r"CountWords-level-1-1.jsonl:2: not a JSON object"):
        data.load(copy)
    item = json.loads(lines[1])
    del item["result"]["exception"]
    _rewrite(path, [lines[0], json.dumps(item) + "\n"])
    with pytest.raises(data.ApiBankDataError, match=r":2: field .result.: expected an object with output, exception"):
        data.load(copy)
    _rewrite(path, [json.dumps({"role": "Robot", "text": "hi"}) + "\n"])
    with pytest.raises(data.ApiBankDataError, match=r":1: field 'role': expected 'User', 'AI' or 'API'"):
        data.load(copy)
    l3 = os.path.join(copy, "test-data", "level-3.json")
    _rewrite(path, lines)
    _rewrite(l3, [json.dumps([{"requirement": "x", "apis": [{"api_name": "A", "input": {}, "output": {}}]}])])
    with pytest.raises(data.ApiBankDataError, match=r"sample 0, api 0: field 'output': expected an object with"):
        data.load(copy)


def test_oracle_plays_the_recorded_input():
    listed = {"api_name": "Meet", "input": {"who": ["Ann", "Bo"]}, "output": "ok", "exception": None}
    task = data.Task("t", "level_1", 1, "/x", (), ("Meet",), "Meet", {"who": "['Ann', 'Bo']"}, listed, "f")
    assert data.expert(task) == [[[{"name": "Meet", "arguments": {"who": ["Ann", "Bo"]}}]]]
    odd = {**listed, "input": None}  # no recorded input: the dialogue's param_dict
    task = data.Task("t", "level_1", 1, "/x", (), ("Meet",), "Meet", {"who": "Ann"}, odd, "f")
    assert data.expert(task) == [[[{"name": "Meet", "arguments": {"who": "Ann"}}]]]
