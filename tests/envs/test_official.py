"""Call-string parsing and formatting (rcgrpo_jax.envs.official)."""

import keyword

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcgrpo_jax.envs import official


def test_parse_call_string_literals_and_positional():
    assert official.parse_call_string("cd(folder='document')") == ("cd", [], {"folder": "document"})
    assert official.parse_call_string("mean([1, 2.5])") == ("mean", [[1, 2.5]], {})
    assert official.parse_call_string(" f(1, x={'a': [True, None]}) ") == ("f", [1], {"x": {"a": [True, None]}})


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('echo pwned')",
        "cd(folder=open('x'))",
        "os.system('ls')",
        "cd(**{'folder': 'x'})",
        "cd(folder=1+1)",
        "cd(folder='a'); rm(file_name='b')",
        "cd",
        "lambda: 0",
        "cd(folder=[x for x in 'ab'])",
    ],
)
def test_parse_call_string_refuses_code(text):
    with pytest.raises(ValueError):
        official.parse_call_string(text)


def test_format_call_matches_bfcl_handlers():
    assert official.format_call("cd", {"folder": "a'b"}) == 'cd(folder="a\'b")'
    assert official.format_call("f", {"x": 1, "y": [1.5, None, True]}) == "f(x=1,y=[1.5, None, True])"
    assert official.format_call("ls", {}) == "ls()"


@pytest.mark.parametrize(
    "name,args",
    [
        ("__import__", {}),
        ("_load_scenario", {}),
        ("os.system", {}),
        ("a b", {}),
        (3, {}),
        ("f", {"x": float("nan")}),
        ("f", {"x": (1,)}),
        ("f", {"x y": 1}),
        ("f", {"x": {1: 2}}),
        ("f", {"x": object()}),
        ("f", {"in": 1}),
        ("class", {}),
    ],
)
def test_format_call_refuses_non_literals(name, args):
    with pytest.raises(ValueError):
        official.format_call(name, args)


plain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
    max_leaves=12,
)


@settings(max_examples=80, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True).filter(lambda k: not keyword.iskeyword(k)),
        plain,
        max_size=4,
    )
)
def test_format_then_parse_round_trips(arguments):
    text = official.format_call("do_thing", arguments)
    name, positional, keyword = official.parse_call_string(text)
    assert (name, positional, keyword) == ("do_thing", [], arguments)


def test_turn_count_mismatch_is_force_terminated_without_checker():
    verdict = official.official_check({"id": "multi_turn_base_0"}, [["ls()"], []], [[["ls()"]]])
    assert verdict["valid"] is False
    assert verdict["error_type"] == official.FORCE_TERMINATED
