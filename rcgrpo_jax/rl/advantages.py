"""Advantage estimators: one signature, one registry, selected by a config string.

    fn(rewards [N, G] float32, *, aux=None, config=None) -> (advantages [N, G], metrics)

N = groups (tasks), G = rollouts per group. `aux` is a dict of optional extra signals (SIGNALS):
  - "group_mask" [N] bool: groups to keep (e.g. the DAPO filter's output); others get zero advantage.
  - "reasoning"  [N, G]: an auxiliary (judge) reward, used by `awpo`.
  - "reward_tokens" [N, G] int (1 = high): logged per token by `rc_grpo`; `rc_grpo_anchor` needs them.
`config` is the estimator's ml_collections sub-config; missing fields take the estimator's defaults
(`default_config(name)`), unknown fields raise. `metrics` are scalars for logging.

Each entry declares (`spec(name)`) the aux signals it `needs` (the trainer runs the judge only for
"reasoning"), an optional `per_rollout(rewards, *, aux, config) -> {name: [N, G, ...]}` (its inputs of the
policy loss; AWPO: {"clip_scale": ...}) and a `validate` of its options (`check(name, options)`).
The trainer calls `estimate(name, ...)` -> `Estimate(advantages, per_rollout, metrics)`; `per_rollout` is a
pytree carried unchanged to the loss (`train.rl_batch` gathers each leaf to the rollout's rows; the loss
reads the names it knows), so a new per-rollout input touches only its estimator and the loss that reads it.

Adding a formula (see docs/advantages.md):

    @register("my_adv")
    def my_adv(rewards, *, aux=None, config=None):
        return rewards - rewards.mean(axis=1, keepdims=True), {}
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import flax.struct
import jax
import jax.numpy as jnp
import ml_collections

from rcgrpo_jax.registry import OptionError, Registry, check_choice, resolve

Array = jax.Array
Metrics = dict[str, Array]
Estimator = Callable[..., tuple[Array, Metrics]]
PerRollout = Callable[..., dict[str, Array]]

SIGNALS = ("group_mask", "reasoning", "reward_tokens")


@dataclasses.dataclass(frozen=True)
class EstimatorSpec:
    needs: tuple[str, ...] = ()
    per_rollout: PerRollout | None = None


REGISTRY: Registry[Estimator] = Registry("advantage estimator")
_SPECS: dict[str, EstimatorSpec] = {}
_, get, names, default_config, check = REGISTRY.api()  # `register` below also records the estimator's spec


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
    deco = REGISTRY.register(name, default_config=default_config, validate=validate, override=override)

    def wrap(fn: Estimator) -> Estimator:
        fn = deco(fn)
        _SPECS[name] = EstimatorSpec(tuple(needs), per_rollout)
        return fn

    return wrap


def spec(name: str) -> EstimatorSpec:
    get(name)  # clear error for unknown names
    return _SPECS[name]


def per_rollout(name: str, rewards: Array, *, aux: dict | None, config) -> dict[str, Array]:
    """The estimator's per-rollout loss inputs: a dict of [N, G, ...] arrays ({} when it has none)."""
    fn = spec(name).per_rollout
    return checked_per_rollout(name, rewards, {} if fn is None else dict(fn(rewards, aux=aux, config=config)))


def checked_per_rollout(name: str, rewards: Array, out: dict[str, Array]) -> dict[str, Array]:
    """`out` unchanged when every leaf is [N, G, ...] like the rewards (any names: the loss reads what it
    knows); else a ValueError naming the estimator and the leaf."""
    n_g = tuple(jnp.shape(rewards))[:2]
    for path, leaf in jax.tree_util.tree_flatten_with_path(out)[0]:
        if tuple(jnp.shape(leaf))[:2] != n_g:
            where = jax.tree_util.keystr(path)
            raise ValueError(
                f"estimator {name!r}: per-rollout input {where} has shape {jnp.shape(leaf)}, not [N, G] = {n_g}"
            )
    return out


@flax.struct.dataclass
class Estimate:
    """One estimator's output for a step: what the policy loss needs per rollout, and the logs.

    advantages [N, G] float32; per_rollout: the pytree of the estimator's per-rollout loss inputs, each leaf
    [N, G, ...] ({} for most estimators; carried unchanged to the loss's `per_rollout` argument); metrics:
    scalars for logging."""

    advantages: Array
    per_rollout: dict[str, Array]
    metrics: Metrics


