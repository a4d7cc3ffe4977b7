"""Diagnostics: hand-computed values, stable key names."""

import chex
import jax.numpy as jnp
import numpy as np
import pytest

from rcgrpo_jax.rl import diagnostics


class DiagnosticsTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_group_metrics(self):
        r = jnp.array([[1.0, 0.0], [1.0, 1.0]])
        a = jnp.array([[1.0, -1.0], [0.0, 0.0]])
        m = self.variant(diagnostics.group_metrics)(r, a)
        np.testing.assert_allclose(
            [m["frac_zero_var_groups"], m["reward_mean"], m["reward_std"], m["adv_std"], m["adv_abs_mean"]],
            [0.5, 0.75, np.sqrt(0.1875), np.sqrt(0.5), 0.5],
            rtol=1e-6,
        )

    @chex.variants(with_jit=True, without_jit=True)
    def test_correlations(self):
        x = jnp.array([1.0, 2.0, 3.0, 4.0])
        y = jnp.array([1.0, 3.0, 2.0, 4.0])
        # Spearman = 1 - 6 * sum d^2 / (n (n^2 - 1)) = 1 - 12 / 60
        np.testing.assert_allclose(self.variant(diagnostics.spearman)(x, y), 0.8, rtol=1e-6)
        np.testing.assert_allclose(self.variant(diagnostics.pearson)(x, y), 0.8, rtol=1e-6)
        np.testing.assert_allclose(
            self.variant(diagnostics.average_ranks)(jnp.array([5.0, 1.0, 1.0, 2.0])), [4.0, 1.5, 1.5, 3.0]
        )
        np.testing.assert_allclose(self.variant(diagnostics.spearman)(x, x**3), 1.0, rtol=1e-6)
        np.testing.assert_allclose(self.variant(diagnostics.pearson)(x, jnp.ones(4)), 0.0)

    @chex.variants(with_jit=True, without_jit=True)
    def test_entropy_correlation_counts_only_rows_with_loss_tokens(self):
        """A rollout masked out of the loss (DAPO's filter, a prompt already past max_context) has no entropy;
        counting it as entropy 0 would invent a correlation. Rows 0-3 alone: entropy 1, 2, 3, 4 against
        rewards 0, 1, 0, 1 (Pearson 0.4472, Spearman the same on these ranks); rows 4-5 have no tokens."""
        entropy = jnp.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0], [0.0, 0.0], [0.0, 0.0]])
        mask = jnp.array([[1, 1], [1, 1], [1, 1], [1, 1], [0, 0], [0, 0]])
        rewards = jnp.array([0.0, 1.0, 0.0, 1.0, 1.0, 1.0])
        m = self.variant(diagnostics.entropy_metrics)(entropy, mask, rewards)
        expected = np.corrcoef([1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 0.0, 1.0])[0, 1]
        np.testing.assert_allclose(m["entropy_reward_pearson"], expected, rtol=1e-5)
        np.testing.assert_allclose(m["entropy_reward_spearman"], expected, rtol=1e-5)
        # all six rows, the masked ones as entropy 0 and reward 1, would give a negative correlation instead
        assert np.corrcoef([1, 2, 3, 4, 0, 0], rewards)[0, 1] < 0 < float(m["entropy_reward_pearson"])

    @chex.variants(with_jit=True, without_jit=True)
    def test_entropy_metrics(self):
        entropy = jnp.array([[1.0, 3.0, 9.0], [0.5, 0.5, 0.5], [4.0, 0.0, 0.0]])
        mask = jnp.array([[1, 1, 0], [1, 1, 1], [1, 0, 0]])
        rewards = jnp.array([[1.0], [0.0], [1.0]])  # [N=3, G=1]
        m = self.variant(diagnostics.entropy_metrics)(entropy, mask, rewards)
        np.testing.assert_allclose(m["entropy_mean"], (1 + 3 + 1.5 + 4) / 6, rtol=1e-6)
        # per-rollout entropies [2, 0.5, 4] vs rewards [1, 0, 1]
        e, r = np.array([2.0, 0.5, 4.0]), np.array([1.0, 0.0, 1.0])
        np.testing.assert_allclose(m["entropy_reward_pearson"], np.corrcoef(e, r)[0, 1], rtol=1e-5)
        np.testing.assert_allclose(
            m["entropy_reward_spearman"], np.corrcoef([2.0, 1.0, 3.0], [2.5, 1.0, 2.5])[0, 1], rtol=1e-5
        )

    @chex.variants(with_jit=True, without_jit=True)
    def test_reward_token_and_grad_metrics(self):
        r = jnp.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
        tokens = jnp.array([[1, 0, 1], [1, 0, 0]])
        m = self.variant(diagnostics.reward_token_metrics)(r, tokens)
        np.testing.assert_allclose(
            [m["reward_mean_high_token"], m["reward_mean_low_token"], m["frac_high_token"]],
            [2 / 3, 1 / 3, 0.5],
            rtol=1e-6,
        )
        g = self.variant(diagnostics.grad_metrics)({"a": jnp.array([3.0]), "b": {"c": jnp.array([[4.0]])}})
        np.testing.assert_allclose(g["grad_norm"], 5.0)


