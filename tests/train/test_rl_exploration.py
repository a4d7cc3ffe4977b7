"""Exploration rollouts -> trajectory records: an oracle episode and a failing one through the real engine,
converted to the data module's record format and accepted by the RCTP-FT builder."""

from __future__ import annotations

import copy

import pytest
from transformers import AutoTokenizer

from rcgrpo_jax import chat
from rcgrpo_jax.data import datasets, trajectories
from rcgrpo_jax.envs import bfcl
from rcgrpo_jax.rollout import EpisodeSpec, RolloutConfig, ScriptedPolicy, oracle_texts, run_episodes
from rcgrpo_jax.train import exploration


@pytest.fixture(scope="module")
def episodes(tiny_ckpt):
    import ml_collections

    from rcgrpo_jax.data import sources

    data = ml_collections.ConfigDict(
        {"source": "world", "max_examples": -1, "world": {"seed": 0, "train_per_type": 64, "test_per_type": 16}}
    )
    tasks = [t for t in sources.tasks(data, "train") if sum(map(len, t.ground_truth)) >= 2][:2]
    tok = AutoTokenizer.from_pretrained(tiny_ckpt)
    parser = chat.get_parser("hermes")
    good = oracle_texts(bfcl.ground_truth_script(tasks[0]), parser)
    script = copy.deepcopy(bfcl.ground_truth_script(tasks[1]))
    call = next(c for turn in script for step in turn for c in step)
    call["name"] = "no_such_tool"  # a refused call: the episode fails
    bad = oracle_texts(script, parser)
    bad.insert(0, "<tool_call>{not json</tool_call>")  # a parse error first: feedback without a call
    specs = [EpisodeSpec(bfcl.BFCLEnv(t), t.id, group=i) for i, t in enumerate(tasks)]
    eps, _ = run_episodes(
        specs,
        ScriptedPolicy(tok, [good, bad], chat.end_of_turn_ids(tok)[0]),
        tok,
        parser,
        RolloutConfig(max_context=10**5, max_step_tokens=10**4),
    )
    return tasks, eps


def test_records_have_the_trajectory_format(episodes):
    tasks, (good, bad) = episodes
    assert good.reward == 1.0 and bad.reward == 0.0 and bad.parse_errors == 1
    ok = exploration.episode_record(good, tasks[0])
    fail = exploration.episode_record(bad, tasks[1])
    for r in (ok, fail):
        trajectories.validate_record(r)
        assert set(r) == set(trajectories.RECORD_KEYS)
    assert (ok["kind"], ok["failure"], ok["reward"]) == ("rollout", None, 1.0)
    assert (fail["kind"], fail["failure"], fail["reward"]) == ("failure", "exploration", 0.0)
    # every executed call is in the record with its result; the parse-error feedback is not
    calls = [c for m in ok["messages"] if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    results = [m for m in ok["messages"] if m["role"] == "tool"]
    assert len(calls) == good.tool_calls == len(results)
    assert [m["tool_call_id"] for m in results] == [c["id"] for c in calls]
    assert not any(m.get("name") == "error" for m in fail["messages"])
    assert fail["messages"][1] == {"role": "assistant", "content": bad.messages[1]["content"]}
    users = [m["content"] for m in ok["messages"] if m["role"] == "user"]
    assert users == [q[0]["content"] for q in tasks[0].entry["question"]]


def test_failures_feed_the_rctp_builder(episodes):
    tasks, (good, bad) = episodes
    expert = trajectories.expert_trajectory(tasks[0])
    rctp = datasets.rctp_records([expert], [exploration.episode_record(bad, tasks[1])])
    assert sorted(r["reward_goal"] for r in rctp) == [datasets.HIGH_REWARD_TOKEN, datasets.LOW_REWARD_TOKEN]
