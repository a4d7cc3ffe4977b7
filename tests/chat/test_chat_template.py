"""Append-only rendering through the checkpoint's own chat template, for both families."""

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcgrpo_jax.chat import (
    NotAppendOnlyError,
    end_of_turn_ids,
    family_for,
    get_parser,
    render_delta,
    render_prompt,
    render_text,
    template,
)


def _tool(name, desc, **params):
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": desc,
            "parameters": {
                "type": "dict",
                "properties": {p: {"type": t} for p, t in params.items()},
                "required": list(params),
            },
        },
    }


TOOLS = [
    _tool("mv", "Move a file.", source="string", destination="string"),
    _tool("cd", "Change directory.", folder="string"),
    _tool("ls", "List files.", a="boolean"),
    _tool("wc", "Count lines.", file_name="string", mode="string"),
]


def conversation(arch):
    """A multi-step tool conversation: several calls per step, several steps per user turn, two user turns."""
    counting = {"role": "assistant", "tool_calls": [{"name": "wc", "arguments": {"file_name": "r.pdf", "mode": "l"}}]}
    if arch == "qwen2":
        counting["content"] = "Counting now."
    return [
        {"role": "system", "content": "You operate a file system."},
        {"role": "user", "content": "Move final_report.pdf into temp, then list temp."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"name": "mv", "arguments": {"source": "final_report.pdf", "destination": "temp"}},
                {"name": "cd", "arguments": {"folder": "temp"}},
            ],
        },
        {"role": "tool", "content": "null"},
        {"role": "tool", "content": '{"current_working_directory": "temp"}'},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [  # OpenAI-style call
                {"type": "function", "function": {"name": "ls", "arguments": {"a": True}}}
            ],
        },
        {"role": "tool", "content": '{"current_directory_content": ["final_report.pdf"]}'},
        {"role": "assistant", "content": "Moved; temp holds final_report.pdf."},
        {"role": "user", "content": "Now count its lines — und zähle die Wörter 🚀, s'il te plaît."},
        counting,
        {"role": "tool", "content": '{"count": 12}'},
        {"role": "assistant", "content": "It has 12 lines."},
        {"role": "user", "content": "Thanks!"},
    ]


def _sampled_ids(tok, family, message):
    """What a sampler would have produced for `message`: the parser-formatted text, then the stop token."""
    calls = [c.get("function", c) for c in message.get("tool_calls") or []]
    text = get_parser(family).format(calls, message.get("content") or "")
    return tok(text, add_special_tokens=False)["input_ids"] + [end_of_turn_ids(tok)[0]]


def test_append_only_rollout_reproduces_the_full_rendering_token_for_token(tiny_tokenizer):
    arch, tok = tiny_tokenizer
    conv = conversation(arch)
    turns = [i for i, m in enumerate(conv) if m["role"] == "assistant"]
    context = render_prompt(tok, conv[: turns[0]], TOOLS)
    for k, i in enumerate(turns):
        context += _sampled_ids(tok, family_for(arch), conv[i])
        nxt = turns[k + 1] if k + 1 < len(turns) else len(conv)
        context += render_delta(tok, conv[: i + 1], conv[i + 1 : nxt], TOOLS)
    assert context == render_prompt(tok, conv, TOOLS)


def test_render_prompt_is_the_template_text_tokenised_once(tiny_tokenizer):
    arch, tok = tiny_tokenizer
    msgs = [{"role": "user", "content": "hi"}]
    ids = render_prompt(tok, msgs)
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert ids == tok(text, add_special_tokens=False)["input_ids"]
    if arch == "llama":
        assert ids.count(tok.bos_token_id) == 1 and ids[0] == tok.bos_token_id
        assert text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    else:
        assert text == (
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        )


def test_end_of_turn_ids(tiny_tokenizer):
    arch, tok = tiny_tokenizer
    names = [tok.convert_ids_to_tokens(i) for i in end_of_turn_ids(tok)]
    assert names == (["<|im_end|>"] if arch == "qwen2" else ["<|eot_id|>", "<|eom_id|>"])


def test_delta_after_tool_calls_is_the_tool_turn_and_generation_prompt(tiny_tokenizer):
    arch, tok = tiny_tokenizer
    conv = conversation(arch)
    delta = render_delta(tok, conv[:3], conv[3:5], TOOLS)
    if arch == "qwen2":  # the "\n" after <|im_end|> belongs to the delta
        expect = (
            "\n<|im_start|>user\n<tool_response>\nnull\n</tool_response>\n<tool_response>\n"
            '{"current_working_directory": "temp"}\n</tool_response><|im_end|>\n<|im_start|>assistant\n'
        )
    else:
        expect = (
            "<|start_header_id|>ipython<|end_header_id|>\n\nnull<|eot_id|>"
            '<|start_header_id|>ipython<|end_header_id|>\n\n{"current_working_directory": "temp"}<|eot_id|>'
            "<|start_header_id|>assistant<|end_header_id|>\n\n"
        )
    assert tok.decode(delta) == expect


def test_render_delta_rejects_a_template_that_rewrites_history(tiny_tokenizer):
    _, tok = tiny_tokenizer
    bad = copy.deepcopy(tok)
    bad.chat_template = "{{- messages | length }}" + tok.chat_template  # the first char changes with each turn
    conv = conversation("llama")
    with pytest.raises(NotAppendOnlyError, match="not append-only"):
        render_delta(bad, conv[:3], conv[3:5], TOOLS)


