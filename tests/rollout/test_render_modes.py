"""Render modes of the rollout engine with the official templates (read from bfcl-eval at test time):
the oracle passes real BFCL tasks with both, Qwen3 runs re-rendered (one sample per step whose loss
tokens are exactly the step's sampled tokens, equal to the SFT samples of the same conversation), the
model policy's reused KV cache matches a full forward of every sample, and a template that cannot
render ends only its episode, as `render_error`."""

import json

import jax
import numpy as np
import pytest
import transformers

from rcgrpo_jax import chat, models, multihost
from rcgrpo_jax.data import splits
from rcgrpo_jax.envs import bfcl
from rcgrpo_jax.rollout import (
    EpisodeSpec,
    ModelPolicy,
    RolloutConfig,
    ScriptedPolicy,
    distributed,
    oracle_texts,
    run_episodes,
)
from rcgrpo_jax.rollout import episode as ep_mod
from rcgrpo_jax.sampling import SamplingParams
from tests.helpers.fake_env import AdderEnv
from tests.helpers.official_templates import with_official_template

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)

BIG = RolloutConfig(max_context=10**6, max_step_tokens=10**5)


@pytest.fixture(scope="module")
def official(tiny_qwen, tmp_path_factory):
    """Tokenizers wearing the official templates: Qwen3 on the tiny Qwen checkpoint's tokenizer (the
    model-policy test decodes with it), LLaMA-3.1 on a tiny LLaMA tokenizer."""
    from rcgrpo_jax.models.tiny import build_tiny_tokenizer

    qwen = with_official_template(transformers.AutoTokenizer.from_pretrained(tiny_qwen[0]), "qwen3")
    path = build_tiny_tokenizer(tmp_path_factory.mktemp("llama_tok"), arch="llama")
    llama = with_official_template(transformers.AutoTokenizer.from_pretrained(path), "llama_3_1")
    return {"qwen3": (qwen, chat.get_parser("hermes")), "llama_3_1": (llama, chat.get_parser("llama3_json"))}


def _tasks():
    """Two test tasks per category, at least one holding a several-call step."""
    ids = splits.split("test")
    picked = []
    for c in ("base", "miss_func", "miss_param", "long_context"):
        picked += [i for i in ids if i.startswith(f"multi_turn_{c}_")][:2]
    multi = lambda t: any(len(step) > 1 for turn in bfcl.ground_truth_script(t) for step in turn)  # noqa: E731
    tasks = [bfcl.get_task(i) for i in picked]
    assert multi(tasks[0]) and len(tasks) == 8  # multi_turn_base_0 moves then cds in one step
    return tasks


def _oracle(tok, parser, tasks, config=BIG):
    specs = [EpisodeSpec(bfcl.BFCLEnv(t), t.id, group=i) for i, t in enumerate(tasks)]
    texts = [oracle_texts(bfcl.ground_truth_script(t), parser) for t in tasks]
    policy = ScriptedPolicy(tok, texts, chat.end_of_turn_ids(tok)[0])
    episodes, _ = run_episodes(specs, policy, tok, parser, config)
    return episodes, texts


@pytest.mark.parametrize("name, mode", [("llama_3_1", ep_mod.APPEND), ("qwen3", ep_mod.RERENDER)])
def test_oracle_passes_bfcl_tasks_with_the_official_templates(official, name, mode):
    tok, parser = official[name]
    tasks = _tasks()
    episodes, texts = _oracle(tok, parser, tasks)
    for e, t, script in zip(episodes, tasks, texts):
        assert e.render_mode == mode and e.done_reason == ep_mod.COMPLETED, (e.task_id, e.env_reason)
        assert e.verdict.get("valid") is True and e.reward == 1.0 and e.parse_errors == 0
        assert len(e.turn_starts) == t.num_turns and e.steps == len(script)
        samples = e.samples()
        assert len(samples) == (1 if mode == ep_mod.APPEND else e.steps)
        # Loss tokens are exactly the scripted (sampled) tokens, step by step, in either mode.
        sampled = [np.asarray(s.tokens)[s.loss_mask == 1].tolist() for s in samples]
        want = [list(tok(x, add_special_tokens=False)["input_ids"]) + [chat.end_of_turn_ids(tok)[0]] for x in script]
        assert sum(sampled, []) == sum(want, [])
        if mode == ep_mod.RERENDER:
            assert sampled == want
            for s, (_, a, b) in zip(samples, e.step_spans):
                assert s.loss_mask[a:b].all() and s.loss_mask.sum() == b - a == len(s.tokens) - a