def test_step_diagnostics_keys():
    r = jnp.array([[1.0, 0.0]])
    out = diagnostics.step_diagnostics(
        r,
        r,
        jnp.ones((2, 3)),
        jnp.ones((2, 3)),
        loss_metrics={"kl": 0.1, "clip_frac_low": 0.0, "clip_frac_high": 0.2, "clip_frac_dual": 0.0, "pg_loss": 1.0},
        reward_tokens=jnp.array([[1, 0]]),
        grads={"w": jnp.ones(4)},
    )
    assert set(out) == {
        "frac_zero_var_groups",
        "reward_mean",
        "reward_std",
        "adv_std",
        "adv_abs_mean",
        "entropy_mean",
        "entropy_reward_pearson",
        "entropy_reward_spearman",
        "reward_mean_high_token",
        "reward_mean_low_token",
        "frac_high_token",
        "grad_norm",
        "kl",
        "clip_frac_low",
        "clip_frac_high",
        "clip_frac_dual",
    }
    assert all(np.ndim(v) == 0 for v in out.values())
    np.testing.assert_allclose(out["grad_norm"], 2.0)


def test_entropy_reward_correlation_across_steps_by_hand():
    # Per-step means: entropy 1, 2, 3; reward 1, 3, 2. Prefix of 2: a perfect line (r = 1). Prefix of 3: centred
    # entropy (-1, 0, 1), reward (-1, 1, 0): sum xy = 1, sum xx = sum yy = 2, r = 1 / 2.
    ent, rew = [1.0, 2.0, 3.0], [1.0, 3.0, 2.0]
    np.testing.assert_allclose(diagnostics.running_pearson(ent, rew), [0.0, 1.0, 0.5], rtol=1e-12)
    np.testing.assert_allclose(diagnostics.running_pearson(ent, [-r for r in rew]), [0.0, -1.0, -0.5], rtol=1e-12)
    np.testing.assert_array_equal(diagnostics.running_pearson(ent, [0.5, 0.5, 0.5]), [0.0, 0.0, 0.0])
    # The trainer's accumulator logs the last value step by step; a resume rebuilds it from the logged rows.
    trend = diagnostics.AcrossSteps()
    logged = [trend.update(e, r)[diagnostics.ACROSS_STEPS_KEY] for e, r in zip(ent, rew)]
    np.testing.assert_allclose(logged, [0.0, 1.0, 0.5], rtol=1e-12)
    rows = [{"step": 1, "entropy_mean": 1.0, "reward_mean": 1.0}, {"step": 2, "entropy_mean": 2.0, "reward_mean": 3.0}]
    resumed = diagnostics.AcrossSteps(rows).update(3.0, 2.0)
    assert resumed == {diagnostics.ACROSS_STEPS_KEY: logged[-1]}
    with pytest.raises(ValueError, match="x has 3 points, y 2"):
        diagnostics.running_pearson(ent, rew[:2])


def test_host_inputs_stay_numpy_and_match_the_device_values():
    """The trainer's step statistics are host numpy: the diagnostics compute them with numpy (no jax array
    comes back), to the values jax.numpy gives on the same inputs."""
    rng = np.random.default_rng(0)
    r = rng.choice([0.0, 0.5, 1.0], (3, 4)).astype(np.float32)
    a = rng.normal(size=(3, 4)).astype(np.float32)
    ent, mask = rng.uniform(0, 3, (12, 1)), rng.uniform(size=(12, 1)) > 0.2
    tokens = rng.integers(0, 2, (3, 4)).astype(np.int32)
    loss = {"kl": 0.1, "clip_frac_low": 0.0, "clip_frac_high": 0.2, "clip_frac_dual": 0.0}
    host = diagnostics.step_diagnostics(r, a, ent, mask, loss, tokens)
    device = diagnostics.step_diagnostics(*map(jnp.asarray, (r, a, ent, mask)), loss, jnp.asarray(tokens))
    assert set(host) == set(device)
    assert all(isinstance(v, (np.ndarray, np.generic)) for v in host.values())
    for k in host:
        np.testing.assert_allclose(host[k], device[k], rtol=1e-6, atol=1e-7, err_msg=k)
    assert diagnostics.array_module(r, None) is np and diagnostics.array_module(r, jnp.asarray(a)) is jnp
