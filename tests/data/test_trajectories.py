"""Expert and failure trajectories, and the datasets built from them."""

import collections
import copy
import json
import random

import pytest

from rcgrpo_jax.data import datasets, trajectories
from rcgrpo_jax.envs import bfcl


@pytest.fixture(scope="module")
def sample_tasks():
    # 5 tasks per category, spread over the files.
    return [t for c in bfcl.CATEGORIES for t in bfcl.load_tasks([c])[::40]]


@pytest.fixture(scope="module")
def sample_failures(sample_tasks):
    return {t.id: trajectories.failure_trajectories(t) for t in sample_tasks}


def test_all_800_expert_trajectories():
    records = [trajectories.expert_trajectory(t) for t in bfcl.load_tasks()]
    assert len(records) == 800
    assert all(r["reward"] == 1.0 and r["official_valid"] is True for r in records)
    for r in records:
        trajectories.validate_record(r)
    first = records[0]
    assert first["messages"][0] == bfcl.get_task(first["id"]).entry["question"][0][0]
    calls = first["messages"][1]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["cd", "mkdir", "mv"]
    assert calls[2]["function"]["arguments"] == {"source": "final_report.pdf", "destination": "temp"}
    assert [m["role"] for m in first["messages"][1:6]] == ["assistant", "tool", "tool", "tool", "assistant"]
    miss_func = [r for r in records if r["category"] == "miss_func"][0]
    assert miss_func["released_tools"] and all(
        int(turn) in bfcl.get_task(miss_func["id"]).held_out for turn in miss_func["released_tools"]
    )


def test_failures_score_zero_and_have_their_kind(sample_tasks, sample_failures):
    kinds = collections.Counter()
    for task in sample_tasks:
        expert = trajectories.expert_trajectory(task)
        n_user = sum(m["role"] == "user" for m in expert["messages"])
        for record in sample_failures[task.id]:
            trajectories.validate_record(record)
            assert record["reward"] == 0.0 and record["kind"] == "failure"
            kinds[record["failure"]] += 1
            users = sum(m["role"] == "user" for m in record["messages"])
            if record["failure"] == "premature_termination":
                assert users <= n_user and record["official_valid"] is False
            else:
                assert users == n_user
            if record["failure"] == "skipped_turn":
                assert trajectories.CANNOT_TEXT in [
                    m["content"] for m in record["messages"] if m["role"] == "assistant"
                ]
    assert set(kinds) == set(trajectories.FAILURE_GENERATORS)
    assert kinds["wrong_parameter"] == kinds["skipped_turn"] == len(sample_tasks)


def test_wrong_tool_swaps_mv_for_cp():
    task = bfcl.get_task("multi_turn_base_0")  # cd, mkdir, mv(...)
    record = trajectories.failure_trajectory(task, "wrong_tool", seed=0, max_tries=50)
    names = [c["function"]["name"] for m in record["messages"] for c in m.get("tool_calls", [])]
    expert = [
        c["function"]["name"] for m in trajectories.expert_trajectory(task)["messages"] for c in m.get("tool_calls", [])
    ]
    assert len(names) == len(expert)
    assert sum(a != b for a, b in zip(names, expert)) == 1
    siblings = list(trajectories.wrong_tool(task, bfcl.ground_truth_script(task), __import__("random").Random(0)))
    swapped = {c["name"] for script, _ in siblings for step in script[0] for c in step} - set(expert)
    assert "cp" in swapped


