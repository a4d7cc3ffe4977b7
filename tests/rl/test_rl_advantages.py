"""Advantage estimators: hand-computed values (chex variants), properties (hypothesis), registry."""

import functools

import chex
import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from absl.testing import parameterized
from hypothesis import given, settings
from hypothesis import strategies as st

from rcgrpo_jax.registry import OptionError
from rcgrpo_jax.rl import advantages as adv_lib
from rcgrpo_jax.rl import losses

R = np.array([[1.0, 0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0, 1.0]], np.float32)
S_POP = np.sqrt(0.24)  # population std of [1,0,1,0,0]
REWARD_LEVELS = st.sampled_from([0.0, 0.25, 0.5, 1.0])

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

    @chex.variants(with_jit=True, without_jit=True)
    def test_rc_grpo_anchor_hand_values(self):
        fn = self.variant(adv_lib.get("rc_grpo_anchor"))
        # group 0: R[0] with tokens [1,1,0,0,0]: the high rollouts keep rc_grpo's advantages, the low get 0;
        # group 1: the high rollouts all succeed, the low all fail: mean 0.4, std sqrt(0.24), A = 0.6 / S_POP
        r = jnp.asarray([R[0].tolist(), [1.0, 1.0, 0.0, 0.0, 0.0]])
        tokens = jnp.array([[1, 1, 0, 0, 0], [1, 1, 0, 0, 0]])
        a, m = fn(r, aux={"reward_tokens": tokens})
        hi, lo = 0.6 / S_POP, -0.4 / S_POP
        np.testing.assert_allclose(a, [[hi, lo, 0, 0, 0], [hi, hi, 0, 0, 0]], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(m["adv_mean_high"], (3 * hi + lo) / 4, rtol=1e-5)
        np.testing.assert_allclose(m["adv_mean_low"], 0.0)
        np.testing.assert_allclose(m["frac_zero_std_groups"], 0.0)
        np.testing.assert_allclose(m["frac_zero_std_high_groups"], 0.5)  # group 1's high rollouts agree

    def test_rc_grpo_anchor_needs_the_tokens(self):
        assert adv_lib.spec("rc_grpo_anchor").needs == ("reward_tokens",)
        with pytest.raises(ValueError, match="reward_tokens"):
            adv_lib.get("rc_grpo_anchor")(jnp.asarray(R))


@settings(max_examples=25, deadline=None)
@given(
    r=st.just((3, 4)).flatmap(lambda s: hnp.arrays(np.float32, s, elements=REWARD_LEVELS)),
    t=hnp.arrays(np.int32, (3, 4), elements=st.integers(0, 1)),
)
def test_rc_grpo_anchor_is_rc_grpo_on_high_rollouts_only(r, t):
    full = np.asarray(adv_lib.get("rc_grpo")(jnp.asarray(r), aux={"reward_tokens": t})[0])
    a = np.asarray(adv_lib.get("rc_grpo_anchor")(jnp.asarray(r), aux={"reward_tokens": t})[0])
    np.testing.assert_allclose(a, np.where(t == 1, full, 0.0), atol=1e-6)


# ---------------------------------------------------------------- AWPO

# One group per gate case (G = 4), default config: m = r + s, rho_g = sigma_mix / sigma_out (the paper's
# form), gate open iff sigma_out > 0, rho_g <= eps_mix = 2 and the group is not saturated.
R_AWPO = np.array([[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0], [0.5, 0, 0, 0], [1, 0, 0, 0]], np.float32)
S_AWPO = np.array([[1, 0.5, 0, 0], [0, 1, 0, 1], [0, 1, 1, 1], [1, 1, 0, 0], [0, 1, 1, 1]], np.float32)
# group 0, open:      m = [2, .5, 0, 0]; sigma_out^2 = 3/16, sigma_mix^2 = 43/64 -> rho_g^2 = 43/12, rho_g = 1.893 <= 2
# group 1, saturated: mean r = 1 = max_reward -> closed (and A_out = 0); sigma_out = 0 -> rho_g = inf
# group 2, sigma_out = 0 (all failed): rho_g = inf, closed, whatever the judge says
# group 3, inflated:  m = [1.5, 1, 0, 0]; sigma_out^2 = 3/64, sigma_mix^2 = 27/64 -> rho_g = 3 > 2: closed
# group 4, cancelled: m = [1, 1, 1, 1], sigma_mix = 0 < sigma_out -> rho_g = 0 <= 2: open, A_mix = 0
D_AWPO = [0.8125, 0.25, 0.25, 0.578125, 0.8125]  # .25 + .75 * 4p(1 - p), p = .25, 1, 0, .125, .25
M0 = np.array([2.0, 0.5, 0.0, 0.0])
U0 = 31 / 43  # variance share of group 0: 1 - 1 / rho_g^2
C0 = 1 - 0.5 * U0  # clip scale of group 0: 1 - kappa u


def _norm(x):
    x = np.asarray(x, np.float64)
    return (x - x.mean()) / (x.std() + 1e-6)


def _awpo(config=None):
    return functools.partial(adv_lib.get("awpo"), config=config)


def _clip(config=None, r=None, s=None):
    """AWPO's per-rollout clip scale [N, G] (the loss input it declares), on R_AWPO / S_AWPO by default."""
    r = jnp.asarray(R_AWPO if r is None else r)
    s = jnp.asarray(S_AWPO if s is None else s)
    return adv_lib.per_rollout("awpo", r, aux={"reasoning": s}, config=config)["clip_scale"]


class AwpoTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_hand_values_default_gate_cases(self):
        a, m = self.variant(_awpo())(jnp.asarray(R_AWPO), aux={"reasoning": jnp.asarray(S_AWPO)})
        chex.assert_shape(a, (5, 4))
        expected = np.stack(
            [
                D_AWPO[0] * _norm(M0),  # open: the whole update is d * A_mix
                np.zeros(4),  # saturated
                np.zeros(4),  # no outcome spread: the judge alone moves nothing
                D_AWPO[3] * _norm(R_AWPO[3]),  # inflated: closed, d * A_out
                np.zeros(4),  # cancelled: open, and A_mix = 0
            ]
        )
        np.testing.assert_allclose(a, expected, rtol=1e-5, atol=1e-6)
        chex.assert_shape(_clip(), (5, 4))
        np.testing.assert_allclose(_clip()[:, 0], [C0, 1, 1, 1, 1], rtol=1e-5)
        np.testing.assert_allclose(m["gate_open_frac"], 2 / 5, rtol=1e-6)
        np.testing.assert_allclose(m["difficulty_mean"], np.mean(D_AWPO), rtol=1e-6)
        np.testing.assert_allclose(m["clip_scale_mean"], (C0 + 4) / 5, rtol=1e-5)
        np.testing.assert_allclose(m["reliance_mean"], U0 / 5, rtol=1e-5)
        # over the groups with outcome spread (0, 3, 4): rho_g = sqrt(43/12), 3, 0
        np.testing.assert_allclose(m["rho_g_mean"], (np.sqrt(43 / 12) + 3 + 0) / 3, rtol=1e-5)
        np.testing.assert_allclose(m["saturated_frac"], 1 / 5, rtol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_lower_bound_closes_a_cancelling_judge(self):
        fn = self.variant(_awpo({"eps_mix_min": 0.5}))  # group 4: rho_g = 0 < .5; group 0: 1.893 >= .5
        a, m = fn(jnp.asarray(R_AWPO), aux={"reasoning": jnp.asarray(S_AWPO)})
        np.testing.assert_allclose(a[4], D_AWPO[4] * _norm(R_AWPO[4]), rtol=1e-5)
        np.testing.assert_allclose(a[0], D_AWPO[0] * _norm(M0), rtol=1e-5)
        np.testing.assert_allclose(m["gate_open_frac"], 1 / 5, rtol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_judge_target_and_gate_reliance(self):
        fn = self.variant(_awpo({"difficulty_target": "judge", "reliance": "gate"}))
        a, m = fn(jnp.asarray(R_AWPO), aux={"reasoning": jnp.asarray(S_AWPO)})
        w = D_AWPO[0]
        np.testing.assert_allclose(a[0], (1 - w) * _norm(R_AWPO[0]) + w * _norm(M0), rtol=1e-5)
        np.testing.assert_allclose(a[3], _norm(R_AWPO[3]), rtol=1e-5)  # closed: plain GRPO, d not applied
        np.testing.assert_allclose(a[4], (1 - w) * _norm(R_AWPO[4]), rtol=1e-5, atol=1e-6)
        clip = _clip({"difficulty_target": "judge", "reliance": "gate"})
        np.testing.assert_allclose(clip[:, 0], [0.5, 1, 1, 1, 0.5], rtol=1e-6)  # u = g

    @chex.variants(with_jit=True, without_jit=True)
    def test_former_reading_as_switches(self):
        """The first reading (open when the outcome's spread is small next to the mixed one, lam = 1/2, d
        on the judge's share, u = g d) on its original hand-computed groups; its old sigma_out / (sigma_mix
        + eps) <= 1 is rho_g >= 1 in the paper's form."""
        old = {
            "gate": "outcome_insignificant",
            "eps_mix": 1.0,
            "mix_weight": 0.5,
            "difficulty_target": "judge",
            "reliance": "weight",
        }
        r = np.array([[1, 0, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], np.float32)
        s = np.array([[1, 0.5, 0, 0], [0, 1, 0, 1], [0, 1, 1, 1]], np.float32)
        a, m = self.variant(_awpo(old))(jnp.asarray(r), aux={"reasoning": jnp.asarray(s)})
        # group 0: m = r + s/2 = [1.5, .25, 0, 0], rho_g = 1 / .696 = 1.437 >= 1: open, w = d = .8125
        w = 0.8125
        np.testing.assert_allclose(a[0], (1 - w) * _norm(r[0]) + w * _norm([1.5, 0.25, 0, 0]), rtol=1e-5)
        np.testing.assert_allclose(a[1], 0.0)
        # group 2: m = [1, .5, .5, .5], sigma_mix = sigma_out / 2 -> rho_g = 1/2 < 1: closed, plain GRPO
        np.testing.assert_allclose(a[2], _norm(r[2]), rtol=1e-5)
        extras = adv_lib.per_rollout("awpo", jnp.asarray(r), aux={"reasoning": jnp.asarray(s)}, config=old)
        np.testing.assert_allclose(extras["clip_scale"][:, 0], [1 - 0.5 * w, 1.0, 1.0], rtol=1e-6)
        chex.assert_shape(extras["clip_scale"], (3, 4))

    def test_terms(self):
        cfg = adv_lib.awpo_config()
        assert cfg.mix_weight == 1.0 and cfg.gate == "dispersion" and cfg.difficulty_target == "update"
        r, s = jnp.asarray(R_AWPO), jnp.asarray(S_AWPO)
        mixed = adv_lib.awpo_mixed_reward(r, s, cfg)
        np.testing.assert_allclose(mixed, R_AWPO + S_AWPO)
        gate = lambda **kw: np.asarray(adv_lib.awpo_gate(r, mixed, ml_collections.ConfigDict({**cfg, **kw})))[:, 0]
        np.testing.assert_array_equal(gate(), [1, 0, 0, 0, 1])
        np.testing.assert_array_equal(gate(eps_mix=3.5), [1, 0, 0, 1, 1])  # group 3: rho_g = 3 <= 3.5
        np.testing.assert_array_equal(gate(eps_mix=1.85), [0, 0, 0, 0, 1])  # group 0: 1.893 > 1.85
        # the introduction's other reading: opens on sigma_out = 0 (group 2) and on the inflating judge (group 3)
        np.testing.assert_array_equal(gate(gate="outcome_insignificant"), [0, 0, 1, 1, 0])
        np.testing.assert_array_equal(gate(gate="always"), [1, 0, 1, 1, 1])  # still never past saturation
        np.testing.assert_array_equal(gate(gate="always", saturation_gate=False), [1, 1, 1, 1, 1])
        np.testing.assert_array_equal(gate(gate="never"), [0, 0, 0, 0, 0])
        rho = np.asarray(adv_lib.awpo_dispersion_ratio(r, mixed))[:, 0]
        np.testing.assert_allclose(rho[[0, 3, 4]], [np.sqrt(43 / 12), 3, 0], rtol=1e-5)
        assert rho[1] == rho[2] == np.inf  # no outcome spread
        # a judge equal to the outcome doubles the spread: rho_g = 2 exactly, on the (closed) boundary
        one = jnp.asarray([[1.0, 0.0, 0.0, 0.0]])
        m1 = adv_lib.awpo_mixed_reward(one, one, cfg)
        assert float(adv_lib.awpo_dispersion_ratio(one, m1)[0, 0]) == 2.0
        assert float(adv_lib.awpo_gate(one, m1, cfg)[0, 0]) == 1.0
        cfg.eps_mix = 1.99
        assert float(adv_lib.awpo_gate(one, m1, cfg)[0, 0]) == 0.0
        p = jnp.array([[0.0], [0.5], [1.0]]) * jnp.ones((1, 4))
        np.testing.assert_allclose(adv_lib.awpo_difficulty(p, cfg)[:, 0], [0.25, 1.0, 0.25], rtol=1e-6)
        cfg.difficulty = "gaussian"
        np.testing.assert_allclose(
            adv_lib.awpo_difficulty(p, cfg)[:, 0],
            [0.25 + 0.75 * np.exp(-2.0), 1.0, 0.25 + 0.75 * np.exp(-2.0)],
            rtol=1e-6,
        )
        cfg.difficulty = "none"
        np.testing.assert_allclose(adv_lib.awpo_difficulty(p, cfg)[:, 0], [1, 1, 1])
        g, d = jnp.array([[1.0], [1.0], [0.0]]), jnp.array([[0.5], [1.0], [1.0]])
        rh = jnp.array([[2.0], [0.0], [5.0]])  # rho_g: the judge holds 3/4 of the variance; cancels; (closed)
        np.testing.assert_allclose(adv_lib.awpo_reliance(g, rh, d, cfg)[:, 0], [0.75, 0.0, 0.0])
        np.testing.assert_allclose(adv_lib.awpo_reliance(g, jnp.array([[jnp.inf]] * 3), d, cfg)[:, 0], [1, 1, 0])
        cfg.reliance = "weight"
        np.testing.assert_allclose(adv_lib.awpo_reliance(g, rh, d, cfg)[:, 0], [0.5, 1.0, 0.0])
        cfg.mix, cfg.mix_weight = "convex", 0.5
        np.testing.assert_allclose(adv_lib.awpo_mixed_reward(r, s, cfg)[0], [1, 0.25, 0, 0])
        np.testing.assert_allclose(adv_lib.awpo_clip_scale(jnp.array([0.0, 0.5, 1.0, 2.0]), cfg), [1.0, 0.75, 0.5, 0.5])

    def test_gate_in_the_papers_notation(self):
        """eps_mix is the paper's bound (rho_g <= eps_mix, rho_g = sigma_mix / sigma_out), so a value taken
        from the paper means the same here (docs/awpo.md converts the notation before it). By hand: r = [1, 0, 0, 0], s = [1, .5, 0, 0], m = [2, .5, 0, 0]; sigma_out^2 = (.75^2 +
        3 * .25^2) / 4 = 3/16, sigma_mix^2 = (1.375^2 + .125^2 + 2 * .625^2) / 4 = 43/64, so rho_g^2 = 43/12
        and rho_g = 1.8930."""
        r, s = jnp.asarray([[1.0, 0.0, 0.0, 0.0]]), jnp.asarray([[1.0, 0.5, 0.0, 0.0]])
        rho = float(adv_lib.awpo_dispersion_ratio(r, r + s)[0, 0])
        np.testing.assert_allclose(rho, np.sqrt(43 / 12), rtol=1e-6)

        def opened(eps_mix):
            _, m = adv_lib.get("awpo")(r, aux={"reasoning": s}, config={"eps_mix": eps_mix})
            np.testing.assert_allclose(m["rho_g_mean"], rho, rtol=1e-6)  # what is logged is the paper's rho_g
            return float(m["gate_open_frac"])

        assert opened(2.0) == 1.0 and opened(1.9) == 1.0  # 1.893 <= 1.9
        assert opened(1.89) == 0.0  # 1.893 > 1.89
        for gone in ("ratio_above", "ratio_below"):  # the names before the paper's notation (docs/awpo.md)
            with pytest.raises(OptionError) as e:
                adv_lib.check("awpo", {"gate": gone})
            assert e.value.field == "gate"

    def test_gate_never_without_difficulty_is_grpo(self):
        r, s = jnp.asarray(R_AWPO), jnp.asarray(S_AWPO)
        for target in adv_lib.AWPO_DIFFICULTY_TARGETS:
            cfg = {"gate": "never", "difficulty": "none", "difficulty_target": target}
            a, m = adv_lib.get("awpo")(r, aux={"reasoning": s}, config=cfg)
            np.testing.assert_allclose(a, adv_lib.get("grpo")(r)[0], rtol=1e-6)
            np.testing.assert_allclose(
                adv_lib.per_rollout("awpo", r, aux={"reasoning": s}, config=cfg)["clip_scale"], 1.0
            )
            assert float(m["gate_open_frac"]) == 0.0

    def test_naive_mixing_switches_are_grpo_of_the_mixed_reward(self):
        r, s = jnp.asarray(R_AWPO), jnp.asarray(S_AWPO)
        naive = {"gate": "always", "saturation_gate": False, "difficulty": "none", "clip_tighten": 0.0}
        a, m = adv_lib.get("awpo")(r, aux={"reasoning": s}, config=naive)
        np.testing.assert_allclose(a, adv_lib.get("grpo")(r + s)[0], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(
            adv_lib.per_rollout("awpo", r, aux={"reasoning": s}, config=naive)["clip_scale"], 1.0
        )

    def test_external_contract_and_group_mask(self):
        r, s = jnp.asarray(R_AWPO), jnp.asarray(S_AWPO)
        a, m = adv_lib.get("awpo")(r, aux={"reasoning": s}, config=None)
        chex.assert_shape(a, r.shape)
        for k in ("gate_open_frac", "difficulty_mean", "clip_scale_mean", "reliance_mean", "rho_g_mean"):
            assert k in m, k
        assert all(jnp.ndim(v) == 0 for v in m.values())  # metrics are scalars; the clip scale is declared apart
        spec = adv_lib.spec("awpo")
        assert spec.needs == ("reasoning",) and spec.per_rollout is adv_lib.awpo_per_rollout
        keep = jnp.array([True, False, False, False, True])
        a2, m2 = adv_lib.get("awpo")(r, aux={"reasoning": s, "group_mask": keep})
        np.testing.assert_allclose(a2[1:4], 0.0)
        np.testing.assert_allclose(a2[0], a[0], rtol=1e-6)
        np.testing.assert_allclose(m2["gate_open_frac"], 1.0)  # both kept groups are open
        np.testing.assert_allclose(m2["difficulty_mean"], D_AWPO[0], rtol=1e-6)

    def test_needs_reasoning_and_valid_options(self):
        with pytest.raises(ValueError, match="reasoning"):
            adv_lib.get("awpo")(jnp.asarray(R_AWPO))
        with pytest.raises(ValueError, match="shape"):
            adv_lib.get("awpo")(jnp.asarray(R_AWPO), aux={"reasoning": jnp.zeros((5, 3))})
        with pytest.raises(ValueError, match="gate"):
            adv_lib.get("awpo")(
                jnp.asarray(R_AWPO), aux={"reasoning": jnp.asarray(S_AWPO)}, config={"gate": "sometimes"}
            )
        bad = {
            "mix": "product",
            "gate": "sometimes",
            "difficulty": "cubic",
            "difficulty_target": "loss",
            "reliance": "trust",
            "mix_weight": -1.0,
            "eps_mix": -0.1,
            "eps_mix_min": 3.0,  # above eps_mix = 2
            "max_reward": 0.0,
            "difficulty_floor": 1.5,
            "difficulty_width": 0.0,
            "clip_tighten": -1.0,
            "clip_scale_min": 0.0,
            "eps": 0.0,
        }
        for field, value in bad.items():
            with pytest.raises(OptionError) as e:
                adv_lib.check("awpo", {field: value})
            assert e.value.field == field
        with pytest.raises(OptionError, match="mix_weight"):
            adv_lib.check("awpo", {"mix": "convex", "mix_weight": 1.5})
        assert adv_lib.check("awpo", None).gate == "dispersion"


_LEVELS = st.sampled_from([0.0, 0.25, 0.5, 1.0])
_ROW = st.one_of(_LEVELS.map(lambda v: [v] * 4), st.lists(_LEVELS, min_size=4, max_size=4))  # constant or not
_JUDGE = hnp.arrays(np.float32, (6, 4), elements=st.floats(0.0, 1.0, width=32))


@functools.partial(jax.jit, static_argnums=(2, 3))
def _awpo_and_gate(r, s, eps_mix, target):  # eps_mix in the paper's form (rho_g <= eps_mix)
    cfg = {"eps_mix": eps_mix, "difficulty_target": target}
    a, m = adv_lib.get("awpo")(r, aux={"reasoning": s}, config=cfg)
    resolved = adv_lib.check("awpo", cfg)
    mixed = adv_lib.awpo_mixed_reward(r, s, resolved)
    gate = adv_lib.awpo_gate(r, mixed, resolved)[:, 0]
    clip = adv_lib.per_rollout("awpo", r, aux={"reasoning": s}, config=cfg)["clip_scale"]
    return a, clip, gate, adv_lib.group_std(r)[:, 0], adv_lib.group_std(mixed)[:, 0]


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(_ROW, min_size=6, max_size=6),
    s=_JUDGE,
    eps_mix=st.sampled_from([4.0, 2.0]),
    target=st.sampled_from(["update", "judge"]),
)
def test_awpo_gate_closed_without_outcome_spread_or_when_saturated(rows, s, eps_mix, target):
    """Whatever the judge says: a group whose outcomes are all equal (sigma_out = 0, which includes
    saturation for rewards in [0, 1]) or whose mean outcome reaches max_reward has a closed gate, its
    advantage is exactly 0 and its clip radius untouched; an open gate implies sigma_out > 0 and
    sigma_mix <= eps_mix * sigma_out (rho_g <= eps_mix)."""
    r = np.asarray(rows, np.float32)
    a, clip, gate, so, sm = map(np.asarray, _awpo_and_gate(jnp.asarray(r), jnp.asarray(s), eps_mix, target))
    assert np.all(np.isfinite(a))
    for i in range(r.shape[0]):
        if np.all(r[i] == r[i, 0]) or r[i].mean() >= 1.0:
            assert gate[i] == 0.0
            assert np.all(a[i] == 0.0)
            assert np.all(clip[i] == 1.0)
        if gate[i]:
            assert so[i] > 0 and sm[i] <= eps_mix * so[i]
    assert np.all((clip >= 0.5) & (clip <= 1.0))


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


def test_estimate_carries_the_per_rollout_pytree():
    """`estimate` = the estimator's (advantages, metrics) and its per-rollout inputs, unchanged: {} for the
    estimators without any, AWPO's {"clip_scale": [N, G]} (= `awpo_per_rollout`)."""
    est = adv_lib.estimate("grpo", jnp.asarray(R))
    np.testing.assert_array_equal(est.advantages, adv_lib.get("grpo")(jnp.asarray(R))[0])
    assert est.per_rollout == {} and "adv_abs_mean" in est.metrics
    r, s = jnp.asarray(R_AWPO), jnp.asarray(S_AWPO)
    est = adv_lib.estimate("awpo", r, aux={"reasoning": s})
    assert set(est.per_rollout) == {"clip_scale"}
    direct = adv_lib.awpo_per_rollout(r, aux={"reasoning": s})["clip_scale"]
    np.testing.assert_array_equal(est.per_rollout["clip_scale"], direct)
    np.testing.assert_array_equal(est.advantages, adv_lib.get("awpo")(r, aux={"reasoning": s})[0])
    # a pytree: jit returns it whole
    jitted = jax.jit(lambda r, s: adv_lib.estimate("awpo", r, aux={"reasoning": s}))(r, s)
    np.testing.assert_allclose(jitted.per_rollout["clip_scale"], est.per_rollout["clip_scale"], rtol=1e-6)


def test_per_rollout_inputs_are_any_names_of_shape_n_g():
    """Any name and shape [N, G, ...] passes through (no list of known fields), a leaf that is not [N, G, ...]
    raises; `per_rollout_shapes` gives one rollout's share (abstract batches)."""
    r = jnp.asarray(R)
    out = {"weight": jnp.ones_like(r), "vec": jnp.zeros((*r.shape, 3), jnp.int32)}
    assert adv_lib.checked_per_rollout("x", r, out) is out
    with pytest.raises(ValueError, match="'x'.*\\['w'\\].*not \\[N, G\\]"):
        adv_lib.checked_per_rollout("x", r, {"w": jnp.ones((r.shape[0],))})
    assert adv_lib.per_rollout_shapes("grpo") == {}
    assert adv_lib.per_rollout_shapes("awpo") == {"clip_scale": jax.ShapeDtypeStruct((), jnp.float32)}
