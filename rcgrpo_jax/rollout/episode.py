"""Per-episode token bookkeeping and the record a finished episode hands to training.

An episode's training data is a list of samples (`Episode.samples()`), each a `Sample`: tokens,
loss_mask (1 exactly on sampled tokens) and logprobs (the behaviour log-prob of each sampled token,
0 elsewhere). How many depends on the render mode (`rcgrpo_jax.chat.modes`):

- ``append`` (`render_mode` = "append"): one sample, the whole append-only context: prompt, then
  alternating sampled assistant steps and rendered deltas (tool results, next user turn). `tokens`,
  `loss_mask`, `logprobs` hold it; `step_spans` are (turn, start, end) of its sampled spans;
  `turn_starts` the token index where each user turn's block starts.
- ``rerender``: one sample per assistant step: that step's rendered context (loss 0) followed by the
  tokens sampled in the step (loss 1). Earlier steps' samples are frozen in `past_samples`; `tokens`,
  `loss_mask`, `logprobs` hold the latest one. `step_spans[k]` = (turn, start, end) of step k's sampled
  span inside sample k; `turn_starts[t]` = the index of turn t's first step (= its sample).

`arrays()` is the single sample of an append-mode episode and refuses a re-rendered one with several
samples, so no caller silently trains on the last step only.
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
RENDER_ERROR = "render_error"  # the chat template could not render the conversation (message in `env_reason`)
DONE_REASONS = (COMPLETED, MAX_CONTEXT, STEP_LIMIT, ENV_DONE, RENDER_ERROR)

APPEND = "append"
RERENDER = "rerender"


@dataclasses.dataclass(frozen=True)
class Sample:
    """One training sequence of an episode.

    tokens int32 [T]; loss_mask int8 [T], 1 exactly on the tokens the policy sampled; logprobs float32
    [T], the behaviour log-prob of each sampled token and 0 elsewhere; spans: (turn, start, end) of the
    sampled spans (one per step; a re-rendered sample has exactly one).
    """

    tokens: np.ndarray
    loss_mask: np.ndarray
    logprobs: np.ndarray
    spans: tuple[tuple[int, int, int], ...]

    @staticmethod
    def of(tokens, loss_mask, logprobs, spans) -> "Sample":
        return Sample(
            np.asarray(tokens, np.int32),
            np.asarray(loss_mask, np.int8),
            np.asarray(logprobs, np.float32),
            tuple(tuple(int(x) for x in s) for s in spans),
        )

    def arrays(self) -> dict[str, np.ndarray]:
        return {"tokens": self.tokens, "loss_mask": self.loss_mask, "logprobs": self.logprobs}

    def to_json(self) -> dict[str, Any]:
        return {
            "tokens": [int(t) for t in self.tokens],
            "loss_mask": [int(m) for m in self.loss_mask],
            "logprobs": [float(x) for x in self.logprobs],  # float32 -> float64: exact through JSON
            "spans": [list(s) for s in self.spans],
        }

    @staticmethod
    def from_json(rec: dict[str, Any]) -> "Sample":
        return Sample.of(rec["tokens"], rec["loss_mask"], rec["logprobs"], rec["spans"])


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
    turn_starts: list[int] = dataclasses.field(default_factory=list)  # see the module docstring
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
    render_mode: str = APPEND
    past_samples: list[Sample] = dataclasses.field(default_factory=list)  # rerender: samples of earlier steps

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

    def begin_sample(self, context: list[int]) -> None:
        """rerender: freeze the current sample and start the next one from a freshly rendered context."""
        if self.render_mode != RERENDER:
            raise ValueError("begin_sample is for re-rendered episodes")
        spans = [s for s in self.step_spans[len(self.past_samples) :]]
        self.past_samples.append(Sample.of(self.tokens, self.loss_mask, self.logprobs, spans))
        self.tokens, self.loss_mask, self.logprobs = [], [], []
        self.add_context(context)

    def finish(self, reason: str) -> None:
        self.done, self.done_reason = True, reason
        self.truncated = reason == MAX_CONTEXT

    def samples(self) -> list[Sample]:
        """The episode's training samples, in step order (one in append mode; see the module docstring).

        Every sample is a full sequence on its own: the trainer treats each as one row (its own
        log-probs, loss mask and context), all with the episode's advantage.
        """
        spans = self.step_spans[len(self.past_samples) :]
        return list(self.past_samples) + [Sample.of(self.tokens, self.loss_mask, self.logprobs, spans)]

    def arrays(self) -> dict[str, np.ndarray]:
        """The single sample's arrays; raises for a re-rendered episode of several samples."""
        if self.past_samples:
            raise ValueError(
                f"episode {self.task_id} was re-rendered at each step ({len(self.past_samples) + 1} training "
                "samples): use Episode.samples()"
            )
        return self.samples()[0].arrays()

    def counts(self) -> dict[str, int]:
        return {
            "steps": self.steps,
            "turns": len(self.turn_starts),
            "tool_calls": self.tool_calls,
            "parse_errors": self.parse_errors,
            "step_truncations": self.step_truncations,
            "truncated": int(self.truncated),
            "samples": len(self.past_samples) + 1,
            "tokens_total": len(self.tokens) + sum(len(s.tokens) for s in self.past_samples),
        }