def _actions(record: dict) -> list:
    """The assistant messages' calls (name, arguments), or their text when they call nothing."""
    out = []
    for m in record["messages"]:
        if m["role"] == "assistant":
            calls = [(c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls") or []]
            out.append(calls or m["content"])
    return out


def _names(actions: list) -> list[str]:
    return [name for step in actions if not isinstance(step, str) for name, _ in step]


def test_first_site_failures_leave_the_expert_path_at_once(sample_tasks):
    acting = [t for t in sample_tasks if not isinstance(_actions(trajectories.expert_trajectory(t))[0], str)]
    assert len(acting) >= len(sample_tasks) // 2  # (miss_func / miss_param tasks may open without a call)
    for task in acting:
        expert = _actions(trajectories.expert_trajectory(task))
        first_calls = expert[0]
        for record in trajectories.failure_trajectories(task, site="first"):
            assert record["reward"] == 0.0
            got = _actions(record)
            kind = record["failure"]
            if kind in ("premature_termination", "skipped_turn"):
                assert isinstance(got[0], str)  # no call at all in the first turn
            elif kind == "wrong_parameter":
                assert got[0][0][0] == first_calls[0][0] and got[0][0][1] != first_calls[0][1]
            else:  # wrong_tool: one name swapped, at the earliest call where a swap fails the task
                names, swapped = _names(expert), _names(got)
                diff = [i for i, (a, b) in enumerate(zip(names, swapped)) if a != b]
                assert len(names) == len(swapped) and len(diff) == 1
                script = bfcl.ground_truth_script(task)
                failing = []
                for candidate, stop in trajectories.wrong_tool(task, script, random.Random(0)):
                    r = trajectories.record_episode(task, candidate, kind="failure", stop_after_turn=stop)
                    if r["reward"] == 0.0:
                        failing += [i for i, (a, b) in enumerate(zip(names, _names(_actions(r)))) if a != b]
                assert diff[0] == min(failing)
    with pytest.raises(ValueError, match="failure site"):
        trajectories.failure_trajectory(sample_tasks[0], "wrong_tool", site="middle")


def test_failures_are_deterministic(sample_tasks):
    task = sample_tasks[3]
    assert trajectories.failure_trajectories(task, seed=1) == trajectories.failure_trajectories(task, seed=1)


def test_rollout_record_format():
    messages = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "ls", "arguments": {}}}],
        },
        {"role": "tool", "tool_call_id": "c0", "name": "ls", "content": "{}"},
        {"role": "assistant", "content": "done"},
    ]
    record = trajectories.rollout_record("multi_turn_base_3", messages, [], 0.0)
    assert record["category"] == "base" and record["kind"] == "rollout"
    with pytest.raises(ValueError, match="tool results missing"):
        trajectories.rollout_record("multi_turn_base_3", messages[:2] + messages[3:], [], 0.0)
    with pytest.raises(ValueError, match="object arguments"):
        bad = [
            messages[0],
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "c0", "function": {"name": "ls", "arguments": "{}"}}],
            },
        ]
        trajectories.rollout_record("multi_turn_base_3", bad, [], 0.0)


def test_datasets(sample_tasks, sample_failures, tmp_path):
    experts = [trajectories.expert_trajectory(t) for t in sample_tasks]
    failures = [r for t in sample_tasks for r in sample_failures[t.id]]
    sft = datasets.sft_records(experts + failures)
    assert [r["id"] for r in sft] == [r["id"] for r in experts]
    rctp = datasets.rctp_records(experts, failures, seed=0)
    assert len(rctp) == 2 * len(experts)
    by_goal = collections.Counter((r["kind"], r["reward_goal"]) for r in rctp)
    assert by_goal == {("expert", "<|high_reward|>"): len(experts), ("failure", "<|low_reward|>"): len(experts)}
    for r in rctp:
        first_user = next(m for m in r["messages"] if m["role"] == "user")
        assert first_user["content"].endswith(
            "\n\n[Reward Goal: <|high_reward|>]" if r["kind"] == "expert" else "\n\n[Reward Goal: <|low_reward|>]"
        )
        assert sum("[Reward Goal:" in m.get("content", "") for m in r["messages"]) == 1
    assert len({r["id"] for r in rctp if r["kind"] == "failure"}) == len(experts)  # round-robin
    assert datasets.rctp_records(experts, failures, seed=0) == rctp
    assert experts[0]["messages"][0]["content"].find("[Reward Goal") == -1  # inputs untouched

    ids = [t.id for t in sample_tasks[:2]]
    paths = datasets.build_all(tmp_path, ids=ids)
    assert trajectories.read_jsonl(paths["rl"]) == [{"id": i} for i in ids]
    assert len(trajectories.read_jsonl(paths["expert"])) == 2
    assert len(trajectories.read_jsonl(paths["rctp_ft"])) == 4
    manifest = json.loads(paths["manifest"].read_text())
    generated = trajectories.read_jsonl(paths["failure"])
    assert manifest["tasks"] == manifest["experts"] == 2 and sum(manifest["failures"].values()) == len(generated)
    assert "exploration" not in manifest["failures"]

    # Exploration failures (a policy's own rollouts that scored 0) join the generated ones; the mix is recorded.
    explored = [{**copy.deepcopy(generated[0]), "failure": "exploration"}, {"kind": "expert", "id": ids[0]}]
    paths = datasets.build_all(tmp_path / "explored", ids=ids, explored=explored)
    manifest = json.loads(paths["manifest"].read_text())
    assert manifest["failures"]["exploration"] == 1  # the expert-kind record is not a failure
    assert sum(manifest["failures"].values()) == len(generated) + 1
    assert sum(manifest["rctp_ft"]["failures"].values()) == manifest["rctp_ft"]["examples"] // 2

    # A subset of the perturbations: only those kinds are generated, the same records the full set holds.
    paths = datasets.build_all(tmp_path / "subset", ids=ids, failure_kinds="skipped_turn, wrong_tool")
    manifest = json.loads(paths["manifest"].read_text())
    subset = trajectories.read_jsonl(paths["failure"])
    assert manifest["failure_kinds"] == ["wrong_tool", "skipped_turn"]
    assert subset and {r["failure"] for r in subset} <= {"wrong_tool", "skipped_turn"}
    assert subset == [r for r in generated if r["failure"] in ("wrong_tool", "skipped_turn")]


