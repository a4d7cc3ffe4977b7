"""Step-level data: SWiRL decomposition, the JSONL chat schema, Hammer-style masking."""

import copy
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcgrpo_jax.data import steps
from rcgrpo_jax.data.steps import StepDataError

FIXTURE = Path(__file__).parent / "fixtures" / "steps_chats.jsonl"


@pytest.fixture(scope="module")
def chats():
    return steps.load_jsonl(FIXTURE)


@pytest.fixture(scope="module")
def raw_rows():
    return [json.loads(line) for line in FIXTURE.read_text().splitlines()]


# --- hypothesis: random well-formed chats ----------------------------------------------------------

NAMES = st.sampled_from(["ls", "cd", "mkdir", "convert", "get_weather", "post"])
KEYS = st.sampled_from(["a", "path", "dir_name", "amount", "to", "unit"])
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text("abc ", max_size=4),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text("xy", max_size=2), inner, max_size=2),
    max_leaves=4,
)
CALLS = st.lists(st.tuples(NAMES, st.dictionaries(KEYS, VALUES, max_size=3)), max_size=3)


@st.composite
def chat_rows(draw):
    messages = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(st.text(max_size=5))})
    ncall = 0
    used: dict[str, set] = {}
    for _ in range(draw(st.integers(1, 3))):
        messages.append({"role": "user", "content": draw(st.text(max_size=8))})
        for calls in draw(st.lists(CALLS.filter(bool), max_size=2)) + [[]]:
            msg = {"role": "assistant", "content": draw(st.text(max_size=6))}
            if draw(st.booleans()):
                msg["reasoning_content"] = draw(st.text(max_size=6))
            if draw(st.booleans()):
                msg["reference_rationale"] = draw(st.text(max_size=6))
            if calls:
                msg["tool_calls"] = []
                for name, args in calls:
                    used.setdefault(name, set()).update(args)
                    msg["tool_calls"].append(
                        {"id": f"c{ncall}", "type": "function", "function": {"name": name, "arguments": args}}
                    )
                    ncall += 1
            messages.append(msg)
            for call in msg.get("tool_calls", []):
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call["id"],
                        "name": call["function"]["name"],
                        "content": draw(st.text(max_size=6)),
                    }
                )
    # Every used function has a tool (plus one unused); one used function may be left undocumented.
    documented = sorted(used)[: draw(st.integers(max(len(used) - 1, 0), len(used)))] + ["unused_tool"]
    tools = [
        {
            "type": "function",
            "function": {
                "name": n,
                "description": f"does {n}",
                "parameters": {
                    "type": "object",
                    "properties": {k: {"type": "string", "description": f"{n}.{k}"} for k in sorted(used.get(n, ()))},
                    "required": sorted(used.get(n, ()))[:1],
                },
            },
        }
        for n in documented
    ]
    return {"id": "h", "messages": messages, "tools": tools}


def _plain(messages):
    return [{k: v for k, v in m.items() if k != "reference_rationale"} for m in messages]


@settings(max_examples=60, deadline=None)
@given(chat_rows())
def test_targets_concatenate_back_to_the_trajectory(row):
    traj = steps.parse_row(row, "row")
    instances = steps.decompose(traj)
    assistant = [i for i, m in enumerate(row["messages"]) if m["role"] == "assistant"]
    assert len(instances) == len(assistant)
    for k, (inst, idx) in enumerate(zip(instances, assistant)):
        assert inst.step == k and inst.num_steps == len(assistant)
        assert list(inst.context) == _plain(row["messages"][:idx])  # every message before the step
        assert inst.target == _plain([row["messages"][idx]])[0]  # reasoning_content included
        assert inst.reference_rationale == row["messages"][idx].get("reference_rationale")
    assert steps.reassemble(instances) == _plain(row["messages"])
    assert steps.reassemble(instances, rationales=True) == row["messages"]