def estimate(name: str, rewards: Array, *, aux: dict | None = None, config=None) -> Estimate:
    """The estimator `name` and its per-rollout loss inputs on [N, G] rewards, as one `Estimate`."""
    advantages, metrics = get(name)(rewards, aux=aux, config=config)
    return Estimate(advantages, per_rollout(name, rewards, aux=aux, config=config), metrics)


def per_rollout_shapes(name: str, config=None, *, group: int = 2) -> dict[str, jax.ShapeDtypeStruct]:
    """One rollout's share of the estimator's per-rollout inputs: {name: ShapeDtypeStruct(shape[2:], dtype)}
    (traced, never computed; for abstract batches: `train.rl_batch.abstract_batch(per_rollout=...)`)."""
    r = jax.ShapeDtypeStruct((1, group), jnp.float32)
    aux = {"reasoning": r, "reward_tokens": jax.ShapeDtypeStruct((1, group), jnp.int32)}
    out = jax.eval_shape(lambda rewards, aux: per_rollout(name, rewards, aux=aux, config=config), r, aux)
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape[2:], s.dtype), out)


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
        extra = _token_means(adv, aux["reward_tokens"])
    return _finish(r, adv, aux, **extra)


def _token_means(adv: Array, tokens: Array) -> Metrics:
    high = (jnp.asarray(tokens) == 1).astype(jnp.float32)
    return {
        "adv_mean_high": jnp.sum(adv * high) / jnp.maximum(high.sum(), 1.0),
        "adv_mean_low": jnp.sum(adv * (1 - high)) / jnp.maximum((1 - high).sum(), 1.0),
    }


@register("rc_grpo_anchor", default_config=grpo_config, validate=grpo_validate, needs=("reward_tokens",))
def rc_grpo_anchor(rewards: Array, *, aux: dict | None = None, config=None) -> tuple[Array, Metrics]:
    """RC-GRPO whose low-token rollouts only anchor the group: with t_j = 1 for a high-token rollout,

        A_j = t_j (r_j - mean_g) / (std_g + eps)     (mean and std over all G rollouts)

    The low-token rollouts still set the group's mean and std, so a group whose high-token rollouts all
    succeed keeps its spread, but they get no advantage of their own: the update never teaches the
    policy to succeed when asked for a low reward, which would erase the conditioning that gives RC-GRPO
    its variance (docs/experiments.md: what that did on the CPU quickstart's RL pool). Metrics as
    `rc_grpo`'s, plus frac_zero_std_high_groups: the share of groups in which the high-token rollouts alone
    have equal rewards.
    """
    cfg = resolve(config, grpo_config())
    r = _f32(rewards)
    if aux is None or aux.get("reward_tokens") is None:
        raise ValueError("rc_grpo_anchor needs aux['reward_tokens'] (reward-conditioned sampling)")
    tokens = jnp.asarray(aux["reward_tokens"]).reshape(r.shape)
    high = (tokens == 1).astype(jnp.float32)
    adv = group_normalize(r, eps=cfg.eps, ddof=_ddof(cfg)) * high
    n_high = high.sum(axis=1)
    mean_h = jnp.sum(r * high, axis=1) / jnp.maximum(n_high, 1.0)
    spread_h = jnp.max(jnp.where(high > 0, jnp.abs(r - mean_h[:, None]), 0.0), axis=1)
    extra = {**_token_means(adv, tokens), "frac_zero_std_high_groups": jnp.mean((spread_h == 0).astype(jnp.float32))}
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
#
# The AWPO paper's equations (21-24) are not available to us: every term below follows the paper's
# text (Sec. 3.1, 3.2, App. A.4) and is a documented, swappable choice; docs/awpo.md lists them.
# The gate is written in the paper's notation: rho_g = sigma_mix / sigma_out, open when rho_g <= eps_mix,
# so an eps_mix taken from the paper means the same here (docs/awpo.md, "Gate notation").


AWPO_MIX = ("additive", "convex")
AWPO_GATES = ("dispersion", "outcome_insignificant", "always", "never")
AWPO_DIFFICULTY = ("quadratic", "gaussian", "none")
AWPO_DIFFICULTY_TARGETS = ("update", "judge")
AWPO_RELIANCE = ("variance_share", "gate", "weight")


