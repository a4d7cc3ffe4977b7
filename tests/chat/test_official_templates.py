"""The paper models' official chat templates (read from the installed bfcl-eval at test time): LLaMA-3.1
refuses several tool calls in one message, which `template_messages` answers with BFCL's content form;
Qwen3 rewrites the past, which the render check detects and `step_samples` handles."""

import jinja2
import numpy as np
import pytest
import transformers

from rcgrpo_jax import chat
from rcgrpo_jax.chat import template
from rcgrpo_jax.chat.parsers import HermesParser, Llama3JsonParser
from rcgrpo_jax.models.tiny import build_tiny_tokenizer
from tests.helpers.official_templates import official_template, with_official_template

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    },
}


def _call(name, **args):
    return {"type": "function", "function": {"name": name, "arguments": args}}


CONV = [
    {"role": "user", "content": "Add 1 and 2, and 3 and 4."},
    {"role": "assistant", "content": "", "tool_calls": [_call("add", a=1, b=2), _call("add", a=3, b=4)]},
    {"role": "tool", "name": "add", "content": "3"},
    {"role": "tool", "name": "add", "content": "7"},
    {"role": "assistant", "content": "", "tool_calls": [_call("add", a=3, b=7)]},
    {"role": "tool", "name": "add", "content": "10"},
    {"role": "assistant", "content": "3, 7 and 10."},
    {"role": "user", "content": "Now 5 and 6."},
    {"role": "assistant", "content": "", "tool_calls": [_call("add", a=5, b=6)]},
    {"role": "tool", "name": "add", "content": "11"},
    {"role": "assistant", "content": "11."},
]


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    """{"llama_3_1": tokenizer, "qwen3": tokenizer}: tiny tokenizers of the matching family wearing the
    official template."""
    out = {}
    for name, arch in (("llama_3_1", "llama"), ("qwen3", "qwen2")):
        path = build_tiny_tokenizer(tmp_path_factory.mktemp(f"official_{name}"), arch=arch)
        out[name] = with_official_template(transformers.AutoTokenizer.from_pretrained(path), name)
    return out


def test_loader_reads_the_templates_with_their_escapes():
    llama, qwen = official_template("llama_3_1"), official_template("qwen3")
    assert llama.startswith("{{- bos_token }}") and "only supports single tool-calls" in llama
    assert "reasoning_content" in qwen and "enable_thinking" in qwen
    assert "\\n" in qwen and '"chat_template"' not in qwen  # escapes kept as escapes, header dropped


def test_llama_official_refuses_two_calls_and_gets_bfcls_content_form(official):
    tok = official["llama_3_1"]
    with pytest.raises(jinja2.TemplateError, match="single tool-calls"):  # the 33%: the raw template
        tok.apply_chat_template(CONV, tools=[ADD], tokenize=False)
    assert not chat.template_profile(tok).multi_call
    text = chat.render_text(tok, CONV, [ADD], add_generation_prompt=False)
    two = '{"name": "add", "parameters": {"a": 1, "b": 2}}; {"name": "add", "parameters": {"a": 3, "b": 4}}'
    one = '{"name": "add", "parameters": {"a": 3, "b": 7}}'  # the template's own single-call rendering
    assert f"<|start_header_id|>assistant<|end_header_id|>\n\n{two}<|eot_id|>" in text
    assert f"<|start_header_id|>assistant<|end_header_id|>\n\n{one}<|eot_id|>" in text
    parsed = Llama3JsonParser().parse(two)
    assert [c["arguments"] for c in parsed.calls] == [{"a": 1, "b": 2}, {"a": 3, "b": 4}] and not parsed.errors
    # The input is not modified, and a template that takes several calls gets the messages unchanged.
    assert len(CONV[1]["tool_calls"]) == 2
    assert chat.template_messages(official["qwen3"], CONV) == [dict(m) for m in CONV]
    # The official LLaMA template is append-only with that form: the delta seam holds at every step.
    assert chat.render_mode_for(tok, CONV[:1], [ADD]) == chat.APPEND
    for i, m in enumerate(CONV):
        if m["role"] == "assistant" and i + 1 < len(CONV):
            nxt = CONV[i + 1 : next(j for j in range(i + 1, len(CONV)) if CONV[j]["role"] == "assistant")]
            chat.render_delta(tok, CONV[: i + 1], nxt, [ADD])


def test_content_with_several_calls_is_a_clear_render_error(official):
    bad = [CONV[0], dict(CONV[1], content="Adding both.")]
    with pytest.raises(chat.RenderError, match="text content"):
        chat.render_text(official["llama_3_1"], bad, [ADD], add_generation_prompt=False)


