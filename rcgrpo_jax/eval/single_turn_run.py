"""Single-turn outputs: replayed from a file, made by the oracle, or generated greedily by our sampler; then scored
(`single_turn.score`) into one result per entry.
"""

from __future__ import annotations

import json
import time
from typing import Mapping, Sequence

from rcgrpo_jax import chat
from rcgrpo_jax.eval import greedy
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
from rcgrpo_jax.rollout.engine import with_reward_goal


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
    """One greedy assistant message per entry with our sampler (`greedy.generate`), in batches of
    `eval.batch_size` entries of similar prompt length. Returns (id -> text, id -> failure) where a
    prompt of `eval.max_context` tokens or more fails as truncated. Every process makes the same
    device calls and gets the same texts."""
    todo = [i for i, text in enumerate(prompts) if text is not None]
    t0 = time.perf_counter()

    def show(done: int, total: int) -> None:
        eta = (time.perf_counter() - t0) / done * (total - done)
        print(f"[eval] single-turn {done}/{total} entries, ETA {eta:.0f}s", flush=True)

    texts, too_long = greedy.generate(
        [prompts[i] for i in todo],
        tokenizer,
        model_cfg,
        params,
        greedy.decoding_of(eval_cfg),
        mesh=mesh,
        on_batch=show if progress else None,
    )
    outputs = {entries[i].id: t for i, t in zip(todo, texts) if t is not None}
    failures = {entries[todo[j]].id: failed(entries[todo[j]], TRUNCATED, why) for j, why in too_long.items()}
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
