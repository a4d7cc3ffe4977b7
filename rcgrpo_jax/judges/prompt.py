"""The judge's prompt and the reading of its reply.

The prompt (`judge_messages`) shows the task context (the user turns), each assistant step's reasoning
and calls, and the reference rationale when the data has one; it asks for a score in [0, 1] and, when
the score is low, a short description of where the reasoning departs from the reference (the role of
AWPO's App. B.2 judge prompt; the wording here is ours).

The reply is data: `parse_score` reads it with regular expressions only, never evaluates it, and never
raises, whatever the text.
"""

from __future__ import annotations

import math
import re

from rcgrpo_jax.judges.base import JudgeInput

LOW_SCORE = 0.5  # below this the judge is asked to describe the deviation

RUBRIC = (
    "You grade the reasoning of an assistant that solves a user's task by calling tools. You see the "
    "task, then each step of the assistant: its reasoning and the tool calls it made. When a reference "
    "rationale is given, it is a correct line of thought for this task written in advance.\n"
    "Judge whether the reasoning is relevant to the request, consistent with the calls that follow it, "
    "and free of contradictions; when there is a reference rationale, judge also how closely the "
    "reasoning follows its logic (different wording is fine, different decisions are not).\n"
    "Answer in exactly this format:\n"
    "Score: X\n"
    "Deviation: D\n"
    "where X is a number between 0 and 1 (1 = sound and in line with the reference), and D, when X is "
    f"below {LOW_SCORE}, says in one or two sentences at which step and how the reasoning departs from "
    "the reference (or, without a reference, what is wrong with it); otherwise D is 'none'."
)


def _tail(text: str, n: int) -> str:
    return text if len(text) <= n else "..." + text[-n:]


def _head(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n] + "..."


def render_item(item: JudgeInput, max_chars: int) -> str:
    """The judge's user message. Each section is cut to `max_chars` characters: the task keeps its
    end (the latest turns), the steps and the reference keep their beginning."""
    task = _tail("\n".join(item.questions), max_chars)
    steps = []
    for i, text in enumerate(item.reasoning):
        calls = item.step_calls[i] if i < len(item.step_calls) else ()
        lines = [f"Step {i + 1}", f"Reasoning: {text.strip() or '(empty)'}"]
        if item.step_calls:
            lines.append(f"Calls: {'; '.join(calls) if calls else '(none)'}")
        steps.append("\n".join(lines))
    body = _head("\n\n".join(steps) or "(no step)", max_chars)
    parts = [f"## Task\n{task or '(empty)'}", f"## Assistant steps\n{body}"]
    if not item.step_calls:
        parts.append(f"## Tools called\n{', '.join(item.calls) or '(none)'}")
    if item.parse_errors:
        parts.append(f"## Note\n{item.parse_errors} of the assistant's tool calls could not be parsed.")
    ref = item.reference_rationale
    parts.append(f"## Reference rationale\n{_head(ref.strip(), max_chars) if ref else '(none given)'}")
    return "\n\n".join(parts)


def judge_messages(item: JudgeInput, max_chars: int) -> list[dict[str, str]]:
    """The chat sent to a judge: the rubric as the system message, the item as the user message."""
    return [{"role": "system", "content": RUBRIC}, {"role": "user", "content": render_item(item, max_chars)}]


# ----------------------------------------------------------------------------------------------------
# Reading the reply.

_NUM = r"(-?\d+(?:\.\d+)?|-?\.\d+)"
_SCALE = r"(?:\s*(?:/|out\s+of)\s*(\d+(?:\.\d+)?))?(\s*%)?"
_LABELLED = re.compile(rf"score[\s*:=]*(?:is[\s*:=]*)?{_NUM}{_SCALE}", re.IGNORECASE)
_BARE = re.compile(rf"{_NUM}{_SCALE}")
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_DEVIATION = re.compile(r"deviation\s*[:=]\s*(.*)", re.IGNORECASE | re.DOTALL)


def strip_thinking(text: str) -> str:
    """The reply without its reasoning block: the text after the last `</think>`, and nothing of an
    unclosed `<think>` (a judge cut off mid-thought has not answered)."""
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end() :]
    m = _THINK_OPEN.search(text)
    return text[: m.start()] if m else text


def _value(m: re.Match) -> float | None:
    try:
        value = float(m.group(1))
        if m.group(2) is not None:
            scale = float(m.group(2))
            if not scale > 0:
                return None
            value /= scale
        elif m.group(3) is not None:
            value /= 100.0
    except (ValueError, OverflowError, ZeroDivisionError):
        return None
    if not math.isfinite(value):
        return None
    return float(min(max(value, 0.0), 1.0))


def parse_score(text) -> float | None:
    """The score in a judge's reply, in [0, 1], or None when there is none. Never raises.

    The reasoning block (`<think>...</think>`) is dropped first. The first labelled score is taken
    ('Score: 0.7', 'score = 7/10', 'Score: 8 out of 10', 'Score: 70%'); without a label, the first
    number. Values outside [0, 1] are clipped; a zero or missing scale, or a non-finite value, is no
    score. Anything that is not a string is no score."""
    if not isinstance(text, str):
        return None
    text = strip_thinking(text)
    m = _LABELLED.search(text) or _BARE.search(text)
    return None if m is None else _value(m)


def parse_deviation(text) -> str | None:
    """The judge's description of the deviation ('Deviation: ...'), or None when absent or 'none'."""
    if not isinstance(text, str):
        return None
    m = _DEVIATION.search(strip_thinking(text))
    if m is None:
        return None
    d = m.group(1).strip()
    return None if not d or d.lower().rstrip(".") == "none" else d