def awpo_config() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        {
            "eps": 1e-6,
            "mix": "additive",  # additive: m = r + lam s (the text: R_mix = R_out + R_reasoning) | convex
            "mix_weight": 1.0,  # lam
            # dispersion (Sec. 3.1/A.4: open iff rho_g = sigma_mix / sigma_out <= eps_mix) | outcome_insignificant
            # (one reading of the introduction: open iff rho_g >= eps_mix, the outcome's spread is small next to
            # the mixed one) | always | never
            "gate": "dispersion",
            "eps_mix": 2.0,  # the bound on rho_g (the paper's form); 2: the judge may at most double the spread
            "eps_mix_min": 0.0,  # dispersion: > 0 also closes the gate when rho_g < eps_mix_min; 0 = no lower bound
            "saturation_gate": True,  # multiply the gate by 1[mean_g(r) < max_reward]
            "max_reward": 1.0,  # R_out_max
            "difficulty": "quadratic",  # quadratic | gaussian | none
            "difficulty_target": "update",  # update: d scales the whole group advantage | judge: the judge's share
            "difficulty_floor": 0.25,  # d_min
            "difficulty_width": 0.25,  # tau of the gaussian weight
            "reliance": "variance_share",  # variance_share: u = g (1 - min(rho, 1)^2) | gate: u = g | weight: u = g d
            "clip_tighten": 0.5,  # kappa
            "clip_scale_min": 0.5,  # c_min
        }
    )


def awpo_validate(cfg: ml_collections.ConfigDict) -> None:
    """Every option of a resolved awpo config; raises `OptionError` naming the field."""
    check_choice(cfg, "mix", AWPO_MIX)
    check_choice(cfg, "gate", AWPO_GATES)
    check_choice(cfg, "difficulty", AWPO_DIFFICULTY)
    check_choice(cfg, "difficulty_target", AWPO_DIFFICULTY_TARGETS)
    check_choice(cfg, "reliance", AWPO_RELIANCE)
    if not isinstance(cfg.saturation_gate, bool):
        raise OptionError("saturation_gate", f"must be True or False, got {cfg.saturation_gate!r}")
    bounds = {
        "eps": (0.0, None, False),
        "mix_weight": (0.0, 1.0 if cfg.mix == "convex" else None, True),
        "eps_mix": (0.0, None, True),
        "eps_mix_min": (0.0, None, True),
        "max_reward": (0.0, None, False),
        "difficulty_floor": (0.0, 1.0, True),
        "difficulty_width": (0.0, None, False),
        "clip_tighten": (0.0, None, True),
        "clip_scale_min": (0.0, 1.0, False),
    }
    for field, (lo, hi, lo_ok) in bounds.items():
        v = float(cfg[field])
        if not (v >= lo if lo_ok else v > lo) or (hi is not None and v > hi):
            rng = f"{'[' if lo_ok else '('}{lo}, {hi if hi is not None else 'inf'}{']' if hi is not None else ')'}"
            raise OptionError(field, f"{v} is not in {rng}")
    if cfg.eps_mix_min > cfg.eps_mix:
        raise OptionError(
            "eps_mix_min", f"{cfg.eps_mix_min} is above eps_mix={cfg.eps_mix} (the gate could never open)"
        )


def awpo_mixed_reward(r: Array, s: Array, cfg: ml_collections.ConfigDict) -> Array:
    """m = r + lam * s ("additive", default lam = 1: R_mix = R_out + R_reasoning) or
    m = (1 - lam) * r + lam * s ("convex")."""
    lam = cfg.mix_weight
    if cfg.mix == "additive":
        return r + lam * s
    if cfg.mix == "convex":
        return (1.0 - lam) * r + lam * s
    raise OptionError("mix", f"{cfg.mix!r} is not one of {', '.join(AWPO_MIX)}")


def awpo_dispersion_ratio(r: Array, m: Array) -> Array:
    """The dispersion ratio in the paper's form, rho_g = sigma_mix / sigma_out [N, 1] (population stds
    of m and r over the group); +inf where sigma_out = 0 (no outcome spread: the gate is closed there).

    1 / rho_g = sigma_out / sigma_mix is the alignment proxy: when the judge's score is independent of
    the outcome it is exactly corr(r, m), so "correlation falls as sigma_mix / sigma_out grows". It
    measures the judge's share of the mixed spread, not its agreement: a judge equal to the outcome
    (m = 2r) has rho_g = 2, one that exactly cancels the outcome (m constant) has rho_g = 0."""
    so, sm = group_std(r), group_std(m)
    return jnp.where(so > 0, sm / jnp.where(so > 0, so, 1.0), jnp.inf)


