"""`generate()`: the one-call API over a `DecodeSession` (prefill every prompt, decode to a stop or the budget).

It sits apart from the jitted core (`decode_loop.py`, `session.py`), as gemma's sampler keeps its loop apart
from its entry point, so the core never imports its caller.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import numpy as np
from jax.sharding import Mesh

from rcgrpo_jax import sharding
from rcgrpo_jax.models import ModelConfig
from rcgrpo_jax.sampling import buckets, decode_loop
from rcgrpo_jax.sampling.next_token import SamplingParams
from rcgrpo_jax.sampling.session import DecodeSession


@dataclasses.dataclass
class GenerateResult:
    """Per prompt: generated ids (stop token included when hit), their log-probs, and whether it stopped."""

    tokens: list[list[int]]
    logprobs: list[np.ndarray]
    lengths: list[int]
    stopped: list[bool]


def generate(
    config: ModelConfig,
    params,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    stop_token_ids=(),
    rng: jax.Array | None = None,
    mesh: Mesh | None = None,
    rules: sharding.Rules = sharding.DECODE_RULES,
    prefill_chunk: int = 512,
    decode_attention: str = "auto",
) -> GenerateResult:
    """Sample continuations of a batch of token-id prompts (of any lengths).

    stop_token_ids: one tuple for all prompts, or one tuple per prompt. rng: a PRNG key (needed
    only when temperature > 0; defaults to key 0). With a mesh, the batch is split over data+fsdp,
    activations follow `rules.logical`, and params are used with the sharding they already carry
    (place them with `sharding.shard_params(params, mesh, rules)`, or `decode_weights`).
    decode_attention: auto | xla | ragged | tokamax (`decode_step.select_decode_attention`).
    """
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("generate needs at least one prompt and no empty prompt")
    rows = buckets.batch_bucket(len(prompts), decode_loop.batch_multiple(mesh))
    longest = max(len(p) for p in prompts)
    budget = buckets.length_bucket(max_new_tokens)
    capacity = buckets.length_bucket(longest) + budget
    session = DecodeSession(
        config,
        params,
        rows,
        capacity,
        sampling=SamplingParams(temperature, top_k, top_p),
        max_new_tokens=budget,
        prefill_chunk=prefill_chunk,
        mesh=mesh,
        rng=jax.random.key(0) if rng is None else rng,
        rules=rules,
        span=buckets.span_bucket(longest + max_new_tokens, capacity),
        decode_attention=decode_attention,
    )
    session.append(prompts)
    out = session.decode([max_new_tokens] * len(prompts), stop_token_ids)[: len(prompts)]
    return GenerateResult(
        tokens=[toks for toks, _, _ in out],
        logprobs=[lps for _, lps, _ in out],
        lengths=[len(toks) for toks, _, _ in out],
        stopped=[stopped for _, _, stopped in out],
    )
