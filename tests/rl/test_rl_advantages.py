"""Advantage estimators: hand-computed values (chex variants), properties (hypothesis), registry."""

import functools

import chex
import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized
from hypothesis import given, settings
from hypothesis import strategies as st

from rcgrpo_jax.rl import advantages as adv_lib
from rcgrpo_jax.rl import losses

R = np.array([[1.0, 0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0, 1.0]], np.float32)
S_POP = np.sqrt(0.24)  # population std of [1,0,1,0,0]

# name -> expected advantages of R (first group hand-computed; the second, all-equal, gives 0)
EXPECTED = {
    "grpo": [[0.6 / S_POP, -0.4 / S_POP, 0.6 / S_POP, -0.4 / S_POP, -0.4 / S_POP], [0.0] * 5],
    "rc_grpo": [[0.6 / S_POP, -0.4 / S_POP, 0.6 / S_POP, -0.4 / S_POP, -0.4 / S_POP], [0.0] * 5],
    "dr_grpo": [[0.6, -0.4, 0.6, -0.4, -0.4], [0.0] * 5],
    # leave-one-out: 1 - 1/4 = 0.75 and 0 - 2/4 = -0.5
    "rloo": [[0.75, -0.5, 0.75, -0.5, -0.5], [0.0] * 5],
    # centred values over the batch have std sqrt((2*0.36 + 3*0.16) / 10) = sqrt(0.12)
    "reinforce_baseline": [[0.6 / np.sqrt(0.12), -0.4 / np.sqrt(0.12)] * 2 + [-0.4 / np.sqrt(0.12)], [0.0] * 5],
    "sign": [[1.0, -1.0, 1.0, -1.0, -1.0], [1.0] * 5],
}


