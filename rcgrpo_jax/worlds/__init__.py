"""A miniature, procedurally generated multi-turn tool world on BFCL's real environment classes."""

from rcgrpo_jax.worlds.compose import HELDOUT_TYPES, READS_RESULTS, TRAIN_TYPES
from rcgrpo_jax.worlds.generate import (
    category_of,
    corpus,
    generate_iid,
    generate_rl_pool,
    generate_world,
    render_episode,
    tool_docs,
)
from rcgrpo_jax.worlds.replay import format_call, format_result, parse_call, replay
from rcgrpo_jax.worlds.vocab import TEST, TRAIN

__all__ = [
    "HELDOUT_TYPES",
    "READS_RESULTS",
    "TRAIN_TYPES",
    "TEST",
    "TRAIN",
    "category_of",
    "corpus",
    "format_call",
    "format_result",
    "generate_iid",
    "generate_rl_pool",
    "generate_world",
    "parse_call",
    "render_episode",
    "replay",
    "tool_docs",
]
