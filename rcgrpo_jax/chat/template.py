"""Chat rendering through the checkpoint's own chat template, kept append-only.

The token context of a rollout only ever grows: sampled tokens stay exactly as sampled, and what
the environment adds (tool results, the next user turn) is rendered by the template as a *delta*
and appended. Nothing already in the context is re-tokenised. No template is hard-coded here: all
text comes from ``tokenizer.apply_chat_template``.

`render_delta` renders the history (ending with the assistant turn that stopped on an end-of-turn token,
`end_of_turn_ids`) and the history plus the new messages (with the generation prompt); the delta is the text
after the last end-of-turn token string of the history, tokenised with ``add_special_tokens=False``. A longer
rendering that does not equal the shorter one up to that seam raises `NotAppendOnlyError`. Only an anchor of
the history is rendered (its head through the first user message, its tail from the last assistant message),
or the whole history when the anchor renderings are not prefix-consistent.

Every rendering goes through `template_messages`: a template that refuses several tool calls in one assistant
message (LLaMA-3.1's official one; probed once per template by `template_profile`) gets the step's calls as
JSON objects joined by ``"; "`` in the assistant content (`Llama3JsonParser.format`, BFCL's LLaMA-3.1 handler
form) and tool results as ``tool`` messages; other templates get the messages unchanged.

An assistant message's ``reasoning_content`` is rendered by templates that know it (Qwen3); ``thinking``
(True / False / None = the template's default) is passed to the template as ``enable_thinking``.
How the seam, the anchor and the several-call form work, and why: docs/chat.md.
"""

from __future__ import annotations

import dataclasses
import json
import os
import weakref
from typing import Any, Mapping, Sequence

from rcgrpo_jax.chat.parsers import Llama3JsonParser

Message = Mapping[str, Any]
Tool = Mapping[str, Any]

# LLaMA 3.1 ends a message that hands control to a tool with <|eom_id|>; templates only emit it for
# built-in tools, so the probe in `end_of_turn_ids` cannot see it. Added when the vocab has it.
_EXTRA_TURN_ENDS = ("<|eom_id|>",)
_PROBE = "\u2591probe-assistant-text\u2591"
# tokenizer -> (chat_template, ids): the probe render costs as much as a short chat, once is enough.
_EOT_CACHE: "weakref.WeakKeyDictionary[Any, tuple[Any, tuple[int, ...]]]" = weakref.WeakKeyDictionary()


class NotAppendOnlyError(ValueError):
    """The chat template renders earlier turns differently once new messages follow."""


class RenderError(ValueError):
    """The chat template cannot render these messages (it raised, or a message has no form it takes)."""


@dataclasses.dataclass(frozen=True)
class TemplateProfile:
    """What a chat template does with tool calls, probed once per template (`template_profile`).

    multi_call: it renders an assistant message holding several ``tool_calls`` (each call's name in
      the text, no exception). False for LLaMA-3.1's official template; its several-call steps are then
      written as content (see the module docstring).
    """

    multi_call: bool


def _raw_render(tokenizer, messages, tools, add_generation_prompt: bool, thinking: bool | None) -> str:
    kwargs = {} if thinking is None else {"enable_thinking": bool(thinking)}
    text = tokenizer.apply_chat_template(
        [dict(m) for m in messages],
        tools=list(tools) if tools else None,
        tokenize=False,
        add_generation_prompt=add_generation_prompt,
        **kwargs,
    )
    if not isinstance(text, str):
        raise TypeError(f"apply_chat_template(tokenize=False) returned {type(text).__name__}, not str")
    return text


_PROBE_CALLS = (
    {"type": "function", "function": {"name": "probe_first_fn", "arguments": {"x": 1}}},
    {"type": "function", "function": {"name": "probe_second_fn", "arguments": {"y": "z"}}},
)
_PROFILE_CACHE: "weakref.WeakKeyDictionary[Any, tuple[Any, TemplateProfile]]" = weakref.WeakKeyDictionary()


def template_profile(tokenizer) -> TemplateProfile:
    """Probe the template with a two-call assistant message (cached per tokenizer and template)."""
    cached = _PROFILE_CACHE.get(tokenizer)
    if cached is not None and cached[0] == tokenizer.chat_template:
        return cached[1]
    probe = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": list(_PROBE_CALLS)}]
    try:
        text = _raw_render(tokenizer, probe, None, False, None)
        multi = all(c["function"]["name"] in text for c in _PROBE_CALLS)
    except Exception:  # noqa: BLE001 - jinja's TemplateError from raise_exception, or any template failure
        multi = False
    profile = TemplateProfile(multi_call=multi)
    _PROFILE_CACHE[tokenizer] = (tokenizer.chat_template, profile)
    return profile


