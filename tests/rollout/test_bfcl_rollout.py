"""BFCL end to end: the oracle policy passes all 800 tasks through the engine; a random model's
garbage on real tasks ends every episode with a recorded reason."""

import jax
import pytest

from rcgrpo_jax import chat
from rcgrpo_jax.envs import bfcl
from rcgrpo_jax.rollout import EpisodeSpec, ModelPolicy, RolloutConfig, ScriptedPolicy, oracle_texts, run_episodes
from rcgrpo_jax.sampling import SamplingParams

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)


def test_oracle_passes_all_800_tasks(tiny_qwen):
    _, _, _, tok, parser = tiny_qwen
    tasks = bfcl.load_tasks()
    assert len(tasks) == 800
    specs = [EpisodeSpec(bfcl.BFCLEnv(t), t.id, group=i, reward_token="<|high_reward|>") for i, t in enumerate(tasks)]
    policy = ScriptedPolicy(
        tok, [oracle_texts(bfcl.ground_truth_script(t), parser) for t in tasks], chat.end_of_turn_ids(tok)[0]
    )
    episodes, _ = run_episodes(specs, policy, tok, parser, RolloutConfig(max_context=10**6, max_step_tokens=10**5))
    failed = [
        (e.task_id, e.reward, e.verdict, e.done_reason)
        for e in episodes
        if e.reward != 1.0 or e.verdict.get("valid") is not True or e.done_reason != "completed"
    ]
    assert not failed, failed[:5]
    for e, t in zip(episodes, tasks):
        assert len(e.turn_starts) == t.num_turns
        assert e.tool_calls == sum(len(turn) for turn in t.ground_truth)


def test_random_model_on_bfcl_ends_cleanly(tiny_qwen):
    _, config, params, tok, parser = tiny_qwen
    tasks = [bfcl.get_task("multi_turn_base_0"), bfcl.get_task("multi_turn_miss_func_0")]
    specs = [
        EpisodeSpec(bfcl.BFCLEnv(t), t.id, group=k, rollout_index=j) for k, t in enumerate(tasks) for j in range(2)
    ]
    policy = ModelPolicy(
        config,
        params,
        stop_ids=chat.end_of_turn_ids(tok),
        max_step_tokens=16,
        max_context=14_000,
        sampling=SamplingParams(temperature=1.0),
        prefill_chunk=512,
        rng=jax.random.key(3),
    )
    episodes, _ = run_episodes(specs, policy, tok, parser, RolloutConfig(max_context=14_000, max_step_tokens=16))
    for e in episodes:
        assert e.done and e.done_reason in ("completed", "max_context", "env_done")
        assert e.reward == 0.0 and e.verdict.get("valid") is False
        assert sum(e.loss_mask) > 0 and len(e.tokens) <= 14_000
    # Group prefix sharing: the group's shared prompt was prefilled once, not once per rollout.
    assert policy.session.stats["prefill_tokens"] < sum(e.prompt_len for e in episodes)
