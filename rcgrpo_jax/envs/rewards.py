"""Trajectory rewards for BFCL episodes, registered by name (`rewards.get(config.reward)`; "module:name" imports a
user's module first, which registers its own reward).

RC-GRPO's reward is binary: R = state consistency x action coverage.
- state consistency: the final public state (attributes not starting with "_") of every involved
  instance equals the state after replaying the ground truth on fresh instances;
- action coverage (the paper's, "permits reordering of independent commutative actions"): every
  ground-truth call is matched by a distinct executed model call with the same name and equal
  arguments after binding to the signature (defaults filled, positional -> keyword), and the matched
  calls come in the ground truth's order except that two ground-truth calls that commute may come in
  either order. Formally the matched calls form a linear extension of the partial order "a before b
  (a earlier in the ground truth) unless a and b commute"; extra model calls anywhere are allowed.
  Which calls commute is the environment's knowledge: `EpisodeOutcome.commutes(i, j)`, which
  `BFCLEnv` answers by running both orders from the same state (`bfcl.TruthOrder`). Without it no
  two distinct calls commute and the ground truth must appear as a subsequence.
The old order-free rule (a multiset inclusion) stays registered as `action_coverage_multiset` and
`rc_grpo_multiset`, for comparison. Each reward is a function of an `EpisodeOutcome`; a
force-terminated episode scores 0 everywhere. How they agree with BFCL's official checker is measured by
`reward_agreement.py`.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any, Callable, Iterable, Mapping, Sequence

from rcgrpo_jax.registry import Registry

Call = tuple[str, Mapping[str, Any]]  # (name, bound arguments)
Commutes = Callable[[int, int], bool]  # (i, j) indices into truth_calls, i < j


@dataclasses.dataclass(frozen=True)
class EpisodeOutcome:
    states_equal: bool
    model_calls: tuple[Call, ...]  # executed calls (ran, returned or raised), bound
    truth_calls: tuple[Call, ...]  # all ground-truth calls, bound, in ground-truth order
    terminated: bool = False  # force-terminated (step/call cap, time limit) -> fails
    # Whether ground-truth calls i < j commute (the environment decides); None: only identical calls do.
    commutes: Commutes | None = dataclasses.field(default=None, compare=False)


RewardFn = Callable[[EpisodeOutcome], float]
REWARDS: Registry[RewardFn] = Registry("reward")
# `get`: a registered name, or "module:name" (the module is imported first)
register, get, names, default_config, check = REWARDS.api(lookup=True)


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


def ordered_cover(model_calls: Sequence[Call], truth_calls: Sequence[Call], commutes: Commutes | None = None) -> bool:
    """Whether distinct model calls match every ground-truth call in an order that respects every
    pair of ground-truth calls that do not commute (see the module docstring).

    Search over (model position, set of matched ground-truth calls). At each model call, match it to
    a ground-truth call with the same key all of whose non-commuting predecessors are matched (an
    "available" one); if one exists, skipping the model call is never needed (moving that call's
    match earlier keeps any completion valid), so the search branches only between several available
    ground-truth calls with the same key, trying the earliest first, and memoizes dead ends.
    `commutes(i, j)` is asked only for pairs the model reorders, so an episode in ground-truth order
    asks nothing.
    """
    truth_keys = [call_key(n, a) for n, a in truth_calls]
    n = len(truth_keys)
    if n == 0:
        return True
    if covered_count(model_calls, truth_calls) < n:
        return False
    by_key: dict[tuple, list[int]] = collections.defaultdict(list)
    for t, key in enumerate(truth_keys):
        by_key[key].append(t)
    model = [by_key[k] for k in (call_key(nm, a) for nm, a in model_calls) if k in by_key]
    known: dict[tuple[int, int], bool] = {}

    def free(i: int, j: int) -> bool:  # may ground-truth call j be matched before i (i < j)?
        if truth_keys[i] == truth_keys[j]:
            return True  # identical calls: both orders are the same sequence
        if commutes is None:
            return False
        if (i, j) not in known:
            known[(i, j)] = bool(commutes(i, j))
        return known[(i, j)]

    full = (1 << n) - 1
    dead: set[tuple[int, int]] = set()

    def available(t: int, mask: int) -> bool:
        return not mask >> t & 1 and all(mask >> i & 1 or free(i, t) for i in range(t))

    def search(k: int, mask: int) -> bool:  # can model calls k.. complete the matched set `mask`?
        while mask != full and k < len(model) and not any(available(t, mask) for t in model[k]):
            k += 1  # nothing available to match: this model call is an extra one
        if mask == full:
            return True
        if k >= len(model) or (k, mask) in dead:
            return False
        # Earliest candidate first; later ones (and their questions) only on backtracking.
        if any(available(t, mask) and search(k + 1, mask | 1 << t) for t in model[k]):
            return True
        dead.add((k, mask))
        return False

    return search(0, 0)


def _covers(outcome: EpisodeOutcome) -> bool:
    return ordered_cover(outcome.model_calls, outcome.truth_calls, outcome.commutes)


@register("state_consistency")
def state_consistency(outcome: EpisodeOutcome) -> float:
    return float(outcome.states_equal and not outcome.terminated)


@register("action_coverage")
def action_coverage(outcome: EpisodeOutcome) -> float:
    if outcome.terminated:
        return 0.0
    return float(_covers(outcome))


@register("rc_grpo")
def rc_grpo(outcome: EpisodeOutcome) -> float:
    """The paper's binary reward: state consistency x (order-aware) action coverage."""
    return state_consistency(outcome) * action_coverage(outcome)


@register("action_coverage_multiset")
def action_coverage_multiset(outcome: EpisodeOutcome) -> float:
    """The earlier, more lenient rule: a multiset inclusion, any order covers."""
    if outcome.terminated:
        return 0.0
    return float(covered_count(outcome.model_calls, outcome.truth_calls) == len(outcome.truth_calls))


@register("rc_grpo_multiset")
def rc_grpo_multiset(outcome: EpisodeOutcome) -> float:
    """State consistency x the order-free multiset coverage (the reward before order mattered)."""
    return state_consistency(outcome) * action_coverage_multiset(outcome)


@register("coverage_fraction")
def coverage_fraction(outcome: EpisodeOutcome) -> float:
    """Partial credit for shaping experiments: the share of ground-truth calls matched as a
    multiset, and 1 only when order-aware action coverage holds (all calls present but out of
    order counts as one miss)."""
    if outcome.terminated:
        return 0.0
    n = len(outcome.truth_calls)
    if n == 0 or _covers(outcome):
        return 1.0
    return min(covered_count(outcome.model_calls, outcome.truth_calls), n - 1) / n
