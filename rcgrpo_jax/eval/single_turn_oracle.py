"""The single-turn oracle: an output that BFCL's checker accepts for every answerable entry.

`oracle_calls`, `oracle_text`: the first accepted value of each argument (omitted when
``""`` is accepted and the argument is not required), nested dicts the same way, Java/JavaScript
values written as source strings the checker's converters read back (`java_source`, `js_source`);
irrelevance entries answer in plain text; relevance entries (no answers shipped) call the first
function with its required arguments filled from the schema. It passes every entry but six whose
shipped answers no output can satisfy (`unanswerable` says why for each: two Java ArrayList-of-any
answers, two required arguments with no accepted value, an answer argument missing from the docs, a
required parameter missing from the answer). One quirk of the checker the oracle follows: a Java
``Array`` of ``String`` is read element by element without stripping quotes, so it is written
``new String[]{a, b}``.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from rcgrpo_jax.eval.single_turn import NO_CALL_ANSWER, Entry, language


def _first(options: Sequence[Any], prefer_str: bool = False) -> Any:
    values = [v for v in options if v != ""]
    if not values and "" in options:
        return ""  # a required argument whose only accepted value is the empty string
    if not values:
        raise ValueError(f"no accepted value among {options!r}")
    if prefer_str:
        return next((v for v in values if isinstance(v, str)), values[0])
    return values[0]


def _flat_dict(answer: Mapping[str, Sequence[Any]]) -> dict:
    """A dict answer ``{key: [accepted...]}`` -> one accepted dict (keys that may be omitted are)."""
    return {k: _first(v) for k, v in answer.items() if "" not in v}


def _concrete(value: Any, prop: Mapping[str, Any]) -> Any:
    """One accepted value in the shape the checker compares: dict answers (and lists of them, for
    ``array`` of ``dict``) hold per-key accepted lists; everything else is literal."""
    typ = prop.get("type")
    if isinstance(value, dict) and typ in ("dict", "HashMap"):
        return _flat_dict(value)
    item = (prop.get("items") or {}).get("type")
    if isinstance(value, list) and item == "dict" and all(isinstance(v, dict) for v in value):
        return [_flat_dict(v) for v in value]
    return value


def java_source(value: Any, typ: str, item: str | None = None) -> str:
    """`value` as the Java source text that BFCL's `java_type_converter` reads back as `value`."""
    if isinstance(value, str):
        return value  # a variable name or expression, or a String (the converter keeps it as is)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and typ == "long":
        return f"{value}L"
    if isinstance(value, float) and typ == "float":
        return f"{value!r}f"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list) and typ == "Array":
        # Elements go through java_type_converter(element, item): a String element keeps its quotes
        # there, so a String array is written without them.
        return f"new {_JAVA_ELEMENT.get(item, item or 'Object')}[]{{{', '.join(java_source(v, item or '') for v in value)}}}"
    if isinstance(value, list) and typ == "ArrayList":

        def element(v):
            if item == "String" and isinstance(v, str):
                return json.dumps(v)  # the converter strips the quotes of String elements
            if item == "char" and isinstance(v, str):
                return f"'{v}'"
            return java_source(v, item or "")

        return (
            f"new ArrayList<>(Arrays.asList({', '.join(element(v) for v in value)}))" if value else "new ArrayList<>()"
        )
    if isinstance(value, dict):
        puts = " ".join(f"put({json.dumps(k)}, {_java_value(v)});" for k, v in value.items())
        return f"new HashMap<String, Object>() {{{{ {puts} }}}}" if value else "new HashMap<>()"
    raise ValueError(f"no Java source for {value!r} of type {typ}")


_JAVA_ELEMENT = {"integer": "int", "long": "long", "double": "double", "float": "float", "boolean": "boolean"}


def _java_value(v: Any) -> str:
    """A HashMap value, read back by the converter's `parse_java_value` (typeless)."""
    if isinstance(v, str):
        return json.dumps(v)
    return java_source(v, "long" if isinstance(v, int) and not isinstance(v, bool) and abs(v) > 2**31 else "")