def test_render_delta_needs_an_assistant_turn_at_the_end(tiny_tokenizer):
    _, tok = tiny_tokenizer
    conv = conversation("llama")
    with pytest.raises(ValueError, match="ends with an assistant"):
        render_delta(tok, conv[:2], conv[2:3], TOOLS)


calls_st = st.lists(
    st.fixed_dictionaries(
        {
            "name": st.from_regex(r"[a-z_]{1,8}", fullmatch=True),
            "arguments": st.dictionaries(
                st.text(max_size=5),
                st.recursive(
                    st.none()
                    | st.booleans()
                    | st.integers()
                    | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2),
                    max_leaves=6,
                ),
                max_size=3,
            ),
        }
    ),
    min_size=1,
    max_size=3,
)


@settings(max_examples=25, deadline=None)
@given(calls=calls_st)
def test_template_renders_tool_calls_exactly_as_the_parser_formats_them(tiny_tokenizer, calls):
    arch, tok = tiny_tokenizer
    user = [{"role": "user", "content": "go"}]
    prompt = render_text(tok, user, add_generation_prompt=True)
    full = render_text(
        tok, user + [{"role": "assistant", "content": "", "tool_calls": calls}], add_generation_prompt=False
    )
    eot = tok.convert_ids_to_tokens(end_of_turn_ids(tok)[0])
    assert full.startswith(prompt + get_parser(family_for(arch)).format(calls) + eot)


def _whole_history_delta(tok, history, new, tools):
    """The reference: the seam found on renderings of the whole history (what render_delta avoids)."""
    short, full, boundary = template.render_pair(tok, history, new, tools)
    assert full[:boundary] == short[:boundary]
    return tok(full[boundary:], add_special_tokens=False)["input_ids"]


def _with_release_turn(arch):
    """conversation() plus a miss_func-style release: a user turn whose content carries JSON docs."""
    docs = json.dumps(
        [
            TOOLS[3]["function"],
            {
                "name": "touch",
                "description": "Create a file.",
                "parameters": {"type": "dict", "properties": {"f": {"type": "string"}}},
            },
        ]
    )
    conv = conversation(arch)
    return conv[:-1] + [
        {"role": "assistant", "content": "", "tool_calls": [{"name": "ls", "arguments": {"a": False}}]},
        {"role": "tool", "content": '["x", "y"]'},
        {"role": "assistant", "content": "I cannot count words without a tool."},
        {"role": "user", "content": "Functions now available:\n" + docs + "\nPlease continue."},
    ]


def test_anchor_delta_equals_the_whole_history_delta_at_every_step(tiny_tokenizer, monkeypatch):
    """At every assistant turn of a multi-step tool conversation with a release turn, the anchor's delta is
    token-for-token the whole history's, and only the anchor (head + tail) reaches the template."""
    arch, tok = tiny_tokenizer
    conv = _with_release_turn(arch)
    turns = [i for i, m in enumerate(conv) if m["role"] == "assistant"]
    expected = {}
    for k, i in enumerate(turns):
        nxt = turns[k + 1] if k + 1 < len(turns) else len(conv)
        expected[i] = (nxt, _whole_history_delta(tok, conv[: i + 1], conv[i + 1 : nxt], TOOLS))
    rendered = []
    real = template.render_text
    monkeypatch.setattr(template, "render_text", lambda t, m, *a, **kw: rendered.append(len(m)) or real(t, m, *a, **kw))
    for i, (nxt, want) in expected.items():
        rendered.clear()
        assert render_delta(tok, conv[: i + 1], conv[i + 1 : nxt], TOOLS) == want
        # head = system + first user (2 messages), tail = the last assistant message.
        assert rendered == [min(i + 1, 3), min(i + 1, 3) + nxt - i - 1]
    assert len(turns) >= 5 and "Functions now available" in tok.decode(expected[turns[-1]][1])


# An assistant message right after the first user message renders a marker while it ends the chat: the
# anchor (head + that message) puts every last assistant there, so its renderings disagree; the whole
# history does not (the message follows a tool result), so render_delta must fall back to it.
_MARK = (
    "{%- for m in messages %}{%- if m.role == 'assistant' and loop.last and loop.index0 == 2 %}"
    "{{- '[first-answer]' }}{%- endif %}{%- endfor %}"
)


def test_render_delta_falls_back_to_the_whole_history_when_the_anchor_is_inconsistent(tiny_tokenizer, monkeypatch):
    arch, tok = tiny_tokenizer
    odd = copy.deepcopy(tok)
    odd.chat_template = _MARK + tok.chat_template
    conv = conversation(arch)
    hist, new = conv[:6], conv[6:7]  # ends with the second assistant turn, after two tool results
    end_of_turn_ids(odd)  # its probe rendering is cached, so it is not counted below
    rendered = []
    real = template.render_text
    monkeypatch.setattr(template, "render_text", lambda t, m, *a, **kw: rendered.append(len(m)) or real(t, m, *a, **kw))
    delta = render_delta(odd, hist, new, TOOLS)
    assert rendered == [3, 4, 6, 7]  # the anchor's pair, then the whole history's
    assert delta == _whole_history_delta(odd, hist, new, TOOLS)
    assert delta == render_delta(tok, hist, new, TOOLS)  # the marker is not in the delta
