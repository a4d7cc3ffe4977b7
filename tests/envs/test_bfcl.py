"""The BFCL environment end to end: ground-truth replays, perturbations against the package's own
checker, hostile input, isolation and limits."""

import copy
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rcgrpo_jax.envs import Environment, bfcl, dispatch, official, rewards
from rcgrpo_jax.envs.isolation import import_bfcl, restore_package_state


@pytest.fixture(scope="module")
def tasks():
    return bfcl.load_tasks()


def replay(task, script=None, config=bfcl.EnvConfig()):
    return bfcl.run_script(bfcl.BFCLEnv(task, config), script or bfcl.ground_truth_script(task))


def direct_checker(task, call_strings, name):
    """The package's multi_turn_checker called directly on the same call strings."""
    restore_package_state()
    checker = import_bfcl("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker")
    result = checker.multi_turn_checker(
        call_strings, [list(t) for t in task.ground_truth], task.entry, task.id.rsplit("_", 1)[0], name
    )
    cache = vars(import_bfcl("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils"))
    for key in [k for k in cache if k.startswith(name)]:
        del cache[key]
    restore_package_state()
    return result


def test_load_tasks(tasks):
    assert len(tasks) == 800
    assert len({t.id for t in tasks}) == 800
    for category in bfcl.CATEGORIES:
        chosen = bfcl.load_tasks([category])
        assert len(chosen) == 200 and all(t.category == category for t in chosen)
        assert all(t.id.startswith(f"multi_turn_{category}_") for t in chosen)
    first = bfcl.get_task("multi_turn_base_0")
    assert first.ground_truth[0] == (
        "cd(folder='document')",
        "mkdir(dir_name='temp')",
        "mv(source='final_report.pdf', destination='temp')",
    )
    assert isinstance(bfcl.BFCLEnv(first), Environment)
    with pytest.raises(ValueError):
        bfcl.load_tasks(["nope"])


def test_all_ground_truth_replays_score_one_and_pass(tasks):
    failures = []
    for task in tasks:
        env = replay(task)
        scores = {name: env.reward(name) for name in rewards.names()}
        verdict = env.official_verdict()
        if env.done_reason != "completed" or set(scores.values()) != {1.0} or not verdict["valid"]:
            failures.append((task.id, env.done_reason, scores, verdict))
    assert failures == []


def test_reset_returns_first_turn_and_openai_tools():
    task = bfcl.get_task("multi_turn_base_0")
    env = bfcl.BFCLEnv(task)
    messages, tools = env.reset()
    assert messages == task.entry["question"][0]
    names = [t["function"]["name"] for t in tools]
    assert len(names) == len(set(names)) > 0
    assert all(t["type"] == "function" and t["function"]["parameters"]["type"] == "object" for t in tools)
    assert "dict" not in json.dumps(tools).replace("dictionary", "")
    tools[0]["function"]["name"] = "mutated"  # callers get copies
    assert bfcl.BFCLEnv(task).reset()[1][0]["function"]["name"] != "mutated"


def test_miss_func_holds_out_and_releases():
    task = bfcl.get_task("multi_turn_miss_func_0")
    assert task.held_out == {3: ("sort",)}
    env = bfcl.BFCLEnv(task)
    _, tools = env.reset()
    assert "sort" not in [t["function"]["name"] for t in tools]
    for turn in (1, 2, 3):
        messages, tools = env.end_turn()
    [message] = messages
    assert message["role"] == "user" and message["content"].endswith("\n" + bfcl.RELEASE_MESSAGE)
    # The released docs travel in the message (the template's tool list is fixed at the top).
    assert [d["name"] for d in json.loads(message["content"].split("\n")[0])] == ["sort"]
    assert [t["function"]["name"] for t in tools][-1] == "sort"
    assert env.end_turn() is not None and env.end_turn() is None
    assert env.done and env.done_reason == "completed"


