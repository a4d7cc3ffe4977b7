"""The single-step environment, its outcome rewards, and the `steps` task source."""

import json
from pathlib import Path

import ml_collections
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcgrpo_jax.config_fields import ConfigError
from rcgrpo_jax.data import sources, steps
from rcgrpo_jax.envs import single_step
from rcgrpo_jax.envs.base import Environment
from rcgrpo_jax.envs.single_step import SingleStepConfig, SingleStepEnv, exact, partial

FIXTURE = Path(__file__).parents[1] / "data" / "fixtures" / "steps_chats.jsonl"


@pytest.fixture(scope="module")
def instances():
    return steps.instances_of(steps.load_jsonl(FIXTURE))


def by_id(instances, key):
    return next(i for i in instances if i.id == key)


# --- rewards, hand-computed ------------------------------------------------------------------------


def f(name, **args):
    return (name, args)


@pytest.mark.parametrize(
    "predicted,target,want",
    [
        ([], [], 1.0),  # a plain answer for a plain-answer step
        ([f("f")], [], 0.0),
        ([], [f("f", a=1)], 0.0),  # r_name 0 / S_max 3
        ([f("f", a=1, b=2)], [f("f", a=1, b=2)], 1.0),
        ([f("f", a=1, b=3)], [f("f", a=1, b=2)], (1 + 1 + 1) / 4),  # names 1, keys 1, one value of 2
        ([f("f", a=1)], [f("f", a=1, b=2)], (1 + 0.5 + 1) / 4),  # keys {a}/{a,b}
        ([f("f", a=1, b=2, c=0)], [f("f", a=1, b=2)], (1 + 2 / 3 + 2) / 4),  # an extra key costs key credit
        ([f("g", a=1, b=2)], [f("f", a=1, b=2)], 0.0),  # wrong function: nothing
        ([f("g", x="y")], [f("f", a=1), f("g", x="y")], (0.5 + 2) / 5),  # names 1/2; g matched fully
        ([f("g", x="y"), f("h")], [f("g", x="y")], (0.5 + 2) / 3),  # an extra call halves the name credit
        # the matching is optimal: g1<->p2 (1 + 2) and g2<->p1 (1 + 1) beat the order-wise pairing (2 + 1)
        ([f("f", a=2, b=1), f("f", a=1, b=1)], [f("f", a=1, b=1), f("f", a=2, b=2)], (1 + 3 + 2) / 7),
        ([f("f", a=2), f("f", a=1)], [f("f", a=1), f("f", a=2)], 1.0),  # order-free
        ([("f", None)], [f("f", a=1)], (1 + 0) / 3),  # an unusable call keeps its name credit only
    ],
)
def test_partial_credit_hand_computed(predicted, target, want):
    assert partial(predicted, target) == pytest.approx(want, rel=1e-12)
    assert exact(predicted, target) == float(want == 1.0)


def test_values_compare_as_json():
    assert exact([f("f", a=1.0)], [f("f", a=1)]) == 1.0
    assert exact([f("f", a=True)], [f("f", a=1)]) == 0.0
    assert exact([f("f", a={"x": [1, 2]})], [f("f", a={"x": [1, 2]})]) == 1.0
    assert exact([f("f", a=[2, 1])], [f("f", a=[1, 2])]) == 0.0
    assert exact([f("f"), f("f")], [f("f")]) == 0.0  # a multiset: a repeated call is not the same step


CALLS = st.lists(
    st.tuples(
        st.sampled_from("fgh"),
        st.dictionaries(st.sampled_from("abc"), st.integers(0, 2) | st.booleans(), max_size=3),
    ),
    max_size=3,
)


@settings(max_examples=150, deadline=None)
@given(CALLS, CALLS, st.randoms(use_true_random=False))
def test_partial_is_bounded_order_free_and_one_iff_exact(predicted, target, rng):
    score = partial(predicted, target)
    assert 0.0 <= score <= 1.0 + 1e-12
    assert (abs(score - 1.0) < 1e-12) == (exact(predicted, target) == 1.0)
    shuffled = list(predicted)
    rng.shuffle(shuffled)
    assert partial(shuffled, target) == pytest.approx(score, rel=1e-12, abs=1e-12)
    assert partial(target, target) == 1.0


