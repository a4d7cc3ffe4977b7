"""Reward-token sampling (RC-GRPO stage 2) and the paper's Proposition 4.3 by Monte Carlo."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rcgrpo_jax.rl import reward_tokens


class SampleTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_shape_dtype_determinism(self):
        for mode in reward_tokens.MODES:
            fn = self.variant(
                functools.partial(reward_tokens.sample, num_groups=6, group_size=5, p_high=0.5, mode=mode)
            )
            a = fn(jax.random.PRNGKey(3))
            chex.assert_shape(a, (6, 5))
            chex.assert_type(a, jnp.int32)
            np.testing.assert_array_equal(a, fn(jax.random.PRNGKey(3)))
            assert set(np.unique(a)) <= {reward_tokens.LOW, reward_tokens.HIGH}
            assert not np.array_equal(a, fn(jax.random.PRNGKey(4)))

    @chex.variants(with_jit=True, without_jit=True)
    def test_iid_frequency_and_extremes(self):
        fn = self.variant(functools.partial(reward_tokens.sample, num_groups=2000, group_size=5, mode="iid"))
        for p in (0.5, 0.2):
            share = float(np.mean(fn(jax.random.PRNGKey(0), p_high=p)))
            assert abs(share - p) < 4 * np.sqrt(p * (1 - p) / 10000), (p, share)
        assert np.all(fn(jax.random.PRNGKey(0), p_high=0.0) == 0)
        assert np.all(fn(jax.random.PRNGKey(0), p_high=1.0) == 1)

    @chex.variants(with_jit=True, without_jit=True)
    def test_stratified_has_both_tokens(self):
        for g in (2, 5):
            fn = self.variant(functools.partial(reward_tokens.sample, num_groups=500, group_size=g, mode="stratified"))
            for p in (0.0, 0.1, 0.5, 1.0):
                counts = np.asarray(fn(jax.random.PRNGKey(g), p_high=jnp.float32(p))).sum(axis=1)
                assert counts.min() >= 1 and counts.max() <= g - 1, (g, p)
        # with p = 1/2 the positions are balanced too
        a = reward_tokens.sample(jax.random.PRNGKey(9), 4000, 5, 0.5, "stratified")
        np.testing.assert_allclose(np.asarray(a).mean(axis=0), 0.5, atol=0.04)


def test_bad_mode():
    with pytest.raises(ValueError, match="iid, stratified"):
        reward_tokens.sample(jax.random.PRNGKey(0), 2, 2, 0.5, "random")


@pytest.mark.parametrize(
    "group_size,p,mu_h,mu_l", [(5, 0.5, 0.8, 0.2), (5, 0.3, 0.6, 0.5), (3, 0.5, 1.0, 0.0), (8, 0.7, 0.9, 0.05)]
)
def test_proposition_4_3_group_variance_bound(group_size, p, mu_h, mu_l):
    """With tokens ~ Bernoulli(p) and binary rewards of mean mu_h / mu_l given the token, the expected
    population variance of a group is >= (G-1)/G p(1-p)(mu_h - mu_l)^2 (RC-GRPO Prop. 4.3).
    By the law of total variance it equals (G-1)/G Var(R), with equality when mu_h, mu_l are 0/1."""
    n = 40000
    k_tok, k_rew = jax.random.split(jax.random.PRNGKey(42))
    tokens = reward_tokens.sample(k_tok, n, group_size, p, "iid")
    mu = jnp.where(tokens == reward_tokens.HIGH, mu_h, mu_l)
    rewards = jax.random.bernoulli(k_rew, mu).astype(jnp.float32)
    group_var = np.asarray(rewards.var(axis=1))
    mc, se = group_var.mean(), group_var.std() / np.sqrt(n)
    bound = (group_size - 1) / group_size * p * (1 - p) * (mu_h - mu_l) ** 2
    m = p * mu_h + (1 - p) * mu_l
    exact = (group_size - 1) / group_size * (p * mu_h + (1 - p) * mu_l - m**2)
    assert mc >= bound - 4 * se, (mc, bound)
    assert abs(mc - exact) < 4 * se, (mc, exact)
    assert exact >= bound - 1e-12
