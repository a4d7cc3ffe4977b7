"""Policy losses, KL estimators and loss aggregation, registered by name.

Every policy loss has one signature:

    fn(logp [B, T], old_logp [B, T], ref_logp [B, T] | None, advantages [B] | [B, T], mask [B, T],
       *, config=None, per_rollout=None) -> (loss_sum, denominator, metrics)

logp is under the current policy (differentiated), old_logp under the behaviour policy (the
sampler), ref_logp under the frozen reference. per_rollout is the advantage estimator's pytree of
per-rollout inputs (`advantages.Estimate.per_rollout`) gathered to rows, each leaf [B, ...], or None / {}:
a loss reads the names it knows and ignores the rest (the clipped losses: "clip_scale" [B], AWPO).
The loss is loss_sum / denominator; the aggregation mode decides both so that summing sums and
denominators over micro-batches and devices, then dividing once (`finalize`), is exact. metrics are masked token means over this batch (scalars).
"""

from __future__ import annotations

from typing import Callable, Mapping

import jax
import jax.numpy as jnp
import ml_collections

from rcgrpo_jax.registry import OptionError, Registry, check_choice, check_entry, resolve

Array = jax.Array
PolicyLoss = Callable[..., tuple[Array, Array, dict[str, Array]]]
KLEstimator = Callable[[Array, Array], Array]

REGISTRY: Registry[PolicyLoss] = Registry("policy loss")
register, get, names, default_config, check = REGISTRY.api()

kl_estimators: Registry[KLEstimator] = Registry("KL estimator")
Aggregation = Callable[[Array, Array, float], tuple[Array, Array]]
aggregations: Registry[Aggregation] = Registry("loss aggregation mode")


# ---------------------------------------------------------------- KL estimators
# Each returns a per-token estimate of KL(pi || pi_ref) from samples a ~ pi, given log pi and log pi_ref.
# Their *values* estimate the same KL; as a loss term (differentiated through log pi, the samples fixed)
# their *gradients* estimate different things. With r = pi_ref(a) / pi(a) and E over a ~ pi:
#
#   k1: grad = grad log pi             E[grad] = 0                                (no regularisation)
#   k2: grad = log(pi/pi_ref) grad log pi   E[grad] = grad KL(pi || pi_ref)        (the reverse KL)
#   k3: grad = (1 - r) grad log pi     E[grad] = -sum_a pi_ref grad log pi = grad KL(pi_ref || pi)  (forward)
#
# (tests/rl/test_rl_losses.py checks all three against exact gradients on a categorical policy).
# So k1 is for logging only, and the config check refuses it as a loss term (kl_beta > 0).
# A loss's `kl_estimator` option may name a user's own estimator as "module:name" (`Registry.lookup`).


@kl_estimators.register("k1")
def kl_k1(logp: Array, ref_logp: Array) -> Array:
    """k1 = log pi - log pi_ref: an unbiased estimate of KL(pi || pi_ref) (high variance, can be negative).
    Its expected gradient as a loss term is zero: use it to log the KL, never as the penalty."""
    return logp - ref_logp


@kl_estimators.register("k2")
def kl_k2(logp: Array, ref_logp: Array) -> Array:
    """k2 = (log pi - log pi_ref)^2 / 2: a biased, low-variance, >= 0 estimate of KL(pi || pi_ref). As a loss
    term its expected gradient is exactly grad KL(pi || pi_ref), the reverse KL the objective names."""
    return 0.5 * (logp - ref_logp) ** 2


@kl_estimators.register("k3")
def kl_k3(logp: Array, ref_logp: Array) -> Array:
    """k3 = exp(d) - d - 1 with d = log pi_ref - log pi: an unbiased, >= 0, low-variance estimate of
    KL(pi || pi_ref) (GRPO's choice). As a loss term its expected gradient is grad KL(pi_ref || pi), the
    forward KL, not the reverse one. Unclamped here; the loss clamps it to [-kl_clamp, kl_clamp]."""
    d = ref_logp - logp
    return jnp.exp(d) - d - 1.0