@settings(max_examples=60, deadline=None)
@given(chat_rows(), st.integers(0, 3))
def test_unmask_inverts_mask(row, seed):
    for inst in steps.decompose(steps.parse_row(row, "row")):
        masked = steps.mask(inst, seed)
        assert steps.unmask(masked).to_json() == inst.to_json()
        _assert_consistent_mask(inst, masked)


def _assert_consistent_mask(inst, masked):
    fns, args = masked.name_map.forward()
    originals = set(fns)
    for tool, mtool in zip(inst.tools, masked.tools):
        fn, mfn = tool["function"], mtool["function"]
        assert mfn["name"] == fns[fn["name"]] and mfn["name"] not in originals
        assert mfn["description"] == fn["description"]  # descriptions untouched
        amap = args[fn["name"]]
        props = fn["parameters"]["properties"]
        assert mfn["parameters"]["properties"] == {amap[k]: v for k, v in props.items()}
        assert mfn["parameters"].get("required") == (
            None if "required" not in fn["parameters"] else [amap[k] for k in fn["parameters"]["required"]]
        )
    for msg, mmsg in zip(inst.context + (inst.target,), masked.context + (masked.target,)):
        assert mmsg.get("content") == msg.get("content") or msg["role"] == "user"
        for call, mcall in zip(msg.get("tool_calls") or [], mmsg.get("tool_calls") or []):
            name, arguments = call["function"]["name"], call["function"]["arguments"]
            assert mcall["function"]["name"] == fns[name]
            assert mcall["function"]["arguments"] == {args[name][k]: v for k, v in arguments.items()}
        if msg["role"] == "tool" and msg.get("name") in fns:
            assert mmsg["name"] == fns[msg["name"]]


# --- the JSONL schema on the hand-written fixture ----------------------------------------------------


def test_fixture_loads_with_normalisation(chats, raw_rows):
    assert [t.id for t in chats] == ["steps_chats.jsonl:1", "xlam-7", "hammer-3"]
    assert [t.category for t in chats] == ["jsonl", "xlam", "hammer"]
    instances = steps.instances_of(chats)
    assert [i.id for i in instances if i.trajectory_id == "hammer-3"] == [f"hammer-3:step{k}" for k in range(4)]
    assert len(instances) == 2 + 2 + 4
    first = instances[0]
    # arguments given as a JSON string are parsed; content null becomes ""; reasoning stays on the target
    assert first.target["tool_calls"][0]["function"]["arguments"] == {"city": "Paris", "unit": "celsius"}
    assert first.target["content"] == ""
    assert first.target["reasoning_content"].startswith("The user wants Paris weather")
    assert [m["role"] for m in first.context] == ["system", "user"]
    # bare xLAM tools are wrapped; "type": "function" added to calls that lacked it
    assert chats[1].tools[0] == {"type": "function", "function": raw_rows[1]["tools"][0]}
    assert instances[-2].target["tool_calls"][0]["type"] == "function"
    assert instances[0].target_calls == [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}]
    assert steps.expert_script(instances[0]) == [[instances[0].target_calls]]
    assert steps.expert_script(instances[1]) == [[]]  # a plain answer: one turn without a step


def test_fixture_reassembles_and_rationales(chats, raw_rows):
    instances = steps.instances_of(chats)
    by_row = [[i for i in instances if i.trajectory_id == t.id] for t in chats]
    for t, group in zip(chats, by_row):
        assert steps.reassemble(group) == list(t.messages)
    assert [i.reference_rationale for i in by_row[0]] == ["Call get_weather with city=Paris and unit=celsius.", None]
    assert by_row[1][0].reference_rationale.startswith("Two conversions") and by_row[1][1].reference_rationale is None
    assert all(i.reference_rationale is None for i in by_row[2])
    # the rationale is kept for the judge, never in what the policy sees
    assert all("reference_rationale" not in m for i in instances for m in i.context + (i.target,))
    back = steps.reassemble(by_row[0], rationales=True)
    assert back[2]["reference_rationale"] == raw_rows[0]["messages"][2]["reference_rationale"]


