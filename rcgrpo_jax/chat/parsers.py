"""Tool-call parsers: assistant text -> (content, calls, errors), and back.

Model output is data, never code: the only thing that reads a call is `json` (no eval, no
`ast.literal_eval`). A parser never raises on model text; every problem becomes an error
string of the form ``"<kind>: call <n>: <detail>"`` where ``<kind>`` is one of the ``ERR_*``
constants below (see `error_kind`), so callers can count error types and the environment can
show the message to the model as an observation.

Families:

- ``hermes`` (Qwen2 / Qwen2.5 / Qwen3): zero or more blocks ``<tool_call>\\n{"name": ...,
  "arguments": {...}}\\n</tool_call>``; text outside the blocks is the content. A leading reasoning
  block ``<think>...</think>`` (Qwen3) is split off first into `ParsedTurn.reasoning`, as Qwen3's
  template and BFCL's handler split it (`split_reasoning`): a ``<tool_call>`` inside it is not a call.
  A ``<think>`` never closed (the step budget ran out while thinking) makes the whole text reasoning and
  an ``unterminated`` error.
- ``llama3_json`` (LLaMA 3.1): the whole message is one or more JSON objects ``{"name": ...,
  "parameters": {...}}`` (``"arguments"`` also accepted) separated by ``;``, ``,`` and/or newlines,
  or one JSON list of such objects, optionally after ``<|python_tag|>`` (what LLaMA-3.1 emits, and
  what BFCL's LLaMA-3.1 handler decodes). A message that starts with neither ``{`` nor ``[{`` is
  plain content.

`format` writes the text that the family's chat template (see `rcgrpo_jax.models.tiny`) renders
for an assistant message with ``tool_calls``, and that `parse` reads back exactly.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Iterable, Mapping, Protocol, Sequence

from rcgrpo_jax import model_families

# Error kinds (the prefix of every error string).
ERR_INVALID_JSON = "invalid_json"
ERR_NOT_AN_OBJECT = "not_an_object"
ERR_MISSING_NAME = "missing_name"
ERR_BAD_NAME = "bad_name"
ERR_BAD_ARGUMENTS = "bad_arguments"
ERR_NON_FINITE = "non_finite"
ERR_UNTERMINATED = "unterminated"
ERR_TRAILING_TEXT = "trailing_text"
ERR_STRAY_CLOSE = "stray_close"
ERROR_KINDS = (
    ERR_INVALID_JSON,
    ERR_NOT_AN_OBJECT,
    ERR_MISSING_NAME,
    ERR_BAD_NAME,
    ERR_BAD_ARGUMENTS,
    ERR_NON_FINITE,
    ERR_UNTERMINATED,
    ERR_TRAILING_TEXT,
    ERR_STRAY_CLOSE,
)


@dataclasses.dataclass(frozen=True)
class ParsedTurn:
    """One assistant message, parsed. ``calls`` are ``{"name": str, "arguments": dict}``; ``reasoning``
    is the text of its ``<think>`` block ("" when it has none or an empty one)."""

    content: str
    calls: list[dict[str, Any]]
    errors: list[str]
    reasoning: str = ""


def error_kind(error: str) -> str:
    """The kind prefix of an error string produced by a parser."""
    return error.split(":", 1)[0]


class ToolCallParser(Protocol):
    family: str

    def parse(self, text: str) -> ParsedTurn: ...

    def format(self, calls: Sequence[Mapping[str, Any]], content: str = "", reasoning: str | None = None) -> str: ...


# ---------------------------------------------------------------------------------------------
# JSON helpers shared by both families.


class _NonFinite(ValueError):
    pass


def _reject_constant(name: str) -> float:
    raise _NonFinite(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # e.g. 1e400 overflows to inf
        raise _NonFinite(f"number {text[:40]} overflows to {value}")
    return value


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def _decode_at(text: str, idx: int, n: int) -> tuple[Any, int, str | None]:
    """raw_decode one JSON value at text[idx:]; returns (value, end, None) or (None, -1, error)."""
    try:
        value, end = _DECODER.raw_decode(text, idx)
        return value, end, None
    except _NonFinite as e:
        return None, -1, f"{ERR_NON_FINITE}: call {n}: {e}"
    except (ValueError, RecursionError) as e:  # JSONDecodeError, int digit limit, deep nesting
        return None, -1, f"{ERR_INVALID_JSON}: call {n}: {type(e).__name__}: {str(e)[:200]}"


def _call_from_object(obj: Any, n: int, arg_keys: tuple[str, ...]) -> tuple[dict | None, str | None]:
    """Validate a decoded call object; returns (call, None) or (None, error)."""
    if not isinstance(obj, dict):
        return None, f"{ERR_NOT_AN_OBJECT}: call {n}: expected a JSON object, got {type(obj).__name__}"
    if "name" not in obj:
        return None, f"{ERR_MISSING_NAME}: call {n}: the object has no \"name\" field"
    name = obj["name"]
    if not isinstance(name, str) or not name.strip():
        return None, f"{ERR_BAD_NAME}: call {n}: \"name\" must be a non-empty string, got {name!r:.80}"
    key = next((k for k in arg_keys if k in obj), None)
    args = {} if key is None else obj[key]  # a call without arguments takes none
    if not isinstance(args, dict):
        return None, (f"{ERR_BAD_ARGUMENTS}: call {n}: \"{key}\" must be a JSON object, got {type(args).__name__}")
    return {"name": name, "arguments": args}, None


def _check_calls(calls: Iterable[Mapping[str, Any]]) -> list[tuple[str, dict]]:
    """Validate calls given to `format` (our own code's input, so errors raise)."""
    out = []
    for i, call in enumerate(calls):
        name, args = call.get("name"), call.get("arguments", {})
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"call {i}: name must be a non-empty string, got {name!r}")
        if not isinstance(args, Mapping):
            raise ValueError(f"call {i}: arguments must be a mapping, got {type(args).__name__}")
        out.append((name, dict(args)))
    return out


