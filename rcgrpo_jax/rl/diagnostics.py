"""The paper's variance diagnostics, logged every step.

Each function is pure and returns a flat dict of float32 scalars whose names are stable log keys.
Rollouts are group-major: rollout b = group b // G, member b % G. Correlations are 0 when either
side has zero variance (common early in training, when whole batches fail).

The step's statistics are host values (rewards, advantages and per-episode entropies are numpy in the
trainer's host phases), so these functions compute with the inputs' own array module: numpy in, numpy
out (no device round trip); jax arrays in (or traced under jit), jax.numpy (`array_module`).
"""

from __future__ import annotations

from types import ModuleType

import jax
import jax.numpy as jnp
import numpy as np

from rcgrpo_jax.models.reward_tokens import HIGH

Array = jax.Array
Scalars = dict[str, Array]


def array_module(*arrays) -> ModuleType:
    """jax.numpy when any input is a jax array (or a tracer), else numpy: host values stay on the host."""
    return jnp if any(isinstance(a, jax.Array) for a in arrays) else np


def group_metrics(rewards: Array, advantages: Array) -> Scalars:
    """Zero-variance group fraction, reward mean/std, advantage spread (std and mean |A|)."""
    xp = array_module(rewards, advantages)
    rewards = xp.asarray(rewards, xp.float32)
    advantages = xp.asarray(advantages, xp.float32)
    spread = rewards.max(axis=1) - rewards.min(axis=1)
    return {
        "frac_zero_var_groups": xp.mean((spread == 0).astype(xp.float32)),
        "reward_mean": rewards.mean(),
        "reward_std": rewards.std(),
        "adv_std": advantages.std(),
        "adv_abs_mean": xp.abs(advantages).mean(),
    }


def pearson(x: Array, y: Array, w: Array | None = None) -> Array:
    """Pearson correlation of x and y over the rows with w = 1 (all rows when w is None)."""
    xp = array_module(x, y, w)
    x, y = xp.asarray(x, xp.float32), xp.asarray(y, xp.float32)
    w = xp.ones_like(x) if w is None else xp.asarray(w, xp.float32)
    n = xp.maximum(w.sum(), xp.float32(1.0))
    x = (x - xp.sum(w * x) / n) * w
    y = (y - xp.sum(w * y) / n) * w
    den = xp.sqrt(xp.sum(x * x) * xp.sum(y * y))
    return xp.where(den > 0, xp.sum(x * y) / xp.where(den > 0, den, xp.float32(1.0)), xp.float32(0.0))


def average_ranks(x: Array, w: Array | None = None) -> Array:
    """Ranks 1..n among the rows with w = 1, ties sharing their average rank (O(n^2), fine for a batch of
    rollouts); rows with w = 0 neither get a meaningful rank nor count in others'."""
    xp = array_module(x, w)
    x = xp.asarray(x, xp.float32)
    w = xp.ones_like(x) if w is None else xp.asarray(w, xp.float32)
    less = xp.sum(w[None, :] * (x[None, :] < x[:, None]), axis=1)
    equal = xp.sum(w[None, :] * (x[None, :] == x[:, None]), axis=1)
    return (less + (equal + 1) / xp.float32(2.0)).astype(xp.float32)


def spearman(x: Array, y: Array, w: Array | None = None) -> Array:
    return pearson(average_ranks(x, w), average_ranks(y, w), w)


def entropy_metrics(entropy: Array, mask: Array, rewards: Array) -> Scalars:
    """Mean per-token entropy, and the Pearson and Spearman correlations between each rollout's mean token
    entropy and its reward, over the rollouts that have loss tokens (a rollout masked out of the loss, e.g.
    by the DAPO filter or a prompt already past max_context, has no entropy to correlate).
    entropy, mask: [B, T]; rewards: [B] or [N, G] (B = N*G)."""
    xp = array_module(entropy, mask, rewards)
    entropy = xp.asarray(entropy, xp.float32)
    mask = xp.asarray(mask).astype(xp.float32)
    tokens = mask.sum(axis=1)
    per_seq = xp.sum(entropy * mask, axis=1) / xp.maximum(tokens, xp.float32(1.0))
    has = (tokens > 0).astype(xp.float32)
    r = xp.asarray(rewards, xp.float32).reshape(-1)
    return {
        "entropy_mean": xp.sum(entropy * mask) / xp.maximum(mask.sum(), xp.float32(1.0)),
        "entropy_reward_pearson": pearson(per_seq, r, has),
        "entropy_reward_spearman": spearman(per_seq, r, has),
    }


def reward_token_metrics(rewards: Array, tokens: Array) -> Scalars:
    """Mean reward of rollouts conditioned on each reward token, and the high-token share."""
    xp = array_module(rewards, tokens)
    r = xp.asarray(rewards, xp.float32).reshape(-1)
    high = (xp.asarray(tokens).reshape(-1) == HIGH).astype(xp.float32)
    low = 1.0 - high
    return {
        "reward_mean_high_token": xp.sum(r * high) / xp.maximum(high.sum(), xp.float32(1.0)),
        "reward_mean_low_token": xp.sum(r * low) / xp.maximum(low.sum(), xp.float32(1.0)),
        "frac_high_token": high.mean(),
    }


