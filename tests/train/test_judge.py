"""AWPO's reasoning judges: the score parser (data, never code), the rule judge's rubric by hand, and a
model-backed judge on a tiny checkpoint."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcgrpo_jax.rollout import Episode
from rcgrpo_jax.train import judge


@pytest.mark.parametrize(
    "text,expected",
    [
        ("Score: 0.7", 0.7),
        ("score=1", 1.0),
        ("SCORE : .25 because", 0.25),
        ("Score: 7/10", 0.7),
        ("I'd say 0.4", 0.4),
        ("Score: 3", 1.0),
        ("Score: -2", 0.0),
        ("8 / 10", 0.8),
        ("no number here", None),
        ("", None),
        ("Score: 1/0", None),
        ("__import__('os').system('x') Score: 0.5", 0.5),
    ],
)
def test_parse_score(text, expected):
    got = judge.parse_score(text)
    assert got == (None if expected is None else pytest.approx(expected))


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_parse_score_is_none_or_in_unit_interval(text):
    s = judge.parse_score(text)
    assert s is None or 0.0 <= s <= 1.0


@settings(max_examples=100, deadline=None)
@given(st.floats(0.0, 1.0), st.text(alphabet="abc .,\n", max_size=20))
def test_parse_score_round_trip(x, noise):
    assert judge.parse_score(f"{noise}Score: {x:.4f}") == pytest.approx(round(x, 4))


def test_rule_judge_by_hand():
    j = judge.RuleJudge()
    item = judge.JudgeInput(
        questions=("Move report.txt to archive",),
        reasoning=("I will move the file with mv.", ""),
        calls=("mv", "ls"),
        parse_errors=0,
    )
    # explained: 1 of 2 steps has text = 0.5; grounded: 'mv' named, 'ls' not = 0.5; clean = 1
    assert j.score(item) == pytest.approx((0.5 + 0.5 + 1.0) / 3)
    bad = judge.JudgeInput(questions=("q",), reasoning=("",), calls=("cat_file",), parse_errors=2)
    assert j.score(bad) == 0.0  # cat_file: 'file' is not in the text either
    assert j.score(judge.JudgeInput((), ())) == 0.0
    out = j([item, bad])
    assert out.dtype == np.float32 and out.shape == (2,)


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
        {"role": "assistant", "content": "It is 5."},
    ]
    e.parse_errors = 1
    item = judge.from_episode(e)
    assert item == judge.JudgeInput(("add 2 and 3",), ("adding", "It is 5."), ("add",), 1)


def test_model_judge_on_a_tiny_checkpoint(tiny_ckpt):
    j = judge.ModelJudge(tiny_ckpt, max_new_tokens=4, default=0.25)
    item = judge.JudgeInput(("Move a.txt",), ("I move it.",), ("mv",))
    prompt = j.tokenizer.decode(j.prompt(item))
    assert judge.RUBRIC[:40] in prompt and "Assistant reasoning" in prompt
    scores = j([item, item, item])
    assert scores.shape == (3,) and np.all((scores >= 0) & (scores <= 1))
    assert j.stats["scored"] == 3
    # a random model's replies are parsed or fall back to the default, never anything else
    replies = j.replies([item])
    s = judge.parse_score(replies[0])
    assert scores[0] == pytest.approx(0.25 if s is None else s)


def test_make_judge():
    import ml_collections

    from rcgrpo_jax.config_checks import ConfigError

    assert isinstance(judge.make_judge(ml_collections.ConfigDict({"kind": "rule"})), judge.RuleJudge)
    with pytest.raises(ConfigError, match="rl.judge.kind"):
        judge.make_judge(ml_collections.ConfigDict({"kind": "oracle"}))