def _call_of(call: Mapping[str, Any], where: str) -> dict[str, Any]:
    fn = call.get("function", call)
    args = fn.get("arguments", {})
    if isinstance(args, str):  # OpenAI-format data keeps arguments as a JSON string: data, read by json
        try:
            args = json.loads(args)
        except ValueError as e:
            raise RenderError(f"{where}: tool-call arguments are not valid JSON: {e}") from None
    return {"name": fn.get("name"), "arguments": args}


def template_messages(tokenizer, messages: Sequence[Message]) -> list[dict]:
    """`messages` in a form the tokenizer's template renders: unchanged, except that a template which
    takes one tool call per message gets each several-call assistant message as content text
    (`Llama3JsonParser.format`: ``{"name": ..., "parameters": ...}`` objects joined by ``"; "``)."""
    out = [dict(m) for m in messages]
    if all(len(m.get("tool_calls") or ()) <= 1 for m in out if m.get("role") == "assistant"):
        return out
    if template_profile(tokenizer).multi_call:
        return out

    for i, m in enumerate(out):
        calls = m.get("tool_calls") or ()
        if m.get("role") != "assistant" or len(calls) <= 1:
            continue
        if (m.get("content") or "").strip():
            raise RenderError(
                f"message {i}: the template takes one tool call per message, so several calls are written as "
                "content; this message also has text content, which that form cannot hold"
            )
        try:
            text = Llama3JsonParser().format([_call_of(c, f"message {i}") for c in calls])
        except ValueError as e:
            raise RenderError(f"message {i}: {e}") from None
        m.pop("tool_calls")
        m["content"] = text
    return out


def render_text(
    tokenizer,
    messages: Sequence[Message],
    tools: Sequence[Tool] | None = None,
    *,
    add_generation_prompt: bool,
    thinking: bool | None = None,
) -> str:
    """The template's text for `messages` (no tokenisation), through `template_messages`.

    thinking: passed as ``enable_thinking`` when not None. Raises `RenderError` when the template raises.
    """
    adapted = template_messages(tokenizer, messages)
    try:
        return _raw_render(tokenizer, adapted, tools, add_generation_prompt, thinking)
    except (RenderError, TypeError):
        raise
    except Exception as e:  # noqa: BLE001 - jinja2 TemplateError (raise_exception), UndefinedError, ...
        raise RenderError(f"the chat template failed: {type(e).__name__}: {e}") from e


def encode_text(tokenizer, text: str) -> list[int]:
    """The token ids of `text`, no special tokens added."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def render_prompt(
    tokenizer, messages: Sequence[Message], tools: Sequence[Tool] | None = None, *, thinking: bool | None = None
) -> list[int]:
    """Token ids of `messages` plus the generation prompt (the template writes BOS itself)."""
    return encode_text(
        tokenizer, render_text(tokenizer, messages, tools, add_generation_prompt=True, thinking=thinking)
    )


@dataclasses.dataclass(frozen=True)
class RenderedPrompt:
    """A rendered prompt: its text and its token ids (`render_prompt_reusing`)."""

    text: str
    ids: tuple[int, ...]


def _eot_seams(tokenizer, text: str, ids: Sequence[int]) -> list[tuple[int, int]] | None:
    """(character end, token end) of every end-of-turn token of `text` / `ids`, in order; None when the
    two do not pair up one to one (then nothing is reused)."""
    eot = end_of_turn_ids(tokenizer)
    names = {tokenizer.convert_ids_to_tokens(i) for i in eot}
    at_ids = [k + 1 for k, t in enumerate(ids) if t in eot]
    at_text = []
    for name in names:
        pos = text.find(name)
        while pos >= 0:
            at_text.append(pos + len(name))
            pos = text.find(name, pos + 1)
    at_text.sort()
    return list(zip(at_text, at_ids)) if len(at_text) == len(at_ids) else None


def render_prompt_reusing(
    tokenizer,
    messages: Sequence[Message],
    tools: Sequence[Tool] | None = None,
    *,
    thinking: bool | None = None,
    previous: RenderedPrompt | None = None,
) -> RenderedPrompt:
    """`render_prompt`, tokenising only what changed since `previous` (the same conversation's last
    rendering): the new text is compared with the old one, the old tokens are kept through the last
    end-of-turn token before the first difference, and only the text after it is tokenised. Equal to
    `render_prompt` because text after a special token tokenises on its own (the seam `render_delta`
    relies on too). Re-rendering every step then costs the template's rendering plus the new tail."""
    text = render_text(tokenizer, messages, tools, add_generation_prompt=True, thinking=thinking)
    seams = None if previous is None else _eot_seams(tokenizer, previous.text, previous.ids)
    if not seams:
        return RenderedPrompt(text, tuple(encode_text(tokenizer, text)))
    n = len(os.path.commonprefix([previous.text, text]))
    usable = [(c, t) for c, t in seams if c <= n]
    if not usable:
        return RenderedPrompt(text, tuple(encode_text(tokenizer, text)))
    c, t = usable[-1]
    return RenderedPrompt(text, previous.ids[:t] + tuple(encode_text(tokenizer, text[c:])))