def awpo_gate(r: Array, m: Array, cfg: ml_collections.ConfigDict) -> Array:
    """Variance-aware gate g [N, 1] in {0, 1} = passes_g * 1[mean_g(r) < max_reward] (the saturation
    factor, unless `saturation_gate=False`), with rho_g = sigma_mix / sigma_out (`awpo_dispersion_ratio`).

    "dispersion" (default; Sec. 3.1/A.4 in the paper's notation, rho_g <= eps_mix): passes when
    sigma_out > 0 and sigma_mix <= eps_mix * sigma_out (rho_g <= eps_mix computed without division),
    the same as a uniform lower bound 1/eps_mix on sigma_out / sigma_mix. So the gate is closed when
    the outcome has no spread (sigma_out = 0, which for rewards <= max_reward includes saturation) and
    closed when the judge inflates the spread past eps_mix times the outcome's. With eps_mix_min > 0
    it also needs rho_g >= eps_mix_min (closes on a judge that cancels the outcome's spread; off by
    default: the text states only the one bound).
    "outcome_insignificant" (the introduction read as "use the judge when the variance induced by the
    outcome is insignificant"): passes when sigma_mix >= eps_mix * sigma_out (rho_g >= eps_mix; opens on
    sigma_out = 0, all-failed groups included, and closes where the judge adds less than that spread,
    e.g. on a judge that follows the outcome at a smaller scale; with eps_mix = 1 it is this code's
    first reading). "always" / "never": passes is 1 / 0.
    """
    so, sm = group_std(r), group_std(m)
    if cfg.gate == "dispersion":
        passes = (so > 0) & (sm <= cfg.eps_mix * so)
        if cfg.eps_mix_min:
            passes &= sm >= cfg.eps_mix_min * so
    elif cfg.gate == "outcome_insignificant":
        passes = sm >= cfg.eps_mix * so
    elif cfg.gate == "always":
        passes = jnp.ones_like(so, bool)
    elif cfg.gate == "never":
        passes = jnp.zeros_like(so, bool)
    else:
        raise OptionError("gate", f"{cfg.gate!r} is not one of {', '.join(AWPO_GATES)}")
    g = passes.astype(jnp.float32)
    if cfg.saturation_gate:
        g = g * (r.mean(axis=1, keepdims=True) < cfg.max_reward).astype(jnp.float32)
    return g


