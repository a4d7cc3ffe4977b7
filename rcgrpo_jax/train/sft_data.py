"""SFT / RCTP-FT data: conversations (OpenAI chat JSONL: {"messages": [...], "tools": [...]}) rendered with the
checkpoint's chat template into (tokens, loss_mask) arrays, exactly as the rollout engine would see them
(append-only segments), grouped into length buckets so only a few shapes compile. The order of examples is
a pure function of (seed, step), so the step counter is the data position.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Sequence

import jax
import numpy as np

from rcgrpo_jax import chat, config_fields, jsonl, multihost
from rcgrpo_jax.chat import NotAppendOnlyError, render_text
from rcgrpo_jax.data import datasets, sources

# ----------------------------------------------------------------------------------------------------
# Tokenisation: (tokens, loss_mask) from a conversation.


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []


def tokenize_conversation(
    tokenizer, messages: Sequence[dict], tools: Sequence[dict] | None, end_of_turn: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """(tokens int32 [T], loss_mask int32 [T]) with loss_mask = 1 exactly on assistant turns.

    The rendered conversation is cut into context and assistant pieces, each tokenised on its own, the
    way the rollout engine builds its context: prompt tokens, then the sampled turn (text up to and
    including its end-of-turn token), then the rendered delta (whatever the template writes after the
    end-of-turn token, e.g. Qwen's newline, belongs to the delta). So SFT trains on exactly the token
    sequences the policy meets when sampling. Raises NotAppendOnlyError if the template rewrites earlier
    turns for this conversation.
    """

    full = render_text(tokenizer, messages, tools, add_generation_prompt=False)
    ends = [tokenizer.convert_ids_to_tokens(int(i)) for i in end_of_turn]
    cuts: list[tuple[int, int]] = []  # (start, end) character spans of assistant turns
    for i, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        before = render_text(tokenizer, messages[:i], tools, add_generation_prompt=True)
        upto = render_text(tokenizer, messages[: i + 1], tools, add_generation_prompt=False)
        if not (upto.startswith(before) and full.startswith(upto)):
            raise NotAppendOnlyError(f"chat template is not append-only at message {i}: prefix renders differ")
        turn = upto[len(before) :]
        stop = max((turn.rfind(e) + len(e) for e in ends if e in turn), default=len(turn))
        cuts.append((len(before), len(before) + stop))
    tokens: list[int] = []
    mask: list[int] = []
    pos = 0
    for start, end in cuts:
        ctx, turn = _encode(tokenizer, full[pos:start]), _encode(tokenizer, full[start:end])
        tokens += ctx + turn
        mask += [0] * len(ctx) + [1] * len(turn)
        pos = end
    tail = _encode(tokenizer, full[pos:])
    tokens += tail
    mask += [0] * len(tail)
    return np.asarray(tokens, np.int32), np.asarray(mask, np.int32)


def read_jsonl(path: str) -> list[dict]:
    """The conversations of an SFT / RCTP-FT JSON-lines file (`jsonl.read`: a bad or empty file raises
    `InputError` naming FILE:LINE or the file)."""
    return jsonl.read(path, what="conversations", check=jsonl.conversation)


def read_explored(path: str) -> list[dict]:
    """The records of an exploration file (`train.exploration` output; conversations with a 'kind')."""
    return jsonl.read(path, what="exploration records", check=jsonl.trajectory_record)


def check_files(config) -> None:
    """Start-up check of the files a supervised stage reads (`data.path`, `data.exploration_path`): each
    must read whole, so a bad line stops the run before the model loads."""
    if config.data.get("path"):
        read_jsonl(config.data.path)
    if config.data.get("exploration_path"):
        read_explored(config.data.exploration_path)


# ----------------------------------------------------------------------------------------------------
# Dataset: bucketed, deterministic order.


@dataclasses.dataclass(frozen=True)
class SFTData:
    """Tokenised examples and the rule mapping a step to its batch."""

    tokens: tuple[np.ndarray, ...]
    loss_mask: tuple[np.ndarray, ...]
    buckets: tuple[int, ...]
    batch_size: int
    grad_accum: int
    seed: int
    pad_id: int
    truncated: int = 0  # examples cut to the largest bucket
    dropped: int = 0  # examples dropped (too long, or no assistant token left)

    @property
    def num_examples(self) -> int:
        return len(self.tokens)

    @property
    def steps_per_epoch(self) -> int:
        return self.num_examples // self.batch_size

    def fingerprint(self) -> str:
        """Identifies the data and its order; a resume with different data is refused."""
        h = hashlib.sha256()
        for t, m in zip(self.tokens, self.loss_mask):
            h.update(t.tobytes())
            h.update(m.tobytes())
        h.update(json.dumps([self.buckets, self.batch_size, self.grad_accum, self.seed]).encode())
        return h.hexdigest()[:16]

    def bucket(self, length: int) -> int:
        return next(b for b in self.buckets if b >= length)

    def indices(self, step: int) -> np.ndarray:
        """The example indices of optimizer step `step`: epoch e is a fresh permutation seeded by (seed, e)."""
        epoch, i = divmod(int(step), self.steps_per_epoch)
        perm = np.random.default_rng([self.seed, epoch]).permutation(self.num_examples)
        return perm[i * self.batch_size : (i + 1) * self.batch_size]

    def batch(self, step: int) -> dict[str, np.ndarray]:
        """Arrays [grad_accum, micro, L] with L the smallest bucket holding the batch's longest example."""
        idx = self.indices(step)
        length = self.bucket(max(len(self.tokens[j]) for j in idx))
        tokens = np.full((len(idx), length), self.pad_id, np.int32)
        loss_mask = np.zeros((len(idx), length), np.int32)
        token_mask = np.zeros((len(idx), length), bool)
        for r, j in enumerate(idx):
            n = len(self.tokens[j])
            tokens[r, :n] = self.tokens[j]
            loss_mask[r, :n] = self.loss_mask[j]
            token_mask[r, :n] = True
        shape = (self.grad_accum, len(idx) // self.grad_accum, length)
        return {
            "tokens": tokens.reshape(shape),
            "loss_mask": loss_mask.reshape(shape),
            "token_mask": token_mask.reshape(shape),
        }


def build_data(
    examples: Sequence[dict],
    tokenizer,
    end_of_turn: Sequence[int],
    *,
    buckets: Sequence[int],
    batch_size: int,
    grad_accum: int,
    seed: int,
    truncate: bool = True,
    max_examples: int = -1,
    render_mode: str = "auto",
    thinking: bool | None = None,
) -> SFTData:
    """Bucketed SFT data. A template that renders the past differently once the conversation goes on
    (`render_mode` auto -> the render check; Qwen3) gives one example per assistant step
    (`chat.step_samples`), exactly the samples RL trains on in its re-render mode; other templates one
    example per conversation (`tokenize_conversation`)."""
    buckets = tuple(int(b) for b in buckets)
    if max_examples > 0:
        examples = examples[:max_examples]
    toks, masks, truncated, dropped = [], [], 0, 0
    for t, m in _examples(tokenizer, examples, end_of_turn, render_mode, thinking):
        if len(t) > buckets[-1]:
            if not truncate:
                dropped += 1
                continue
            t, m, truncated = t[: buckets[-1]], m[: buckets[-1]], truncated + 1
        if m[1:].sum() == 0:  # nothing to learn from (the first token is never a target)
            dropped += 1
            continue
        toks.append(t)
        masks.append(m)
    if len(toks) < batch_size:
        raise config_fields.ConfigError(
            "train.batch_size", f"{batch_size} is larger than the {len(toks)} usable examples"
        )
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return SFTData(tuple(toks), tuple(masks), buckets, batch_size, grad_accum, seed, int(pad), truncated, dropped)


def _examples(tokenizer, examples, end_of_turn, render_mode: str, thinking):
    """(tokens, loss_mask) per training example (see build_data)."""

    if not examples:
        return
    first = examples[0]
    mode = chat.render_mode_for(tokenizer, first["messages"], first.get("tools"), thinking=thinking, mode=render_mode)
    for ex in examples:
        if mode == chat.RERENDER:
            yield from chat.step_samples(
                tokenizer, ex["messages"], ex.get("tools"), end_of_turn=end_of_turn, thinking=thinking
            )
        else:
            yield tokenize_conversation(tokenizer, ex["messages"], ex.get("tools"), end_of_turn)


def load_examples(config, workdir: str) -> list[dict]:
    """`data.path`, else the stage's dataset built from the train tasks of `data.source` into workdir/data (SFT: expert
    trajectories; RCTP-FT: expert + failure 1:1 with reward goals, the failures generated and, with
    `data.exploration_path`, a policy's own failed rollouts), over the first `data.max_examples` tasks when
    that is set. workdir/data/manifest.json records the counts and the failures' mix."""
    if config.data.path:
        return read_jsonl(config.data.path)

    out = os.path.join(workdir, "data")
    name = {"expert": "sft.jsonl", "rctp": "rctp_ft.jsonl"}[config.data.kind]
    if not os.path.exists(os.path.join(out, name)):
        if jax.process_index() == 0:
            explored = read_explored(config.data.exploration_path) if config.data.get("exploration_path") else ()
            tasks = sources.tasks(config.data, "train")
            datasets.build_all(
                out,
                split="train",
                seed=int(config.seed),
                ids=tasks,
                explored=explored,
                failure_site=config.data.get("failure_site", "any"),
                failure_kinds=config.data.get("failure_kinds", "all"),
            )
        multihost.sync("sft_data")
    return read_jsonl(os.path.join(out, name))