def kl_penalty(logp: Array, ref_logp: Array, estimator: str, clamp: float | None) -> Array:
    """Per-token KL estimate, clamped to [-clamp, clamp] when clamp is set (k3's exp can explode). `estimator`
    is a name of `kl_estimators`, or "module:name" (the module is imported first)."""
    kl = kl_estimators.lookup(estimator)(logp, ref_logp)
    return kl if clamp is None else jnp.clip(kl, -clamp, clamp)


# ---------------------------------------------------------------- aggregation


# A loss's `agg_mode` option names one (or "module:name", a user's own). Each maps a [B, T] per-token loss l and
# its mask m to the (sum, denominator) pair that `finalize` divides and micro-batches add up (`train.state`).


def _seqs(mask: Array) -> Array:
    """#seqs: the rows with at least one masked-in token."""
    return jnp.sum(mask.sum(axis=1) > 0).astype(jnp.float32)


@aggregations.register("token-mean")
def agg_token_mean(per_token: Array, mask: Array, norm_const: float = 1.0) -> tuple[Array, Array]:
    """sum_bt m l / sum_bt m: every token weighs the same."""
    return (per_token * mask).sum(), mask.sum()


@aggregations.register("seq-mean-token-mean")
def agg_seq_mean_token_mean(per_token: Array, mask: Array, norm_const: float = 1.0) -> tuple[Array, Array]:
    """sum_b (sum_t m l / sum_t m) / #seqs: every sequence weighs the same (GRPO's)."""
    per_seq = (per_token * mask).sum(axis=1) / jnp.maximum(mask.sum(axis=1), 1.0)
    return jnp.sum(per_seq), _seqs(mask)


@aggregations.register("seq-mean-token-sum")
def agg_seq_mean_token_sum(per_token: Array, mask: Array, norm_const: float = 1.0) -> tuple[Array, Array]:
    """sum_bt m l / #seqs."""
    return (per_token * mask).sum(), _seqs(mask)


@aggregations.register("seq-mean-token-sum-norm")
def agg_seq_mean_token_sum_norm(per_token: Array, mask: Array, norm_const: float = 1.0) -> tuple[Array, Array]:
    """sum_bt m l / (#seqs * norm_const) (Dr.GRPO: a constant in place of each sequence's length)."""
    return (per_token * mask).sum(), _seqs(mask) * norm_const


def aggregate(per_token: Array, mask: Array, mode: str, norm_const: float = 1.0) -> tuple[Array, Array]:
    """(sum, denominator) of a [B, T] per-token loss under the aggregation `mode` (a name of `aggregations`, or
    "module:name"); rows with no mask are not sequences. An unknown mode is a ValueError naming the known ones."""
    try:
        fn = aggregations.lookup(mode)
    except KeyError as e:
        raise ValueError(e.args[0]) from None
    return fn(per_token, mask.astype(jnp.float32), norm_const)


def finalize(loss_sum: Array, denominator: Array) -> Array:
    """loss = sum / denominator, 0 for an empty batch."""
    return loss_sum / jnp.maximum(denominator, 1e-8)


def masked_mean(x: Array, mask: Array) -> Array:
    mask = mask.astype(jnp.float32)
    return jnp.sum(x * mask) / jnp.maximum(mask.sum(), 1.0)


# ---------------------------------------------------------------- clipped surrogate


RATIO_LEVELS = ("token", "sequence_mean", "trajectory")
RATIO_BASELINES = ("old", "ref")


def ppo_clip_config() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        {
            "eps_low": 0.2,
            "eps_high": 0.2,  # DAPO's clip-higher: 0.28
            "dual_clip": 0.0,  # c > 1 caps the loss of negative-advantage tokens at -c*A; 0 = off
            # The importance ratio (`log_ratio`): per token (PPO/GRPO), the mean over a sequence's tokens
            # (GSPO), or the whole trajectory's pi(tau)/pi_base(tau) (RC-GRPO's Alg. 1 writes
            # pi_theta(tau)/pi_ref(tau)); against the behaviour policy ("old") or the reference ("ref").
            "ratio_level": "token",
            "ratio_baseline": "old",
            "agg_mode": "token-mean",
            "norm_const": 1.0,  # seq-mean-token-sum-norm's constant (Dr.GRPO: the max response length)
            "kl_beta": 0.0,
            "kl_estimator": "k3",
            "kl_clamp": 10.0,
            "log_ratio_clamp": 20.0,  # keeps exp() finite; far outside any clip range
        }
    )


