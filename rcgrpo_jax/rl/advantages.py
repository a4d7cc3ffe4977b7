"""Advantage estimators: one signature, one registry, selected by a config string.

    fn(rewards [N, G] float32, *, aux=None, config=None) -> (advantages [N, G], metrics)

N = groups (tasks), G = rollouts per group. `aux` is a dict of optional extra signals (SIGNALS):
  - "group_mask" [N] bool: groups to keep (e.g. the DAPO filter's output); others get zero advantage.
  - "reasoning"  [N, G]: an auxiliary (judge) reward, used by `awpo`.
  - "reward_tokens" [N, G] int (1 = high): logged per token by `rc_grpo`.
`config` is the estimator's ml_collections sub-config; missing fields take the estimator's defaults
(`default_config(name)`), unknown fields raise. `metrics` are scalars for logging.

Each registry entry declares what it needs and gives beyond its advantages (`spec(name)`):
  - `needs`: the aux signals it requires (the RL trainer runs the judge only for an estimator that
    needs "reasoning");
  - `per_rollout`: an optional `fn(rewards, *, aux, config) -> {field: [N, G]}` of per-rollout inputs
    of the policy loss (PER_ROLLOUT_FIELDS: AWPO's clip-radius scale);
  - `validate`: checks its options at start-up (`check(name, options)`).

Adding a formula (see docs/advantages.md):

    @register("my_adv")
    def my_adv(rewards, *, aux=None, config=None):
        return rewards - rewards.mean(axis=1, keepdims=True), {}
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections

from rcgrpo_jax.rl.registry import Registry, check_choice, resolve

Array = jax.Array
Metrics = dict[str, Array]
Estimator = Callable[..., tuple[Array, Metrics]]
PerRollout = Callable[..., dict[str, Array]]

SIGNALS = ("group_mask", "reasoning", "reward_tokens")
PER_ROLLOUT_FIELDS = ("clip_scale",)  # per-rollout inputs of the policy loss (rl.losses)


@dataclasses.dataclass(frozen=True)
class EstimatorSpec:
    needs: tuple[str, ...] = ()
    per_rollout: PerRollout | None = None


_REGISTRY: Registry[Estimator] = Registry("advantage estimator")
REGISTRY = _REGISTRY
_SPECS: dict[str, EstimatorSpec] = {}
get = _REGISTRY.get
names = _REGISTRY.names
default_config = _REGISTRY.default_config
check = _REGISTRY.check


def register(
    name: str,
    *,
    default_config: Callable[[], ml_collections.ConfigDict] | None = None,
    validate: Callable[[ml_collections.ConfigDict], None] | None = None,
    needs: tuple[str, ...] = (),
    per_rollout: PerRollout | None = None,
    override: bool = False,
) -> Callable[[Estimator], Estimator]:
    """Registers an estimator under `name` (a decorator); see the module docstring for the fields."""
    unknown = sorted(set(needs) - set(SIGNALS))
    if unknown:
        raise ValueError(f"estimator {name!r} needs unknown signals {unknown}; known: {', '.join(SIGNALS)}")
    deco = _REGISTRY.register(name, default_config=default_config, validate=validate, override=override)

    def wrap(fn: Estimator) -> Estimator:
        fn = deco(fn)
        _SPECS[name] = EstimatorSpec(tuple(needs), per_rollout)
        return fn

    return wrap


def spec(name: str) -> EstimatorSpec:
    get(name)  # clear error for unknown names
    return _SPECS[name]


def per_rollout(name: str, rewards: Array, *, aux: dict | None, config) -> dict[str, Array]:
    """The estimator's per-rollout loss inputs ({} when it has none); unknown fields raise."""
    fn = spec(name).per_rollout
    out = {} if fn is None else dict(fn(rewards, aux=aux, config=config))
    unknown = sorted(set(out) - set(PER_ROLLOUT_FIELDS))
    if unknown:
        raise ValueError(f"estimator {name!r} returned unknown per-rollout fields {unknown}")
    return out


# ---------------------------------------------------------------- group statistics


def group_center(rewards: Array) -> Array:
    """r - mean_g, computed after shifting by each group's first reward so that a group of equal
    rewards centres to exactly 0.0 (a plain float mean of equal values need not equal them)."""
    shifted = rewards - rewards[:, :1]
    return shifted - shifted.mean(axis=1, keepdims=True)