def js_source(value: Any, typ: str, item: str | None = None) -> str:
    """`value` as the JavaScript source text that BFCL's `js_type_converter` reads back as `value`."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and typ == "Bigint":
        return f"{value}n"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_js_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_js_value(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"no JavaScript source for {value!r} of type {typ}")


def _js_value(v: Any) -> str:
    if isinstance(v, str):
        return json.dumps(v) if "'" in v else f"'{v}'"
    return js_source(v, "")


def _placeholder(prop: Mapping[str, Any]) -> Any:
    """A value of a parameter's schema, for the relevance oracle (any decodable call passes)."""
    if "enum" in prop and prop["enum"]:
        return prop["enum"][0]
    if "default" in prop and prop["default"] is not None:
        return prop["default"]
    return {
        "integer": 1,
        "float": 1.0,
        "number": 1.0,
        "boolean": True,
        "array": [],
        "tuple": [],
        "dict": {},
        "object": {},
    }.get(prop.get("type"), "x")


def oracle_calls(entry: Entry) -> list[dict]:
    """The calls that answer `entry` (see the module docstring), as ``{"name", "arguments"}``."""
    if entry.kind == "irrelevance":
        return []
    if entry.kind == "relevance":
        doc = entry.functions[0]
        props = doc["parameters"].get("properties", {})
        return [{"name": doc["name"], "arguments": {k: _placeholder(props[k]) for k in doc["parameters"]["required"]}}]
    docs = {d["name"]: d for d in entry.functions}
    lang = language(entry.category)
    calls = []
    for answer in entry.ground_truth:
        ((name, args),) = answer.items()
        params = docs[name]["parameters"]
        props, required = params["properties"], set(params.get("required", ()))
        out = {}
        for arg, options in args.items():
            if "" in options and arg not in required:
                continue
            if not options:  # nothing is accepted (a data error): the schema's empty value
                out[arg] = _placeholder({"type": props.get(arg, {}).get("type")})
                continue
            prop = props.get(arg, {})
            prefer_str = lang != "python" and prop.get("type") in ("any", "String", "char")
            value = _concrete(_first(options, prefer_str), prop)
            if lang == "java":
                value = java_source(value, prop.get("type", ""), (prop.get("items") or {}).get("type"))
            elif lang == "javascript":
                value = js_source(value, prop.get("type", ""), (prop.get("items") or {}).get("type"))
            out[arg] = value
        calls.append({"name": name, "arguments": out})
    return calls


def oracle_text(entry: Entry, parser) -> str:
    """The oracle's raw assistant text, written by the family parser."""
    calls = oracle_calls(entry)
    return parser.format(calls) if calls else parser.format([], content=NO_CALL_ANSWER)


def unanswerable(entry: Entry) -> str | None:
    """Why no output can pass `entry` under the official checker (a data error of the shipped answers),
    or None. Rules, each a path through `ast_checker` that every output fails:
    - a required parameter of the function is not in the answer (provided: "Unexpected parameter";
      omitted: "Missing required parameter");
    - an answer argument is not a parameter of the function and may not be omitted ("Unexpected
      parameter" when given, "Optional parameter ... not marked as optional" when not);
    - a required argument has no accepted value at all (its accepted list is empty);
    - Java Array/ArrayList of `any`: the checker's converter turns every element into a string, and
      every accepted value is a list holding a non-string.
    """
    if entry.kind != "ast":
        return None
    docs = {d["name"]: d for d in entry.functions}
    for answer in entry.ground_truth:
        ((name, args),) = answer.items()
        params = docs[name]["parameters"]
        props, required = params["properties"], list(params.get("required", ()))
        for p in required:
            if p not in args:
                return f"{name}: required parameter {p!r} is not in the answer"
        for arg, options in args.items():
            if arg not in props and "" not in options:
                return f"{name}: answer argument {arg!r} is not a parameter of the function"
            if arg in required and not options:
                return f"{name}: required argument {arg!r} has no accepted value"
            prop = props.get(arg, {})
            if (
                language(entry.category) == "java"
                and prop.get("type") in ("Array", "ArrayList")
                and (prop.get("items") or {}).get("type") == "any"
                and options
                and all(isinstance(v, list) and not all(isinstance(x, str) for x in v) for v in options)
            ):
                return f"{name}: Java {prop['type']} of any: the checker makes every element a string"
    return None