def test_calls_only_keeps_tool_calling_steps(chats):
    kept = steps.instances_of(chats, calls_only=True)
    assert [i.id for i in kept] == ["steps_chats.jsonl:1:step0", "xlam-7:step0", "hammer-3:step0", "hammer-3:step2"]


GOOD = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], "tools": []}
CALL = {"type": "function", "function": {"name": "f", "arguments": {}}}


def _with(**changes):
    row = copy.deepcopy(GOOD)
    row.update(changes)
    return row


BAD_ROWS = [
    ("{not json", "not valid JSON"),
    (_with(tools=None), "'tools' must be a list"),
    ({"messages": GOOD["messages"]}, "missing field 'tools'"),
    (_with(messages=[]), "non-empty list"),
    (_with(messages=[{"role": "robot", "content": "x"}]), "role must be one of"),
    (_with(messages=[{"role": "assistant", "content": "x"}]), "before any user message"),
    (_with(messages=[{"role": "user", "content": "x"}]), "must end with an assistant message"),
    (_with(messages=[{"role": "user", "content": ["parts"]}, GOOD["messages"][1]]), "user content must be a string"),
    (
        _with(messages=[{"role": "user", "content": "x"}, {"role": "tool", "content": "r"}, GOOD["messages"][1]]),
        "must follow an assistant message with tool_calls",
    ),
    (
        _with(
            messages=[
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]},
            ]
        ),
        "arguments of 'f' are not valid JSON",
    ),
    (
        _with(
            messages=[
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]},
            ]
        ),
        "must be a JSON object",
    ),
    (
        _with(messages=[{"role": "user", "content": "x"}, {"role": "assistant", "function_call": {"name": "f"}}]),
        "legacy 'function_call'",
    ),
    (_with(tools=[{"name": "f"}, {"type": "function", "function": {"name": "f"}}]), "duplicate tool names ['f']"),
    (_with(tools=[{"description": "no name"}]), "needs a 'function' object"),
    (
        _with(
            messages=[GOOD["messages"][0], {"role": "assistant", "content": "", "tool_calls": [CALL]}]
            + [{"role": "tool", "content": "r"}, {"role": "assistant", "content": "done"}],
            reference_rationale="one string for two steps",
        ),
        "needs a one-step row",
    ),
    (_with(reference_rationale=["a", "b"]), "a list of 1 strings/nulls"),
    (
        _with(
            messages=[GOOD["messages"][0], {**GOOD["messages"][1], "reference_rationale": "m"}], reference_rationale="r"
        ),
        "differ",
    ),
    (_with(released_tools={"one": []}), "is not a turn number"),
]


@pytest.mark.parametrize("bad,message", BAD_ROWS)
def test_malformed_row_names_file_and_line(tmp_path, bad, message):
    path = tmp_path / "chats.jsonl"
    lines = [json.dumps(GOOD), "", bad if isinstance(bad, str) else json.dumps(bad)]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(StepDataError) as err:
        steps.load_jsonl(path)
    assert f"{path}:3" in str(err.value) and message in str(err.value)


def test_duplicate_row_ids_are_refused(tmp_path):
    path = tmp_path / "dup.jsonl"
    path.write_text(json.dumps({**GOOD, "id": "x"}) + "\n" + json.dumps({**GOOD, "id": "x"}) + "\n")
    with pytest.raises(StepDataError, match="duplicate row ids"):
        steps.load_jsonl(path)


