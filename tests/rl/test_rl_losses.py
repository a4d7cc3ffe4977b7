"""Policy losses, KL estimators and aggregation: hand values, gradients, micro-batch exactness."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from rcgrpo_jax.rl import losses

LN = np.log
# Two sequences of 3 tokens; the last token of row 1 is padding.
LOG_RATIO = np.array([[0.0, LN(1.5), LN(0.5)], [0.0, 0.0, 0.0]], np.float32)
OLD = np.array([[-1.0, -2.0, -0.5], [-0.3, -1.2, -2.2]], np.float32)
ADV = np.array([1.0, -1.0], np.float32)
MASK = np.array([[1, 1, 1], [1, 1, 0]], np.float32)
# Per-token losses by hand (eps 0.2): row 0 (A=+1) ratios 1, 1.5 -> clip 1.2, 0.5 -> unclipped 0.5;
# row 1 (A=-1) ratios 1: loss +1.
TOKEN_LOSS = np.array([[-1.0, -1.2, -0.5], [1.0, 1.0, 0.0]])

AGG_EXPECTED = {  # mode -> (sum, denominator)
    "token-mean": (-0.7, 5.0),
    "seq-mean-token-mean": (-0.9 + 1.0, 2.0),
    "seq-mean-token-sum": (-0.7, 2.0),
    "seq-mean-token-sum-norm": (-0.7, 2.0 * 4.0),
}


def _loss(name, **config):
    return functools.partial(losses.get(name), config=config)


class PPOClipTest(parameterized.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.named_parameters(*[(m.replace("-", "_"), m) for m in AGG_EXPECTED])
    def test_hand_values_per_mode(self, mode):
        fn = self.variant(_loss("ppo_clip", agg_mode=mode, norm_const=4.0))
        loss_sum, denom, m = fn(
            jnp.asarray(OLD + LOG_RATIO), jnp.asarray(OLD), None, jnp.asarray(ADV), jnp.asarray(MASK)
        )
        chex.assert_rank([loss_sum, denom], 0)
        chex.assert_type([loss_sum, denom], jnp.float32)
        np.testing.assert_allclose([loss_sum, denom], AGG_EXPECTED[mode], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(m["clip_frac_high"], 1 / 5, rtol=1e-6)
        np.testing.assert_allclose(m["clip_frac_low"], 0.0)
        np.testing.assert_allclose(m["pg_loss"], -0.7 / 5, rtol=1e-5)

    @chex.variants(with_jit=True, without_jit=True)
    def test_on_policy_gradient_is_minus_a_over_denominator(self):
        adv = jax.random.normal(jax.random.PRNGKey(0), (2, 3))
        fn = self.variant(
            jax.grad(
                lambda lp: losses.finalize(
                    *losses.get("ppo_clip")(lp, jnp.asarray(OLD), None, adv, jnp.asarray(MASK))[:2]
                )
            )
        )
        grad = fn(jnp.asarray(OLD))
        np.testing.assert_allclose(grad, -np.asarray(adv) * MASK / MASK.sum(), rtol=1e-6, atol=1e-7)

    @chex.variants(with_jit=True, without_jit=True)
    def test_clipped_tokens_get_zero_gradient(self):
        # columns: A>0 ratio 1.5 (clipped), A<0 ratio 0.5 (clipped), A<0 ratio 1.5, A>0 ratio 0.5
        lr = jnp.log(jnp.array([[1.5, 0.5, 1.5, 0.5]]))
        adv = jnp.array([[1.0, -1.0, -2.0, 3.0]])
        old = jnp.zeros((1, 4))
        mask = jnp.ones((1, 4))
        loss = lambda lp: losses.finalize(*losses.get("ppo_clip")(lp, old, None, adv, mask)[:2])
        grad = self.variant(jax.grad(loss))(old + lr)
        np.testing.assert_allclose(grad, [[0.0, 0.0, 2.0 * 1.5 / 4, -3.0 * 0.5 / 4]], rtol=1e-5)
        _, _, m = losses.get("ppo_clip")(old + lr, old, None, adv, mask)
        np.testing.assert_allclose([m["clip_frac_high"], m["clip_frac_low"]], [0.25, 0.25])

    @chex.variants(with_jit=True, without_jit=True)
    def test_dual_clip_and_clip_higher(self):
        lr = jnp.log(jnp.array([[5.0, 1.25]]))
        adv = jnp.array([[-1.0, 1.0]])
        zeros, ones = jnp.zeros((1, 2)), jnp.ones((1, 2))
        plain = self.variant(_loss("ppo_clip", agg_mode="seq-mean-token-sum"))
        dual = self.variant(_loss("ppo_clip", agg_mode="seq-mean-token-sum", dual_clip=3.0, eps_high=0.28))
        # plain: 5 (ratio 5, A=-1, unclipped side) + (-1.2); dual: min(5, 3) + (-1.25, inside 1.28)
        np.testing.assert_allclose(plain(lr, zeros, None, adv, ones)[0], 5.0 - 1.2, rtol=1e-5)
        s, _, m = dual(lr, zeros, None, adv, ones)
        np.testing.assert_allclose(s, 3.0 - 1.25, rtol=1e-5)
        np.testing.assert_allclose(m["clip_frac_dual"], 0.5)

    @chex.variants(with_jit=True, without_jit=True)
    def test_per_sequence_clip_scale(self):
        lr = jnp.log(jnp.full((2, 1), 1.15))
        adv, zeros, ones = jnp.ones((2,)), jnp.zeros((2, 1)), jnp.ones((2, 1))
        fn = self.variant(
            lambda lp, scale: losses.get("ppo_clip")(lp, zeros, None, adv, ones, per_rollout={"clip_scale": scale})
        )
        s, d, _ = fn(lr, jnp.array([1.0, 0.5]))
        np.testing.assert_allclose(s, -(1.15 + 1.1), rtol=1e-5)  # row 1's radius is 0.1
        grad = jax.grad(lambda lp: fn(lp, jnp.array([1.0, 0.5]))[0])(lr)
        np.testing.assert_allclose(grad, [[-1.15], [0.0]], rtol=1e-5)

    @chex.variants(with_jit=True, without_jit=True)
    def test_per_rollout_inputs_a_loss_does_not_read_change_nothing(self):
        """None, {}, a scale of ones and names the loss does not know give the same loss, bit for bit."""
        lr = jnp.log(jnp.array([[1.15, 0.7], [1.3, 1.0]]))
        adv, zeros, ones = jnp.array([1.0, -2.0]), jnp.zeros((2, 2)), jnp.ones((2, 2))
        fn = self.variant(lambda lp, pr: losses.get("ppo_clip")(lp, zeros, None, adv, ones, per_rollout=pr)[:2])
        base = fn(lr, None)
        for pr in ({}, {"clip_scale": jnp.ones((2,))}, {"other": jnp.full((2, 3), 7.0)}):
            np.testing.assert_array_equal(fn(lr, pr), base)

    @chex.variants(with_jit=True, without_jit=True)
    def test_kl_term(self):
        logp = jnp.array([[-1.0, -1.0]])
        ref = jnp.array([[-2.0, 20.0]])
        fn = self.variant(_loss("ppo_clip", kl_beta=0.1, kl_estimator="k3"))
        s, d, m = fn(logp, logp, ref, jnp.zeros((1,)), jnp.ones((1, 2)))
        k3 = np.exp(-1.0) + 1.0 - 1.0  # d = ref - logp = -1: e^d - d - 1
        np.testing.assert_allclose(m["kl"], (k3 + 10.0) / 2, rtol=1e-5)  # second token clamped at 10
        np.testing.assert_allclose(s / d, 0.1 * (k3 + 10.0) / 2, rtol=1e-5)

    def test_kl_beta_needs_reference_and_bad_mode(self):
        args = (jnp.zeros((1, 2)), jnp.zeros((1, 2)), None, jnp.ones((1,)), jnp.ones((1, 2)))
        with pytest.raises(ValueError, match="ref_logp"):
            losses.get("ppo_clip")(*args, config={"kl_beta": 0.1})
        with pytest.raises(ValueError, match="token-mean"):
            losses.get("ppo_clip")(*args, config={"agg_mode": "sum"})
        with pytest.raises(KeyError, match="known: gspo, ppo_clip"):
            losses.get("ppo")


class KLAndGSPOTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_kl_estimators(self):
        logp, ref = jnp.array([-1.0, -0.5]), jnp.array([-2.0, -0.5])
        for name, expected in (("k1", [1.0, 0.0]), ("k2", [0.5, 0.0]), ("k3", [np.exp(-1.0), 0.0])):
            out = self.variant(losses.kl_estimators.get(name))(logp, ref)
            np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-7)

    @chex.variants(with_jit=True, without_jit=True)
    def test_gspo_sequence_ratio(self):
        lr = jnp.array([[jnp.log(2.0), 0.0, 5.0]])  # third token is padding: excluded from the mean
        mask = jnp.array([[1.0, 1.0, 0.0]])
        fn = self.variant(_loss("gspo", eps_low=0.5, eps_high=0.5))
        s, d, m = fn(lr, jnp.zeros((1, 3)), None, jnp.array([2.0]), mask)
        np.testing.assert_allclose(m["ratio_mean"], np.sqrt(2.0), rtol=1e-6)
        np.testing.assert_allclose([s, d], [-2.0 * np.sqrt(2.0), 1.0], rtol=1e-6)
        # default GSPO radius (4e-4 high) clips it: -(1 + 4e-4) * 2
        s, _, _ = losses.get("gspo")(lr, jnp.zeros((1, 3)), None, jnp.array([2.0]), mask)
        np.testing.assert_allclose(s, -2.0 * (1 + 4e-4), rtol=1e-6)


@pytest.mark.parametrize("mode", list(AGG_EXPECTED))
def test_micro_batch_sums_are_exact(mode):
    k = jax.random.split(jax.random.PRNGKey(1), 4)
    b, t = 5, 6
    logp = -jax.random.uniform(k[0], (b, t))
    old = logp + 0.3 * jax.random.normal(k[1], (b, t))
    adv = jax.random.normal(k[2], (b,))
    lengths = jnp.array([6, 1, 3, 0, 4])  # one empty row: not a sequence
    mask = (jnp.arange(t)[None] < lengths[:, None]).astype(jnp.float32)
    fn = _loss("ppo_clip", agg_mode=mode, norm_const=6.0)
    full = losses.finalize(*fn(logp, old, None, adv, mask)[:2])
    parts = [fn(logp[i:j], old[i:j], None, adv[i:j], mask[i:j])[:2] for i, j in ((0, 2), (2, 3), (3, 5))]
    summed = losses.finalize(sum(p[0] for p in parts), sum(p[1] for p in parts))
    np.testing.assert_allclose(summed, full, rtol=1e-6)
    # and the full value is the mode's definition, computed directly
    ratio = np.exp(np.asarray(logp - old))
    a = np.asarray(adv)[:, None]
    tok = -np.minimum(ratio * a, np.clip(ratio, 0.8, 1.2) * a)
    m = np.asarray(mask)
    rows = [r for r in range(b) if m[r].sum() > 0]
    direct = {
        "token-mean": (tok * m).sum() / m.sum(),
        "seq-mean-token-mean": np.mean([(tok[r] * m[r]).sum() / m[r].sum() for r in rows]),
        "seq-mean-token-sum": (tok * m).sum() / len(rows),
        "seq-mean-token-sum-norm": (tok * m).sum() / (len(rows) * 6.0),
    }[mode]
    np.testing.assert_allclose(full, direct, rtol=1e-5)


# ---------------------------------------------------------------- what each KL estimator's gradient estimates


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kl_estimator_gradients_exactly(seed):
    """On a categorical policy, E_{a~pi}[grad k(a)] (samples fixed, the expectation taken exactly) is 0 for k1,
    grad KL(pi || pi_ref) for k2 and grad KL(pi_ref || pi) for k3 (see the note above the estimators)."""
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    theta, theta_ref = jax.random.normal(k1, (6,)), jax.random.normal(k2, (6,))
    log_ref = jax.nn.log_softmax(theta_ref)

    def expected_grad(name):
        def surrogate(t):
            logp = jax.nn.log_softmax(t)
            weights = jax.lax.stop_gradient(jnp.exp(logp))  # the sampling distribution is not differentiated
            return jnp.sum(weights * losses.kl_estimators.get(name)(logp, log_ref))

        return jax.grad(surrogate)(theta)

    reverse = jax.grad(lambda t: jnp.sum(jnp.exp(jax.nn.log_softmax(t)) * (jax.nn.log_softmax(t) - log_ref)))(theta)
    forward = jax.grad(lambda t: jnp.sum(jnp.exp(log_ref) * (log_ref - jax.nn.log_softmax(t))))(theta)
    scale = float(jnp.max(jnp.abs(reverse)) + jnp.max(jnp.abs(forward)))
    np.testing.assert_allclose(expected_grad("k1"), 0.0, atol=1e-6 * scale)
    np.testing.assert_allclose(expected_grad("k2"), reverse, atol=1e-5 * scale)
    np.testing.assert_allclose(expected_grad("k3"), forward, atol=1e-5 * scale)
    assert float(jnp.max(jnp.abs(reverse - forward))) > 1e-3 * scale  # the two targets really differ here


def test_clipped_loss_options_fail_at_start_up():
    from rcgrpo_jax.registry import OptionError

    assert losses.check("ppo_clip", {"kl_beta": 0.0, "kl_estimator": "k1"}).kl_estimator == "k1"  # logging only
    bad = [
        ({"kl_beta": 0.1, "kl_estimator": "k1"}, "kl_estimator: k1's expected gradient is zero"),
        ({"agg_mode": "token_mean"}, "agg_mode: 'token_mean' is not one of"),
        ({"kl_estimator": "k4"}, "kl_estimator: 'k4' is not one of (.*, )?k1, k2, k3"),  # (+ entries of test modules)
        ({"ratio_level": "seq"}, "ratio_level"),
        ({"dual_clip": 0.5}, "dual_clip"),
    ]
    for options, message in bad:
        with pytest.raises(OptionError, match=message):
            losses.check("ppo_clip", options)
    with pytest.raises(KeyError, match="sequence_ratio"):
        losses.check("gspo", {"sequence_ratio": True})


class TrajectoryRatioTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_trajectory_ratio_against_the_reference(self):
        """ratio = pi(tau) / pi_ref(tau) = exp(sum_t (logp - ref_logp)) over the loss tokens, one per sequence."""
        logp = jnp.array([[-1.0, -2.0, -9.0], [-1.0, -1.0, -1.0]])
        ref = jnp.array([[-1.2, -2.1, 0.0], [-1.0, -1.0, -1.0]])
        mask = jnp.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
        fn = self.variant(_loss("ppo_clip", ratio_level="trajectory", ratio_baseline="ref", eps_low=0.5, eps_high=0.5))
        s, d, m = fn(logp, jnp.zeros_like(logp), ref, jnp.array([1.0, -1.0]), mask)
        ratio0 = np.exp(0.2 + 0.1)  # row 0: only its two masked tokens count
        # per token -min(rA, clip(r)A): row 0 (A = 1, r = 1.35 < 1.5) -> -1.35 on 2 tokens; row 1 r = 1 -> +1 on 3.
        np.testing.assert_allclose(m["ratio_mean"], (2 * ratio0 + 3) / 5, rtol=1e-6)
        np.testing.assert_allclose([s, d], [-2 * ratio0 + 3.0, 5.0], rtol=1e-6)
        with pytest.raises(ValueError, match="ref_logp"):
            _loss("ppo_clip", ratio_baseline="ref")(logp, logp, None, jnp.array([1.0, -1.0]), mask)