def _dumps(obj: Any) -> str:
    # Same text as the chat template's `tojson` filter (json.dumps, ensure_ascii=False).
    return json.dumps(obj, ensure_ascii=False, allow_nan=False)


# ---------------------------------------------------------------------------------------------
# Hermes / Qwen.

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


def split_reasoning(text: str) -> tuple[str, str, list[str]]:
    """(reasoning, answer text, errors) of an assistant text, as Qwen3's template splits it.

    A reasoning block is recognised only at the start: the text opens with ``<think>`` (after
    whitespace), or it holds a ``</think>`` before any ``<tool_call>`` (a template that put ``<think>``
    in the generation prompt). Reasoning = the text up to the first ``</think>`` without the opening
    tag, newlines stripped at both ends; the answer = the text after it, leading newlines stripped. So
    a ``<tool_call>`` inside an opened block is not a call, and a ``</think>`` inside a later call's
    argument does not cut anything. An opened block that never closes (the step budget ran out while
    thinking) is all reasoning, with no answer and an ``unterminated`` error.
    """
    stripped = text.lstrip()
    opened = stripped.startswith(THINK_OPEN)
    body = stripped[len(THINK_OPEN) :] if opened else text
    close = body.find(THINK_CLOSE)
    if close < 0:
        if opened:
            return body.strip("\n"), "", [f"{ERR_UNTERMINATED}: call 1: no {THINK_CLOSE} after {THINK_OPEN}"]
        return "", text, []
    if not opened and TOOL_CALL_OPEN in body[:close]:
        return "", text, []
    return body[:close].strip("\n"), body[close + len(THINK_CLOSE) :].lstrip("\n"), []


def _skip_ws(text: str, idx: int) -> int:
    while idx < len(text) and text[idx].isspace():
        idx += 1
    return idx