def end_of_turn_ids(tokenizer) -> tuple[int, ...]:
    """Stop tokens of an assistant turn, the template's own first.

    The template's token is found by rendering a probe conversation and reading the special token
    that directly follows the assistant text; then ``eos_token_id`` and `_EXTRA_TURN_ENDS` present
    in the vocabulary are added.
    """
    cached = _EOT_CACHE.get(tokenizer)
    if cached is not None and cached[0] == tokenizer.chat_template:
        return cached[1]
    probe = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _PROBE}]
    text = render_text(tokenizer, probe, add_generation_prompt=False)
    at = text.rfind(_PROBE)
    if at < 0:
        raise ValueError("the chat template dropped the assistant message of the probe conversation")
    after = encode_text(tokenizer, text[at + len(_PROBE) :])
    special = set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder)
    if not after or after[0] not in special:
        raise ValueError(
            "the chat template does not close an assistant turn with a special token; "
            f"text after the assistant message: {text[at + len(_PROBE) :][:80]!r}"
        )
    ids = [after[0]]
    vocab = tokenizer.get_vocab()
    extra = [tokenizer.eos_token_id] + [vocab.get(t) for t in _EXTRA_TURN_ENDS]
    ids += [i for i in extra if i is not None and i not in ids]
    _EOT_CACHE[tokenizer] = (tokenizer.chat_template, tuple(ids))
    return tuple(ids)


def _anchor(history: Sequence[Message]) -> list[Message] | None:
    """A short stand-in for `history` with the same rendered tail: the head (messages up to and
    including the first user message: system prompt, tool block, anything a template renders once
    per conversation) plus the trailing messages back to the last assistant message. None when
    that is the whole history anyway."""
    first_user = next((i for i, m in enumerate(history) if m.get("role") == "user"), None)
    last_assistant = max(i for i, m in enumerate(history) if m.get("role") == "assistant")
    if first_user is None or last_assistant <= first_user + 1:
        return None
    return list(history[: first_user + 1]) + list(history[last_assistant:])


def render_pair(
    tokenizer,
    history: Sequence[Message],
    new_messages: Sequence[Message],
    tools: Sequence[Tool] | None,
    thinking: bool | None = None,
) -> tuple[str, str, int]:
    """(history text, history + new text with the generation prompt, end of the last end-of-turn)."""
    short = render_text(tokenizer, history, tools, add_generation_prompt=False, thinking=thinking)
    full = render_text(
        tokenizer, list(history) + list(new_messages), tools, add_generation_prompt=True, thinking=thinking
    )
    ends = [tokenizer.convert_ids_to_tokens(i) for i in end_of_turn_ids(tokenizer)]
    boundary = max((short.rfind(e) + len(e) for e in ends if e in short), default=-1)
    if boundary < 0:
        raise ValueError(f"no end-of-turn token {ends} in the rendered history")
    return short, full, boundary


def render_delta(
    tokenizer,
    history: Sequence[Message],
    new_messages: Sequence[Message],
    tools: Sequence[Tool] | None = None,
    *,
    thinking: bool | None = None,
) -> list[int]:
    """Tokens to append after the assistant turn that ends `history`, so that the context becomes
    ``history + new_messages`` followed by the generation prompt. See the module docstring.

    Cost: the template renders only an anchor (the conversation's head plus its trailing messages
    from the last assistant message, see `_anchor`) instead of the whole history, twice: in an
    append-only template the text after the seam depends only on those. If the anchor's two
    renderings are not prefix-consistent, the whole history is rendered instead (which raises
    `NotAppendOnlyError` if the template really rewrites earlier turns).
    """
    if not history or history[-1].get("role") != "assistant":
        raise ValueError("render_delta needs a history that ends with an assistant message")
    anchor = _anchor(history)
    if anchor is not None:
        short, full, boundary = render_pair(tokenizer, anchor, new_messages, tools, thinking)
        if full[:boundary] == short[:boundary]:
            return encode_text(tokenizer, full[boundary:])
    short, full, boundary = render_pair(tokenizer, history, new_messages, tools, thinking)
    if full[:boundary] != short[:boundary]:
        at = next(i for i, (a, b) in enumerate(zip(short, full)) if a != b)
        raise NotAppendOnlyError(
            "the chat template is not append-only: the history renders differently once new messages "
            f"follow (first difference at character {at}: {short[max(0, at - 40) : at + 40]!r} vs "
            f"{full[max(0, at - 40) : at + 40]!r}). Changing `tools` mid-episode also does this."
        )
    return encode_text(tokenizer, full[boundary:])
