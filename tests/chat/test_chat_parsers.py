"""Tool-call parsers: well-formed, several per message, malformed, garbage, format -> parse round trip."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcgrpo_jax.chat import ERROR_KINDS, ParsedTurn, error_kind, family_for, get_parser

hermes = get_parser("hermes")
llama = get_parser("llama3_json")


def kinds(parsed: ParsedTurn) -> list[str]:
    return [error_kind(e) for e in parsed.errors]


# ------------------------------------------------------------------ hermes, well-formed


def test_hermes_single_call_without_content():
    out = hermes.parse('<tool_call>\n{"name": "cd", "arguments": {"folder": "document"}}\n</tool_call>')
    assert out == ParsedTurn(content="", calls=[{"name": "cd", "arguments": {"folder": "document"}}], errors=[])


def test_hermes_several_calls_and_content_outside_blocks_is_kept():
    text = (
        'Let me look.\n<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>\nand then'
        '\n<tool_call>{"name": "mv", "arguments": {"source": "a.txt", "destination": "b/"}}</tool_call>\n'
    )
    out = hermes.parse(text)
    assert out.calls == [
        {"name": "ls", "arguments": {}},
        {"name": "mv", "arguments": {"source": "a.txt", "destination": "b/"}},
    ]
    assert out.content == "Let me look.\n\nand then"
    assert out.errors == []


def test_hermes_plain_answer_has_no_calls():
    assert hermes.parse("  The file was moved.  ") == ParsedTurn("The file was moved.", [], [])


def test_hermes_parameters_alias_and_missing_arguments():
    out = hermes.parse(
        '<tool_call>{"name": "a", "parameters": {"x": 1}}</tool_call><tool_call>{"name": "pwd"}</tool_call>'
    )
    assert out.calls == [{"name": "a", "arguments": {"x": 1}}, {"name": "pwd", "arguments": {}}]
    assert out.errors == []


def test_hermes_close_tag_inside_a_string_argument_does_not_end_the_block():
    args = {"content": "see </tool_call> and <tool_call> here"}
    text = "<tool_call>\n" + json.dumps({"name": "echo", "arguments": args}) + "\n</tool_call>"
    assert hermes.parse(text) == ParsedTurn("", [{"name": "echo", "arguments": args}], [])


# ------------------------------------------------------------------ hermes, malformed


@pytest.mark.parametrize(
    "body, kind",
    [
        ('{"name": "cd", "arguments": {"folder": "x"', "invalid_json"),
        ('{"arguments": {}}', "missing_name"),
        ('{"name": 3, "arguments": {}}', "bad_name"),
        ('{"name": "  ", "arguments": {}}', "bad_name"),
        ('{"name": "cd", "arguments": ["x"]}', "bad_arguments"),
        ('{"name": "cd", "arguments": "{\\"folder\\": \\"x\\"}"}', "bad_arguments"),
        ('{"name": "cd", "arguments": {"x": NaN}}', "non_finite"),
        ('{"name": "cd", "arguments": {"x": -Infinity}}', "non_finite"),
        ('{"name": "cd", "arguments": {"x": 1e400}}', "non_finite"),
        ('["cd", {}]', "not_an_object"),
        ('{"name": "cd", "arguments": {}} extra', "trailing_text"),
        ("cd(folder='x')", "invalid_json"),
        ("[" * 50_000, "invalid_json"),  # nesting deep enough to hit the recursion limit
        ('{"name": "f", "arguments": {"n": ' + "9" * 5000 + "}}", "invalid_json"),  # over int digit limit
    ],
)
def test_hermes_malformed_block_is_an_error_and_later_blocks_still_parse(body, kind):
    text = f"<tool_call>\n{body}\n</tool_call>\n<tool_call>\n" + '{"name": "ls", "arguments": {}}\n</tool_call>'
    out = hermes.parse(text)
    assert kinds(out) == [kind]
    assert out.errors[0].startswith(f"{kind}: call 1: ")
    assert out.calls == [{"name": "ls", "arguments": {}}]


def test_hermes_unterminated_block():
    out = hermes.parse('ok <tool_call>\n{"name": "ls", "arguments": {}}')
    assert out.calls == [] and kinds(out) == ["unterminated"] and out.content == "ok"
    out = hermes.parse('<tool_call>\n{"name": "ls", "argu')
    assert out.calls == [] and kinds(out) == ["invalid_json", "unterminated"]


def test_hermes_stray_close_tag():
    out = hermes.parse('done</tool_call>')
    assert out.calls == [] and kinds(out) == ["stray_close"]


# ------------------------------------------------------------------ llama3 json


def test_llama_single_call_with_and_without_python_tag():
    expect = [{"name": "cd", "arguments": {"folder": "doc"}}]
    assert llama.parse('{"name": "cd", "parameters": {"folder": "doc"}}') == ParsedTurn("", expect, [])
    assert llama.parse('<|python_tag|>{"name": "cd", "arguments": {"folder": "doc"}}') == ParsedTurn("", expect, [])


def test_llama_several_calls_separated_by_semicolons_and_newlines():
    text = '{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": [1, 2]}}\n{"name": "c"};'
    out = llama.parse(text)
    assert out.calls == [
        {"name": "a", "arguments": {}},
        {"name": "b", "arguments": {"x": [1, 2]}},
        {"name": "c", "arguments": {}},
    ]
    assert out.errors == [] and out.content == ""


def test_llama_plain_content():
    assert llama.parse(" The tweet is posted. ") == ParsedTurn("The tweet is posted.", [], [])


@pytest.mark.parametrize(
    "text, kind, n_calls",
    [
        ('{"name": "a", "parameters": {}}; {"name": "b", "parameters": {', "invalid_json", 1),
        ('{"name": "a", "parameters": {}} and more', "trailing_text", 1),
        ('{"parameters": {}}', "missing_name", 0),
        ('{"name": ["a"], "parameters": {}}', "bad_name", 0),
        ('{"name": "a", "parameters": 5}', "bad_arguments", 0),
        ('{"name": "a", "parameters": {"v": NaN}}', "non_finite", 0),
        ("<|python_tag|>brave_search.call(query='x')", "invalid_json", 0),
    ],
)
def test_llama_malformed(text, kind, n_calls):
    out = llama.parse(text)
    assert kinds(out) == [kind] and len(out.calls) == n_calls


# ------------------------------------------------------------------ properties

json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
tag_text = st.sampled_from(["<tool_call>", "</tool_call>", "<|python_tag|>", "{", "}", '"', ";", "\n"])
calls_st = st.lists(
    st.fixed_dictionaries(
        {
            "name": st.from_regex(r"[A-Za-z_][A-Za-z0-9_.]{0,15}", fullmatch=True),
            "arguments": st.dictionaries(st.text(max_size=8), json_value | tag_text, max_size=4),
        }
    ),
    min_size=1,
    max_size=4,
)
content_st = (
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
    .map(str.strip)
    .filter(lambda s: not any(t in s for t in ("<tool_call>", "</tool_call>", "<think>", "</think>")))
)


@settings(max_examples=150, deadline=None)
@given(calls=calls_st, content=content_st)
def test_hermes_format_parse_round_trip(calls, content):
    assert hermes.parse(hermes.format(calls, content)) == ParsedTurn(content, calls, [])


@settings(max_examples=150, deadline=None)
@given(calls=calls_st)
def test_llama_format_parse_round_trip(calls):
    assert llama.parse(llama.format(calls)) == ParsedTurn("", calls, [])


garbage = st.lists(
    tag_text
    | st.text(max_size=8)
    | st.sampled_from(['{"name": "f", "arguments": {}}', '{"name": ', "NaN", "1e999", '"arguments": [', "]", "\\"]),
    max_size=12,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=garbage)
def test_parsers_never_raise_and_errors_are_structured(text):
    for parser in (hermes, llama):
        out = parser.parse(text)
        assert isinstance(out.content, str)
        assert all(error_kind(e) in ERROR_KINDS for e in out.errors)
        for call in out.calls:
            assert isinstance(call["name"], str) and call["name"].strip()
            assert isinstance(call["arguments"], dict)


def test_format_rejects_what_it_cannot_write_faithfully():
    with pytest.raises(ValueError):
        hermes.format([{"name": "a", "arguments": {}}], content="x <tool_call> y")
    with pytest.raises(ValueError):
        hermes.format([{"name": "", "arguments": {}}])
    with pytest.raises(ValueError):
        llama.format([{"name": "a", "arguments": [1]}])
    with pytest.raises(ValueError):
        llama.format([{"name": "a", "arguments": {}}], content="text beside a call")
    with pytest.raises(ValueError):
        hermes.format([{"name": "a", "arguments": {"x": float("nan")}}])


def test_format_writes_the_documented_text():
    calls = [{"name": "cd", "arguments": {"folder": "é"}}, {"name": "ls", "arguments": {}}]
    assert hermes.format(calls, "Sure.") == (
        'Sure.\n<tool_call>\n{"name": "cd", "arguments": {"folder": "é"}}\n'
        '</tool_call>\n<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>'
    )
    assert llama.format(calls) == '{"name": "cd", "parameters": {"folder": "é"}}; {"name": "ls", "parameters": {}}'
    assert llama.format([], "All done.") == "All done."


def test_family_lookup():
    assert family_for("qwen2") == "hermes" == family_for("qwen3") and family_for("llama") == "llama3_json"
    assert get_parser(family_for("qwen2")) is hermes
    with pytest.raises(ValueError, match="gpt2"):
        family_for("gpt2")
    with pytest.raises(ValueError):
        get_parser("xml")


# ------------------------------------------------------------------ what LLaMA-3.1 emits, and reasoning


@pytest.mark.parametrize(
    "text",
    [
        '<|python_tag|>{"name": "cd", "parameters": {"folder": "a"}}; {"name": "ls", "parameters": {}}',
        '{"name": "cd", "arguments": {"folder": "a"}};{"name": "ls"}',
        '<|python_tag|>{"name": "cd", "parameters": {"folder": "a"}}, {"name": "ls", "parameters": {}}',
        '[\n    {"name": "cd", "parameters": {"folder": "a"}},\n    {"name": "ls", "parameters": {}}\n]',
        '<|python_tag|>[{"name": "cd", "arguments": {"folder": "a"}}, {"name": "ls", "arguments": {}}]',
    ],
)
def test_llama_reads_every_form_llama_3_1_emits(text):
    assert llama.parse(text) == ParsedTurn(
        "", [{"name": "cd", "arguments": {"folder": "a"}}, {"name": "ls", "arguments": {}}], []
    )


@pytest.mark.parametrize(
    "text, kind, n_calls",
    [
        ('[{"name": "cd"}, 3]', "not_an_object", 1),
        ('[{"name": "cd"}] and more', "trailing_text", 1),
        ('[{"name": "cd"}', "invalid_json", 0),
        ("<|python_tag|>[1, 2", "invalid_json", 0),
    ],
)
def test_llama_malformed_lists(text, kind, n_calls):
    out = llama.parse(text)
    assert kind in kinds(out) and len(out.calls) == n_calls


def test_llama_brackets_in_plain_content_stay_content():
    assert llama.parse("[1, 2] are the numbers.") == ParsedTurn("[1, 2] are the numbers.", [], [])


def test_hermes_splits_reasoning_and_ignores_calls_inside_it():
    call = '<tool_call>\n{"name": "rm", "arguments": {}}\n</tool_call>'
    out = hermes.parse(f"<think>\nMaybe {call}? No.\n</think>\n\nSure.\n" + call.replace("rm", "ls"))
    assert out == ParsedTurn("Sure.", [{"name": "ls", "arguments": {}}], [], reasoning=f"Maybe {call}? No.")
    # Opening tag in the generation prompt (only the close is sampled), and an empty block.
    assert hermes.parse("I think.\n</think>\n\nHi").reasoning == "I think."
    assert hermes.parse("<think>\n\n</think>\n\nHi") == ParsedTurn("Hi", [], [], reasoning="")
    # Never closed (the step budget ran out while thinking): all reasoning, no call, an error.
    out = hermes.parse(f"<think>\nstill thinking {call}")
    assert out.calls == [] and out.content == "" and kinds(out) == ["unterminated"]
    assert out.reasoning.startswith("still thinking")


reasoning_st = (
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
    .map(lambda s: s.strip("\n"))
    .filter(lambda s: "</think>" not in s)
)


@settings(max_examples=150, deadline=None)
@given(calls=calls_st, content=content_st, reasoning=reasoning_st)
def test_hermes_format_parse_round_trip_with_reasoning(calls, content, reasoning):
    assert hermes.parse(hermes.format(calls, content, reasoning)) == ParsedTurn(content, calls, [], reasoning)


def test_reasoning_format_rules():
    assert hermes.format([], "Hi", "") == "<think>\n\n</think>\n\nHi"  # Qwen3's rendering of the last turn
    with pytest.raises(ValueError):
        hermes.format([], "Hi", "a </think> b")
    with pytest.raises(ValueError):
        llama.format([], "Hi", "")
