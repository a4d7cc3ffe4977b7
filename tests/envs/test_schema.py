"""Schema conversion and argument checks (rcgrpo_jax.envs.schema)."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from rcgrpo_jax.envs import schema

DOC = {
    "name": "edit",
    "description": "Edit.",
    "parameters": {
        "type": "dict",
        "required": ["ticket_id"],
        "properties": {
            "ticket_id": {"type": "integer", "description": "id"},
            "ratio": {"type": "float", "description": "r"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "updates": {"type": "dict", "properties": {"title": {"type": "string"}, "priority": {"type": "integer"}}},
            "mode": {"type": "string", "enum": ["a", "b"]},
        },
    },
}
PARAMS = schema.to_openai_tool(DOC)["function"]["parameters"]


def test_to_openai_tool_converts_types_recursively():
    tool = schema.to_openai_tool(DOC)
    assert tool["type"] == "function"
    fn = tool["function"]
    assert fn["name"] == "edit"
    assert fn["description"] == "Edit. Note that the provided function is in Python 3 syntax."
    assert fn["parameters"]["type"] == "object"
    props = fn["parameters"]["properties"]
    assert props["ratio"]["type"] == "number"
    assert props["updates"]["type"] == "object"
    assert props["updates"]["properties"]["priority"]["type"] == "integer"
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert DOC["parameters"]["type"] == "dict"  # the source doc is untouched


def test_check_arguments_accepts_valid_and_null_optionals():
    assert schema.check_arguments({"ticket_id": 3}, PARAMS) is None
    assert (
        schema.check_arguments(
            {"ticket_id": 3, "ratio": 2, "tags": ["x"], "mode": "b", "updates": {"title": "t"}}, PARAMS
        )
        is None
    )
    assert schema.check_arguments({"ticket_id": 3, "ratio": None}, PARAMS) is None


def test_check_arguments_errors():
    cases = {
        "missing required argument 'ticket_id'": {},
        "unexpected argument 'x'": {"ticket_id": 1, "x": 1},
        "'ticket_id' must be of type integer, got string": {"ticket_id": "1"},
        "'ticket_id' must be of type integer, got boolean": {"ticket_id": True},
        "'ticket_id' must be of type integer, got number": {"ticket_id": 1.0},
        "'tags[1]' must be of type string, got integer": {"ticket_id": 1, "tags": ["a", 2]},
        "'mode' must be one of ['a', 'b']": {"ticket_id": 1, "mode": "c"},
        "unexpected argument 'updates.bogus'": {"ticket_id": 1, "updates": {"bogus": 1}},
        "'ticket_id' must be of type integer, got null": {"ticket_id": None},
    }
    for message, args in cases.items():
        assert schema.check_arguments(args, PARAMS) == message, args
    assert schema.check_arguments([1], PARAMS) == "arguments must be a JSON object, got array"


def test_non_json_and_oversized_values_are_refused():
    assert "finite" in schema.check_arguments({"ticket_id": 1, "ratio": math.nan}, PARAMS)
    assert "finite" in schema.check_arguments({"ticket_id": 1, "ratio": -math.inf}, PARAMS)
    assert "unsupported value of type tuple" in schema.check_arguments({"ticket_id": 1, "tags": ("a",)}, PARAMS)
    assert "integer out of range" in schema.check_arguments({"ticket_id": 10**40}, PARAMS)
    assert "larger than" in schema.check_arguments({"ticket_id": 1, "mode": "a" * 200_000}, PARAMS)
    deep = []
    for _ in range(100_000):  # far deeper than the recursion limit: the walk is iterative
        deep = [deep]
    assert "nested deeper" in schema.check_arguments({"ticket_id": 1, "tags": deep}, PARAMS)


class Evil(str):
    def __repr__(self):
        raise AssertionError("repr of a model value must never be needed")


def test_str_subclass_is_not_plain_json():
    assert "unsupported value" in schema.check_arguments({"ticket_id": 1, "mode": Evil("a")}, PARAMS)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(max_size=12), json_values, max_size=5))
def test_check_arguments_never_raises(arguments):
    result = schema.check_arguments(arguments, PARAMS)
    assert result is None or isinstance(result, str)


def test_compact_tool_keeps_the_signature_and_drops_prose():
    from rcgrpo_jax.envs.bfcl import function_docs
    from rcgrpo_jax.envs.schema import compact_tool, to_openai_tool

    doc = next(d for d in function_docs("GorillaFileSystem") if d["name"] == "mv")
    full = to_openai_tool(doc)
    short = compact_tool(full)
    fn = short["function"]
    assert fn["name"] == "mv" and "belongs to" not in fn["description"] and "Python 3" not in fn["description"]
    assert fn["description"].endswith(".") and len(fn["description"]) < len(full["function"]["description"])
    params = fn["parameters"]
    assert params["required"] == full["function"]["parameters"]["required"]
    assert set(params["properties"]) == set(full["function"]["parameters"]["properties"])
    assert all("description" not in p for p in params["properties"].values())
    assert all(
        p["type"] == full["function"]["parameters"]["properties"][k]["type"] for k, p in params["properties"].items()
    )