def grad_metrics(grads) -> Scalars:
    """Global L2 norm of a gradient pytree."""
    leaves = jax.tree.leaves(grads)
    sq = sum(jnp.sum(jnp.square(jnp.asarray(g, jnp.float32))) for g in leaves)
    return {"grad_norm": jnp.sqrt(jnp.asarray(sq, jnp.float32))}


def step_diagnostics(
    rewards: Array,
    advantages: Array,
    entropy: Array,
    mask: Array,
    loss_metrics: Scalars | None = None,
    reward_tokens: Array | None = None,
    grads=None,
) -> Scalars:
    """All of the above in one flat dict; KL and clip fractions come from the policy loss's
    metrics (passed through unchanged). Host (numpy) inputs give numpy scalars, except grad_metrics (grads
    live on the device)."""
    out = {**group_metrics(rewards, advantages), **entropy_metrics(entropy, mask, rewards)}
    if reward_tokens is not None:
        out.update(reward_token_metrics(rewards, reward_tokens))
    if grads is not None:
        out.update(grad_metrics(grads))
    xp = array_module(rewards, advantages, entropy, mask, reward_tokens)
    for key in ("kl", "clip_frac_low", "clip_frac_high", "clip_frac_dual"):
        if loss_metrics is not None and key in loss_metrics:
            out[key] = xp.asarray(loss_metrics[key], xp.float32)
    return out


def rollout_metrics(episodes) -> dict[str, float]:
    """Episode shape (host side): lengths, steps, tool calls, parse errors, truncations, official validity,
    end reasons."""
    n = max(len(episodes), 1)
    out = {
        "rollout/tokens_mean": float(np.mean([len(e.tokens) for e in episodes])),  # the final context
        "rollout/sampled_tokens_mean": float(
            np.mean([sum(int(np.sum(x.loss_mask)) for x in e.samples()) for e in episodes])
        ),
        "rollout/samples_mean": float(np.mean([len(e.samples()) for e in episodes])),
        "rollout/steps_mean": float(np.mean([e.steps for e in episodes])),
        "rollout/tool_calls_mean": float(np.mean([e.tool_calls for e in episodes])),
        "rollout/parse_errors_mean": float(np.mean([e.parse_errors for e in episodes])),
        "rollout/step_truncations_mean": float(np.mean([e.step_truncations for e in episodes])),
        "rollout/official_valid": float(np.mean([bool(e.verdict.get("valid")) for e in episodes])),
    }
    for reason in ("completed", "max_context", "step_limit", "env_done", "render_error"):
        out[f"rollout/end_{reason}"] = sum(e.done_reason == reason for e in episodes) / n
    return out


ACROSS_STEPS_KEY = "entropy_reward_pearson_across_steps"


def running_pearson(x, y):
    """[K] float64: element k is the Pearson correlation of x[: k + 1] and y[: k + 1] (host side, numpy).

    The paper's entropy-reward correlation (RC-GRPO: rho = -0.15, GRPO: +0.49) is this quantity over a
    run: x = per-step mean policy entropy, y = per-step mean reward, one point per training step. It is
    not `entropy_reward_pearson` (that one correlates rollouts within one step). As elsewhere in this
    module, a prefix where either side has zero variance (the first step, always) gives 0.
    """
    x, y = np.asarray(x, np.float64).reshape(-1), np.asarray(y, np.float64).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"running_pearson: x has {x.size} points, y {y.size}")
    return np.asarray([_pearson64(x[: k + 1], y[: k + 1]) for k in range(x.size)], np.float64)


def _pearson64(x, y) -> float:
    """Pearson correlation of two float64 vectors (centred first); 0 when either side has zero variance."""
    xs, ys = x - x.mean(), y - y.mean()
    den = float(np.sqrt(np.sum(xs * xs) * np.sum(ys * ys)))
    return float(np.sum(xs * ys)) / den if den > 0 else 0.0


class AcrossSteps:
    """The running entropy-reward correlation over a run's steps (`running_pearson` of the per-step
    `entropy_mean` and `reward_mean`), kept by the RL trainer. A resumed run rebuilds its history from the
    metrics rows written before the checkpoint (`rows`), so its values repeat the uninterrupted run's
    (exactly when every step is logged, `log.every_steps=1`, the default)."""

    def __init__(self, rows=()):
        self.entropy = [float(r["entropy_mean"]) for r in rows if "entropy_mean" in r and "reward_mean" in r]
        self.reward = [float(r["reward_mean"]) for r in rows if "entropy_mean" in r and "reward_mean" in r]

    def update(self, entropy_mean: float, reward_mean: float) -> dict[str, float]:
        self.entropy.append(float(entropy_mean))
        self.reward.append(float(reward_mean))
        return {ACROSS_STEPS_KEY: _pearson64(np.asarray(self.entropy, np.float64), np.asarray(self.reward, np.float64))}