def gspo_config() -> ml_collections.ConfigDict:
    cfg = ppo_clip_config()
    cfg.update({"ratio_level": "sequence_mean", "eps_low": 3e-4, "eps_high": 4e-4, "agg_mode": "seq-mean-token-mean"})
    return cfg


def log_ratio(logp: Array, base_logp: Array, mask: Array, *, level: str = "token") -> Array:
    """log pi/pi_base per token, broadcast to a sequence's tokens for the sequence levels:

    token:          log pi(a_t) - log pi_base(a_t)
    sequence_mean:  mean_t over the sequence's masked tokens (GSPO: the ratio is exp(mean_t ...))
    trajectory:     sum_t over them, so the ratio is pi(tau) / pi_base(tau) (RC-GRPO Alg. 1)
    """
    lr = logp - base_logp
    if level == "token":
        return lr
    m = mask.astype(jnp.float32)
    total = jnp.sum(lr * m, axis=1, keepdims=True)
    if level == "sequence_mean":
        total = total / jnp.maximum(m.sum(axis=1, keepdims=True), 1.0)
    elif level != "trajectory":
        raise ValueError(f"unknown ratio level {level!r}; known: {', '.join(RATIO_LEVELS)}")
    return jnp.broadcast_to(total, lr.shape)


def clipped_surrogate(
    ratio: Array, adv: Array, lo: Array, hi: Array, dual_clip: float
) -> tuple[Array, dict[str, Array]]:
    """Per-token -min(ratio A, clip(ratio, lo, hi) A), with the dual clip min(., -c A) for A < 0.
    Returns the loss and boolean masks of where each clip is active (zero gradient there)."""
    unclipped = ratio * adv
    clipped = jnp.clip(ratio, lo, hi) * adv
    loss = -jnp.minimum(unclipped, clipped)
    active = {"clip_frac_low": (ratio < lo) & (adv < 0), "clip_frac_high": (ratio > hi) & (adv > 0)}
    if dual_clip > 0:
        if dual_clip <= 1:
            raise ValueError(f"dual_clip must be > 1 (or 0 = off), got {dual_clip}")
        dual = (adv < 0) & (ratio > dual_clip)
        loss = jnp.where(adv < 0, jnp.minimum(loss, -dual_clip * adv), loss)
    else:
        dual = jnp.zeros_like(active["clip_frac_low"])
    active["clip_frac_dual"] = dual
    return loss, active


def _token_advantages(advantages: Array, shape: tuple[int, int]) -> Array:
    advantages = jnp.asarray(advantages, jnp.float32)
    if advantages.ndim == 1:
        advantages = advantages[:, None]
    return jnp.broadcast_to(advantages, shape)


def _clipped_policy_loss(logp, old_logp, ref_logp, advantages, mask, cfg, per_rollout: Mapping[str, Array] | None):
    mask = mask.astype(jnp.float32)
    adv = jax.lax.stop_gradient(_token_advantages(advantages, logp.shape))
    old_logp = jax.lax.stop_gradient(old_logp)
    if cfg.ratio_baseline == "ref":
        if ref_logp is None:
            raise ValueError("ratio_baseline='ref' needs ref_logp")
        base = jax.lax.stop_gradient(ref_logp)
    else:
        base = old_logp
    lr = log_ratio(logp, base, mask, level=cfg.ratio_level)
    ratio = jnp.exp(jnp.clip(lr, -cfg.log_ratio_clamp, cfg.log_ratio_clamp))
    clip_scale = (per_rollout or {}).get("clip_scale")
    scale = jnp.ones((logp.shape[0], 1)) if clip_scale is None else jnp.asarray(clip_scale)[:, None]
    lo, hi = 1.0 - cfg.eps_low * scale, 1.0 + cfg.eps_high * scale
    per_token, active = clipped_surrogate(ratio, adv, lo, hi, cfg.dual_clip)
    metrics = {
        "pg_loss": masked_mean(per_token, mask),
        "ratio_mean": masked_mean(ratio, mask),
        **{k: masked_mean(v.astype(jnp.float32), mask) for k, v in active.items()},
    }
    if ref_logp is not None:
        kl = kl_penalty(logp, jax.lax.stop_gradient(ref_logp), cfg.kl_estimator, cfg.kl_clamp)
        metrics["kl"] = masked_mean(kl, mask)
        if cfg.kl_beta:
            per_token = per_token + cfg.kl_beta * kl
    elif cfg.kl_beta:
        raise ValueError("kl_beta > 0 needs ref_logp")
    loss_sum, denom = aggregate(per_token, mask, cfg.agg_mode, cfg.norm_const)
    return loss_sum, denom, metrics


