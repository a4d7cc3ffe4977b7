"""How a conversation becomes token sequences: append-only deltas, or a fresh rendering at every step.

Two render modes (`RENDER_MODES`; the rollout config's ``render_mode`` picks one, ``auto`` asks
`render_mode_for`):

- ``append``: one token sequence per episode. The context only grows: sampled tokens stay as sampled
  and what the environment adds is rendered as a delta (`template.render_delta`). Right for templates
  that render the past the same way whatever follows (Qwen2.5, LLaMA-3.1, our tiny ones).
- ``rerender``: one token sequence per assistant step. Before each step the whole conversation is
  rendered again with the generation prompt, as BFCL's local-inference handlers do, and the step's
  training sample is that rendering (context, loss 0) followed by exactly the tokens sampled in the
  step (loss 1). Needed for templates whose rendering of the past changes: Qwen3 drops the reasoning
  (and the empty ``<think></think>`` block) of assistant turns before the last real user message.

`render_mode_for` is the render check: it continues the episode's opening messages with a probe (a
tool step, a two-call step, an answer, a new user turn, an answer; reasoning on the assistant messages)
and asks, at every assistant message, whether the history renders the same once the next messages
follow (the prefix test of `render_delta`, on the whole history). Any difference means ``rerender``.

`step_samples` builds the ``rerender`` samples of a recorded conversation (SFT / RCTP-FT data for such
templates): per assistant message, the rendering of the messages before it with the generation prompt,
then the template's rendering of that message up to and including its end-of-turn token.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from rcgrpo_jax.chat import template

AUTO = "auto"
APPEND = "append"
RERENDER = "rerender"
RENDER_MODES = (AUTO, APPEND, RERENDER)

_PROBE_REASONING = "probe reasoning"


def _probe_call(tools: Sequence[Mapping[str, Any]] | None, k: int) -> dict:
    names = [t.get("function", t).get("name") for t in (tools or ())]
    names = [n for n in names if isinstance(n, str) and n] or ["probe_fn"]
    return {"type": "function", "function": {"name": names[k % len(names)], "arguments": {}}}


def probe_conversation(messages: Sequence[Mapping[str, Any]], tools=None) -> list[dict]:
    """`messages` (an episode's opening, ending with a user message) continued by the probe."""
    call = lambda k: _probe_call(tools, k)  # noqa: E731
    tool = lambda k: {"role": "tool", "name": call(k)["function"]["name"], "content": f"probe result {k}"}  # noqa: E731
    return [dict(m) for m in messages] + [
        {"role": "assistant", "content": "", "tool_calls": [call(0)], "reasoning_content": _PROBE_REASONING},
        tool(0),
        {"role": "assistant", "content": "", "tool_calls": [call(1), call(2)]},
        tool(1),
        tool(2),
        {"role": "assistant", "content": "probe answer", "reasoning_content": _PROBE_REASONING},
        {"role": "user", "content": "probe next request"},
        {"role": "assistant", "content": "probe answer"},
    ]


def append_only(tokenizer, messages, tools=None, *, thinking: bool | None = None) -> bool:
    """Whether the template renders the probe continuation of `messages` append-only (see the module
    docstring). Raises `template.RenderError` when the template cannot render the probe at all."""
    conv = probe_conversation(messages, tools)
    ends = [i for i, m in enumerate(conv) if m["role"] == "assistant"]
    for j, k in zip(ends, ends[1:]):
        short, full, boundary = template.render_pair(tokenizer, conv[: j + 1], conv[j + 1 : k], tools, thinking)
        if full[:boundary] != short[:boundary]:
            return False
    return True


def render_mode_for(tokenizer, messages, tools=None, *, thinking: bool | None = None, mode: str = AUTO) -> str:
    """``append`` or ``rerender``: `mode` itself unless it is ``auto``, then the render check. A template
    that cannot render the probe gets ``rerender`` (it assumes nothing about the template)."""
    if mode not in RENDER_MODES:
        raise ValueError(f"render_mode must be one of {RENDER_MODES}, got {mode!r}")
    if mode != AUTO:
        return mode
    try:
        return APPEND if append_only(tokenizer, messages, tools, thinking=thinking) else RERENDER
    except ValueError:  # RenderError, or no end-of-turn token where the probe expects one
        return RERENDER


def step_samples(
    tokenizer,
    messages: Sequence[Mapping[str, Any]],
    tools=None,
    *,
    end_of_turn: Sequence[int] | None = None,
    thinking: bool | None = None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """One (tokens int32 [T], loss_mask int32 [T]) per assistant message, the ``rerender`` way.

    Sample i = tokens of render(messages[:i], generation prompt) with loss 0, then the tokens of the
    template's text for message i (render(messages[:i + 1]) minus that prefix) up to and including its
    last end-of-turn token, with loss 1; each piece tokenised on its own, as the engine holds them.
    Raises `template.RenderError` if the template does not render message i after its own generation
    prompt (then no sampled step could have produced it).
    """
    eot = end_of_turn if end_of_turn is not None else template.end_of_turn_ids(tokenizer)
    ends = [tokenizer.convert_ids_to_tokens(int(i)) for i in eot]
    out = []
    for i, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        before = template.render_text(tokenizer, messages[:i], tools, add_generation_prompt=True, thinking=thinking)
        upto = template.render_text(tokenizer, messages[: i + 1], tools, add_generation_prompt=False, thinking=thinking)
        if not upto.startswith(before):
            raise template.RenderError(
                f"message {i}: the template does not render this assistant message after its generation prompt"
            )
        turn = upto[len(before) :]
        stop = max((turn.rfind(e) + len(e) for e in ends if e in turn), default=len(turn))
        ctx, target = template.encode_text(tokenizer, before), template.encode_text(tokenizer, turn[:stop])
        tokens = np.asarray(ctx + target, np.int32)
        mask = np.asarray([0] * len(ctx) + [1] * len(target), np.int32)
        out.append((tokens, mask))
    return out