def test_several_files_load_in_order_and_share_no_row_id(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(FIXTURE.read_text())
    b.write_text(json.dumps(GOOD) + "\n")
    rows = steps.load_jsonl_files([a, b])
    # ids default to "<file name>:<line>" (the fixture's first row has none; the others name themselves)
    assert [t.id for t in rows] == ["a.jsonl:1", "xlam-7", "hammer-3", "b.jsonl:1"]
    assert [t.messages for t in rows[:3]] == [t.messages for t in steps.load_jsonl(FIXTURE)]
    b.write_text(json.dumps({**GOOD, "id": "xlam-7"}) + "\n")
    with pytest.raises(StepDataError) as err:
        steps.load_jsonl_files([a, b])
    assert str(err.value).startswith(f"{b}: row id 'xlam-7' is also a row of {a}")
    with pytest.raises(StepDataError, match="no JSONL file"):
        steps.load_jsonl_files([])


# --- the `steps` source over data.steps.path (the AWPO presets' data) ---------------------------------


def _steps_data(**fields):
    import ml_collections

    return ml_collections.ConfigDict({"source": "steps", "max_examples": -1, "steps": fields})


def test_source_reads_the_files_at_data_steps_path(tmp_path, chats):
    from rcgrpo_jax.data import sources

    extra = tmp_path / "extra.jsonl"
    extra.write_text(json.dumps({**GOOD, "id": "extra", "category": "toolace"}) + "\n")
    d = _steps_data(trajectories="jsonl", path=f"{FIXTURE}, {extra}", test_fraction=0.0)
    sources.check(d)
    tasks = sources.tasks(d, "train")
    # every assistant step of the 3 fixture rows (8) and of the extra row (1), in file order
    assert len(tasks) == 9 and tasks[-1].id == "extra:step0" and tasks[-1].category == "toolace"
    assert [t.trajectory_id for t in tasks[:-1]] == [t.trajectory_id for t in steps.instances_of(chats)]
    assert sources.tasks(d, "test") == []


@pytest.mark.parametrize(
    "fields,message",
    [
        ({"trajectories": "jsonl"}, "required for data.source=steps"),
        ({"trajectories": "jsonl", "path": " , "}, "required for data.source=steps"),
        ({"trajectories": "jsonl", "path": "/no/such/steps.jsonl"}, "no such JSONL file: '/no/such/steps.jsonl'"),
        ({"trajectories": "bfcl", "path": str(FIXTURE)}, "would not read it"),
        ({"trajectories": "jsonl", "path": 3}, "must be a string"),
    ],
)
def test_source_path_errors_name_the_field(fields, message):
    from rcgrpo_jax.config_fields import ConfigError
    from rcgrpo_jax.data import sources

    with pytest.raises(ConfigError) as err:
        sources.check(_steps_data(**fields))
    assert err.value.field == "data.steps.path" and message in str(err.value)
    assert "\n" not in str(err.value)  # one line, as the launcher prints it


def test_missing_path_error_gives_the_schema():
    from rcgrpo_jax.config_fields import ConfigError
    from rcgrpo_jax.data import sources

    with pytest.raises(ConfigError) as err:
        sources.check(_steps_data(trajectories="jsonl"))
    assert str(err.value).startswith("config.data.steps.path: required for data.source=steps")
    assert steps.SCHEMA_LINE in str(err.value)
    for field in ('"messages"', '"tools"', '"tool_calls"', '"reasoning_content"', "rcgrpo_jax/data/steps.py"):
        assert field in steps.SCHEMA_LINE


def test_source_reports_a_bad_row_of_a_path_file_on_that_field(tmp_path):
    from rcgrpo_jax.config_fields import ConfigError
    from rcgrpo_jax.data import sources

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(GOOD) + "\n" + json.dumps({"messages": [], "tools": []}) + "\n")
    with pytest.raises(ConfigError) as err:
        sources.check(_steps_data(trajectories="jsonl", path=f"{FIXTURE},{bad}"))
    assert err.value.field == "data.steps.path" and f"{bad}:2" in str(err.value)