def group_std(rewards: Array, *, ddof: int = 0) -> Array:
    """Per-group std [N, 1]; ddof=0 is the population std (RC-GRPO Eq. 6), ddof=1 the sample std."""
    centered = group_center(rewards)
    dof = max(rewards.shape[1] - ddof, 1)
    return jnp.sqrt(jnp.sum(centered**2, axis=1, keepdims=True) / dof)


def group_normalize(rewards: Array, *, eps: float, ddof: int = 0) -> Array:
    """(r - mean_g) / (std_g + eps)."""
    return group_center(rewards) / (group_std(rewards, ddof=ddof) + eps)


def _group_mask(aux: dict[str, Any] | None, num_groups: int) -> Array:
    if aux is None or aux.get("group_mask") is None:
        return jnp.ones((num_groups, 1), jnp.float32)
    return jnp.asarray(aux["group_mask"], jnp.float32).reshape(num_groups, 1)


def _finish(rewards: Array, advantages: Array, aux: dict | None, **extra: Array) -> tuple[Array, Metrics]:
    """Zero the advantages of masked-out groups and attach the common metrics."""
    keep = _group_mask(aux, rewards.shape[0])
    advantages = (advantages * keep).astype(jnp.float32)
    zero_std = (group_std(rewards) == 0).astype(jnp.float32)
    metrics = {
        "frac_zero_std_groups": jnp.mean(zero_std),
        "adv_abs_mean": jnp.sum(jnp.abs(advantages)) / jnp.maximum(keep.sum() * rewards.shape[1], 1.0),
        **extra,
    }
    return advantages, metrics


def _f32(rewards: Array) -> Array:
    rewards = jnp.asarray(rewards, jnp.float32)
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [N, G], got shape {rewards.shape}")
    return rewards


# ---------------------------------------------------------------- estimators


def grpo_config() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict({"eps": 1e-6, "std": "population"})


def grpo_validate(config: ml_collections.ConfigDict) -> None:
    check_choice(config, "std", ("population", "sample"))


def _ddof(config: ml_collections.ConfigDict) -> int:
    grpo_validate(config)
    return 0 if config.std == "population" else 1


@register("grpo", default_config=grpo_config, validate=grpo_validate)
def grpo(rewards: Array, *, aux: dict | None = None, config=None) -> tuple[Array, Metrics]:
    """A = (r - mean_g) / (std_g + eps), population std by default (RC-GRPO paper, Eq. 6)."""
    cfg = resolve(config, grpo_config())
    r = _f32(rewards)
    return _finish(r, group_normalize(r, eps=cfg.eps, ddof=_ddof(cfg)), aux)


@register("rc_grpo", default_config=grpo_config, validate=grpo_validate)
def rc_grpo(rewards: Array, *, aux: dict | None = None, config=None) -> tuple[Array, Metrics]:
    """GRPO's normalisation over a group whose rollouts were conditioned on different reward tokens.

    The RC-GRPO difference lives in sampling (`reward_tokens.sample`); this estimator is named so
    configs and logs say what ran. With aux["reward_tokens"] it also logs the mean advantage of the
    high- and low-token rollouts.
    """
    cfg = resolve(config, grpo_config())
    r = _f32(rewards)
    adv = group_normalize(r, eps=cfg.eps, ddof=_ddof(cfg))
    extra = {}
    if aux is not None and aux.get("reward_tokens") is not None:
        high = (jnp.asarray(aux["reward_tokens"]) == 1).astype(jnp.float32)
        extra = {
            "adv_mean_high": jnp.sum(adv * high) / jnp.maximum(high.sum(), 1.0),
            "adv_mean_low": jnp.sum(adv * (1 - high)) / jnp.maximum((1 - high).sum(), 1.0),
        }
    return _finish(r, adv, aux, **extra)


@register("dr_grpo")
def dr_grpo(rewards: Array, *, aux: dict | None = None, config=None) -> tuple[Array, Metrics]:
    """A = r - mean_g, no std division (Dr.GRPO). Its length fix is the loss aggregation mode
    `seq-mean-token-sum-norm`."""
    r = _f32(rewards)
    return _finish(r, group_center(r), aux)


