"""Reward shaping (`rcgrpo_jax.rl.shaping`): DAPO's overlong punishment by hand, the registry's contract and its
start-up checks against the run's `rl` section."""

import functools

import chex
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from rcgrpo_jax.registry import OptionError
from rcgrpo_jax.rl import shaping
from rcgrpo_jax.rollout.episode import Episode


class OverlongPenaltyTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_overlong_penalty(self):
        fn = self.variant(functools.partial(shaping.overlong_penalty, max_len=10, cache_len=4, penalty=0.5))
        out = fn(jnp.array([3, 6, 7, 9, 10, 11]))
        chex.assert_type(out, jnp.float32)
        # soft zone (6, 10]: (6 - L) / 4, times the penalty 0.5; beyond 10: -0.5
        np.testing.assert_allclose(out, [0.0, 0.0, -0.125, -0.375, -0.5, -0.5], rtol=1e-6)


def test_overlong_bad_lengths():
    with pytest.raises(ValueError, match="cache_len"):
        shaping.overlong_penalty(jnp.array([1]), max_len=4, cache_len=5)


def _episode(parts, render_mode="append"):
    """An episode built from ("context" | "sampled" | "rerender", n tokens) parts."""
    e = Episode(task_id="t", group=0, rollout_index=0, reward_token=None, render_mode=render_mode)
    for kind, n in parts:
        if kind == "context":
            e.add_context([7] * n)
        elif kind == "sampled":
            e.add_sampled([8] * n, [-0.5] * n)
        else:
            e.begin_sample([7] * n)
    return e


def test_overlong_shaping_counts_the_models_own_tokens_only():
    # A 40-token prompt, 6 sampled, a 30-token tool result, 4 sampled, a 25-token user turn, 5 sampled:
    # 110 tokens of context, 15 of them the model's response.
    long_tools = _episode(
        [("context", 40), ("sampled", 6), ("context", 30), ("sampled", 4), ("context", 25), ("sampled", 5)]
    )
    # Re-rendered: each step a sample of its own (re-rendered context 50, then 60), 9 + 3 sampled tokens.
    rerendered = _episode([("context", 50), ("sampled", 9), ("rerender", 60), ("sampled", 3)], render_mode="rerender")
    short = _episode([("context", 100), ("sampled", 2)])
    lengths = shaping.response_lengths([long_tools, rerendered, short])
    np.testing.assert_array_equal(lengths, [15, 12, 2])
    assert len(long_tools.tokens) == 110  # what the shaping used to measure
    # L_max 16, cache 8: no penalty up to 8 response tokens, then (8 - L) / 8 down to -1 at 16.
    shaped = shaping.overlong_penalty(lengths, max_len=16, cache_len=8, penalty=1.0)
    np.testing.assert_allclose(shaped, [-7 / 8, -4 / 8, 0.0], rtol=1e-6)
    # On the whole context every one of them would have been past L_max: -1 each.
    whole = shaping.overlong_penalty(np.array([len(e.tokens) for e in (long_tools, short)]), max_len=16, cache_len=8)
    np.testing.assert_allclose(whole, [-1.0, -1.0])


def _rl(max_context=512):
    return ml_collections.ConfigDict({"max_context": max_context})


def test_overlong_lengths_default_to_the_context():
    """L_max = max_len or rl.max_context; cache_len = cache_len or L_max // 8."""
    options = shaping.default_config("dapo_overlong")
    assert shaping.overlong_lengths(options, _rl()) == (512, 64)
    options.max_len, options.cache_len = 128, 32
    assert shaping.overlong_lengths(options, _rl()) == (128, 32)


def test_dapo_overlong_adds_the_penalty_to_each_rollouts_reward():
    """N = 2 groups of G = 2; response lengths 2, 15 | 12, 20 with L_max 16 and cache 8:
    penalties 0, -7/8 | -4/8, -1, added to the rewards 1, 0 | 1, 1."""
    episodes = [_episode([("context", 5), ("sampled", n)]) for n in (2, 15, 12, 20)]
    rewards = np.array([[1.0, 0.0], [1.0, 1.0]], np.float32)
    options = shaping.check("dapo_overlong", {"max_len": 16, "cache_len": 8})
    shaped, metrics = shaping.get("dapo_overlong")(rewards, episodes, rl=_rl(), config=options)
    assert shaped.shape == (2, 2) and shaped.dtype == np.float32
    np.testing.assert_allclose(shaped, [[1.0, -7 / 8], [0.5, 0.0]], rtol=1e-6)
    np.testing.assert_allclose(metrics["overlong_penalty_mean"], -(7 / 8 + 4 / 8 + 1) / 4, rtol=1e-6)


@pytest.mark.parametrize("name", shaping.names())
def test_every_shaping_keeps_the_contract(name):
    """(rewards [N, G], N * G episodes) -> (rewards [N, G] float32, float metrics), at its registry defaults."""
    episodes = [_episode([("context", 3), ("sampled", n)]) for n in (1, 2, 3, 4, 5, 6)]
    shaped, metrics = shaping.get(name)(np.zeros((3, 2), np.float32), episodes, rl=_rl(8), config=None)
    assert shaped.shape == (3, 2) and shaped.dtype == np.float32
    assert all(isinstance(v, float) for v in metrics.values())


def test_none_leaves_the_rewards():
    rewards = np.array([[1.0, 0.0]], np.float32)
    shaped, metrics = shaping.get("none")(rewards, [None, None], rl=_rl())
    np.testing.assert_array_equal(shaped, rewards)
    assert metrics == {}


@pytest.mark.parametrize(
    "options, field, message",
    [
        ({"max_len": -1}, "max_len", "must be >= 0"),
        ({"penalty": -0.5}, "penalty", "must be >= 0"),
        ({"cache_len": 600}, "cache_len", r"must be in \(0, L_max = 512\]"),  # past rl.max_context
        ({"max_len": 16, "cache_len": 17}, "cache_len", r"must be in \(0, L_max = 16\]"),
        ({"max_len": 4}, "cache_len", r"got 0"),  # L_max // 8 = 0: no soft zone
    ],
)
def test_options_are_checked_against_the_run(options, field, message):
    with pytest.raises(OptionError, match=message) as e:
        shaping.check_run("dapo_overlong", shaping.check("dapo_overlong", options), _rl())
    assert e.value.field == field