# --- the environment ---------------------------------------------------------------------------------


def test_protocol_and_expert_step(instances):
    inst = by_id(instances, "steps_chats.jsonl:1:step0")
    env = SingleStepEnv(inst)
    assert isinstance(env, Environment) and env.done
    messages, tools = env.reset()
    assert messages == list(inst.context) and tools == list(inst.tools) and not env.done
    messages[0]["content"] = "changed"  # a copy: the instance is untouched
    assert inst.context[0]["content"] != "changed"
    assert env.step([]) == [] and not env.done  # no call: nothing happens (as BFCLEnv)
    results = env.step(inst.target_calls)
    assert results == [single_step.NOT_EXECUTED]
    assert env.done and env.done_reason == single_step.COMPLETED
    assert env.reward() == 1.0 and env.official_verdict()["valid"] is True
    with pytest.raises(RuntimeError, match="is over"):
        env.step(inst.target_calls)
    assert env.end_turn() is None
    trace = env.trace()
    assert json.loads(json.dumps(trace)) == trace and trace["exact"] and trace["reward_name"] == "exact"
    assert trace["reference_rationale"] == inst.reference_rationale == env.reference_rationale
    # reset gives a fresh episode
    env.reset()
    assert not env.done and env.reward() == 0.0


def test_verdicts_say_how_a_step_missed(instances):
    weather = by_id(instances, "steps_chats.jsonl:1:step0")
    answer = by_id(instances, "steps_chats.jsonl:1:step1")

    def verdict(inst, calls):
        env = SingleStepEnv(inst)
        env.reset()
        env.step(calls) if calls else env.end_turn()
        return env.reward(), env.official_verdict()

    r, v = verdict(answer, None)
    assert r == 1.0 and v["valid"] and "ours" in v["checker"]
    r, v = verdict(answer, [{"name": "get_weather", "arguments": {"city": "Paris"}}])
    assert r == 0.0 and v["error_type"] == "single_step:unexpected_call"
    r, v = verdict(weather, None)
    assert r == 0.0 and v["error_type"] == "single_step:no_call"
    r, v = verdict(weather, [{"name": "get_forecast", "arguments": {"city": "Paris"}}])
    assert v["error_type"] == "single_step:wrong_function"
    two = [{"name": "get_weather", "arguments": {"city": "Paris"}}] * 2
    assert verdict(weather, two)[1]["error_type"] == "single_step:extra_call"
    r, v = verdict(weather, [{"name": "get_weather", "arguments": {"city": "Lyon"}}])
    assert r == 0.0 and v["error_type"] == "single_step:wrong_arguments" and "Lyon" in v["error_message"]
    # arguments that are not a JSON object (or not JSON at all) match nothing, and do not raise
    r, v = verdict(weather, [{"name": "get_weather", "arguments": "{oops"}])
    assert r == 0.0 and not v["valid"]
    r, v = verdict(weather, [{"function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}])
    assert r == 1.0  # the OpenAI wrapper and JSON-string arguments are accepted; unit's default filled


def test_schema_defaults_fill_both_sides(instances):
    weather = by_id(instances, "steps_chats.jsonl:1:step0")  # target states unit=celsius, the default
    ls = by_id(instances, "hammer-3:step2")  # target ls(a=True); default a=False
    calls = [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    for config, want in ((SingleStepConfig(), 1.0), (SingleStepConfig(fill_defaults=False), 0.0)):
        env = SingleStepEnv(weather, config)
        env.reset()
        env.step(calls)
        assert env.reward() == want
    env = SingleStepEnv(ls)
    env.reset()
    env.step([{"name": "ls", "arguments": {}}])  # the default a=False differs from the target's a=True
    assert env.reward() == 0.0


def test_partial_reward_from_instance_or_config(instances):
    weather = by_id(instances, "steps_chats.jsonl:1:step0")
    wrong = [{"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}]
    partial_inst = steps.decompose(steps.load_jsonl(FIXTURE)[0], reward="partial")[0]
    for env in (SingleStepEnv(weather, SingleStepConfig(reward="partial")), SingleStepEnv(partial_inst)):
        env.reset()
        env.step(wrong)
        assert env.reward() == pytest.approx((1 + 1 + 1) / 4)  # names 1 + keys 1 + unit; city wrong
    with pytest.raises(KeyError, match="unknown step reward"):
        SingleStepEnv(weather, SingleStepConfig(reward="nope"))


def test_masked_instance_scores_the_masked_expert_only(instances):
    for inst in instances:
        masked = steps.mask(inst, seed=5)
        env = SingleStepEnv(masked)
        env.reset()
        for calls in steps.expert_script(masked)[0]:
            env.step(calls)
        env.end_turn()
        assert env.reward() == 1.0, inst.id
        if inst.target_calls:  # the original names are now wrong
            env.reset()
            env.step(inst.target_calls)
            assert env.reward() == 0.0


# --- the `steps` task source ----------------------------------------------------------------------------


def data_config(**steps_fields):
    return ml_collections.ConfigDict(
        {
            "source": "steps",
            "max_examples": -1,
            "world": {"seed": 0, "train_per_type": 2, "test_per_type": 1},
            "steps": steps_fields,
        }
    )


def play_expert(d, task):
    env = sources.make_env(d, task)
    env.reset()
    for calls in sources.expert(d, task)[0]:
        env.step(calls)
    env.end_turn()
    return env


def test_source_from_jsonl_splits_rows_and_plays_experts():
    d = data_config(trajectories="jsonl", path=str(FIXTURE), test_fraction=0.34, seed=0)
    sources.check(d)
    train, test = sources.tasks(d, "train"), sources.tasks(d, "test")
    assert len({t.trajectory_id for t in test}) == 1 and len({t.trajectory_id for t in train}) == 2
    assert not {t.trajectory_id for t in train} & {t.trajectory_id for t in test}
    assert len(train) + len(test) == 8 == len(sources.tasks(d, "all"))
    for task in train + test:
        assert task.id and task.category
        env = play_expert(d, task)
        assert isinstance(env, SingleStepEnv) and env.reward() == 1.0 and env.official_verdict()["valid"]
    train_ids = {t.trajectory_id for t in train}
    assert sources.tokenizer_chats(d) == [
        {"messages": list(t.messages), "tools": list(t.tools)} for t in steps.load_jsonl(FIXTURE) if t.id in train_ids
    ]


def test_source_options_mask_partial_calls_only():
    d = data_config(
        trajectories="jsonl",
        path=str(FIXTURE),
        test_fraction=0.0,
        mask_names=True,
        partial_credit=True,
        calls_only=True,
    )
    tasks = sources.tasks(d, "train")
    assert len(tasks) == 4 and all(t.target_calls and t.name_map is not None and t.reward == "partial" for t in tasks)
    assert all(play_expert(d, t).reward() == 1.0 for t in tasks)
    assert sources.tasks(d, "test") == []


def test_source_from_world_expert_trajectories():
    from rcgrpo_jax.data import datasets

    d = data_config(trajectories="world")
    sources.check(d)
    world = ml_collections.ConfigDict({"source": "world", "world": d.world})
    records = datasets.expert_records(sources.tasks(world, "train"))
    tasks = sources.tasks(d, "train")
    assert len(tasks) == sum(m["role"] == "assistant" for r in records for m in r["messages"])
    assert {t.trajectory_id for t in tasks} == {r["id"] for r in records}
    assert all(play_expert(d, t).reward() == 1.0 for t in tasks)
    assert sources.tokenizer_corpus(d) == sources.tokenizer_corpus(world)


@pytest.mark.parametrize(
    "fields,field,message",
    [
        ({"trajectory": "bfcl"}, "data.steps.trajectory", "unknown field"),
        ({"trajectories": "jsonl", "path": "/no/such/file.jsonl"}, "data.steps.path", "no such JSONL file"),
        ({"trajectories": "/no/such/file.jsonl"}, "data.steps.trajectories", "is not one of bfcl, world, jsonl"),
        ({"trajectories": "steps"}, "data.steps.trajectories", "is not one of bfcl, world, jsonl"),
        ({"test_fraction": 1.0}, "data.steps.test_fraction", "[0, 1)"),
        ({"mask_names": "yes"}, "data.steps.mask_names", "true or false"),
    ],
)
def test_source_check_rejects_bad_options(fields, field, message):
    with pytest.raises(ConfigError) as err:
        sources.check(data_config(**fields))
    assert err.value.field == field and message in str(err.value)


def test_source_check_reads_the_jsonl_at_start_up(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(FIXTURE.read_text() + '{"messages": [{"role": "user", "content": "x"}], "tools": []}\n')
    with pytest.raises(ConfigError) as err:
        sources.check(data_config(trajectories="jsonl", path=str(bad)))
    assert err.value.field == "data.steps.path" and f"{bad}:4" in str(err.value)


def test_source_defaults_and_world_section():
    assert sources.steps_options(ml_collections.ConfigDict({"source": "steps"})) == sources.StepsOptions()
    d = ml_collections.ConfigDict({"source": "steps", "steps": {"trajectories": "world"}})
    with pytest.raises(ConfigError, match="data.world"):
        sources.check(d)
    sources.check(data_config(trajectories="bfcl"))  # checks only; building the 720 tasks is not tested here


# --- through the rollout engine ----------------------------------------------------------------------


def test_rollout_engine_plays_single_step_episodes(tmp_path, instances):
    import transformers

    from rcgrpo_jax import chat
    from rcgrpo_jax.models.tiny import build_tiny_tokenizer
    from rcgrpo_jax.rollout import EpisodeSpec, RolloutConfig, ScriptedPolicy, oracle_texts, run_episodes

    tok = transformers.AutoTokenizer.from_pretrained(
        build_tiny_tokenizer(tmp_path, corpus=["get_weather Paris convert ls mkdir"], tokenizer_vocab_size=300)
    )
    parser = chat.get_parser(chat.family_for("qwen2"))
    tasks = list(instances) + [steps.mask(i, seed=1) for i in instances]
    scripts = [oracle_texts(steps.expert_script(t), parser) for t in tasks]
    wrong = by_id(instances, "xlam-7:step0")  # one of its two parallel calls only
    tasks.append(wrong)
    scripts.append([parser.format(wrong.target_calls[:1])])
    specs = [EpisodeSpec(SingleStepEnv(t), t.id, group=k) for k, t in enumerate(tasks)]
    policy = ScriptedPolicy(tok, scripts, chat.end_of_turn_ids(tok)[0])
    episodes, _ = run_episodes(specs, policy, tok, parser, RolloutConfig(max_context=10**5, max_step_tokens=10**4))
    for e, task in zip(episodes[:-1], tasks):
        assert e.steps == 1 and e.reward == 1.0 and e.verdict["valid"], (task.id, e.done_reason)
        assert e.messages[: len(task.context)] == list(task.context)
        assert e.done_reason == ("env_done" if task.target_calls else "completed")
    assert episodes[-1].reward == 0.0 and episodes[-1].verdict["error_type"] == "single_step:missing_call"

    # An unparsable step never reaches the environment, and by default the engine lets the model try
    # again; with max_steps_per_turn=0 (the setting for single-step sources) every episode is one step.
    call_task = by_id(instances, "hammer-3:step0")
    garbage = ["<tool_call>{not json</tool_call>"] + oracle_texts(steps.expert_script(call_task), parser)
    texts = [oracle_texts(steps.expert_script(t), parser) for t in instances]
    for limit, want in ((None, (2, 1.0)), (0, (1, 0.0))):
        specs = [EpisodeSpec(SingleStepEnv(t), t.id, group=k) for k, t in enumerate([*instances, call_task])]
        policy = ScriptedPolicy(tok, [*texts, garbage], chat.end_of_turn_ids(tok)[0])
        config = RolloutConfig(max_context=10**5, max_step_tokens=10**4, max_steps_per_turn=limit)
        episodes, _ = run_episodes(specs, policy, tok, parser, config)
        assert [(e.steps, e.reward) for e in episodes[:-1]] == [(1, 1.0)] * len(instances)
        assert (episodes[-1].steps, episodes[-1].reward) == want
