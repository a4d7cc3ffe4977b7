"""The judge seam: what a judge reads (`JudgeInput`), what it returns, the counters it keeps, and the
`JUDGES` registry that `make_judge` builds from the flat `rl.judge` config section.

Every judge is a host-side callable

    judge(items: Sequence[JudgeInput]) -> np.ndarray float32 [len(items)], each score in [0, 1]

with three attributes the trainer reports: `name` (short, for logs), `stand_in` (True for a judge that
is not a language model, so reports say the reasoning reward came from a stand-in) and
`stats() -> dict[str, int]` (cumulative counters: `calls`, `failures` and `failures/<kind>`, plus
kind-specific ones). A judge never raises on a bad reply or a failed request: the item scores the
configured `default` and the failure is counted.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any, Callable, Mapping, Protocol, Sequence

import ml_collections
import numpy as np

from rcgrpo_jax.config_fields import ConfigError
from rcgrpo_jax.registry import OptionError, Registry, entry_name, selected, selection

# ----------------------------------------------------------------------------------------------------
# What a judge reads.


@dataclasses.dataclass(frozen=True)
class JudgeInput:
    """One rollout (or one step-level instance) as the judge sees it.

    questions:   the user turns (the task context), in order.
    reasoning:   per assistant step, its reasoning text (the `<think>` part when the parser kept it as
                 `reasoning_content`, then the visible text; tool-call markup removed).
    calls:       the names of the tools it called, in order (flat over the steps).
    parse_errors: malformed tool calls in the rollout.
    reference_rationale: the data's reference rationale for this task/step, or None when it has none.
    step_calls:  per step, its calls rendered as `name({json arguments})`; () when unknown (then the
                 prompt lists `calls` once for the whole rollout).
    """

    questions: tuple[str, ...]
    reasoning: tuple[str, ...]
    calls: tuple[str, ...] = ()
    parse_errors: int = 0
    reference_rationale: str | None = None
    step_calls: tuple[tuple[str, ...], ...] = ()


def _render_call(call: Mapping[str, Any]) -> str:
    fn = call.get("function", call)
    args = fn.get("arguments", {})
    if not isinstance(args, str):
        try:
            args = json.dumps(args, sort_keys=True, ensure_ascii=False)
        except (TypeError, ValueError):
            args = repr(args)
    return f"{fn.get('name', '?')}({args})"


def from_episode(episode, reference_rationale: str | None = None) -> JudgeInput:
    """A judge input from a finished `rollout.Episode` (its OpenAI-style messages).

    The reference rationale is taken from the argument, else from `episode.reference_rationale` when
    the episode carries one (step-level data), else None."""
    questions, reasoning, calls, step_calls = [], [], [], []
    for m in episode.messages:
        if m.get("role") == "user":
            questions.append(str(m.get("content") or ""))
        elif m.get("role") == "assistant":
            parts = [str(m.get(k) or "").strip() for k in ("reasoning_content", "content")]
            reasoning.append("\n".join(p for p in parts if p))
            tool_calls = m.get("tool_calls") or []
            calls += [c["function"]["name"] for c in tool_calls]
            step_calls.append(tuple(_render_call(c) for c in tool_calls))
    if reference_rationale is None:
        reference_rationale = getattr(episode, "reference_rationale", None)
    return JudgeInput(
        tuple(questions),
        tuple(reasoning),
        tuple(calls),
        int(episode.parse_errors),
        reference_rationale,
        tuple(step_calls),
    )


class Judge(Protocol):
    name: str
    stand_in: bool

    def __call__(self, items: Sequence[JudgeInput]) -> np.ndarray: ...

    def stats(self) -> dict[str, int]: ...


# ----------------------------------------------------------------------------------------------------
# Counters.

FAILURE_KINDS = ("http", "timeout", "connection", "malformed", "no_score", "error")


class Counters:
    """Thread-safe integer counters; `snapshot()` is a plain dict copy. Every failure kind of
    `FAILURE_KINDS` is present (0 until it happens), so metric columns are the same every step."""

    def __init__(self, *names: str):
        self._lock = threading.Lock()
        self._c: dict[str, int] = {n: 0 for n in ("calls", "failures", *names)}
        self._c.update({f"failures/{k}": 0 for k in FAILURE_KINDS})

    def add(self, name: str, n: int = 1) -> int:
        with self._lock:
            self._c[name] = self._c.get(name, 0) + int(n)
            return self._c[name]

    def fail(self, kind: str) -> int:
        """Counts one item that scored the default because of `kind`; returns that kind's count."""
        with self._lock:
            self._c["failures"] += 1
            key = f"failures/{kind}"
            self._c[key] = self._c.get(key, 0) + 1
            return self._c[key]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._c)