def test_failure_kinds():
    every = tuple(trajectories.FAILURE_GENERATORS)
    assert set(every) == {"wrong_tool", "wrong_parameter", "premature_termination", "skipped_turn"}
    assert trajectories.failure_kinds("all") == every
    assert trajectories.failure_kinds(",".join(reversed(every))) == every  # the registry's order
    assert trajectories.failure_kinds(" skipped_turn ") == ("skipped_turn",)
    for bad, says in (("wrong_tol", "unknown: wrong_tol"), ("", "comma-separated subset"), (",", "wrong_tool")):
        with pytest.raises(ValueError, match=says):
            trajectories.failure_kinds(bad)


def test_reasoning_content_must_be_text():
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok", "reasoning_content": "hm"}]
    trajectories.validate_record(trajectories.rollout_record("multi_turn_base_3", messages, [], 1.0))
    messages[1]["reasoning_content"] = ["hm"]
    with pytest.raises(ValueError, match="reasoning_content"):
        trajectories.rollout_record("multi_turn_base_3", messages, [], 1.0)


@pytest.fixture(scope="module")
def official_tokenizers(tmp_path_factory):
    import transformers

    from rcgrpo_jax.models.tiny import build_tiny_tokenizer
    from tests.helpers.official_templates import with_official_template

    out = {}
    for name, arch in (("llama_3_1", "llama"), ("qwen3", "qwen2")):
        path = build_tiny_tokenizer(tmp_path_factory.mktemp(f"tok_{name}"), arch=arch)
        out[name] = with_official_template(transformers.AutoTokenizer.from_pretrained(path), name)
    return out


def _expected_assistant_texts(messages, write):
    return [write(m) for m in messages if m["role"] == "assistant"]


def test_sft_and_rctp_data_tokenise_with_the_official_templates(sample_tasks, sample_failures, official_tokenizers):
    """LLaMA-3.1: the append-only tokenisation (train/sft.py) works, several-call steps in BFCL's content
    form. Qwen3: it is not append-only, so every assistant step is its own sample (chat.step_samples),
    the step written as Qwen3 writes it after its generation prompt."""
    from rcgrpo_jax import chat
    from rcgrpo_jax.chat.parsers import HermesParser, Llama3JsonParser
    from rcgrpo_jax.train.sft_data import tokenize_conversation

    experts = [trajectories.expert_trajectory(t) for t in sample_tasks[::4]]
    failures = [r for t in sample_tasks[::4] for r in sample_failures[t.id]]
    records = experts + datasets.rctp_records(experts, failures, seed=0)
    assert any(len(m.get("tool_calls", [])) > 1 for r in experts for m in r["messages"])
    calls = lambda m: [c["function"] for c in m.get("tool_calls", [])]  # noqa: E731

    llama = official_tokenizers["llama_3_1"]
    eot = chat.end_of_turn_ids(llama)
    for r in records:
        tokens, mask = tokenize_conversation(llama, r["messages"], r["tools"], eot)
        want = _expected_assistant_texts(
            r["messages"], lambda m: (Llama3JsonParser().format(calls(m)) if calls(m) else m["content"]) + "<|eot_id|>"
        )
        assert llama.decode(tokens[mask == 1]) == "".join(want)

    qwen = official_tokenizers["qwen3"]
    for r in records:
        with pytest.raises(chat.NotAppendOnlyError):
            tokenize_conversation(qwen, r["messages"], r["tools"], chat.end_of_turn_ids(qwen))
        samples = chat.step_samples(qwen, r["messages"], r["tools"])
        want = _expected_assistant_texts(
            r["messages"],
            lambda m: HermesParser().format(calls(m), "" if calls(m) else m["content"], reasoning="") + "<|im_end|>",
        )
        assert [qwen.decode(t[m == 1]) for t, m in samples] == want
        assert all("[Reward Goal:" in qwen.decode(t) for t, _ in samples) == ("reward_goal" in r)


