"""A single-step instance (SWiRL): one assistant step of a trajectory, with the context before it.

The type the environments run (`envs.single_step`) and the data layer makes (`data.steps`: decomposition,
JSONL loading, Hammer masking). It lives here so that the environments do not import the data layer.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any, Mapping

from rcgrpo_jax.envs.base import Message, Tool


@dataclasses.dataclass(frozen=True)
class NameMap:
    """A Hammer mask: original -> masked function names, and per function original -> masked argument
    names (keyed by the original function name). Both are bijections."""

    functions: tuple[tuple[str, str], ...]
    arguments: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]

    def forward(self) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
        return dict(self.functions), {f: dict(a) for f, a in self.arguments}

    def inverse(self) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
        """masked -> original function names, and per *masked* function masked -> original arguments."""
        fns = dict(self.functions)
        return {m: o for o, m in self.functions}, {fns[f]: {m: o for o, m in a} for f, a in self.arguments}


@dataclasses.dataclass(frozen=True, eq=False)
class StepInstance:
    """One single-step instance: the messages before step k (`context`), the step's assistant message
    (`target`) and the tools rendered above the conversation (`data.steps` documents the fields' sources). Read-only by convention; compare with
    `to_json()`. `reward` names the step reward it is scored with (`envs.single_step.STEP_REWARDS`)."""

    id: str  # "<trajectory id>:step<k>"
    category: str
    trajectory_id: str
    step: int  # k, 0-based among the trajectory's steps
    num_steps: int  # K
    context: tuple[Message, ...]
    tools: tuple[Tool, ...]
    target: Message
    released_tools: tuple[Tool, ...] = ()  # tools documented inside the context (released before the step)
    reference_rationale: str | None = None
    name_map: NameMap | None = None  # set by `mask`
    reward: str = "exact"

    @property
    def target_calls(self) -> list[dict]:
        """The target's calls as {"name", "arguments"} (fresh copies)."""
        return message_calls(self.target)

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        out["context"], out["tools"], out["released_tools"] = (
            list(self.context),
            list(self.tools),
            list(self.released_tools),
        )
        return json.loads(json.dumps(out))


def message_calls(message: Mapping[str, Any]) -> list[dict]:
    """An assistant message's calls as [{"name", "arguments"}] (fresh copies)."""
    return [
        {"name": c["function"]["name"], "arguments": copy.deepcopy(c["function"]["arguments"])}
        for c in message.get("tool_calls") or []
    ]
