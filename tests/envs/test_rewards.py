"""Reward registry and the RC-GRPO reward math (rcgrpo_jax.envs.rewards): hand-made outcomes, the
order-aware coverage against a brute force, and commutation decided by the BFCL environment."""

import itertools
import random

import pytest

from rcgrpo_jax.envs import bfcl, reward_agreement, rewards
from rcgrpo_jax.envs.reward_agreement import reversed_script
from rcgrpo_jax.envs.rewards import EpisodeOutcome

TRUTH = (("cd", {"folder": "a"}), ("mv", {"source": "x", "destination": "y"}), ("cd", {"folder": "a"}))
A, B, C = ("ls", {"a": True}), ("pwd", {}), ("cd", {"folder": "b"})


def outcome(model, states_equal=True, terminated=False, truth=TRUTH, commutes=None):
    return EpisodeOutcome(states_equal, tuple(model), tuple(truth), terminated, commutes)


def test_registry_names_and_unknown():
    expected = {"rc_grpo", "state_consistency", "action_coverage", "coverage_fraction"}
    assert expected | {"rc_grpo_multiset", "action_coverage_multiset"} <= set(rewards.names())
    with pytest.raises(KeyError, match="known"):
        rewards.get("nope")


def test_ground_truth_order_with_extra_calls_scores_one_and_asks_nothing():
    asked = []
    o = outcome(
        [("ls", {"a": False}), TRUTH[0], TRUTH[1], ("pwd", {}), TRUTH[2]], commutes=lambda i, j: asked.append(1)
    )
    assert rewards.rc_grpo(o) == 1.0 and rewards.coverage_fraction(o) == 1.0
    assert asked == []  # in ground-truth order, no commutation question is needed


def test_commuting_pair_reversed_still_covers():
    truth = (A, B, C)
    o = outcome([B, A, C], truth=truth, commutes=lambda i, j: (i, j) == (0, 1))
    assert rewards.action_coverage(o) == 1.0 and rewards.rc_grpo(o) == 1.0
    # ...but only that pair: A after C breaks the (non-commuting) pair (0, 2).
    o = outcome([B, C, A], truth=truth, commutes=lambda i, j: (i, j) == (0, 1))
    assert rewards.action_coverage(o) == 0.0


def test_non_commuting_pair_reversed_does_not_cover():
    truth = (A, B, C)
    for commutes in (None, lambda i, j: False, lambda i, j: (i, j) != (0, 1)):
        o = outcome([B, A, C], truth=truth, commutes=commutes)
        assert rewards.action_coverage(o) == 0.0 and rewards.rc_grpo(o) == 0.0
        assert rewards.action_coverage_multiset(o) == 1.0 and rewards.rc_grpo_multiset(o) == 1.0  # the old rule
        assert rewards.coverage_fraction(o) == pytest.approx(2 / 3)  # all present, out of order: one miss
    # A later repetition of the earlier call repairs the order.
    assert rewards.action_coverage(outcome([B, A, B, C], truth=truth)) == 1.0


def test_missing_action_does_not_cover_even_if_everything_commutes():
    o = outcome([TRUTH[1], TRUTH[0]], commutes=lambda i, j: True)
    assert rewards.action_coverage(o) == 0.0 and rewards.rc_grpo(o) == 0.0
    assert rewards.coverage_fraction(o) == pytest.approx(2 / 3)


def test_identical_calls_are_interchangeable():
    # cd(a), mv, cd(a): the two cd calls are the same call, so matching either first is fine.
    assert rewards.action_coverage(outcome([TRUTH[0], TRUTH[1], TRUTH[0]])) == 1.0
    assert rewards.action_coverage(outcome([TRUTH[1], TRUTH[0], TRUTH[0]])) == 0.0  # mv first: cd must precede


def _brute_force(model, truth, commutes):
    keys = [rewards.call_key(*c) for c in model]
    tkeys = [rewards.call_key(*c) for c in truth]
    for positions in itertools.permutations(range(len(model)), len(truth)):
        if all(keys[p] == tkeys[t] for t, p in enumerate(positions)) and all(
            positions[i] < positions[j] or commutes(i, j)
            for i, j in itertools.combinations(range(len(truth)), 2)
            if tkeys[i] != tkeys[j]
        ):
            return True
    return False


def test_ordered_cover_matches_brute_force():
    rng = random.Random(0)
    alphabet = [("f", {"x": k}) for k in range(3)]
    checked = {True: 0, False: 0}
    for _ in range(400):
        truth = [rng.choice(alphabet) for _ in range(rng.randint(1, 4))]
        model = [rng.choice(alphabet) for _ in range(rng.randint(len(truth), 6))]
        table = {(i, j): rng.random() < 0.4 for i, j in itertools.combinations(range(len(truth)), 2)}
        expected = _brute_force(model, truth, lambda i, j: table[(i, j)])
        assert rewards.ordered_cover(model, truth, lambda i, j: table[(i, j)]) == expected, (model, truth, table)
        checked[expected] += 1
    assert min(checked.values()) > 50  # both answers well represented


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


# --- commutation decided by the BFCL environment ------------------------------------------------


def test_environment_decides_commutation():
    # base_13 turn 0: cd(folder='documents'), tail(file_name='report.txt', lines=1): tail reads the
    # folder cd enters, so the two do not commute; reversed, the old rule scored 1 and BFCL fails it.
    task = bfcl.get_task("multi_turn_base_13")
    order = bfcl.TruthOrder(task)
    assert order.commutes(0, 1) is False and order.commutes(0, 1) is False and order.evaluated == 1
    with pytest.raises(ValueError, match="commutes"):
        order.commutes(1, 0)
    env = bfcl.run_script(bfcl.BFCLEnv(task), reversed_script(task))
    assert env.official_verdict()["valid"] is False
    assert env.reward() == 0.0 and env.reward("rc_grpo_multiset") == 1.0
    assert env.reward("state_consistency") == 1.0


def test_sampled_oracle_and_reversed_agreement():
    tasks = bfcl.load_tasks()[::16]  # 50 tasks, all four categories
    names = ("rc_grpo_multiset", "rc_grpo")
    oracle = reward_agreement.agreement(tasks, bfcl.ground_truth_script, names)
    assert oracle["episodes"] == len(tasks)
    assert oracle["rc_grpo"]["reward1_official_pass"] == len(tasks)  # the ground truth still scores 1
    flipped = reward_agreement.agreement(tasks, reversed_script, names)
    after, before = flipped["rc_grpo"], flipped["rc_grpo_multiset"]
    assert sum(after.values()) == sum(before.values()) == len(tasks)
    assert after["reward1_official_fail"] == 0  # order now matters where the benchmark sees it
    assert before["reward1_official_fail"] > 0  # the sample holds cases the old rule let through
    assert after["reward0_official_pass"] == 0  # commuting reorders still score 1 ...
    assert after["reward1_official_pass"] > 0  # ... and the sample holds some
    assert set(flipped["host_ms_per_episode"]) >= {"replay", "outcome", "rc_grpo", "rc_grpo_cached"}
