"""AdamW with linear warmup and cosine decay, global-norm clipping (paper: AdamW for every stage)."""

from __future__ import annotations

import jax
import optax


def schedule(lr: float, total_steps: int, warmup_ratio: float, end_lr_ratio: float) -> optax.Schedule:
    """Linear 0 -> lr over the warmup, then cosine lr -> lr * end_lr_ratio over the rest."""
    total_steps = max(int(total_steps), 1)
    warmup = min(int(round(warmup_ratio * total_steps)), total_steps - 1)
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=lr, warmup_steps=warmup, decay_steps=total_steps, end_value=lr * end_lr_ratio
    )


def decay_mask(params):
    """Weight decay on matrices only: norms, biases (rank < 2) are left alone."""
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def make_optimizer(cfg, total_steps: int) -> optax.GradientTransformation:
    """`cfg` is the config's `optim` section. Clipping comes first so the update sees the clipped gradient."""
    sched = schedule(cfg.lr, total_steps, cfg.warmup_ratio, cfg.end_lr_ratio)
    parts = []
    if cfg.clip_norm > 0:
        parts.append(optax.clip_by_global_norm(cfg.clip_norm))
    parts.append(optax.adamw(sched, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay, mask=decay_mask))
    return optax.chain(*parts)