@register("rloo")
def rloo(rewards: Array, *, aux: dict | None = None, config=None) -> tuple[Array, Metrics]:
    """Leave-one-out baseline: A_i = r_i - mean_{j != i} r_j = G / (G - 1) * (r_i - mean_g)."""
    r = _f32(rewards)
    g = r.shape[1]
    if g < 2:
        raise ValueError("rloo needs at least 2 rollouts per group")
    return _finish(r, group_center(r) * (g / (g - 1)), aux)


def reinforce_baseline_config() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict({"eps": 1e-6})


@register("reinforce_baseline", default_config=reinforce_baseline_config)
def reinforce_baseline(rewards: Array, *, aux: dict | None = None, config=None) -> tuple[Array, Metrics]:
    """A = (r - mean_g) / (std_batch + eps): group baseline, then whitening over the kept groups.
    Group-centred rewards already have batch mean 0, so whitening only divides by their std (not
    subtracting a float-rounded ~0 mean keeps all-equal groups at exactly 0)."""
    cfg = resolve(config, reinforce_baseline_config())
    r = _f32(rewards)
    centered = group_center(r)
    keep = _group_mask(aux, r.shape[0])
    count = jnp.maximum(keep.sum() * r.shape[1], 1.0)
    std = jnp.sqrt(jnp.sum((centered * keep) ** 2) / count)
    return _finish(r, centered / (std + cfg.eps), aux)


@register("sign")
def sign(rewards: Array, *, aux: dict | None = None, config=None) -> tuple[Array, Metrics]:
    """A = 2r - 1 for binary rewards: a fixed reference, no group centring, so a group that all
    failed still pushes down (the "gradient starvation" fix)."""
    r = _f32(rewards)
    return _finish(r, 2.0 * r - 1.0, aux)


# ---------------------------------------------------------------- AWPO (a reconstruction)


def awpo_config() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        {
            "eps": 1e-6,
            "mix": "additive",  # additive: m = r + lam*s | convex: m = (1-lam) r + lam s
            "mix_weight": 0.5,  # lam
            "gate": "ratio_below",  # ratio_below | ratio_above | always | never
            "eps_mix": 1.0,  # threshold on rho = sigma_out / sigma_mix
            "max_reward": 1.0,  # a group whose mean outcome reaches this is saturated
            "difficulty": "quadratic",  # quadratic | gaussian | none
            "difficulty_floor": 0.25,  # d_min
            "difficulty_width": 0.25,  # tau of the gaussian weight
            "clip_tighten": 0.5,  # kappa
            "clip_scale_min": 0.5,
        }
    )


def awpo_mixed_reward(r: Array, s: Array, cfg: ml_collections.ConfigDict) -> Array:
    """m = r + lam * s ("additive") or m = (1 - lam) * r + lam * s ("convex")."""
    lam = cfg.mix_weight
    if cfg.mix == "additive":
        return r + lam * s
    if cfg.mix == "convex":
        return (1.0 - lam) * r + lam * s
    raise ValueError(f"awpo config.mix must be 'additive' or 'convex', got {cfg.mix!r}")


def awpo_gate(r: Array, m: Array, cfg: ml_collections.ConfigDict) -> Array:
    """Variance-aware gate g [N, 1] in {0, 1}.

    rho = sigma_out / (sigma_mix + eps) (population stds over the group). With "ratio_below" (the
    default) g = 1[rho <= eps_mix] * 1[mean_g(r) < max_reward]: the judge is admitted when mixing
    raises the group's dispersion in step with the outcome (an aligned judge makes sigma_mix >=
    sigma_out; a conflicting one shrinks it) or when the outcome alone has none (rho = 0), and never
    once the group is saturated. "ratio_above" uses 1[rho >= eps_mix] instead; "always"/"never"
    ignore rho (but "always" still respects saturation).
    """
    rho = group_std(r) / (group_std(m) + cfg.eps)
    unsaturated = (r.mean(axis=1, keepdims=True) < cfg.max_reward).astype(jnp.float32)
    if cfg.gate == "ratio_below":
        passes = rho <= cfg.eps_mix
    elif cfg.gate == "ratio_above":
        passes = rho >= cfg.eps_mix
    elif cfg.gate == "always":
        passes = jnp.ones_like(rho, bool)
    elif cfg.gate == "never":
        passes = jnp.zeros_like(rho, bool)
    else:
        raise ValueError(f"awpo config.gate must be ratio_below|ratio_above|always|never, got {cfg.gate!r}")
    return passes.astype(jnp.float32) * unsaturated


