"""Single-turn outputs: replayed from a file, made by the oracle, or generated greedily by our sampler; then scored
(`single_turn.score`) into one result per entry.
"""

from __future__ import annotations

import json
import time
from typing import Mapping, Sequence

from rcgrpo_jax import chat, sharding
from rcgrpo_jax.eval.single_turn import (
    MISSING_OUTPUT,
    RENDER_ERROR,
    TRUNCATED,
    Entry,
    EntryResult,
    failed,
    messages_for,
    score,
    tools_for,
)
from rcgrpo_jax.eval.single_turn_oracle import oracle_text
from rcgrpo_jax.rollout import ModelPolicy
from rcgrpo_jax.rollout.engine import with_reward_goal
from rcgrpo_jax.sampling import SamplingParams


def read_replay(path: str) -> dict[str, str]:
    """Outputs made elsewhere: JSON lines ``{"id": <BFCL entry id>, "output": "<raw assistant text>"}``.
    Blank lines are skipped; a malformed line, a non-string field or an id given twice raises
    ValueError naming the file and line."""
    out: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{n}: not a JSON object: {err}") from None
            if (
                not isinstance(row, dict)
                or not isinstance(row.get("id"), str)
                or not isinstance(row.get("output"), str)
            ):
                raise ValueError(f'{path}:{n}: expected {{"id": str, "output": str}}, got {line.strip()[:120]}')
            if row["id"] in out:
                raise ValueError(f"{path}:{n}: id {row['id']!r} appears twice")
            out[row["id"]] = row["output"]
    return out


def prompt_messages(entry: Entry, reward_token: str | None) -> list[dict]:

    return with_reward_goal(messages_for(entry), reward_token)


def render_prompts(entries: Sequence[Entry], tokenizer, reward_token: str | None) -> tuple[list[str | None], dict]:
    """The chat template's prompt text of each entry (None where it failed) and the failures
    (id -> EntryResult of kind render_error)."""

    texts: list[str | None] = []
    failures: dict[str, EntryResult] = {}
    for e in entries:
        try:
            texts.append(
                chat.render_text(tokenizer, prompt_messages(e, reward_token), tools_for(e), add_generation_prompt=True)
            )
        except Exception as err:  # noqa: BLE001 - one entry the template refuses must not stop the suite
            texts.append(None)
            failures[e.id] = failed(e, RENDER_ERROR, f"{type(err).__name__}: {err}")
    return texts, failures


def oracle_outputs(entries: Sequence[Entry], tokenizer, parser) -> dict[str, str]:
    """The oracle's texts, through the tokenizer and back (as a model's sampled tokens would be)."""
    texts = [oracle_text(e, parser) for e in entries]
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return {e.id: tokenizer.decode(t, skip_special_tokens=False) for e, t in zip(entries, ids)}


def generate_outputs(
    entries: Sequence[Entry],
    prompts: Sequence[str | None],
    tokenizer,
    model_cfg,
    params,
    eval_cfg,
    *,
    mesh=None,
    progress: bool = False,
) -> tuple[dict[str, str], dict[str, EntryResult]]:
    """One greedy assistant message per entry with our sampler (`rollout.ModelPolicy`), in batches of
    `eval.batch_size` entries of similar prompt length. Returns (id -> text, id -> failure) where a
    prompt of `eval.max_context` tokens or more fails as truncated. Every process makes the same
    device calls and gets the same texts."""
    max_context, max_step = int(eval_cfg.max_context), int(eval_cfg.max_step_tokens)
    stop_ids = chat.end_of_turn_ids(tokenizer)
    outputs: dict[str, str] = {}
    failures: dict[str, EntryResult] = {}
    todo: list[tuple[int, list[int]]] = []
    for i, (e, text) in enumerate(zip(entries, prompts)):
        if text is None:
            continue
        tokens = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        if len(tokens) >= max_context:
            failures[e.id] = failed(e, TRUNCATED, f"prompt of {len(tokens)} tokens >= eval.max_context={max_context}")
        else:
            todo.append((i, tokens))
    todo.sort(key=lambda x: len(x[1]))
    batch = max(int(eval_cfg.batch_size), 1)
    t0 = time.perf_counter()
    for start in range(0, len(todo), batch):
        chunk = todo[start : start + batch]
        policy = ModelPolicy(
            model_cfg,
            params,
            stop_ids=stop_ids,
            max_step_tokens=max_step,
            max_context=max_context,
            sampling=SamplingParams(temperature=0.0),
            prefill_chunk=int(eval_cfg.prefill_chunk),
            mesh=mesh,
            rules=sharding.DECODE_RULES,
            share_prefix=False,
        )
        rows = list(range(len(chunk)))
        policy.start([t for _, t in chunk], rows)
        samples = policy.act(rows, [min(max_step, max_context - len(t) - 1) for _, t in chunk])
        policy.finish(rows)
        for (i, _), s in zip(chunk, samples):
            body = s.tokens[:-1] if s.stopped else s.tokens
            outputs[entries[i].id] = tokenizer.decode(body, skip_special_tokens=False)
        if progress:
            done = start + len(chunk)
            eta = (time.perf_counter() - t0) / done * (len(todo) - done)
            print(f"[eval] single-turn {done}/{len(todo)} entries, ETA {eta:.0f}s", flush=True)
    return outputs, failures


def score_all(
    entries: Sequence[Entry], outputs: Mapping[str, str], parser, failures: Mapping[str, EntryResult] = {}
) -> list[EntryResult]:
    """Each entry's result: its failure if it has one, else its output scored, else missing_output."""
    out = []
    for e in entries:
        if e.id in failures:
            out.append(failures[e.id])
        elif e.id in outputs:
            out.append(score(e, outputs[e.id], parser))
        else:
            out.append(failed(e, MISSING_OUTPUT, "no output for this id"))
    return out
