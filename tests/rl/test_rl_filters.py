"""Group filters (`rcgrpo_jax.rl.filters`): the contract, hand-computed keep masks, options checked at start-up."""

import functools

import chex
import jax.numpy as jnp
import numpy as np
import pytest

from rcgrpo_jax.registry import OptionError
from rcgrpo_jax.rl import advantages, filters

R = jnp.array([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.5, 0.5, 0.5], [0.5, 0.5, 0.51]])


class FilterTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_dapo_drops_the_groups_of_equal_rewards(self):
        keep, m = self.variant(filters.get("dapo"))(R)
        chex.assert_shape(keep, (4,))
        chex.assert_type(keep, bool)
        # spreads 0, 1, 0, 0.01 > atol 0
        np.testing.assert_array_equal(keep, [False, True, False, True])
        assert int(m["dapo_groups_dropped"]) == 2
        np.testing.assert_allclose(m["dapo_frac_dropped"], 0.5)
        keep, _ = self.variant(functools.partial(filters.get("dapo"), config={"atol": 0.05}))(R)
        np.testing.assert_array_equal(keep, [False, True, False, False])  # 0.01 <= 0.05 now

    @chex.variants(with_jit=True, without_jit=True)
    def test_none_keeps_every_group(self):
        keep, m = self.variant(filters.get("none"))(R)
        chex.assert_shape(keep, (4,))
        np.testing.assert_array_equal(keep, [True] * 4)
        assert m == {}


@pytest.mark.parametrize("name", filters.names())
def test_every_filter_keeps_the_contract(name):
    """rewards [N, G] -> (keep [N] bool, scalar metrics), at its registry defaults."""
    keep, metrics = filters.get(name)(R, config=filters.default_config(name))
    assert keep.shape == (4,) and keep.dtype == bool
    assert all(np.ndim(v) == 0 for v in metrics.values())
    with pytest.raises(ValueError, match=r"\[N, G\]"):
        filters.get(name)(R[0])


def test_options_are_checked():
    assert filters.check("dapo", {"atol": 0.1}).atol == 0.1
    with pytest.raises(OptionError, match="atol: must be >= 0") as e:
        filters.check("dapo", {"atol": -1.0})
    assert e.value.field == "atol"
    with pytest.raises(KeyError):  # a misspelt option names itself
        filters.check("dapo", {"tol": 0.1})


def test_filter_composes_with_any_estimator():
    keep, _ = filters.get("dapo")(R)
    a, _ = advantages.get("sign")(R, aux={"group_mask": keep})
    np.testing.assert_array_equal(np.asarray(a)[~np.asarray(keep)], 0.0)
    kept_r, kept_a = filters.select_groups(keep, R, a)
    np.testing.assert_array_equal(kept_r, np.asarray(R)[[1, 3]])
    assert kept_a.shape == (2, 3)