@pytest.mark.parametrize("thinking", [None, True, False])
def test_render_check_picks_rerender_for_qwen3_only(official, tiny_tokenizer, thinking):
    _, tiny = tiny_tokenizer
    assert chat.render_mode_for(official["qwen3"], CONV[:1], [ADD], thinking=thinking) == chat.RERENDER
    assert chat.render_mode_for(official["llama_3_1"], CONV[:1], [ADD], thinking=thinking) == chat.APPEND
    assert chat.render_mode_for(tiny, CONV[:1], [ADD], thinking=thinking) == chat.APPEND
    assert chat.render_mode_for(tiny, CONV[:1], [ADD], mode=chat.RERENDER) == chat.RERENDER
    with pytest.raises(chat.NotAppendOnlyError):  # what the append mode would have hit
        chat.render_delta(official["qwen3"], CONV[:2], CONV[2:4], [ADD], thinking=thinking)


@pytest.mark.parametrize("thinking", [None, False])
def test_qwen3_step_samples_are_context_then_the_model_form_of_the_step(official, thinking):
    """Sample k = render_prompt(messages before step k) + the step as Qwen3 writes it after its generation
    prompt (built here by our own Hermes formatter: empty think block when thinking is on) + <|im_end|>."""
    tok = official["qwen3"]
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    samples = chat.step_samples(tok, CONV, [ADD], thinking=thinking)
    steps = [i for i, m in enumerate(CONV) if m["role"] == "assistant"]
    assert len(samples) == len(steps) == 5
    fmt = HermesParser()
    for (tokens, mask), i in zip(samples, steps):
        calls = [c["function"] for c in CONV[i].get("tool_calls", [])]
        text = fmt.format(calls, CONV[i]["content"], reasoning="" if thinking is None else None)
        ctx = chat.render_prompt(tok, CONV[:i], [ADD], thinking=thinking)
        want = ctx + list(tok(text, add_special_tokens=False)["input_ids"]) + [eot]
        assert tokens.tolist() == want
        assert mask.tolist() == [0] * len(ctx) + [1] * (len(want) - len(ctx))
    # The past really changes: step 3's context has no think block for step 1, step 1's own sample had one.
    if thinking is None:
        assert "<think>" in tok.decode(samples[0][0][samples[0][1] == 1])
        assert "<think>" not in tok.decode(samples[3][0][samples[3][1] == 0])


def test_qwen3_reasoning_round_trips_through_the_official_template(official):
    tok = official["qwen3"]
    parsed = HermesParser().parse('<think>\nI add.\n<tool_call>\n{"name": "x"}\n</tool_call>\n</think>\n\nSure.')
    assert parsed.reasoning.startswith("I add.") and parsed.content == "Sure." and parsed.calls == []
    msg = {"role": "assistant", "content": parsed.content, "reasoning_content": parsed.reasoning}
    last = chat.render_text(tok, [CONV[0], msg], [ADD], add_generation_prompt=False)
    assert f"<think>\n{parsed.reasoning}\n</think>\n\nSure.<|im_end|>" in last
    past = chat.render_text(tok, [CONV[0], msg, {"role": "user", "content": "more"}], [ADD], add_generation_prompt=True)
    assert "I add." not in past  # dropped once a new user turn follows: why rerender exists


def test_template_errors_become_render_errors(tiny_tokenizer):
    _, tok = tiny_tokenizer
    broken = type(tok).from_pretrained(tok.name_or_path)
    broken.chat_template = "{{ raise_exception('nope') }}"
    with pytest.raises(chat.RenderError, match="nope"):
        chat.render_prompt(broken, CONV[:1], [ADD])
    assert chat.render_mode_for(broken, CONV[:1], [ADD]) == chat.RERENDER
    assert not template.template_profile(broken).multi_call


def test_step_samples_of_an_append_only_template_end_like_its_single_sequence(tiny_tokenizer):
    """For an append-only template the last step's sample is the whole conversation's one sequence up to
    its last end-of-turn, with loss on that step only."""
    from rcgrpo_jax.train.sft_data import tokenize_conversation

    _, tok = tiny_tokenizer
    eot = chat.end_of_turn_ids(tok)
    conv = [dict(m, content=m["content"] or "") for m in CONV]
    tokens, mask = tokenize_conversation(tok, conv, [ADD], eot)
    last, last_mask = chat.step_samples(tok, conv, [ADD])[-1]
    n = len(last)
    assert np.array_equal(tokens[:n], last) and last_mask.sum() > 0
    assert np.array_equal(last_mask[: n - last_mask.sum()], np.zeros(n - last_mask.sum()))


@pytest.mark.parametrize("name", ["qwen3", "llama_3_1"])
def test_reusing_render_equals_a_fresh_render_at_every_step(official, name):
    """`render_prompt_reusing` keeps old tokens only up to the last end-of-turn before the first change
    (Qwen3 changes the past: the empty think block of the previous step goes away)."""
    tok = official[name]
    previous = None
    for i, m in enumerate(CONV):
        if m["role"] != "assistant":
            continue
        now = chat.render_prompt_reusing(tok, CONV[:i], [ADD], previous=previous)
        assert list(now.ids) == chat.render_prompt(tok, CONV[:i], [ADD])
        previous = now  # as the engine does: the last step's context is the next one's reference