def test_sft_records_reward_slot_random_carries_an_uninformative_token():
    """reward_slot="random": every expert's first user message ends with a reward goal, the token drawn at
    random (both appear, about half each), nothing else changes; "none" leaves the experts as they are."""
    from rcgrpo_jax.config_lib import common
    from rcgrpo_jax.data import sources

    d = common.data()
    d.source = "world"
    d.world.update({"train_per_type": 16, "test_per_type": 1})
    experts = datasets.expert_records(sources.tasks(d, "train"))
    plain = datasets.sft_records(experts)
    slotted = datasets.sft_records(experts, reward_slot="random", seed=3)
    assert plain == experts and len(slotted) == len(experts) == 64
    tokens = [r["reward_goal"] for r in slotted]
    assert 16 <= tokens.count(datasets.HIGH_REWARD_TOKEN) <= 48 and set(tokens) == {
        datasets.HIGH_REWARD_TOKEN,
        datasets.LOW_REWARD_TOKEN,
    }
    for r, e in zip(slotted, experts):
        want = datasets.add_reward_goal(e["messages"], r["reward_goal"] == datasets.HIGH_REWARD_TOKEN)
        assert r["messages"] == want and {k: v for k, v in r.items() if k not in ("messages", "reward_goal")} == {
            k: v for k, v in e.items() if k != "messages"
        }
    assert datasets.sft_records(experts, reward_slot="random", seed=3) == slotted  # seeded
    with pytest.raises(ValueError, match="reward_slot must be one of"):
        datasets.sft_records(experts, reward_slot="high")


def _fake(task_id: str, kind: str, n: int = 0) -> dict:
    return {"id": task_id, "kind": kind, "failure": None if kind == "expert" else f"k{n}", "messages": []}


def test_pretrain_records_one_conversation_a_task_with_the_failure_share():
    experts = [_fake(f"t{i}", "expert") for i in range(400)]
    failures = [_fake(f"t{i}", "failure", n) for i in range(0, 400, 2) for n in range(2)]  # even tasks have two
    none = datasets.pretrain_records(experts, failures, failure_share=0.0)
    assert sorted(r["id"] for r in none) == sorted(r["id"] for r in experts) and {r["kind"] for r in none} == {"expert"}
    every = datasets.pretrain_records(experts, failures, failure_share=1.0)
    by_id = {r["id"]: r for r in every}
    assert len(every) == 400 and len(by_id) == 400  # one conversation per task
    assert all(
        by_id[f"t{i}"]["kind"] == ("failure" if i % 2 == 0 else "expert") for i in range(400)
    )  # where one exists
    assert {by_id[f"t{i}"]["failure"] for i in range(0, 400, 2)} == {"k0", "k1"}  # either failure of a task
    half = datasets.pretrain_records(experts, failures, failure_share=0.5, seed=3)
    n_failed = sum(r["kind"] == "failure" for r in half)
    assert 100 - 35 < n_failed < 100 + 35  # Binomial(200, 0.5): mean 100, sd ~7
    assert half == datasets.pretrain_records(experts, failures, failure_share=0.5, seed=3)  # seeded
    assert all("reward_goal" not in r for r in half)  # no reward goal: the base knows no reward token
    with pytest.raises(ValueError, match=r"failure_share must be in \[0, 1\]"):
        datasets.pretrain_records(experts, failures, failure_share=1.5)
