"""The Environment protocol that the rollout engine drives (docs/interfaces.md, "envs").

An episode is a sequence of user turns. Within a turn the policy takes steps: each step is a list of
tool calls `{name, arguments}` parsed from the model's output, answered by one result string per
call. When the model answers without calls the turn ends and `end_turn()` returns the next turn's
new messages (and the tools visible from then on), or None when the episode is over.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

Message = dict[str, Any]  # {"role": ..., "content": ...} (OpenAI chat form)
Tool = dict[str, Any]  # {"type": "function", "function": {name, description, parameters}}
ToolCall = dict[str, Any]  # {"name": str, "arguments": dict}


@runtime_checkable
class Environment(Protocol):
    done: bool
    done_reason: str | None  # None while running; e.g. "completed", "max_steps"

    def reset(self) -> tuple[list[Message], list[Tool]]:
        """Start a fresh episode: the first turn's messages and the tools visible in it."""

    def step(self, tool_calls: Sequence[ToolCall]) -> list[str]:
        """Run one assistant step; one result string per call, in order."""

    def end_turn(self) -> tuple[list[Message], list[Tool]] | None:
        """Close the current turn: the next turn's messages and tools, or None when over."""

    def reward(self) -> float:
        """The training reward of the episode."""

    def official_verdict(self) -> dict:
        """The evaluation verdict: {"valid": bool, "error_type": str | None, ...}."""

    def trace(self) -> dict:
        """A JSON-serialisable record of what happened."""
