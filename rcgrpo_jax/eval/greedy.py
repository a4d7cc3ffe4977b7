"""One greedy assistant message per prompt with our sampler (`rollout.ModelPolicy`), in batches: the shared
decoding loop of the single-message suites (BFCL single-turn, MMLU-Pro)."""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from rcgrpo_jax import chat, sharding
from rcgrpo_jax.rollout import ModelPolicy
from rcgrpo_jax.sampling import SamplingParams


@dataclasses.dataclass(frozen=True)
class Decoding:
    max_context: int  # prompt + output tokens; a prompt of this many tokens or more is not decoded
    max_new_tokens: int
    batch_size: int
    prefill_chunk: int


def decoding_of(eval_cfg, max_new_tokens: int | None = None) -> Decoding:
    """The decoding settings of an `eval` config section (`max_new_tokens` None: eval.max_step_tokens)."""
    return Decoding(
        max_context=int(eval_cfg.max_context),
        max_new_tokens=int(eval_cfg.max_step_tokens if max_new_tokens is None else max_new_tokens),
        batch_size=max(int(eval_cfg.batch_size), 1),
        prefill_chunk=int(eval_cfg.prefill_chunk),
    )


def generate(
    prompts: Sequence[str],
    tokenizer,
    model_cfg,
    params,
    decoding: Decoding,
    *,
    mesh=None,
    on_batch: Callable[[int, int], None] | None = None,
) -> tuple[list[str | None], dict[int, str]]:
    """Greedy texts of `prompts` (rendered prompt strings), in batches of prompts of similar length.

    Returns (texts, too_long): texts[i] is the decoded message without its end-of-turn token, None for a
    prompt of `decoding.max_context` tokens or more, which `too_long` maps to a one-line reason. Every
    process makes the same device calls and gets the same texts. `on_batch(done, total)` is called
    after each batch (a progress display)."""
    stop_ids = chat.end_of_turn_ids(tokenizer)
    texts: list[str | None] = [None] * len(prompts)
    too_long: dict[int, str] = {}
    todo: list[tuple[int, list[int]]] = []
    for i, text in enumerate(prompts):
        tokens = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        if len(tokens) >= decoding.max_context:
            too_long[i] = f"prompt of {len(tokens)} tokens >= eval.max_context={decoding.max_context}"
        else:
            todo.append((i, tokens))
    todo.sort(key=lambda x: len(x[1]))
    for start in range(0, len(todo), decoding.batch_size):
        chunk = todo[start : start + decoding.batch_size]
        policy = ModelPolicy(
            model_cfg,
            params,
            stop_ids=stop_ids,
            max_step_tokens=decoding.max_new_tokens,
            max_context=decoding.max_context,
            sampling=SamplingParams(temperature=0.0),
            prefill_chunk=decoding.prefill_chunk,
            mesh=mesh,
            rules=sharding.DECODE_RULES,
            share_prefix=False,
        )
        rows = list(range(len(chunk)))
        policy.start([t for _, t in chunk], rows)
        budgets = [min(decoding.max_new_tokens, decoding.max_context - len(t) - 1) for _, t in chunk]
        samples = policy.act(rows, budgets)
        policy.finish(rows)
        for (i, _), s in zip(chunk, samples):
            body = s.tokens[:-1] if s.stopped else s.tokens
            texts[i] = tokenizer.decode(body, skip_special_tokens=False)
        if on_batch is not None:
            on_batch(start + len(chunk), len(todo))
    return texts, too_long