def clipped_validate(cfg: ml_collections.ConfigDict) -> None:
    """Start-up checks of a clipped loss's options (`Registry.check`)."""
    check_entry(cfg, "agg_mode", aggregations)
    check_choice(cfg, "ratio_level", RATIO_LEVELS)
    check_choice(cfg, "ratio_baseline", RATIO_BASELINES)
    kl_estimator = check_entry(cfg, "kl_estimator", kl_estimators)
    if cfg.kl_beta and kl_estimator == "k1":
        raise OptionError(
            "kl_estimator",
            "k1's expected gradient is zero, so as a penalty (kl_beta > 0) it adds only noise; use k3 (gradient of "
            "KL(pi_ref || pi)) or k2 (gradient of KL(pi || pi_ref)); k1 is fine for logging with kl_beta = 0",
        )
    if cfg.kl_beta < 0:
        raise OptionError("kl_beta", f"must be >= 0, got {cfg.kl_beta}")
    if cfg.dual_clip and cfg.dual_clip <= 1:
        raise OptionError("dual_clip", f"must be > 1 (or 0 = off), got {cfg.dual_clip}")
    if not (0 <= cfg.eps_low < 1 and cfg.eps_high >= 0):
        raise OptionError("eps_low", f"need 0 <= eps_low < 1 and eps_high >= 0, got {cfg.eps_low}, {cfg.eps_high}")


def needs_reference(cfg: ml_collections.ConfigDict) -> bool:
    """Whether a clipped loss with these options reads ref_logp (a KL penalty, or the ratio against pi_ref)."""
    return bool(cfg.get("kl_beta", 0.0)) or cfg.get("ratio_baseline", "old") == "ref"


@register("ppo_clip", default_config=ppo_clip_config, validate=clipped_validate)
def ppo_clip(
    logp: Array,
    old_logp: Array,
    ref_logp: Array | None,
    advantages: Array,
    mask: Array,
    *,
    config=None,
    per_rollout: Mapping[str, Array] | None = None,
) -> tuple[Array, Array, dict[str, Array]]:
    """PPO/GRPO/DAPO clipped surrogate + beta * KL(pi || pi_ref), aggregated by config.agg_mode.

    ratio = exp(log_ratio(logp, base)) with base = old_logp (default) or ref_logp and the level of
    `ratio_level` (per token by default; sequence mean; whole trajectory);
    per token -min(ratio A, clip(ratio, 1 - eps_low s, 1 + eps_high s) A)
    with s = per_rollout["clip_scale"] (AWPO, per sequence; 1 when absent), the dual clip for A < 0 when
    dual_clip > 0,
    and + kl_beta * clamp(k(logp, ref_logp)) when kl_beta > 0.
    """
    cfg = resolve(config, ppo_clip_config())
    return _clipped_policy_loss(logp, old_logp, ref_logp, advantages, mask, cfg, per_rollout)


@register("gspo", default_config=gspo_config, validate=clipped_validate)
def gspo(
    logp: Array,
    old_logp: Array,
    ref_logp: Array | None,
    advantages: Array,
    mask: Array,
    *,
    config=None,
    per_rollout: Mapping[str, Array] | None = None,
) -> tuple[Array, Array, dict[str, Array]]:
    """GSPO: the clipped surrogate with one ratio per sequence, exp(mean_t (logp - old_logp)),
    tight clip (3e-4 / 4e-4) and seq-mean-token-mean aggregation by default; per_rollout as `ppo_clip`."""
    cfg = resolve(config, gspo_config())
    return _clipped_policy_loss(logp, old_logp, ref_logp, advantages, mask, cfg, per_rollout)
