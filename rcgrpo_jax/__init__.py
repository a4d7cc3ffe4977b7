"""rcgrpo_jax: JAX/Flax RL for multi-turn tool-calling agents (RC-GRPO and the GRPO family on BFCL v4)."""

__version__ = "0.1.0"
