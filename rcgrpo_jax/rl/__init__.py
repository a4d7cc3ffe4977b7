"""RL math kernels: advantage estimators, policy losses, chunked log-probs, diagnostics.

Pure JAX; no model or environment needed. Estimators and losses are registries (`rcgrpo_jax.registry`) selected by name:
`advantages.get(cfg.advantage)`, `losses.get(cfg.loss)`.
"""

from rcgrpo_jax.rl import advantages, diagnostics, filters, logprobs, losses

__all__ = ["advantages", "diagnostics", "filters", "logprobs", "losses"]
