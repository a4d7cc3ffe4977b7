"""The multi-turn engine with a model policy: the KV cache kept across steps/turns/groups matches a
full forward, slot modes and prefix sharing change nothing, truncation and garbage end cleanly."""

import jax
import numpy as np
import pytest

from rcgrpo_jax import chat, models
from rcgrpo_jax.rollout import (
    KEEP,
    SHRINK,
    EpisodeSpec,
    ModelPolicy,
    RolloutConfig,
    ScriptedPolicy,
    run_episodes,
    with_reward_goal,
)
from rcgrpo_jax.rollout import episode as ep_mod
from rcgrpo_jax.sampling import SamplingParams
from tests.helpers.fake_env import AdderEnv

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)

TOKENS = ("<|high_reward|>", "<|low_reward|>")


def _specs(groups=2, g=2, **env_kw):
    return [
        EpisodeSpec(AdderEnv(**env_kw), f"adder_{k}", group=k, rollout_index=j, reward_token=TOKENS[j % 2])
        for k in range(groups)
        for j in range(g)
    ]


def _run(
    tiny,
    specs,
    *,
    sampling=SamplingParams(),
    slot_mode=SHRINK,
    share_prefix=True,
    max_context=1024,
    max_step_tokens=24,
    rng=0,
    rows=None,
    slice_tokens=0,
):
    _, config, params, tok, parser = tiny
    policy = ModelPolicy(
        config,
        params,
        stop_ids=chat.end_of_turn_ids(tok),
        max_step_tokens=max_step_tokens,
        max_context=max_context,
        sampling=sampling,
        prefill_chunk=64,
        slot_mode=slot_mode,
        share_prefix=share_prefix,
        rng=jax.random.key(rng),
        rows=rows,
        slice_tokens=slice_tokens,
    )
    if rows is not None:  # record every admission of the continuous-batching scheduler, and the batch size
        policy.admitted, policy.max_session_rows = [], 0
        start = policy.start  # builds the scheduler (`policy.sched`) of continuous batching

        def recording_start(prompts, groups):
            start(prompts, groups)
            admit = policy.sched.admit

            def recording_admit():
                out = admit()
                policy.admitted += [i for a in out for i in a.episodes]
                policy.max_session_rows = max(policy.max_session_rows, policy.session.rows)
                return out

            policy.sched.admit = recording_admit

        policy.start = recording_start
    rc = RolloutConfig(max_context=max_context, max_step_tokens=max_step_tokens)
    episodes, split = run_episodes(specs, policy, tok, parser, rc)
    return episodes, split, policy


@pytest.fixture(scope="module")
def sampled(tiny_qwen):
    return _run(tiny_qwen, _specs(), sampling=SamplingParams(temperature=1.0))


@pytest.fixture(scope="module")
def greedy_g3(tiny_qwen):
    """Greedy, 2 groups of 3, one row per episode (no refill)."""
    return _run(tiny_qwen, _specs(g=3))


def _check_records(tiny, episodes, specs):
    """Records line up with the prompt, the loss mask covers exactly the sampled spans, and every sampled
    token's behaviour log-prob equals a fresh full forward over the final context."""
    _, config, params, tok, _ = tiny
    for e, spec in zip(episodes, specs):
        assert e.done and e.done_reason in (ep_mod.COMPLETED, ep_mod.MAX_CONTEXT)
        assert len(e.tokens) == len(e.loss_mask) == len(e.logprobs)
        messages, tools = spec.env.reset()
        prompt = chat.render_prompt(tok, with_reward_goal(messages, e.reward_token), tools)
        assert e.tokens[: e.prompt_len] == prompt and "[Reward Goal: " in e.messages[0]["content"]
        mask = np.asarray(e.loss_mask)
        assert mask.sum() == sum(b - a for _, a, b in e.step_spans) and mask[: e.prompt_len].sum() == 0
        # Every sampled token's behaviour log-prob equals a fresh full forward over the final context.
        logits = models.apply(config, params, np.asarray([e.tokens], np.int32))[0]
        logp = np.asarray(jax.nn.log_softmax(logits, -1))
        pos = np.nonzero(mask)[0]
        np.testing.assert_allclose(np.asarray(e.logprobs)[pos], logp[pos - 1, np.asarray(e.tokens)[pos]], atol=2e-4)
        assert e.steps == len(e.step_spans) >= 2 and len(e.turn_starts) == 2
        assert e.messages[-1]["role"] == "assistant"


def test_records_line_up_and_logprobs_match_a_full_forward(tiny_qwen, sampled):
    episodes, split, _ = sampled
    _check_records(tiny_qwen, episodes, _specs())
    assert set(split) == {"policy", "env", "chat"}


def test_slot_modes_and_prefix_sharing_agree(tiny_qwen, greedy_g3):
    runs = [greedy_g3] + [
        _run(tiny_qwen, _specs(g=3), slot_mode=m, share_prefix=s) for m, s in ((KEEP, True), (SHRINK, False))
    ]
    ref = [e.tokens for e in runs[0][0]]
    for eps, _, _ in runs[1:]:
        assert [e.tokens for e in eps] == ref
    assert runs[1][2].stats["rows_computed"] >= runs[0][2].stats["rows_computed"]


