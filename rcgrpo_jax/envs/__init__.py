"""Tool environments: the Environment protocol, the BFCL v4 multi-turn adapter, rewards.

`rcgrpo_jax.envs.bfcl` needs the bfcl-eval package (installed --no-deps); importing this package
does not, so the protocol and rewards are usable without it.
"""

from rcgrpo_jax.envs.base import Environment, Message, Tool, ToolCall

__all__ = ["Environment", "Message", "Tool", "ToolCall"]
