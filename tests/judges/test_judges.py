"""AWPO's reasoning judges: the score parser (data, never code; hypothesis on garbage), the prompt, the
rule judge's rubric by hand, the model judge on a tiny checkpoint, and the registry / config seam."""

from __future__ import annotations

import math

import ml_collections
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcgrpo_jax import judges
from rcgrpo_jax.config_fields import ConfigError
from rcgrpo_jax.rollout import Episode


@pytest.mark.parametrize(
    "text,expected",
    [
        ("Score: 0.7", 0.7),
        ("score=1", 1.0),
        ("SCORE : .25 because", 0.25),
        ("Score: 7/10", 0.7),
        ("Score: 8 out of 10", 0.8),
        ("Score: 70%", 0.7),
        ("Score: **0.6**\nDeviation: none", 0.6),
        ("**Score**: 0.6", 0.6),
        ("Final score is 0.3. Step 2 of 4 deviates.", 0.3),
        ("I'd say 0.4", 0.4),
        ("Score: 3", 1.0),
        ("Score: -2", 0.0),
        ("8 / 10", 0.8),
        ("no number here", None),
        ("", None),
        ("Score: 1/0", None),
        ("Score: " + "9" * 400, None),  # overflows to inf: not a score
        ("__import__('os').system('x') Score: 0.5", 0.5),
        ("<think>maybe Score: 0.9, step 3 of 4</think>\nScore: 0.2\nDeviation: step 2", 0.2),
        ("<think>Score: 0.9 ... still thinking", None),  # cut off mid-thought: no answer
        (None, None),
        (b"Score: 0.5", None),
    ],
)
def test_parse_score(text, expected):
    got = judges.parse_score(text)
    assert got == (None if expected is None else pytest.approx(expected))


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.text(alphabet="0123456789./%- :scoreSCOREout<think>/", max_size=60)))
def test_parse_score_never_raises_and_is_none_or_in_unit_interval(text):
    s = judges.parse_score(text)
    assert s is None or (isinstance(s, float) and math.isfinite(s) and 0.0 <= s <= 1.0)
    d = judges.parse_deviation(text)
    assert d is None or isinstance(d, str)


@settings(max_examples=100, deadline=None)
@given(st.floats(0.0, 1.0), st.text(alphabet="abc .,\n", max_size=20))
def test_parse_score_round_trip(x, noise):
    assert judges.parse_score(f"{noise}Score: {x:.4f}") == pytest.approx(round(x, 4))


def test_parse_deviation():
    assert judges.parse_deviation("Score: 0.2\nDeviation: step 2 skips the check.") == "step 2 skips the check."
    assert judges.parse_deviation("Score: 0.9\nDeviation: none") is None
    assert judges.parse_deviation("Score: 0.9") is None


ITEM = judges.JudgeInput(
    questions=("Move report.txt to archive",),
    reasoning=("I will move the file with mv.", ""),
    calls=("mv", "ls"),
    parse_errors=0,
)


def test_prompt_shows_context_steps_calls_and_reference():
    item = judges.JudgeInput(
        questions=("List the files", "Now delete a.txt"),
        reasoning=("First look at the directory.", "a.txt is there; remove it."),
        calls=("ls", "rm"),
        reference_rationale="List first, then remove a.txt only after seeing it.",
        step_calls=(("ls({})",), ('rm({"file_name": "a.txt"})',)),
    )
    system, user = judges.judge_messages(item, max_chars=2000)
    assert system == {"role": "system", "content": judges.RUBRIC}
    assert "Deviation" in judges.RUBRIC and "reference" in judges.RUBRIC
    text = user["content"]
    for part in ("Now delete a.txt", "First look at the directory.", 'rm({"file_name": "a.txt"})', "Step 2"):
        assert part in text
    assert "List first, then remove a.txt only after seeing it." in text
    # without a reference the prompt says none was given; without per-step calls it lists the names once
    text = judges.render_item(ITEM, 2000)
    assert "(none given)" in text and "mv, ls" in text and "Reasoning: (empty)" in text
    # sections are cut to max_chars
    long = judges.JudgeInput(("q" * 500,), ("r" * 500,), reference_rationale="x" * 500)
    assert len(judges.render_item(long, 50)) < 400