class HermesParser:
    """``<tool_call>`` blocks, as Qwen2/2.5 and Hermes models write them.

    The end of a block is found by decoding its JSON (so a ``</tool_call>`` inside a string
    argument does not cut it short), then expecting the closing tag.
    """

    family = "hermes"

    def parse(self, text: str) -> ParsedTurn:
        reasoning, text, errors = split_reasoning(text)
        if errors:
            return ParsedTurn(content="", calls=[], errors=errors, reasoning=reasoning)
        turn = self._parse_calls(text)
        return dataclasses.replace(turn, reasoning=reasoning)

    def _parse_calls(self, text: str) -> ParsedTurn:
        content, calls, errors = [], [], []
        pos, n = 0, 0
        while True:
            start = text.find(TOOL_CALL_OPEN, pos)
            content.append(text[pos:] if start < 0 else text[pos:start])
            if start < 0:
                break
            n += 1
            body = _skip_ws(text, start + len(TOOL_CALL_OPEN))
            value, end, err = _decode_at(text, body, n)
            if err:
                errors.append(err)
                close = text.find(TOOL_CALL_CLOSE, body)
                if close < 0:
                    errors.append(f"{ERR_UNTERMINATED}: call {n}: no {TOOL_CALL_CLOSE} after {TOOL_CALL_OPEN}")
                    break
                pos = close + len(TOOL_CALL_CLOSE)
                continue
            after = _skip_ws(text, end)
            if not text.startswith(TOOL_CALL_CLOSE, after):
                close = text.find(TOOL_CALL_CLOSE, after)
                if close < 0:
                    errors.append(f"{ERR_UNTERMINATED}: call {n}: no {TOOL_CALL_CLOSE} after the JSON object")
                    break
                errors.append(
                    f"{ERR_TRAILING_TEXT}: call {n}: text between the JSON object and "
                    f"{TOOL_CALL_CLOSE}: {text[after:close][:80]!r}"
                )
                pos = close + len(TOOL_CALL_CLOSE)
                continue
            call, err = _call_from_object(value, n, ("arguments", "parameters"))
            if err:
                errors.append(err)
            else:
                calls.append(call)
            pos = after + len(TOOL_CALL_CLOSE)
        joined = "".join(content)
        if TOOL_CALL_CLOSE in joined:
            errors.append(f"{ERR_STRAY_CLOSE}: call {n + 1}: {TOOL_CALL_CLOSE} without an opening tag")
        return ParsedTurn(content=joined.strip(), calls=calls, errors=errors)

    def format(self, calls: Sequence[Mapping[str, Any]], content: str = "", reasoning: str | None = None) -> str:
        """Content (if any), then one block per call, newline-separated (as the template renders); with
        `reasoning` (a string, "" included), first ``<think>\\n{reasoning}\\n</think>\\n\\n`` as Qwen3's
        template renders the latest assistant message."""
        if TOOL_CALL_OPEN in content or TOOL_CALL_CLOSE in content:
            raise ValueError("content must not contain <tool_call> tags")
        if content != content.strip():
            raise ValueError("content must not start or end with whitespace (parse strips it)")
        if THINK_OPEN in content or THINK_CLOSE in content:
            raise ValueError("content must not contain <think> tags")
        blocks = [
            f"{TOOL_CALL_OPEN}\n{_dumps({'name': name, 'arguments': args})}\n{TOOL_CALL_CLOSE}"
            for name, args in _check_calls(calls)
        ]
        body = "\n".join(([content] if content else []) + blocks)
        if reasoning is None:
            return body
        if THINK_CLOSE in reasoning or reasoning != reasoning.strip("\n"):
            raise ValueError("reasoning must not contain </think> nor start or end with a newline (parse strips them)")
        return f"{THINK_OPEN}\n{reasoning}\n{THINK_CLOSE}\n\n{body}"


# ---------------------------------------------------------------------------------------------
# LLaMA 3.1 JSON.

PYTHON_TAG = "<|python_tag|>"
LLAMA_CALL_SEPARATOR = "; "