def test_held_out_callable_flag():
    task = bfcl.get_task("multi_turn_miss_func_49")  # its answer calls `tail` before the release
    strict = replay(task, config=bfcl.EnvConfig(held_out_callable=False))
    statuses = {r["name"]: r["status"] for turn in strict.trace()["turns"] for step in turn for r in step}
    assert statuses["tail"] == "rejected"
    assert strict.reward() == 0.0
    assert replay(task).reward() == 1.0


# --- perturbations -----------------------------------------------------------------------------


def _flat(script):
    return [(t, c) for t, steps in enumerate(script) for c in range(len(steps[0]) if steps else 0)]


def perturb(task, kind):
    script = copy.deepcopy(bfcl.ground_truth_script(task))
    sites = _flat(script)
    if kind == "reverse":
        return [[list(reversed(s)) for s in steps] for steps in script]
    if not sites:
        return None
    t, c = sites[len(sites) // 2]
    calls = script[t][0]
    if kind == "drop":
        del calls[c]
    elif kind == "duplicate":
        calls.insert(c, copy.deepcopy(calls[c]))
    elif kind == "skip_turn":
        script[t] = []
    elif kind == "wrong_argument":
        args = calls[c]["arguments"]
        if not args:
            return None
        key = sorted(args)[0]
        value = args[key]
        args[key] = (
            not value
            if type(value) is bool
            else value + 1
            if type(value) in (int, float)
            else value + "_x"
            if type(value) is str
            else value[:-1]
            if value
            else ["x"]
        )
    return script


@pytest.mark.parametrize("kind", ["drop", "duplicate", "wrong_argument", "skip_turn", "reverse"])
def test_perturbed_replays_match_the_package_checker(tasks, kind):
    checked = 0
    for i, task in enumerate(tasks[::5]):
        script = perturb(task, kind)
        if script is None:
            continue
        env = replay(task, script)
        ours = env.official_verdict()
        theirs = direct_checker(task, env.call_strings(), f"test_direct_{kind}_{i}")
        assert ours["valid"] == theirs["valid"], (task.id, ours, theirs)
        assert ours["error_type"] == (None if theirs["valid"] else theirs["error_type"])
        reward = env.reward()
        outcome = env.outcome()
        if kind in ("drop", "skip_turn"):
            assert reward == 0.0, task.id
        elif kind == "duplicate":
            assert reward == float(outcome.states_equal), task.id
        elif kind == "reverse":  # order-aware coverage: reward 1 only where the reorder commutes
            assert reward <= float(outcome.states_equal) and (reward == 0.0 or ours["valid"]), task.id
        checked += 1
    assert checked > 100


def test_documented_reward_verdict_differences():
    # docs/bfcl.md: tail before cd fails (wrong directory) but the final state and the multiset of
    # calls are right -> the old multiset reward 1, official fail (the tail result is missing); the
    # order-aware reward sees that cd and tail do not commute -> 0.
    task = bfcl.get_task("multi_turn_base_13")
    env = replay(task, [[list(reversed(s)) for s in steps] for steps in bfcl.ground_truth_script(task)])
    assert env.reward("rc_grpo_multiset") == 1.0 and env.reward() == 0.0
    assert env.official_verdict()["error_type"] == "multi_turn:execution_response_mismatch"
    # ls(a=False) instead of ls(a=True) in a folder without hidden files: same results and state
    # -> official pass, but the argument differs -> reward 0.
    task = bfcl.get_task("multi_turn_base_1")
    script = copy.deepcopy(bfcl.ground_truth_script(task))
    assert script[0][0][0] == {"name": "ls", "arguments": {"a": True}}
    script[0][0][0]["arguments"]["a"] = False
    env = replay(task, script)
    assert env.official_verdict()["valid"] is True
    assert env.reward() == 0.0 and env.reward("state_consistency") == 1.0


# --- hostile input -----------------------------------------------------------------------------

PAYLOAD = "__import__('os').system('touch {marker}')"


@pytest.fixture()
def marker(tmp_path, monkeypatch):
    def forbidden(*a, **k):
        raise AssertionError("a model call reached os.system")

    monkeypatch.setattr(os, "system", forbidden)
    return tmp_path / "pwned"


def hostile_calls(marker):
    p = PAYLOAD.format(marker=marker)
    return [
        {"name": p, "arguments": {}},
        {"name": "__import__", "arguments": {"name": "os"}},
        {"name": "_load_scenario", "arguments": {"scenario": {}}},
        {"name": "__init__", "arguments": {}},
        {"name": "__class__", "arguments": {}},
        {"name": "book_flight", "arguments": {"access_token": "t"}},  # TravelAPI is not involved
        {"name": "cd", "arguments": {"folder": p}},
        {"name": "cd", "arguments": {"folder": f"x'); {p}; ('"}},
        {"name": "echo", "arguments": {"content": p + " ls( cd(", "file_name": "f.txt"}},
        {"name": "echo", "arguments": {"content": "x" * 1_000_000}},
        {"name": "cd", "arguments": json.dumps({"folder": [[[[[[[[[[[["x"]]]]]]]]]]]]})},
        {"name": "cd", "arguments": '{"folder": NaN}'},
        {"name": "mkdir", "arguments": {"dir_name": float("inf")}},
        {"name": "ls", "arguments": {"a": float("nan")}},
        {"name": "tail", "arguments": {"file_name": "f.txt", "lines": 10**30}},
        "cd(folder='x')",
        None,
        42,
        {"name": None},
        {"function": {"name": "pwd", "arguments": "{}"}},
    ]


def test_hostile_calls_never_execute_or_crash(marker):
    task = bfcl.get_task("multi_turn_base_0")  # GorillaFileSystem and TwitterAPI
    assert "TravelAPI" not in task.involved_classes
    env = bfcl.BFCLEnv(task)
    env.reset()
    calls = hostile_calls(marker)
    results = env.step(calls)
    assert len(results) == len(calls) and all(isinstance(r, str) for r in results)
    statuses = [r["status"] for r in env.trace()["turns"][0][0]]
    assert statuses[:6] == ["rejected"] * 6
    assert statuses[-1] == "ok"  # the OpenAI wrapper form is accepted
    while env.end_turn() is not None:
        pass
    env.official_verdict()
    env.reward()
    assert not marker.exists()
    json.dumps(env.trace())


names = st.one_of(
    st.sampled_from(
        [
            "__import__",
            "_load_scenario",
            "__init__",
            "eval",
            "exec",
            "open",
            "os.system",
            "post_tweet",
            "cd",
            "echo",
            "ls",
            "mkdir",
            "mean",
            "__class__.__bases__",
        ]
    ),
    st.text(max_size=30),
)
values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40) | st.just(PAYLOAD),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=10,
)
arg_names = st.sampled_from(["folder", "dir_name", "content", "file_name", "a", "__class__", "x"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.fixed_dictionaries({"name": names, "arguments": st.dictionaries(arg_names, values, max_size=3)}),
        min_size=1,
        max_size=4,
    )
)
def test_random_calls_never_crash(marker, calls):
    env = bfcl.BFCLEnv("multi_turn_base_1")
    env.reset()
    callable_names = {t["function"]["name"] for t in bfcl.tools_for(env.task, 0)}
    results = env.step(calls)
    assert len(results) == len(calls)
    for call, result, rec in zip(calls, results, env.trace()["turns"][0][0]):
        if call["name"] not in callable_names:
            assert rec["status"] == "rejected" and result.startswith("Error:")
    env.official_verdict()
    assert env.reward() in (0.0, 1.0)
    assert not marker.exists()