def test_rule_judge_by_hand():
    j = judges.RuleJudge()
    assert j.stand_in is True and "stand-in" in j.name
    # explained: 1 of 2 steps has text = 0.5; grounded: 'mv' named, 'ls' not = 0.5; clean = 1
    assert j.score(ITEM) == pytest.approx((0.5 + 0.5 + 1.0) / 3)
    bad = judges.JudgeInput(questions=("q",), reasoning=("",), calls=("cat_file",), parse_errors=2)
    assert j.score(bad) == 0.0  # cat_file: 'file' is not in the text either
    assert j.score(judges.JudgeInput((), ())) == 0.0
    out = j([ITEM, bad])
    assert out.dtype == np.float32 and out.shape == (2,)
    assert j.stats() == {"calls": 2, "failures": 0, **{f"failures/{k}": 0 for k in judges.FAILURE_KINDS}}


def test_from_episode():
    e = Episode("t_0", 0, 0, None)
    e.messages = [
        {"role": "user", "content": "add 2 and 3"},
        {
            "role": "assistant",
            "content": "adding",
            "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}],
        },
        {"role": "tool", "name": "add", "content": "5"},
        {"role": "assistant", "content": "It is 5.", "reasoning_content": "The tool said 5."},
    ]
    e.parse_errors = 1
    item = judges.from_episode(e)
    assert item == judges.JudgeInput(
        ("add 2 and 3",), ("adding", "The tool said 5.\nIt is 5."), ("add",), 1, None, (('add({"a": 2, "b": 3})',), ())
    )
    assert judges.from_episode(e, reference_rationale="add them").reference_rationale == "add them"
    e.reference_rationale = "from the data"
    assert judges.from_episode(e).reference_rationale == "from the data"


def test_model_judge_on_a_tiny_checkpoint(tiny_ckpt):
    j = judges.ModelJudge(tiny_ckpt, max_new_tokens=4, default=0.25)
    assert j.stand_in is False and j.name == f"model:{tiny_ckpt}"
    item = judges.JudgeInput(("Move a.txt",), ("I move it.",), ("mv",), reference_rationale="Move it with mv.")
    prompt = j.tokenizer.decode(j.prompt(item))
    assert judges.RUBRIC[:40] in prompt and "Move it with mv." in prompt and "I move it." in prompt
    scores = j([item, item])
    assert scores.shape == (2,) and np.all((scores >= 0) & (scores <= 1))
    # a random model's replies are parsed or fall back to the default, never anything else (greedy:
    # the same batch gives the same replies)
    replies = j.replies([item, item])
    s = judges.parse_score(replies[0])
    assert scores[0] == pytest.approx(0.25 if s is None else s)
    st_ = j.stats()
    assert st_["calls"] == 2 and st_["failures"] == st_["failures/no_score"] == (2 if s is None else 0)


def test_registry_and_config():
    assert set(judges.JUDGES.names()) == {"http", "model", "rule"}
    cfg = judges.default_config()  # rl.judge: the selected judge's name and one option subsection per judge
    assert cfg.name == "rule" and "rule" not in cfg  # the rule judge has no options
    assert cfg.http.default == 0.0 and cfg.http.api_key_env == "JUDGE_API_KEY"
    assert isinstance(judges.make_judge(cfg), judges.RuleJudge)
    assert isinstance(judges.make_judge(ml_collections.ConfigDict({"name": "rule"})), judges.RuleJudge)

    def err(name, **kw):
        c = judges.default_config()
        c.name = name
        if name in c:
            c[name].update(kw)
        with pytest.raises(ConfigError) as e:
            judges.check_config(c)
        return e.value.field

    assert err("oracle") == "rl.judge.name"
    assert err("model") == "rl.judge.model.path"
    assert err("model", path="/x", dtype="int8") == "rl.judge.model.dtype"
    assert err("http") == "rl.judge.http.url"
    assert err("http", url="ftp://x") == "rl.judge.http.url"
    assert err("http", url="http://h/v1") == "rl.judge.http.model"
    ok = dict(url="http://h/v1", model="m")
    c = judges.default_config("http")
    c.http.update(ok)
    assert judges.check_config(c).url == "http://h/v1"
    assert err("http", **ok, concurrency=0) == "rl.judge.http.concurrency"
    assert err("http", **ok, timeout_s=0.0) == "rl.judge.http.timeout_s"
    assert err("http", **ok, retries=-1) == "rl.judge.http.retries"
    assert err("http", **ok, default=2.0) == "rl.judge.http.default"
    assert err("http", **ok, extra_body="[1]") == "rl.judge.http.extra_body"
    assert err("http", **ok, extra_body="{nope") == "rl.judge.http.extra_body"
    c = ml_collections.ConfigDict({"name": "http", "http": {**ok, "timeout": 3}})
    with pytest.raises(ConfigError) as e:
        judges.check_config(c)
    assert e.value.field == "rl.judge.http"