class Llama3JsonParser:
    """LLaMA 3.1 JSON tool calls: the message is a sequence of call objects, or plain content."""

    family = "llama3_json"

    def parse(self, text: str) -> ParsedTurn:
        body = text.strip()
        tagged = body.startswith(PYTHON_TAG)
        if tagged:
            body = body[len(PYTHON_TAG) :].strip()
        if body.startswith("[") and (tagged or body[1:].lstrip().startswith(("{", "]"))):
            return self._parse_list(body)
        if not body.startswith("{"):
            if tagged:  # the tag promises a call
                err = f"{ERR_INVALID_JSON}: call 1: expected a JSON object after {PYTHON_TAG}, got {body[:80]!r}"
                return ParsedTurn(content="", calls=[], errors=[err])
            return ParsedTurn(content=body, calls=[], errors=[])
        calls, errors = [], []
        idx, n = 0, 0
        while True:
            while idx < len(body) and (body[idx].isspace() or body[idx] in ";,"):
                idx += 1
            if idx >= len(body):
                break
            n += 1
            if body[idx] != "{":
                errors.append(f"{ERR_TRAILING_TEXT}: call {n}: expected a JSON object, got {body[idx : idx + 80]!r}")
                break
            value, end, err = _decode_at(body, idx, n)
            if err:
                errors.append(err)
                break
            call, err = _call_from_object(value, n, ("parameters", "arguments"))
            if err:
                errors.append(err)
            else:
                calls.append(call)
            idx = end
        return ParsedTurn(content="", calls=calls, errors=errors)

    def _parse_list(self, body: str) -> ParsedTurn:
        """``[{...}, {...}]``: one JSON list of call objects, nothing after it."""
        value, end, err = _decode_at(body, 0, 1)
        if err:
            return ParsedTurn(content="", calls=[], errors=[err])
        if not isinstance(value, list):  # unreachable after "[", kept for safety
            return ParsedTurn(content="", calls=[], errors=[f"{ERR_NOT_AN_OBJECT}: call 1: expected a JSON list"])
        calls, errors = [], []
        for n, obj in enumerate(value, 1):
            call, err = _call_from_object(obj, n, ("parameters", "arguments"))
            if err:
                errors.append(err)
            else:
                calls.append(call)
        rest = body[end:].strip()
        if rest:
            errors.append(f"{ERR_TRAILING_TEXT}: call {len(value) + 1}: text after the JSON list: {rest[:80]!r}")
        return ParsedTurn(content="", calls=calls, errors=errors)

    def format(self, calls: Sequence[Mapping[str, Any]], content: str = "", reasoning: str | None = None) -> str:
        """Calls as ``{"name": ..., "parameters": ...}`` joined by ``"; "``; or the content alone.
        LLaMA-3.1 has no reasoning block: `reasoning` must be None."""
        if reasoning is not None:
            raise ValueError("llama3_json has no reasoning block")
        checked = _check_calls(calls)
        if checked and content:
            raise ValueError("llama3_json writes a message of tool calls only: content must be empty")
        if not checked:
            if content != content.strip() or content.startswith(("{", PYTHON_TAG)):
                raise ValueError("content must be stripped and must not look like a tool call")
            return content
        return LLAMA_CALL_SEPARATOR.join(_dumps({"name": name, "parameters": args}) for name, args in checked)


# ---------------------------------------------------------------------------------------------

_PARSERS: dict[str, ToolCallParser] = {"hermes": HermesParser(), "llama3_json": Llama3JsonParser()}
FAMILIES = tuple(_PARSERS)


def get_parser(family: str) -> ToolCallParser:
    try:
        return _PARSERS[family]
    except KeyError:
        raise ValueError(f"unknown tool-call family {family!r}; known: {sorted(_PARSERS)}") from None


def family_for(model_type: str) -> str:
    """The tool-call family of an HF ``model_type`` (``qwen2``, ``qwen3`` -> hermes, ``llama`` -> llama3_json),
    from the family table (`rcgrpo_jax.model_families`)."""
    if model_type not in model_families.FAMILIES:
        raise ValueError(f"no tool-call family for model_type {model_type!r}; known: {sorted(model_families.FAMILIES)}")
    return model_families.FAMILIES[model_type].tool_call_format