def test_split_rows_keeps_trajectories_whole_and_is_seeded(chats):
    rows = [steps.Trajectory(f"t{i}", "c", chats[0].messages, chats[0].tools) for i in range(20)]
    a = steps.split_rows(rows, 0.25, seed=3)
    assert len(a["test"]) == 5 and len(a["train"]) == 15
    assert {t.id for t in a["train"]} | {t.id for t in a["test"]} == {t.id for t in rows}
    assert not {t.id for t in a["train"]} & {t.id for t in a["test"]}
    assert [t.id for t in steps.split_rows(rows, 0.25, seed=3)["test"]] == [t.id for t in a["test"]]
    assert [t.id for t in steps.split_rows(rows, 0.25, seed=4)["test"]] != [t.id for t in a["test"]]
    with pytest.raises(ValueError):
        steps.split_rows(rows, 1.0, seed=0)


# --- masking -----------------------------------------------------------------------------------------


def test_mask_fixture_is_consistent_seeded_and_invertible(chats):
    for inst in steps.instances_of(chats):
        masked = steps.mask(inst, seed=1)
        _assert_consistent_mask(inst, masked)
        assert steps.unmask(masked).to_json() == inst.to_json()
        assert steps.mask(inst, seed=1).to_json() == masked.to_json()
        assert steps.mask(inst, seed=2).name_map != masked.name_map
        # free text (here the fixture's reasoning) is not rewritten; every structured name is
        shown = [{k: v for k, v in m.items() if k != "reasoning_content"} for m in masked.context + (masked.target,)]
        text = json.dumps([masked.tools, shown])
        for name in ("get_weather", "convert", "mkdir", '"ls"', '"dir_name"', '"amount"'):
            assert name not in text
        calls = masked.target_calls
        assert steps.unmask_calls(calls, masked.name_map) == inst.target_calls
    with pytest.raises(ValueError, match="not masked"):
        steps.unmask(inst)
    with pytest.raises(ValueError, match="already masked"):
        steps.mask(masked)


# --- BFCL expert trajectories --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bfcl_pair():
    from rcgrpo_jax.data import trajectories
    from rcgrpo_jax.envs import bfcl

    tasks = [bfcl.get_task("multi_turn_base_0"), bfcl.get_task("multi_turn_miss_func_0")]
    return [(trajectories.expert_trajectory(t), steps.expert_trajectories([t])[0]) for t in tasks]


def test_bfcl_expert_trajectories_decompose(bfcl_pair):
    for record, traj in bfcl_pair:
        instances = steps.decompose(traj)
        assert len(instances) == sum(m["role"] == "assistant" for m in record["messages"])
        assert steps.reassemble(instances) == record["messages"]
        assert all(list(i.tools) == record["tools"] for i in instances)
        assert instances[0].category == record["category"] and instances[0].trajectory_id == record["id"]


def test_bfcl_released_tools_follow_the_release_and_are_masked(bfcl_pair):
    from rcgrpo_jax.envs import bfcl

    record, traj = bfcl_pair[1]
    (turn, released), *_ = sorted((int(t), v) for t, v in record["released_tools"].items())
    instances = steps.decompose(traj)
    release_text = bfcl.release_message(released)
    for inst in instances:
        seen = any(m["role"] == "user" and m["content"] == release_text for m in inst.context)
        assert list(inst.released_tools) == (released if seen else [])
    after = next(i for i in instances if i.released_tools)
    masked = steps.mask(after)
    fns, _ = masked.name_map.forward()
    [release] = [m for m in masked.context if m["role"] == "user" and m["content"].endswith(bfcl.RELEASE_MESSAGE)]
    docs = json.loads(release["content"].split("\n", 1)[0])
    assert [d["name"] for d in docs] == [fns[t["function"]["name"]] for t in released]
    assert [d["description"] for d in docs] == [t["function"]["description"] for t in released]
    assert [t["function"]["name"] for t in masked.released_tools] == [d["name"] for d in docs]
    assert steps.unmask(masked).to_json() == after.to_json()