def awpo_difficulty(r: Array, cfg: ml_collections.ConfigDict) -> Array:
    """Difficulty weight d_g [N, 1] in [d_min, 1], peaking at medium difficulty (the text: it
    "prioritizes" medium-difficulty groups).

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
        raise OptionError("difficulty", f"{cfg.difficulty!r} is not one of {', '.join(AWPO_DIFFICULTY)}")
    return cfg.difficulty_floor + (1.0 - cfg.difficulty_floor) * w


def awpo_reliance(gate: Array, rho: Array, difficulty: Array, cfg: ml_collections.ConfigDict) -> Array:
    """Reliance u_g [N, 1] in [0, 1] on the auxiliary reward, which tightens the clip radius.

    "variance_share" (default): u = g (1 - min(1 / rho_g, 1)^2) = g (1 - min(sigma_out / sigma_mix, 1)^2),
    the judge's share of the mixed variance (exact when the judge is independent of the outcome); 0 when
    the gate is closed or the judge adds no spread (rho_g <= 1), g where sigma_out = 0 (rho_g = inf).
    "gate": u = g. "weight": u = g d."""
    if cfg.reliance == "variance_share":
        inv = jnp.where(rho > 0, 1.0 / jnp.where(rho > 0, rho, 1.0), jnp.inf)  # sigma_out / sigma_mix
        return gate * (1.0 - jnp.minimum(inv, 1.0) ** 2)
    if cfg.reliance == "gate":
        return gate
    if cfg.reliance == "weight":
        return gate * difficulty
    raise OptionError("reliance", f"{cfg.reliance!r} is not one of {', '.join(AWPO_RELIANCE)}")


def awpo_clip_scale(reliance: Array, cfg: ml_collections.ConfigDict) -> Array:
    """Clip-radius scale c = max(c_min, 1 - kappa * u): the loss's eps_low/eps_high are multiplied
    by c, so the trust region tightens as reliance u on the auxiliary reward grows."""
    return jnp.maximum(cfg.clip_scale_min, 1.0 - cfg.clip_tighten * reliance)


def _masked_mean(x: Array, keep: Array) -> Array:
    """Mean of [N, 1] `x` over the kept groups (0 when none is kept); non-finite entries count as 0."""
    x = jnp.where(jnp.isfinite(x), x, 0.0)
    return jnp.sum(x * keep) / jnp.maximum(jnp.sum(keep), 1.0)


def _awpo_terms(rewards: Array, aux: dict | None, config) -> dict[str, Any]:
    """Every term of `awpo` (shared by the advantage and the per-rollout clip scale)."""
    cfg = resolve(config, awpo_config())
    awpo_validate(cfg)
    r = _f32(rewards)
    if aux is None or aux.get("reasoning") is None:
        raise ValueError("awpo needs aux['reasoning'], the [N, G] auxiliary (judge) reward")
    s = jnp.asarray(aux["reasoning"], jnp.float32)
    if s.shape != r.shape:
        raise ValueError(f"aux['reasoning'] must have the rewards' shape {r.shape}, got {s.shape}")
    m = awpo_mixed_reward(r, s, cfg)
    gate = awpo_gate(r, m, cfg)
    rho = awpo_dispersion_ratio(r, m)
    d = awpo_difficulty(r, cfg)
    reliance = awpo_reliance(gate, rho, d, cfg)
    return {
        "cfg": cfg,
        "r": r,
        "m": m,
        "gate": gate,
        "rho": rho,
        "d": d,
        "reliance": reliance,
        "scale": awpo_clip_scale(reliance, cfg),
    }


def awpo_per_rollout(rewards: Array, *, aux: dict | None = None, config=None) -> dict[str, Array]:
    """{"clip_scale": [N, G]} = `awpo_clip_scale(u)` broadcast over each group, for the policy loss."""
    t = _awpo_terms(rewards, aux, config)
    return {"clip_scale": jnp.broadcast_to(t["scale"], t["r"].shape)}


@register(
    "awpo", default_config=awpo_config, validate=awpo_validate, needs=("reasoning",), per_rollout=awpo_per_rollout
)
def awpo(rewards: Array, *, aux: dict | None = None, config=None) -> tuple[Array, Metrics]:
    """AWPO advantage, reconstructed from the paper's text (its equations 21-24 are not available).

    r = outcome reward [N, G], s = aux["reasoning"] [N, G] (judge score), m = `awpo_mixed_reward`
    (default m = r + s). A_out = GRPO(r), A_mix = GRPO(m), gate g_g (`awpo_gate`), difficulty weight
    d_g (`awpo_difficulty`):

        difficulty_target="update" (default):  A = d_g * ((1 - g_g) A_out + g_g A_mix)
        difficulty_target="judge":             A = (1 - w_g) A_out + w_g A_mix,  w_g = g_g d_g

    so with the gate closed and d = 1 it is plain GRPO. Reliance u_g (`awpo_reliance`) sets the loss's
    per-rollout clip scale `awpo_clip_scale(u)` (`awpo_per_rollout`). Scalar metrics (means over the
    kept groups): gate_open_frac, difficulty_mean (d_g), clip_scale_mean (the factor on the clip
    radius), reliance_mean, rho_g_mean (rho_g = sigma_mix / sigma_out in the paper's form, over the
    groups with outcome spread, where it is finite), saturated_frac.
    """
    t = _awpo_terms(rewards, aux, config)
    cfg, r, m, gate, rho, d, reliance = (t[k] for k in ("cfg", "r", "m", "gate", "rho", "d", "reliance"))
    a_out, a_mix = group_normalize(r, eps=cfg.eps), group_normalize(m, eps=cfg.eps)
    if cfg.difficulty_target == "update":
        adv = d * ((1.0 - gate) * a_out + gate * a_mix)
    else:
        w = gate * d
        adv = (1.0 - w) * a_out + w * a_mix
    keep = _group_mask(aux, r.shape[0])
    finite_rho = jnp.isfinite(rho).astype(jnp.float32) * keep
    return _finish(
        r,
        adv,
        aux,
        gate_open_frac=_masked_mean(gate, keep),
        difficulty_mean=_masked_mean(d, keep),
        clip_scale_mean=_masked_mean(t["scale"], keep),
        reliance_mean=_masked_mean(reliance, keep),
        rho_g_mean=jnp.sum(jnp.where(finite_rho > 0, rho, 0.0)) / jnp.maximum(jnp.sum(finite_rho), 1.0),
        saturated_frac=_masked_mean((r.mean(axis=1, keepdims=True) >= cfg.max_reward).astype(jnp.float32), keep),
    )
