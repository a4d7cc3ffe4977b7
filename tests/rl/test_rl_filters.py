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