class EstimatorValuesTest(parameterized.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.named_parameters(*[(n, n) for n in EXPECTED])
    def test_hand_values(self, name):
        fn = self.variant(adv_lib.get(name))
        a, metrics = fn(jnp.asarray(R))
        chex.assert_shape(a, R.shape)
        chex.assert_type(a, jnp.float32)
        np.testing.assert_allclose(a, np.asarray(EXPECTED[name], np.float32), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(metrics["frac_zero_std_groups"], 0.5)

    @chex.variants(with_jit=True, without_jit=True)
    def test_grpo_sample_std(self):
        fn = self.variant(functools.partial(adv_lib.get("grpo"), config={"std": "sample"}))
        a, _ = fn(jnp.asarray(R[:1]))
        s = np.sqrt(1.2 / 4)
        np.testing.assert_allclose(a, [[0.6 / s, -0.4 / s, 0.6 / s, -0.4 / s, -0.4 / s]], rtol=1e-5)

    @chex.variants(with_jit=True, without_jit=True)
    def test_group_mask_zeroes_groups(self):
        r = jnp.asarray(np.concatenate([R[:1], R[:1]]))
        fn = self.variant(adv_lib.get("grpo"))
        a, _ = fn(r, aux={"group_mask": jnp.array([True, False])})
        np.testing.assert_allclose(a[1], 0.0)
        np.testing.assert_allclose(a[0], EXPECTED["grpo"][0], rtol=1e-5)

    @chex.variants(with_jit=True, without_jit=True)
    def test_rc_grpo_logs_per_token_advantage(self):
        fn = self.variant(adv_lib.get("rc_grpo"))
        tokens = jnp.array([[1, 1, 0, 0, 0]])
        _, m = fn(jnp.asarray(R[:1]), aux={"reward_tokens": tokens})
        hi, lo = 0.6 / S_POP, -0.4 / S_POP
        np.testing.assert_allclose(m["adv_mean_high"], (hi + lo) / 2, rtol=1e-5)
        np.testing.assert_allclose(m["adv_mean_low"], (hi + 2 * lo) / 3, rtol=1e-5)


# ---------------------------------------------------------------- AWPO

R_AWPO = np.array([[1, 0, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], np.float32)
S_AWPO = np.array([[1, 0.5, 0, 0], [0, 1, 0, 1], [0, 1, 1, 1]], np.float32)


def _norm(x):
    return (x - x.mean()) / (x.std() + 1e-6)


class AwpoTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_hand_values(self):
        a, m = self.variant(adv_lib.get("awpo"))(jnp.asarray(R_AWPO), aux={"reasoning": jnp.asarray(S_AWPO)})
        chex.assert_shape(a, (3, 4))
        # group 0: m = r + s/2 = [1.5, .25, 0, 0]; sigma_out = .4330, sigma_mix = .6219, rho = .696 <= 1:
        # gate open; p = 1/4 -> d = .25 + .75 * (4 * .25 * .75) = .8125.
        w = 0.8125
        m0 = np.array([1.5, 0.25, 0, 0])
        np.testing.assert_allclose(a[0], (1 - w) * _norm(R_AWPO[0]) + w * _norm(m0), rtol=1e-5)
        # group 1 is saturated (mean outcome = max): no judge signal, and all-equal outcome -> 0.
        np.testing.assert_allclose(a[1], 0.0)
        # group 2: the judge disagrees, m = [1, .5, .5, .5] has sigma_mix = sigma_out / 2 -> rho = 2 > 1:
        # gate closed, plain GRPO.
        np.testing.assert_allclose(a[2], _norm(R_AWPO[2]), rtol=1e-5)
        extras = adv_lib.per_rollout("awpo", jnp.asarray(R_AWPO), aux={"reasoning": jnp.asarray(S_AWPO)}, config=None)
        np.testing.assert_allclose(extras["clip_scale"][:, 0], [1 - 0.5 * w, 1.0, 1.0], rtol=1e-6)
        chex.assert_shape(extras["clip_scale"], (3, 4))
        np.testing.assert_allclose(m["gate_open_frac"], 1 / 3, rtol=1e-6)

    def test_terms(self):
        cfg = adv_lib.awpo_config()
        r = jnp.asarray(R_AWPO)
        mixed = adv_lib.awpo_mixed_reward(r, jnp.asarray(S_AWPO), cfg)
        np.testing.assert_allclose(adv_lib.awpo_gate(r, mixed, cfg)[:, 0], [1, 0, 0])
        cfg.gate = "ratio_above"
        np.testing.assert_allclose(adv_lib.awpo_gate(r, mixed, cfg)[:, 0], [0, 0, 1])
        cfg.gate = "always"  # still never past saturation
        np.testing.assert_allclose(adv_lib.awpo_gate(r, mixed, cfg)[:, 0], [1, 0, 1])
        p = jnp.array([[0.0], [0.5], [1.0]]) * jnp.ones((1, 4))
        np.testing.assert_allclose(adv_lib.awpo_difficulty(p, cfg)[:, 0], [0.25, 1.0, 0.25], rtol=1e-6)
        cfg.difficulty = "none"
        np.testing.assert_allclose(adv_lib.awpo_difficulty(p, cfg)[:, 0], [1, 1, 1])
        cfg.mix = "convex"
        np.testing.assert_allclose(adv_lib.awpo_mixed_reward(r, jnp.asarray(S_AWPO), cfg)[0], [1, 0.25, 0, 0])
        np.testing.assert_allclose(adv_lib.awpo_clip_scale(jnp.array([0.0, 0.5, 1.0, 2.0]), cfg), [1.0, 0.75, 0.5, 0.5])

    def test_gate_never_is_grpo(self):
        r, s = jnp.asarray(R_AWPO), jnp.asarray(S_AWPO)
        a, _ = adv_lib.get("awpo")(r, aux={"reasoning": s}, config={"gate": "never"})
        np.testing.assert_allclose(a, adv_lib.get("grpo")(r)[0], rtol=1e-6)
        extras = adv_lib.per_rollout("awpo", r, aux={"reasoning": s}, config={"gate": "never"})
        np.testing.assert_allclose(extras["clip_scale"], 1.0)

    def test_needs_reasoning_and_valid_choices(self):
        with pytest.raises(ValueError, match="reasoning"):
            adv_lib.get("awpo")(jnp.asarray(R_AWPO))
        with pytest.raises(ValueError, match="gate"):
            adv_lib.get("awpo")(
                jnp.asarray(R_AWPO), aux={"reasoning": jnp.asarray(S_AWPO)}, config={"gate": "sometimes"}
            )


# ---------------------------------------------------------------- registry


def test_registry_errors_and_defaults():
    with pytest.raises(KeyError, match=r"unknown advantage estimator 'gpro'; known: awpo, .*rloo"):
        adv_lib.get("gpro")
    with pytest.raises(ValueError, match="already registered"):
        adv_lib.register("grpo")(lambda r, **kw: (r, {}))
    with pytest.raises(KeyError, match="epsilon"):
        adv_lib.get("grpo")(jnp.asarray(R), config={"epsilon": 1.0})
    with pytest.raises(ValueError, match="std"):
        adv_lib.get("grpo")(jnp.asarray(R), config={"std": "unbiased"})
    assert adv_lib.default_config("grpo").std == "population"
    assert set(EXPECTED) | {"awpo"} <= set(adv_lib.names())


# ---------------------------------------------------------------- properties

QUARTERS = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0, 1.5, -0.5])
shapes = st.tuples(st.integers(1, 4), st.integers(2, 6))
CENTRED = ("grpo", "rc_grpo", "dr_grpo", "rloo")


@functools.partial(jax.jit, static_argnums=1)
def _centred_advantages_and_grads(rewards, num_tokens, seed):
    """For each centred estimator: its advantages and d loss / d logp at random log-probs."""
    b = rewards.size
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    logp = -jax.random.uniform(k1, (b, num_tokens))
    old = -jax.random.uniform(k2, (b, num_tokens))
    mask = jnp.ones((b, num_tokens))
    out = {}
    for name in CENTRED:
        a, _ = adv_lib.get(name)(rewards)
        tok = a.reshape(-1)  # [B]: the loss broadcasts a rollout's advantage to its tokens
        loss = lambda lp: losses.finalize(*losses.get("ppo_clip")(lp, old, None, tok, mask)[:2])
        out[name] = (a, jax.grad(loss)(logp))
    return out


@settings(max_examples=25, deadline=None)
@given(shape=st.sampled_from([(1, 2), (3, 5), (2, 8)]), value=st.floats(-10, 10, width=32), seed=st.integers(0, 2**16))
def test_all_equal_rewards_zero_advantage_and_gradient(shape, value, seed):
    """RC-GRPO Proposition 4.2: a group with equal rewards gives zero advantages and an exactly zero
    policy gradient, whatever the log-probs."""
    out = _centred_advantages_and_grads(jnp.full(shape, value, jnp.float32), 3, seed)
    for name, (a, grad) in out.items():
        assert np.all(np.asarray(a) == 0.0), name
        assert np.all(np.asarray(grad) == 0.0), name


@settings(max_examples=25, deadline=None)
@given(
    r=shapes.flatmap(lambda s: hnp.arrays(np.float32, s, elements=QUARTERS)),
    shift=st.sampled_from([-3.0, 0.5, 7.25]),
    scale=st.sampled_from([0.5, 2.0, 10.0]),
)
def test_grpo_zero_sum_and_invariances(r, shift, scale):
    grpo = adv_lib.get("grpo")
    a = np.asarray(grpo(jnp.asarray(r))[0])
    np.testing.assert_allclose(a.sum(axis=1), 0.0, atol=1e-4)
    np.testing.assert_allclose(grpo(jnp.asarray(r + shift))[0], a, atol=1e-4)
    np.testing.assert_allclose(grpo(jnp.asarray(r * scale))[0], a, atol=1e-4)


@settings(max_examples=25, deadline=None)
@given(r=shapes.flatmap(lambda s: hnp.arrays(np.float32, s, elements=st.floats(-5, 5, width=32))))
def test_rloo_matches_leave_one_out_loop(r):
    a = np.asarray(adv_lib.get("rloo")(jnp.asarray(r))[0])
    n, g = r.shape
    expected = np.array([[r[i, j] - np.mean(np.delete(r[i], j)) for j in range(g)] for i in range(n)])
    np.testing.assert_allclose(a, expected, atol=1e-4)
