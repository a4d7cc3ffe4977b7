"""Reasoning judges for AWPO: host-side callables that score the assistant's reasoning text in [0, 1].

A judge maps a batch of `JudgeInput`s (the task's user turns, the assistant's reasoning text per step,
the tool calls it made) to a float array. Two are provided:

- `RuleJudge`: a cheap, deterministic rubric (tests, CPU runs). It measures form, not truth.
- `ModelJudge`: any HF checkpoint, driven by our sampler (greedy) with a rubric prompt; the score is
  parsed from its reply as a number. The reply is data: it is matched against a regular expression,
  never evaluated. Unparsable replies score `default` and are counted.

`make_judge(cfg)` builds one from the `rl.judge` config section.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable, Protocol, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class JudgeInput:
    questions: tuple[str, ...]  # the user turns
    reasoning: tuple[str, ...]  # the assistant's text (tool-call markup removed) per step
    calls: tuple[str, ...] = ()  # names of the tools it called, in order
    parse_errors: int = 0


class Judge(Protocol):
    def __call__(self, items: Sequence[JudgeInput]) -> np.ndarray: ...


def from_episode(episode) -> JudgeInput:
    """A judge input from a finished `rollout.Episode` (its OpenAI-style messages)."""
    questions, reasoning, calls = [], [], []
    for m in episode.messages:
        if m.get("role") == "user":
            questions.append(str(m.get("content") or ""))
        elif m.get("role") == "assistant":
            reasoning.append(str(m.get("content") or ""))
            calls += [c["function"]["name"] for c in m.get("tool_calls", [])]
    return JudgeInput(tuple(questions), tuple(reasoning), tuple(calls), int(episode.parse_errors))


# ----------------------------------------------------------------------------------------------------
# Rule-based.


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclasses.dataclass(frozen=True)
class RuleJudge:
    """score = mean of three checks, each in [0, 1]:

    explained: the share of steps with calls whose text is not empty (the model said why it acts);
    grounded:  the share of called tool names (and their words split at '_') named somewhere in the text
               or the user turns, i.e. the reasoning talks about what it does;
    clean:     1 if the turn parsed without errors, else 0.
    An episode with no step at all scores 0.
    """

    def score(self, item: JudgeInput) -> float:
        if not item.reasoning:
            return 0.0
        texts = [t.strip() for t in item.reasoning]
        explained = float(np.mean([bool(t) for t in texts]))
        words = {w.lower() for t in (*texts, *item.questions) for w in _WORD.findall(t)}
        if item.calls:
            hits = [
                c.lower() in words or any(p in words for p in c.lower().split("_") if len(p) > 2) for c in item.calls
            ]
            grounded = float(np.mean(hits))
        else:
            grounded = explained
        clean = float(item.parse_errors == 0)
        return (explained + grounded + clean) / 3.0

    def __call__(self, items: Sequence[JudgeInput]) -> np.ndarray:
        return np.asarray([self.score(i) for i in items], np.float32)


# ----------------------------------------------------------------------------------------------------
# Model-backed.


RUBRIC = (
    "You grade the reasoning of an assistant that solves a task with tool calls. Judge whether its "
    "reasoning is relevant to the user's request, consistent with the tools it called, and free of "
    "contradictions. Reply with one line: 'Score: X' where X is a number between 0 and 1."
)

_SCORE = re.compile(r"score\s*[:=]?\s*(-?\d+(?:\.\d+)?|-?\.\d+)(\s*/\s*(\d+(?:\.\d+)?))?", re.IGNORECASE)
_NUMBER = re.compile(r"(-?\d+(?:\.\d+)?|-?\.\d+)(\s*/\s*(\d+(?:\.\d+)?))?")


def parse_score(text: str) -> float | None:
    """The score in a judge's reply, in [0, 1], or None when there is none.

    'Score: 0.7' -> 0.7; 'score = 7/10' -> 0.7; a bare number is taken when no 'score' label is present;
    values outside [0, 1] are clipped. Only a regular expression reads the text."""
    m = _SCORE.search(text) or _NUMBER.search(text)
    if m is None:
        return None
    value = float(m.group(1))
    if m.group(3) is not None:
        scale = float(m.group(3))
        if scale <= 0:
            return None
        value /= scale
    return float(min(max(value, 0.0), 1.0))


def render_item(item: JudgeInput, max_chars: int) -> str:
    """The judge's user message: the request, then the assistant's steps, cut to `max_chars` each side."""
    q = "\n".join(item.questions)[-max_chars:]
    steps = "\n".join(f"[{i}] {t}" for i, t in enumerate(item.reasoning))[:max_chars]
    calls = ", ".join(item.calls) or "(none)"
    return f"Request:\n{q}\n\nAssistant reasoning:\n{steps}\n\nTools called: {calls}"


class ModelJudge:
    """A judge backed by an HF checkpoint at `path` (greedy decoding with our sampler).

    `stats` counts scored items and unparsable replies (scored `default`)."""

    def __init__(
        self,
        path: str,
        *,
        max_new_tokens: int = 16,
        max_chars: int = 2000,
        default: float = 0.0,
        dtype: str = "float32",
        batch_size: int = 16,
        mesh=None,
    ):
        from transformers import AutoTokenizer

        from rcgrpo_jax import chat, models

        self.config, self.params = models.load_hf(path, dtype=dtype)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.stop_ids = chat.end_of_turn_ids(self.tokenizer)
        self.max_new_tokens, self.max_chars, self.default = max_new_tokens, max_chars, default
        self.batch_size, self.mesh = batch_size, mesh
        self.stats = {"scored": 0, "unparsed": 0}

    def prompt(self, item: JudgeInput) -> list[int]:
        from rcgrpo_jax import chat

        messages = [
            {"role": "system", "content": RUBRIC},
            {"role": "user", "content": render_item(item, self.max_chars)},
        ]
        return chat.render_prompt(self.tokenizer, messages, None)

    def replies(self, items: Sequence[JudgeInput]) -> list[str]:
        from rcgrpo_jax.sampling import generate

        out: list[str] = []
        for i in range(0, len(items), self.batch_size):
            chunk = [self.prompt(x) for x in items[i : i + self.batch_size]]
            res = generate(
                self.config,
                self.params,
                chunk,
                max_new_tokens=self.max_new_tokens,
                temperature=0.0,
                stop_token_ids=self.stop_ids,
                mesh=self.mesh,
            )
            out += [self.tokenizer.decode(t, skip_special_tokens=True) for t in res.tokens]
        return out

    def __call__(self, items: Sequence[JudgeInput]) -> np.ndarray:
        scores = []
        for reply in self.replies(items):
            s = parse_score(reply)
            self.stats["scored"] += 1
            if s is None:
                self.stats["unparsed"] += 1
                s = self.default
            scores.append(s)
        return np.asarray(scores, np.float32)


JUDGES: dict[str, Callable[..., Judge]] = {
    "rule": lambda cfg: RuleJudge(),
    "model": lambda cfg: ModelJudge(
        cfg.path, max_new_tokens=int(cfg.max_new_tokens), max_chars=int(cfg.max_chars), default=float(cfg.default)
    ),
}


def make_judge(cfg) -> Judge:
    """`cfg`: the `rl.judge` section ({kind: rule | model, path, max_new_tokens, max_chars, default})."""
    if cfg.kind not in JUDGES:
        from rcgrpo_jax.config_checks import ConfigError

        raise ConfigError("rl.judge.kind", f"unknown judge {cfg.kind!r}; known: {', '.join(JUDGES)}")
    return JUDGES[cfg.kind](cfg)
