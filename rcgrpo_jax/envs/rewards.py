"""Trajectory rewards for BFCL episodes, registered by name (`rewards.get(config.reward)`).

RC-GRPO's reward is binary: R = state consistency x action coverage.
- state consistency: the final public state (attributes not starting with "_") of every involved
  instance equals the state after replaying the ground truth on fresh instances;
- action coverage: every ground-truth call is matched by a distinct executed model call with the same
  name and equal arguments after binding to the signature (defaults filled, positional -> keyword):
  a multiset inclusion, order-free.
Each reward is a function of an `EpisodeOutcome`; a force-terminated episode scores 0 everywhere.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any, Callable, Iterable, Mapping

from rcgrpo_jax.rl.registry import Registry

Call = tuple[str, Mapping[str, Any]]  # (name, bound arguments)


@dataclasses.dataclass(frozen=True)
class EpisodeOutcome:
    states_equal: bool
    model_calls: tuple[Call, ...]  # executed calls (ran, returned or raised), bound
    truth_calls: tuple[Call, ...]  # all ground-truth calls, bound
    terminated: bool = False  # force-terminated (step/call cap, time limit) -> fails


RewardFn = Callable[[EpisodeOutcome], float]
REWARDS: Registry[RewardFn] = Registry("reward")
register = REWARDS.register
get = REWARDS.get
names = REWARDS.names


def canonical(value: Any) -> Any:
    """A hashable form in which values compare as Python `==` does for JSON data (1 == 1.0), except
    that booleans stay distinct from numbers."""
    kind = type(value)
    if kind is bool or value is None:
        return ("b", value)
    if kind in (int, float):
        if kind is float and math.isfinite(value) and value.is_integer():
            value = int(value)
        return ("n", value)
    if kind in (list, tuple):
        return ("l", tuple(canonical(v) for v in value))
    if kind is dict:
        return ("d", tuple(sorted((str(k), canonical(v)) for k, v in value.items())))
    if kind is str:
        return ("s", value)
    return ("r", repr(value))


def call_key(name: str, bound: Mapping[str, Any]) -> tuple:
    return (name, canonical(dict(bound)))


def covered_count(model_calls: Iterable[Call], truth_calls: Iterable[Call]) -> int:
    """How many ground-truth calls are matched by distinct model calls (multiset intersection)."""
    available = collections.Counter(call_key(n, a) for n, a in model_calls)
    covered = 0
    for name, args in truth_calls:
        key = call_key(name, args)
        if available[key] > 0:
            available[key] -= 1
            covered += 1
    return covered


@register("state_consistency")
def state_consistency(outcome: EpisodeOutcome) -> float:
    return float(outcome.states_equal and not outcome.terminated)


@register("action_coverage")
def action_coverage(outcome: EpisodeOutcome) -> float:
    if outcome.terminated:
        return 0.0
    return float(covered_count(outcome.model_calls, outcome.truth_calls) == len(outcome.truth_calls))


@register("rc_grpo")
def rc_grpo(outcome: EpisodeOutcome) -> float:
    """The paper's binary reward: state consistency x action coverage."""
    return state_consistency(outcome) * action_coverage(outcome)


@register("coverage_fraction")
def coverage_fraction(outcome: EpisodeOutcome) -> float:
    """Partial credit for shaping experiments: the fraction of ground-truth calls covered."""
    if outcome.terminated:
        return 0.0
    if not outcome.truth_calls:
        return 1.0
    return covered_count(outcome.model_calls, outcome.truth_calls) / len(outcome.truth_calls)
