"""RL math kernels: advantage estimators, policy losses, chunked log-probs, reward tokens, diagnostics.

Pure JAX; no model or environment needed. Estimators and losses are registries selected by name:
`advantages.get(cfg.advantage)`, `losses.get(cfg.loss)`.
"""

from rcgrpo_jax.rl import advantages, diagnostics, filters, logprobs, losses, reward_tokens
from rcgrpo_jax.rl.registry import Registry, resolve

__all__ = ["Registry", "advantages", "diagnostics", "filters", "logprobs", "losses", "resolve", "reward_tokens"]