def test_refill_streams_episodes_through_fewer_rows(tiny_qwen, greedy_g3):
    """Continuous batching: 6 episodes (2 groups of 3) through 4 rows, so the second group enters the rows
    the first one freed, decoded in slices of 8 tokens (a step of up to 24 spans several decode calls):
    the greedy episodes equal those of one row per episode decoded step by step, token for token, each
    episode is admitted exactly once, and the log-probs of the refilled rows match a full forward."""
    eps, _, policy = _run(tiny_qwen, _specs(g=3), rows=4, slice_tokens=8)
    ref = greedy_g3[0]
    assert [e.tokens for e in eps] == [e.tokens for e in ref]
    assert [(e.done_reason, e.steps) for e in eps] == [(e.done_reason, e.steps) for e in ref]
    assert sorted(policy.admitted) == list(range(6)) and policy.max_session_rows == 4
    assert policy.stats["admissions"] == 2 and policy.stats["refills"] == 3 and not policy.partial
    assert policy.session.stats["decode_calls"] > sum(e.steps for e in eps[:1] + eps[3:4])  # sliced steps
    _check_records(tiny_qwen, eps[3:], _specs(g=3)[3:])  # the group that entered freed rows


def test_context_limit_truncates_cleanly(tiny_qwen):
    episodes, _, _ = _run(tiny_qwen, _specs(groups=1), max_context=330, max_step_tokens=16)
    for e in episodes:
        assert e.prompt_len < 330 - 16 and e.steps >= 1
        assert e.done_reason == ep_mod.MAX_CONTEXT and e.truncated and len(e.tokens) <= 330
    # A prompt that alone is too long: recorded, never decoded.
    episodes, _, _ = _run(tiny_qwen, _specs(groups=1, g=1), max_context=100)
    assert episodes[0].done_reason == ep_mod.MAX_CONTEXT and episodes[0].steps == 0


def test_scripted_garbage_never_crashes(tiny_qwen):
    _, _, _, tok, parser = tiny_qwen
    scripts = [
        ['<tool_call>\n{"name": "add", "arguments": {"a": 1,', "Done."],  # unterminated, broken JSON
        [parser.format([{"name": "rm_rf", "arguments": {}}]), "x" * 50, "Done."],  # unknown tool
        [parser.format([{"name": "add", "arguments": {"a": "y" * 10_000, "b": 1}}]), "Done."],  # 10k chars
        [parser.format([{"name": "add", "arguments": {"a": 2, "b": 3}}]), "ok", "again", "Done."],
    ]
    specs = [EpisodeSpec(AdderEnv(output_chars=3000), f"garbage_{i}", group=i) for i in range(4)]
    policy = ScriptedPolicy(tok, scripts, chat.end_of_turn_ids(tok)[0])
    episodes, _ = run_episodes(specs, policy, tok, parser, RolloutConfig(max_context=20_000, max_step_tokens=64))
    assert all(e.done and e.done_reason for e in episodes)
    assert episodes[0].parse_errors >= 1 and episodes[0].tool_calls == 0
    assert episodes[1].tool_calls == 1 and "Error" in episodes[1].messages[2]["content"]
    assert episodes[2].step_truncations == 1  # 10k chars exceed the 64-token step budget
    assert episodes[3].reward == 0.0 and episodes[3].tool_calls == 1


def test_step_budget_and_cut_step_by_hand():
    from rcgrpo_jax.rollout import engine

    # 100 tokens held, context 8192: the step's own cap; 8000 held: 8192 - 8000 - 1 = 191 left
    assert engine.step_budget(100, max_step_tokens=256, max_context=8192) == 256
    assert engine.step_budget(8000, max_step_tokens=256, max_context=8192) == 191
    assert engine.step_budget(8191, max_step_tokens=256, max_context=8192) == 0
    assert engine.cut_step_tokens(True) == 0 and engine.cut_step_tokens(False) == 1
    # 8000 held + 191 delta + 1 more = 8192 fits; one more token of delta does not
    assert engine.delta_fits(8000, 191, 8192) and not engine.delta_fits(8000, 192, 8192)


def test_slice_rules_by_hand():
    from rcgrpo_jax.rollout import policies

    assert policies.slice_width(8, 512) == 8 and policies.slice_width(0, 512) == 0
    assert policies.slice_width(600, 512) == 512  # never past a step's budget
    # the session's max_new_tokens: length_bucket(8) = 16; whole steps: length_bucket(500) = 512
    assert policies.decode_budget(8, 512) == 16 and policies.decode_budget(0, 500) == 512
    assert policies.decode_budget(600, 500) == 512
    # a row with 5 tokens of its budget left asks 5 of a slice of 8; 20 left asks 8; whole steps ask all
    assert policies.slice_budget(5, 8) == 5 and policies.slice_budget(20, 8) == 8
    assert policies.slice_budget(300, 0) == 300
