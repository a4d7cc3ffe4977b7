"""BFCL function docs -> OpenAI JSON-schema tools, and argument checks against those schemas.

BFCL docs use Python-flavoured type names ("dict", "float", "tuple", "any"). Chat templates and the
OpenAI tool format expect JSON-schema names, so the conversion maps them recursively. The same
converted schema is what `check_arguments` validates model arguments against, so the model is judged
by exactly the schema it was shown.

Validation is deliberately strict about *Python* types: model arguments come from JSON, so only the
exact JSON types (dict with str keys, list, str, int, float, bool, None) are accepted. An object of
any other type -- whose `repr` could be arbitrary code -- never reaches a tool or a call string.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Mapping

PYTHON_HINT = " Note that the provided function is in Python 3 syntax."

# BFCL / Python type name -> JSON-schema type name (None = unconstrained).
_TYPE_MAP: dict[str, str | None] = {
    "dict": "object",
    "object": "object",
    "float": "number",
    "number": "number",
    "integer": "integer",
    "int": "integer",
    "string": "string",
    "str": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "tuple": "array",
    "any": None,
}

# JSON integers beyond this are almost surely garbage and make some tools (big-int arithmetic) slow.
MAX_ABS_INT = 2**63


def convert_schema(schema: Any) -> Any:
    """Recursively rename BFCL types to JSON-schema types; everything else is kept as is."""
    if isinstance(schema, list):
        return [convert_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            mapped = _TYPE_MAP.get(value, value)
            if mapped is not None:
                out["type"] = mapped
        elif key == "properties" and isinstance(value, dict):
            out["properties"] = {name: convert_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "anyOf", "oneOf"):
            out[key] = convert_schema(value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def to_openai_tool(doc: Mapping[str, Any], *, hint: str = PYTHON_HINT) -> dict:
    """One BFCL function doc -> {"type": "function", "function": {name, description, parameters}}.

    `hint` is the sentence BFCL appends to every description at inference time.
    """
    return {
        "type": "function",
        "function": {
            "name": doc["name"],
            "description": doc.get("description", "") + hint,
            "parameters": convert_schema(doc.get("parameters", {"type": "dict", "properties": {}})),
        },
    }


def compact_tool(tool: Mapping[str, Any]) -> dict:
    """A short form of an OpenAI tool for small models: the description cut to its first sentence,
    parameter descriptions dropped; names, types, enums, defaults and required lists kept (so
    validation and the model's view of the signature are unchanged)."""
    fn = tool["function"]
    text = fn.get("description", "").replace(PYTHON_HINT, "")
    # BFCL's descriptions open with the class's blurb and then "Tool description: <what it does>".
    text = text.split("Tool description:", 1)[-1]
    first = text.strip().split(". ")[0].strip().rstrip(".")

    def strip(schema: Any) -> Any:
        if isinstance(schema, dict):
            return {k: strip(v) for k, v in schema.items() if k != "description"}
        if isinstance(schema, list):
            return [strip(v) for v in schema]
        return schema

    return {
        "type": "function",
        "function": {"name": fn["name"], "description": first + ".", "parameters": strip(fn.get("parameters", {}))},
    }


def _type_name(value: Any) -> str:
    return type(value).__name__


def check_json_value(value: Any, *, max_depth: int, max_chars: int) -> str | None:
    """Check that `value` is plain JSON data of bounded depth and size. Iterative: never recurses.

    Returns an error message, or None when the value is acceptable.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    chars = 0
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            return f"arguments nested deeper than {max_depth} levels"
        kind = type(node)
        if kind is dict:
            for key, sub in node.items():
                if type(key) is not str:
                    return f"object keys must be strings, got {_type_name(key)}"
                chars += len(key)
                stack.append((sub, depth + 1))
        elif kind is list:
            stack.extend((sub, depth + 1) for sub in node)
            chars += len(node)
        elif kind is str:
            chars += len(node)
        elif kind is float:
            if not math.isfinite(node):
                return "numbers must be finite (no NaN or Infinity)"
            chars += 8
        elif kind is int:
            if abs(node) > MAX_ABS_INT:
                return "integer out of range"
            chars += 8
        elif kind is bool or node is None:
            chars += 1
        else:
            return f"unsupported value of type {_type_name(node)}"
        if chars > max_chars:
            return f"arguments larger than {max_chars} characters"
    return None


def _check(value: Any, schema: Mapping[str, Any], path: str, *, nullable: bool) -> str | None:
    """Recursive schema check; depth is already bounded by `check_json_value`."""
    if value is None and nullable:
        return None
    expected = schema.get("type")
    kind = type(value)
    allowed = expected if isinstance(expected, list) else [expected]
    if not any(_is_type(value, t) for t in allowed):
        shown = " or ".join(map(str, allowed))
        return f"'{path}' must be of type {shown}, got {_describe(value)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"'{path}' must be one of {schema['enum']}"
    if kind is list and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            err = _check(item, schema["items"], f"{path}[{i}]", nullable=False)
            if err:
                return err
    if kind is dict and isinstance(schema.get("properties"), dict):
        return _check_object(value, schema, path)
    return None


def _is_type(value: Any, expected: Any) -> bool:
    kind = type(value)
    if expected == "string":
        return kind is str
    if expected == "integer":
        return kind is int
    if expected == "number":
        return kind in (int, float)
    if expected == "boolean":
        return kind is bool
    if expected == "array":
        return kind is list
    if expected == "object":
        return kind is dict
    return expected is None  # untyped ("any")


def _check_object(value: Mapping[str, Any], schema: Mapping[str, Any], path: str) -> str | None:
    props = schema.get("properties", {})
    required = schema.get("required", [])
    prefix = f"{path}." if path else ""
    for name in required:
        if name not in value:
            return f"missing required argument '{prefix}{name}'"
    for name, sub in value.items():
        if name not in props:
            return f"unexpected argument '{prefix}{name}'"
        # An optional argument may be null: the Python default of most BFCL optionals is None.
        err = _check(sub, props[name], f"{prefix}{name}", nullable=name not in required)
        if err:
            return err
    return None


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}.get(
        type(value), _type_name(value)
    )


def check_arguments(
    arguments: Any, parameters: Mapping[str, Any], *, max_depth: int = 8, max_chars: int = 100_000
) -> str | None:
    """Validate a call's arguments against a converted (JSON-schema) parameters object.

    Returns None when valid, else a short message meant for the model.
    """
    if type(arguments) is not dict:
        return f"arguments must be a JSON object, got {_describe(arguments)}"
    err = check_json_value(arguments, max_depth=max_depth, max_chars=max_chars)
    if err:
        return err
    return _check_object(arguments, parameters, "")
