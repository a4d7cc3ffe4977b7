"""Reward registry and the RC-GRPO reward math (rcgrpo_jax.envs.rewards), on hand-made outcomes."""

import pytest

from rcgrpo_jax.envs import rewards
from rcgrpo_jax.envs.rewards import EpisodeOutcome

TRUTH = (("cd", {"folder": "a"}), ("mv", {"source": "x", "destination": "y"}), ("cd", {"folder": "a"}))


def outcome(model, states_equal=True, terminated=False):
    return EpisodeOutcome(states_equal, tuple(model), TRUTH, terminated)


def test_registry_names_and_unknown():
    assert {"rc_grpo", "state_consistency", "action_coverage", "coverage_fraction"} <= set(rewards.names())
    with pytest.raises(KeyError, match="known"):
        rewards.get("nope")


def test_full_match_in_any_order_scores_one():
    o = outcome([TRUTH[1], TRUTH[0], ("ls", {"a": False}), TRUTH[2]])
    assert rewards.get("rc_grpo")(o) == 1.0
    assert rewards.get("coverage_fraction")(o) == 1.0


def test_multiset_duplicates_must_be_matched_twice():
    o = outcome([TRUTH[0], TRUTH[1]])
    assert rewards.action_coverage(o) == 0.0
    assert rewards.coverage_fraction(o) == pytest.approx(2 / 3)
    assert rewards.rc_grpo(o) == 0.0


def test_state_mismatch_or_termination_zero():
    full = list(TRUTH)
    assert rewards.rc_grpo(outcome(full, states_equal=False)) == 0.0
    assert rewards.action_coverage(outcome(full, states_equal=False)) == 1.0
    for name in rewards.names():
        assert rewards.get(name)(outcome(full, terminated=True)) == 0.0


def test_argument_equality_semantics():
    assert rewards.call_key("f", {"x": 1}) == rewards.call_key("f", {"x": 1.0})
    assert rewards.call_key("f", {"x": True}) != rewards.call_key("f", {"x": 1})
    assert rewards.call_key("f", {"x": [1, {"a": None}]}) == rewards.call_key("f", {"x": [1.0, {"a": None}]})
    assert rewards.call_key("f", {"x": "1"}) != rewards.call_key("f", {"x": 1})
    assert rewards.covered_count([("f", {"x": 2})], [("f", {"x": 1})]) == 0


def test_empty_ground_truth():
    o = EpisodeOutcome(True, (), (), False)
    assert rewards.rc_grpo(o) == 1.0 and rewards.coverage_fraction(o) == 1.0