def awpo_difficulty(r: Array, cfg: ml_collections.ConfigDict) -> Array:
    """Difficulty weight d_g [N, 1] in [d_min, 1], peaking at medium difficulty.

    p = mean_g(r) / max_reward (clipped to [0, 1]); d = d_min + (1 - d_min) * w(p) with
    "quadratic": w = 4 p (1 - p); "gaussian": w = exp(-(p - 1/2)^2 / (2 tau^2)); "none": d = 1.
    """
    p = jnp.clip(r.mean(axis=1, keepdims=True) / cfg.max_reward, 0.0, 1.0)
    if cfg.difficulty == "none":
        return jnp.ones_like(p)
    if cfg.difficulty == "quadratic":
        w = 4.0 * p * (1.0 - p)
    elif cfg.difficulty == "gaussian":
        w = jnp.exp(-((p - 0.5) ** 2) / (2.0 * cfg.difficulty_width**2))
    else:
        raise ValueError(f"awpo config.difficulty must be quadratic|gaussian|none, got {cfg.difficulty!r}")
    return cfg.difficulty_floor + (1.0 - cfg.difficulty_floor) * w


def awpo_clip_scale(reliance: Array, cfg: ml_collections.ConfigDict) -> Array:
    """Clip-radius scale c = max(c_min, 1 - kappa * w): the loss's eps_low/eps_high are multiplied
    by c, so the trust region tightens as reliance w on the auxiliary reward grows."""
    return jnp.maximum(cfg.clip_scale_min, 1.0 - cfg.clip_tighten * reliance)


def _awpo_reliance(rewards: Array, aux: dict | None, config) -> tuple:
    """(r, m, gate, reliance w = gate * difficulty) of `awpo`, shared by the advantage and the clip scale."""
    cfg = resolve(config, awpo_config())
    r = _f32(rewards)
    if aux is None or aux.get("reasoning") is None:
        raise ValueError("awpo needs aux['reasoning'], the [N, G] auxiliary (judge) reward")
    s = jnp.asarray(aux["reasoning"], jnp.float32)
    m = awpo_mixed_reward(r, s, cfg)
    gate = awpo_gate(r, m, cfg)
    return r, m, gate, gate * awpo_difficulty(r, cfg), cfg


def awpo_per_rollout(rewards: Array, *, aux: dict | None = None, config=None) -> dict[str, Array]:
    """{"clip_scale": [N, G]} = `awpo_clip_scale(w)` broadcast over each group, for the policy loss."""
    r, _, _, reliance, cfg = _awpo_reliance(rewards, aux, config)
    return {"clip_scale": jnp.broadcast_to(awpo_clip_scale(reliance, cfg), r.shape)}


@register("awpo", default_config=awpo_config, needs=("reasoning",), per_rollout=awpo_per_rollout)
def awpo(rewards: Array, *, aux: dict | None = None, config=None) -> tuple[Array, Metrics]:
    """AWPO advantage, reconstructed from the paper's text (its equations are not available).

    r = outcome reward [N, G], s = aux["reasoning"] [N, G] (judge score), m = mixed reward
    (`awpo_mixed_reward`). A_out = GRPO(r), A_mix = GRPO(m). Reliance w_g = g_g * d_g (gate
    `awpo_gate` times difficulty weight `awpo_difficulty`), and

        A = (1 - w_g) * A_out + w_g * A_mix,

    so w = 0 is plain GRPO. The loss's clip scale per rollout is `awpo_per_rollout`.
    """
    r, m, gate, reliance, cfg = _awpo_reliance(rewards, aux, config)
    adv = (1.0 - reliance) * group_normalize(r, eps=cfg.eps) + reliance * group_normalize(m, eps=cfg.eps)
    return _finish(r, adv, aux, gate_open_frac=jnp.mean(gate), reliance_mean=jnp.mean(reliance))
