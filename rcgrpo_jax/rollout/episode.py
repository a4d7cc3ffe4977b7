"""Per-episode token bookkeeping and the record a finished episode hands to training.

The token context is append-only: prompt, then alternating sampled assistant steps and rendered
deltas (tool results, next user turn). `loss_mask` is 1 exactly on sampled tokens; `logprobs` holds
the behaviour log-prob of each sampled token and 0 elsewhere.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

# Why an episode ended.
COMPLETED = "completed"  # the environment ran out of user turns
MAX_CONTEXT = "max_context"  # the next step or delta would not fit the context length
STEP_LIMIT = "step_limit"  # too many tool steps in one turn (BFCL force-terminates at 20)
ENV_DONE = "env_done"  # the environment ended it (its done_reason is kept in `env_reason`)


@dataclasses.dataclass
class Episode:
    task_id: str
    group: int  # index of the task in the batch (rollouts of one task share it)
    rollout_index: int
    reward_token: str | None
    tokens: list[int] = dataclasses.field(default_factory=list)
    loss_mask: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    prompt_len: int = 0
    turn_starts: list[int] = dataclasses.field(default_factory=list)  # token index where each user turn's block starts
    step_spans: list[tuple[int, int, int]] = dataclasses.field(
        default_factory=list
    )  # (turn, start, end) of sampled spans
    messages: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    tools: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    turn: int = 0
    steps_in_turn: int = 0
    steps: int = 0
    tool_calls: int = 0
    parse_errors: int = 0
    step_truncations: int = 0  # assistant steps cut by the per-step token budget
    truncated: bool = False  # ended by the context length
    done: bool = False
    done_reason: str | None = None
    env_reason: str | None = None
    reward: float = 0.0
    verdict: dict[str, Any] = dataclasses.field(default_factory=dict)

    def add_context(self, tokens: list[int]) -> None:
        """Tokens the model did not sample (prompt, deltas, a forced end-of-turn)."""
        self.tokens.extend(tokens)
        self.loss_mask.extend([0] * len(tokens))
        self.logprobs.extend([0.0] * len(tokens))

    def add_sampled(self, tokens: list[int], logprobs) -> None:
        start = len(self.tokens)
        self.tokens.extend(tokens)
        self.loss_mask.extend([1] * len(tokens))
        self.logprobs.extend(float(x) for x in logprobs)
        self.step_spans.append((self.turn, start, len(self.tokens)))

    def finish(self, reason: str) -> None:
        self.done, self.done_reason = True, reason
        self.truncated = reason == MAX_CONTEXT

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "tokens": np.asarray(self.tokens, np.int32),
            "loss_mask": np.asarray(self.loss_mask, np.int8),
            "logprobs": np.asarray(self.logprobs, np.float32),
        }

    def counts(self) -> dict[str, int]:
        return {
            "steps": self.steps,
            "turns": len(self.turn_starts),
            "tool_calls": self.tool_calls,
            "parse_errors": self.parse_errors,
            "step_truncations": self.step_truncations,
            "truncated": int(self.truncated),
        }
