"""Chat formatting (the checkpoint's own template, append-only deltas) and tool-call parsers."""

from rcgrpo_jax.chat.parsers import (
    ERROR_KINDS,
    FAMILIES,
    HermesParser,
    Llama3JsonParser,
    ParsedTurn,
    ToolCallParser,
    error_kind,
    family_for,
    get_parser,
)
from rcgrpo_jax.chat.template import (
    NotAppendOnlyError,
    end_of_turn_ids,
    render_delta,
    render_prompt,
    render_text,
)

__all__ = [
    "ERROR_KINDS",
    "FAMILIES",
    "HermesParser",
    "Llama3JsonParser",
    "ParsedTurn",
    "ToolCallParser",
    "error_kind",
    "family_for",
    "get_parser",
    "NotAppendOnlyError",
    "end_of_turn_ids",
    "render_delta",
    "render_prompt",
    "render_text",
]