# --- isolation ---------------------------------------------------------------------------------


def _fingerprint(env):
    return json.dumps([env.trace(), env.reward(), env.official_verdict()], sort_keys=True)


def test_same_task_twice_and_a_b_a_are_identical(tasks):
    a, b = bfcl.get_task("multi_turn_long_context_10"), bfcl.get_task("multi_turn_base_57")
    for first in (a, bfcl.get_task("multi_turn_base_20")):
        script = perturb(first, "duplicate")  # a repeated call shifts seeded ids: still repeatable
        runs = [_fingerprint(replay(first, script))]
        replay(b, perturb(b, "wrong_argument"))
        runs.append(_fingerprint(replay(first, script)))
        assert runs[0] == runs[1]


def test_interleaved_episodes_do_not_share_state():
    travel = [t for t in bfcl.load_tasks(["long_context"]) if "TravelAPI" in t.involved_classes][0]
    script = bfcl.ground_truth_script(travel)
    solo = replay(travel, script)
    x, y = bfcl.BFCLEnv(travel), bfcl.BFCLEnv(travel)
    x.reset(), y.reset()
    for turn, steps in enumerate(script):
        for calls in steps:
            assert x.step(calls) == y.step(calls)
        if turn + 1 < len(script):
            x.end_turn(), y.end_turn()
    assert x.trace()["turns"] == y.trace()["turns"] == solo.trace()["turns"]