def test_rerender_samples_equal_the_sft_step_samples_of_the_same_conversation(official):
    """With thinking off, the oracle writes each step exactly as Qwen3's template renders it, so RL's
    per-step samples and SFT's `chat.step_samples` of the episode's conversation are the same sequences."""
    tok, parser = official["qwen3"]
    tasks = _tasks()[:3]
    episodes, _ = _oracle(tok, parser, tasks, RolloutConfig(max_context=10**6, max_step_tokens=10**5, thinking=False))
    for e in episodes:
        assert e.render_mode == ep_mod.RERENDER and e.verdict.get("valid") is True
        sft = chat.step_samples(tok, e.messages, e.tools, thinking=False)
        rl = e.samples()
        assert len(sft) == len(rl) == e.steps
        for (tokens, mask), s in zip(sft, rl):
            assert tokens.tolist() == s.tokens.tolist() and mask.tolist() == s.loss_mask.tolist()
        assert tok.decode(rl[1].tokens[rl[1].loss_mask == 0]).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_rerender_equals_append_for_an_append_only_template(tiny_qwen):
    _, _, _, tok, parser = tiny_qwen
    tasks = _tasks()[:3]
    runs = {}
    for mode in (chat.APPEND, chat.RERENDER):
        runs[mode], _ = _oracle(
            tok, parser, tasks, RolloutConfig(max_context=10**6, max_step_tokens=10**5, render_mode=mode)
        )
    for a, r in zip(runs[chat.APPEND], runs[chat.RERENDER]):
        assert a.render_mode == ep_mod.APPEND and r.render_mode == ep_mod.RERENDER and r.verdict["valid"]
        whole = a.samples()[0]
        for s, (_, start, end) in zip(r.samples(), r.step_spans):
            assert s.tokens.tolist() == whole.tokens[:end].tolist()  # each step's context is the append context
            assert s.loss_mask[start:end].all() and not s.loss_mask[:start].any()
        with pytest.raises(ValueError, match="samples"):
            r.arrays()


def test_model_policy_rerender_reuses_the_cache_and_matches_a_full_forward(tiny_qwen, official):
    _, config, params, _, parser = tiny_qwen
    tok = official["qwen3"][0]
    specs = [EpisodeSpec(AdderEnv(), f"adder_{k}", group=k, rollout_index=j) for k in range(2) for j in range(2)]
    policy = ModelPolicy(
        config,
        params,
        stop_ids=chat.end_of_turn_ids(tok),
        max_step_tokens=16,
        max_context=1024,
        sampling=SamplingParams(temperature=1.0),
        prefill_chunk=64,
        rng=jax.random.key(1),
    )
    episodes, _ = run_episodes(specs, policy, tok, parser, RolloutConfig(max_context=1024, max_step_tokens=16))
    contexts, rows = 0, []
    for e in episodes:
        assert e.render_mode == ep_mod.RERENDER and e.done and e.steps >= 2
        samples = e.samples()
        assert len(samples) == e.steps
        for k, (s, (_, a, b)) in enumerate(zip(samples, e.step_spans)):
            before = [i for i, m in enumerate(e.messages) if m["role"] == "assistant"][k]
            assert s.tokens[:a].tolist() == chat.render_prompt(tok, e.messages[:before], e.tools)
            rows.append((s, a, b))
            contexts += a
    # One full forward over every sample (right-padded: causal, so padding changes no earlier logit).
    width = max(len(s.tokens) for s, _, _ in rows)
    batch = np.zeros((len(rows), width), np.int32)
    for r, (s, _, _) in enumerate(rows):
        batch[r, : len(s.tokens)] = s.tokens
    logp = np.asarray(jax.nn.log_softmax(models.apply(config, params, batch), -1))
    for r, (s, a, b) in enumerate(rows):
        pos = np.arange(a, b)
        ref = logp[r, pos - 1, s.tokens[pos]]
        np.testing.assert_allclose(s.logprobs[pos], ref, atol=2e-4 * max(1.0, np.abs(ref).max()))
    st = policy.stats
    assert st["reused_tokens"] > 0 and st["reused_tokens"] + st["replaced_tokens"] == contexts - sum(
        e.prompt_len for e in episodes
    )
    # Each re-rendered context kept at least the shared prompt head in the cache.
    assert st["reused_tokens"] >= sum((e.steps - 1) * 0.5 * e.prompt_len for e in episodes)