# ----------------------------------------------------------------------------------------------------
# Registry and construction from the `rl.judge` selection section (rcgrpo_jax.registry.selection).

JudgeFactory = Callable[..., Judge]
JUDGES: Registry[JudgeFactory] = Registry("judge")

DEFAULT_MAX_FAILED_FRAC = 0.2

# Options every judge shares (the same default in each entry's config).
COMMON = {"default": 0.0, "max_chars": 2000}


def default_config(name: str = "rule") -> ml_collections.ConfigDict:
    """The `rl.judge` section: `name` (the judge) plus one subsection of options per judge, the same
    shape as every other selection (`rl.advantage`, `rl.loss`):

        --config.rl.judge.name=http --config.rl.judge.http.url=http://judge:8000/v1
    """
    section = selection(JUDGES, name)
    # The failure budget (any judge): a step in which a larger share of the items scored the judge's default
    # because the judge failed (`FAILURE_KINDS`) stops the run after a save (train/rl_trainer.py). 1.0 = never stop.
    section.max_failed_frac = DEFAULT_MAX_FAILED_FRAC
    return section


def check_config(section, prefix: str = "rl.judge") -> ml_collections.ConfigDict:
    """The selected judge's options resolved against its defaults and validated, without building it.
    Raises `ConfigError` naming `<prefix>.name` for an unknown judge, `<prefix>.<judge>.<field>` for an
    unknown option or a bad value, `<prefix>.max_failed_frac` for a budget outside [0, 1]."""

    if not isinstance(section, ml_collections.ConfigDict):
        section = ml_collections.ConfigDict(section)
    name = section.get("name", "rule")
    frac = section.get("max_failed_frac", DEFAULT_MAX_FAILED_FRAC)
    if not isinstance(frac, (int, float)) or not 0.0 <= float(frac) <= 1.0:
        raise ConfigError(f"{prefix}.max_failed_frac", f"{frac!r} is not a share in [0, 1]")
    if entry_name(name) not in JUDGES:
        raise ConfigError(f"{prefix}.name", f"unknown judge {name!r}; known: {', '.join(JUDGES.names())}")
    try:
        return selected(JUDGES, section)[1]
    except KeyError as e:
        raise ConfigError(f"{prefix}.{name}", str(e.args[0] if e.args else e)) from None
    except OptionError as e:
        raise ConfigError(f"{prefix}.{name}.{e.field}", str(e).split(": ", 1)[-1]) from None


def failure_budget(section) -> float:
    """The share of a step's items that may fail before the run stops (`max_failed_frac`)."""
    return float(section.get("max_failed_frac", DEFAULT_MAX_FAILED_FRAC))


def make_judge(section, **runtime) -> Judge:
    """A judge from the `rl.judge` section (`default_config()`). `runtime` goes to the factory (e.g.
    `mesh=` for the model judge)."""
    options = check_config(section)
    return JUDGES.get(entry_name(section.get("name", "rule")))(options, **runtime)


def require_unit_interval(cfg, field: str) -> None:
    v = float(cfg[field])
    if not 0.0 <= v <= 1.0:
        raise OptionError(field, f"{v} is not in [0, 1]")


def require_positive(cfg, field: str, *, allow_zero: bool = False) -> None:
    v = cfg[field]
    if v is None or (v < 0 if allow_zero else v <= 0):
        raise OptionError(field, f"must be {'>= 0' if allow_zero else '> 0'}, got {v!r}")