def test_mutable_default_does_not_leak_between_episodes():
    task = [t for t in bfcl.load_tasks(["base"]) if "TwitterAPI" in t.involved_classes][0]
    results = []
    for _ in range(2):
        env = bfcl.BFCLEnv(task)
        env.reset()
        env.step(
            [
                {
                    "name": "authenticate_twitter",
                    "arguments": {
                        "username": task.entry["initial_config"]["TwitterAPI"]["username"],
                        "password": task.entry["initial_config"]["TwitterAPI"]["password"],
                    },
                }
            ]
        )
        posted = json.loads(env.step([{"name": "post_tweet", "arguments": {"content": "hi"}}])[0])
        env.step([{"name": "mention", "arguments": {"tweet_id": posted["id"], "mentioned_usernames": ["@z"]}}])
        results.append(posted)
    assert results[0] == results[1] and results[0]["mentions"] == []
    cls = import_bfcl("bfcl_eval.eval_checker.multi_turn_eval.func_source_code.posting_api").TwitterAPI
    assert cls.post_tweet.__defaults__ == ([], [])


# --- limits ------------------------------------------------------------------------------------


def test_step_limit_force_terminates():
    env = bfcl.BFCLEnv("multi_turn_base_0")
    env.reset()
    for _ in range(bfcl.MAX_STEPS_PER_TURN):
        assert env.step([{"name": "pwd", "arguments": {}}])[0].startswith("{")
    assert not env.done
    assert "force-terminated" in env.step([{"name": "pwd", "arguments": {}}])[0]
    assert env.done and env.done_reason == "max_steps"
    assert env.end_turn() is None
    assert env.reward() == 0.0
    assert env.official_verdict()["error_type"] == official.FORCE_TERMINATED
    with pytest.raises(RuntimeError):
        env.step([{"name": "pwd", "arguments": {}}])


def test_tool_call_and_output_caps():
    env = bfcl.BFCLEnv("multi_turn_base_0", bfcl.EnvConfig(max_tool_calls=3, max_output_chars=60))
    env.reset()
    assert env.step([]) == []
    results = env.step([{"name": "ls", "arguments": {}}] * 4)
    assert len(results[0]) <= 60 + len(bfcl.TRUNCATION_MARK)
    assert results[1] == bfcl.TRUNCATION_MARK.lstrip("\n") or results[1].endswith(bfcl.TRUNCATION_MARK)
    assert "tool-call limit (3)" in results[3]
    assert env.done_reason == "max_tool_calls" and env.reward() == 0.0


def test_call_timeout_ends_the_episode(monkeypatch):
    def too_slow(fn, kwargs, timeout_s):
        raise dispatch.CallTimeout()

    monkeypatch.setattr(dispatch, "call_with_timeout", too_slow)
    env = bfcl.BFCLEnv("multi_turn_base_0")
    env.reset()
    results = env.step([{"name": "pwd", "arguments": {}}, {"name": "ls", "arguments": {}}])
    assert "time limit" in results[0] and "not run" in results[1]
    assert env.done_reason == "call_timeout"
    assert env.official_verdict()["valid"] is False


def test_unknown_reward_fails_at_construction():
    with pytest.raises(KeyError):
        bfcl.BFCLEnv("multi_turn_base_0", bfcl.EnvConfig(reward="nope"))