def test_a_template_that_cannot_render_ends_only_its_episode_as_render_error(official, tiny_qwen):
    tok, parser = official["qwen3"]
    # Forcing append on Qwen3: the first delta breaks the seam -> render_error, with the reason kept.
    episodes, _ = _oracle(
        tok, parser, _tasks()[:2], RolloutConfig(max_context=10**6, max_step_tokens=10**5, render_mode=chat.APPEND)
    )
    for e in episodes:
        assert e.done_reason == ep_mod.RENDER_ERROR and "not append-only" in e.env_reason and e.steps == 1
    # A template that raises on the first prompt: the episode ends before any step; others go on.
    broken = transformers.AutoTokenizer.from_pretrained(tiny_qwen[0])
    broken.chat_template = tiny_qwen[3].chat_template.replace(
        "{%- for m in rest %}",
        "{%- if 'NO_RENDER' in rest[0].content %}{{ raise_exception('refused') }}{%- endif %}{%- for m in rest %}",
        1,
    )
    envs = [AdderEnv(questions=("NO_RENDER 2 plus 3?", "x")), AdderEnv()]
    specs = [EpisodeSpec(env, f"e{i}", group=i) for i, env in enumerate(envs)]
    script = [parser.format([{"name": "add", "arguments": {"a": 2, "b": 3}}]), "5", "9"]
    policy = ScriptedPolicy(broken, [script, script], chat.end_of_turn_ids(tiny_qwen[3])[0])
    episodes, _ = run_episodes(specs, policy, broken, parser, RolloutConfig(max_context=4096, render_mode=chat.APPEND))
    assert episodes[0].done_reason == ep_mod.RENDER_ERROR and "refused" in episodes[0].env_reason
    assert episodes[0].steps == 0 and episodes[1].done_reason == ep_mod.COMPLETED


def test_rerender_episode_survives_the_process_exchange(official):
    tok, parser = official["qwen3"]
    (e,), _ = _oracle(tok, parser, _tasks()[:1])
    back = distributed.from_record(json.loads(json.dumps(distributed.to_record(e, messages=True))))
    assert len(back.samples()) == len(e.samples()) == e.steps
    for x, y in zip(back.samples(), e.samples()):
        assert x.tokens.tolist() == y.tokens.tolist() and x.spans == y.spans
        assert x.loss_mask.tolist() == y.loss_mask.tolist() and x.logprobs.tolist() == y.logprobs.tolist()
    assert back.messages == json.loads(json.dumps(e.messages))


def test_lockstep_forwards_replace_in_a_single_process_order():
    calls = []

    class Recorder:
        def start(self, prompts, groups):
            calls.append(("start", len(prompts)))

        def finish(self, rows):
            calls.append(("finish", list(rows)))

        def replace(self, rows, contexts):
            calls.append(("replace", list(rows), [list(c) for c in contexts]))

        def extend(self, rows, deltas):
            calls.append(("extend", list(rows)))

        def act(self, rows, budgets):
            calls.append(("act", list(rows)))
            return [r * 10 for r in rows]

    lock = multihost.LockstepPolicy(Recorder())
    lock.start([[1], [2], [3]], [0, 1, 2])
    lock.replace([2, 0], [[7, 8], [9]])
    lock.finish([1])
    assert lock.act([0, 2], [4, 4]) == [0, 20]
    assert calls == [("start", 3), ("finish", [1]), ("replace", [0, 2], [[9], [7, 8]]), ("act", [0, 2])]


def test_rollout_config_rejects_unknown_modes():
    with pytest.raises(ValueError, match="render_mode"):
        RolloutConfig(render_mode="sometimes")
    with pytest.raises(ValueError, match="thinking"):
        RolloutConfig(thinking="yes")
