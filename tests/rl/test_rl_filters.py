"""DAPO group filter and overlong reward shaping."""

import functools

import chex
import jax.numpy as jnp
import numpy as np
import pytest

from rcgrpo_jax.rl import advantages, filters

R = jnp.array([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.5, 0.5, 0.5], [0.5, 0.5, 0.51]])


class FilterTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_group_filter(self):
        keep, m = self.variant(filters.dapo_group_filter)(R)
        chex.assert_shape(keep, (4,))
        np.testing.assert_array_equal(keep, [False, True, False, True])
        assert int(m["dapo_groups_dropped"]) == 2
        np.testing.assert_allclose(m["dapo_frac_dropped"], 0.5)
        keep, _ = self.variant(functools.partial(filters.dapo_group_filter, atol=0.05))(R)
        np.testing.assert_array_equal(keep, [False, True, False, False])

    @chex.variants(with_jit=True, without_jit=True)
    def test_overlong_penalty(self):
        fn = self.variant(functools.partial(filters.overlong_penalty, max_len=10, cache_len=4, penalty=0.5))
        out = fn(jnp.array([3, 6, 7, 9, 10, 11]))
        chex.assert_type(out, jnp.float32)
        # soft zone (6, 10]: (6 - L) / 4, times the penalty 0.5; beyond 10: -0.5
        np.testing.assert_allclose(out, [0.0, 0.0, -0.125, -0.375, -0.5, -0.5], rtol=1e-6)


def test_filter_composes_with_any_estimator():
    keep, _ = filters.dapo_group_filter(R)
    a, _ = advantages.get("sign")(R, aux={"group_mask": keep})
    np.testing.assert_array_equal(np.asarray(a)[~np.asarray(keep)], 0.0)
    kept_r, kept_a = filters.select_groups(keep, R, a)
    np.testing.assert_array_equal(kept_r, np.asarray(R)[[1, 3]])
    assert kept_a.shape == (2, 3)


def test_overlong_bad_lengths():
    with pytest.raises(ValueError, match="cache_len"):
        filters.overlong_penalty(jnp.array([1]), max_len=4, cache_len=5)


def _episode(parts, render_mode="append"):
    """An episode built from ("context" | "sampled" | "rerender", n tokens) parts."""
    from rcgrpo_jax.rollout.episode import Episode

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
    lengths = filters.response_lengths([long_tools, rerendered, short])
    np.testing.assert_array_equal(lengths, [15, 12, 2])
    assert len(long_tools.tokens) == 110  # what the shaping used to measure
    # L_max 16, cache 8: no penalty up to 8 response tokens, then (8 - L) / 8 down to -1 at 16.
    shaped = filters.overlong_penalty(lengths, max_len=16, cache_len=8, penalty=1.0)
    np.testing.assert_allclose(shaped, [-7 / 8, -4 / 8, 0.0], rtol=1e-6)
    # On the whole context every one of them would have been past L_max: -1 each.
    whole = filters.overlong_penalty(np.array([len(e.tokens) for e in (long_tools, short)]), max_len=16, cache_len=8)
    np.testing.assert_allclose(whole, [-1.0, -1.0])


def test_overlong_max_len_defaults_to_the_context():
    import ml_collections

    rl = ml_collections.ConfigDict({"max_context": 512, "overlong": {"max_len": 0, "cache_len": 64}})
    assert filters.overlong_max_len(rl) == 512
    rl.overlong.max_len = 128
    assert filters.overlong_max_len(rl) == 128
