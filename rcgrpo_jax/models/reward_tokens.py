"""The RC-GRPO reward-condition tokens, in one place: their strings and their per-rollout codes (HIGH = 1 for
`<|high_reward|>`, LOW = 0 for `<|low_reward|>`), adding them to a tokenizer and model (`add_reward_tokens`), and
drawing one per rollout (`sample`, RC-GRPO stage 2).

Rows for new tokens are initialised to the mean of the rows of the tokens the tokenizer already knew
(ids below min(len(tokenizer), vocab_size) before adding), in the input embedding and, when untied, in
the lm_head. The mean keeps the new tokens inside the distribution of existing embeddings, so the
untrained model treats them as a generic token rather than an outlier.

HF checkpoints often pad vocab_size beyond len(tokenizer) (Qwen2.5: 152064 rows for 151665 tokens). When
the new ids land in those padding rows, the matrices keep their shape and just those rows are set to
the mean; only ids beyond vocab_size grow the matrices (optionally rounded up to `pad_to_multiple_of`,
e.g. 128 so a tensor-parallel vocab split stays even; extra rows also get the mean). Tokens the
tokenizer already has (a reloaded RCTP checkpoint) keep their trained rows.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from rcgrpo_jax.models.config import ModelConfig

HIGH_REWARD_TOKEN = "<|high_reward|>"
LOW_REWARD_TOKEN = "<|low_reward|>"
REWARD_TOKENS = (HIGH_REWARD_TOKEN, LOW_REWARD_TOKEN)
HIGH = 1  # a rollout's code for HIGH_REWARD_TOKEN
LOW = 0  # ... and for LOW_REWARD_TOKEN


def known_by(tokenizer) -> bool:
    """Whether `tokenizer` holds both reward tokens (a reward-conditioned checkpoint's; `add` adds them)."""
    vocab = tokenizer.get_vocab()
    return all(t in vocab for t in REWARD_TOKENS)


def token_of(code: int) -> str:
    """The reward token of a rollout's code (`sample`'s values): HIGH -> HIGH_REWARD_TOKEN, LOW -> LOW_REWARD_TOKEN."""
    if int(code) not in (HIGH, LOW):
        raise ValueError(f"a reward-token code is {HIGH} (high) or {LOW} (low), got {code!r}")
    return HIGH_REWARD_TOKEN if int(code) == HIGH else LOW_REWARD_TOKEN


def _add_special(tokenizer: Any, tokens: list[str]) -> None:
    if hasattr(tokenizer, "extra_special_tokens"):  # transformers v5
        tokenizer.add_special_tokens({"extra_special_tokens": tokens}, replace_extra_special_tokens=False)
    else:  # transformers v4
        tokenizer.add_special_tokens({"additional_special_tokens": tokens}, replace_additional_special_tokens=False)


def _resize_rows(matrix: jnp.ndarray, new_ids: list[int], num_known: int, vocab_size: int, axis: int) -> jnp.ndarray:
    """Sets rows `new_ids` (along `axis`) to the mean of rows [0, num_known), growing to vocab_size."""
    mean = jnp.mean(jnp.take(matrix, jnp.arange(num_known), axis=axis).astype(jnp.float32), axis=axis, keepdims=True)
    mean = mean.astype(matrix.dtype)
    grow = vocab_size - matrix.shape[axis]
    if grow > 0:
        matrix = jnp.concatenate([matrix, jnp.repeat(mean, grow, axis=axis)], axis=axis)
    ids = jnp.asarray(new_ids, jnp.int32)
    if axis == 0:
        return matrix.at[ids].set(jnp.broadcast_to(mean, (len(new_ids), matrix.shape[1])))
    return matrix.at[:, ids].set(jnp.broadcast_to(mean, (matrix.shape[0], len(new_ids))))


def add_reward_tokens(
    config: ModelConfig,
    params: dict,
    tokenizer: Any,
    tokens: tuple[str, ...] = REWARD_TOKENS,
    *,
    pad_to_multiple_of: int = 1,
) -> tuple[ModelConfig, dict, Any, dict[str, int]]:
    """Adds `tokens` as special tokens; returns (config, params, tokenizer, {token: id}).

    The tokenizer is modified in place (and returned). Params and config are new values.
    """
    num_known = min(len(tokenizer), config.vocab_size)
    vocab = tokenizer.get_vocab()
    fresh = [t for t in tokens if t not in vocab]
    _add_special(tokenizer, list(tokens))
    ids = {t: int(tokenizer.convert_tokens_to_ids(t)) for t in tokens}
    new_ids = sorted(ids[t] for t in fresh)
    needed = max([config.vocab_size, *[i + 1 for i in ids.values()]])
    vocab_size = needed if needed == config.vocab_size else -(-needed // pad_to_multiple_of) * pad_to_multiple_of
    # Padding rows added by growth get the mean too, so list them with the new ids.
    init_ids = sorted(set(new_ids) | set(range(config.vocab_size, vocab_size)))
    if not init_ids:
        return config, params, tokenizer, ids
    params = dict(params)
    params["embed"] = {"embedding": _resize_rows(params["embed"]["embedding"], init_ids, num_known, vocab_size, 0)}
    if not config.tie_word_embeddings:
        params["lm_head"] = {"kernel": _resize_rows(params["lm_head"]["kernel"], init_ids, num_known, vocab_size, 1)}
    return dataclasses.replace(config, vocab_size=vocab_size), params, tokenizer, ids


# ---------------------------------------------------------------- one token per rollout

MODES = ("iid", "stratified")


def sample(
    rng: jax.Array, num_groups: int, group_size: int, p_high: float | jax.Array = 0.5, mode: str = "iid"
) -> jax.Array:
    """Reward tokens [num_groups, group_size] int32, deterministic under `rng`.

    "iid": each token ~ Bernoulli(p_high), as in the paper (p_high = 0.5 matches the 1:1 RCTP data).
    "stratified": the number of high tokens k ~ Binomial(G, p_high) is clipped to [1, G - 1] and the
    k high tokens are placed at uniformly random positions, so every group of G >= 2 holds both
    tokens (a group of one is plain iid). The clipping moves the high share slightly toward 1/2.
    """
    if mode not in MODES:
        raise ValueError(f"unknown reward-token mode {mode!r}; known: {', '.join(MODES)}")
    shape = (num_groups, group_size)
    k_draw, k_perm = jax.random.split(rng)
    iid = jax.random.bernoulli(k_draw, p_high, shape).astype(jnp.int32)
    if mode == "iid" or group_size < 2:
        return iid
    num_high = jnp.clip(iid.sum(axis=1, keepdims=True), 1, group_size - 1)
    # rank of each slot in a random order; the num_high lowest-ranked slots get the high token
    order = jnp.argsort(jax.random.uniform(k_perm, shape), axis=1)
    rank = jnp.argsort(order, axis=1)
    return (rank < num_high).astype(jnp.int32)
