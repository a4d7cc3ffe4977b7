"""Single-turn BFCL categories: the shipped data, the prompt docs against BFCL's own pre-processing, the
oracle through both parser families and the official checker, error kinds by hand, replay input."""

from __future__ import annotations

import ast
import copy
import importlib.resources
import json
from pathlib import Path

import pytest

from rcgrpo_jax import chat
from rcgrpo_jax.eval import single_turn as st
from rcgrpo_jax.eval import single_turn_oracle, single_turn_run

FAMILIES = ("hermes", "llama3_json")


def _package_functions(relpath: str, names: set[str], namespace: dict) -> dict:
    """Function definitions `names` of an installed bfcl_eval module, run from its source (the module
    itself cannot be imported here: it has import-time side effects and dependencies we lack)."""
    path = Path(str(importlib.resources.files("bfcl_eval"))) / relpath
    tree = ast.parse(path.read_text(encoding="utf-8"))
    tree.body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    assert {n.name for n in tree.body} == names
    exec(compile(tree, str(path), "exec"), namespace)
    return namespace


def test_shipped_categories_and_counts():
    entries = st.load_entries()
    counts = {c: sum(e.category == c for e in entries) for c in st.CATEGORIES}
    assert counts == st.ENTRY_COUNTS
    assert len(entries) == 3641 and len({e.id for e in entries}) == 3641
    assert all(e.id.rsplit("_", 1)[0] == e.category for e in entries)  # BFCL's id -> category rule
    for e in entries:
        assert (e.ground_truth is None) == (e.category in st.IRRELEVANCE + st.RELEVANCE)
    assert sum(e.kind == "ast" for e in entries) == 2501


def test_prompt_docs_match_bfcl_pre_processing():
    ns = _package_functions(
        "utils.py",
        {"_func_doc_language_specific_pre_processing", "_get_language_specific_hint", "is_java", "is_js"},
        {"json": json},
    )
    for e in st.load_entries():
        want = ns["_func_doc_language_specific_pre_processing"](copy.deepcopy(list(e.functions)), e.category)
        assert st.hinted_docs(e.functions, e.category) == want, e.id
    java = next(e for e in st.load_entries(["simple_java"]) if e.id == "simple_java_1")
    tool = st.tools_for(java)[0]["function"]
    assert all(p["type"] == "string" for p in tool["parameters"]["properties"].values())
    assert tool["description"].endswith("Note that the provided function is in Java 8 SDK syntax.")
    assert java.functions[0]["parameters"]["properties"]["useShortName"]["type"] == "boolean"  # raw docs untouched


@pytest.mark.parametrize("family", FAMILIES)
def test_oracle_passes_every_answerable_entry(family):
    parser = chat.get_parser(family)
    entries = st.load_entries()
    unanswerable = {e.id: single_turn_oracle.unanswerable(e) for e in entries if single_turn_oracle.unanswerable(e)}
    # The shipped answers that no output can satisfy (see single_turn_oracle.unanswerable).
    assert sorted(unanswerable) == [
        "live_multiple_862-181-3",
        "live_multiple_964-207-0",
        "live_simple_106-63-0",
        "live_simple_112-68-0",
        "simple_java_36",
        "simple_java_65",
    ]
    failed = {}
    for e in entries:
        r = st.score(e, single_turn_oracle.oracle_text(e, parser), parser)
        assert r.output is not None and not r.parse_errors
        if not r.official_pass:
            failed[e.id] = r
    assert set(failed) == set(unanswerable)
    assert failed["simple_java_36"].checker_error_type == "value_error:list/tuple"
    assert failed["live_multiple_964-207-0"].checker_error_type == "simple_function_checker:missing_required"


def test_java_and_javascript_values_are_source_strings():
    parser = chat.get_parser("hermes")
    java = next(e for e in st.load_entries(["simple_java"]) if e.id == "simple_java_1")
    (call,) = single_turn_oracle.oracle_calls(java)
    assert call["arguments"] == {
        "object": "Customers",
        "useShortName": "true",
        "params": 'new HashMap<String, Object>() {{ put("limit", 50); put("schemaFilter", "public"); }}',
    }
    typed = {**call, "arguments": {**call["arguments"], "useShortName": True}}  # a JSON boolean, not Java text
    r = st.score(java, parser.format([typed]), parser)
    assert not r.official_pass and r.error_kind == st.WRONG_TYPE and r.checker_error_type == "type_error:java"
    js = next(e for e in st.load_entries(["simple_javascript"]) if e.id == "simple_javascript_3")
    (call,) = single_turn_oracle.oracle_calls(js)
    assert call["arguments"]["coordinates"] == "[60, 30]"
    assert (
        single_turn_oracle.java_source(42, "long") == "42L" and single_turn_oracle.java_source(0.5, "float") == "0.5f"
    )
    assert single_turn_oracle.java_source([1, 2], "Array", "integer") == "new int[]{1, 2}"
    assert (
        single_turn_oracle.js_source(7, "Bigint") == "7n" and single_turn_oracle.js_source(False, "Boolean") == "false"
    )


def _simple_entry():
    return next(e for e in st.load_entries(["simple_python"]) if e.id == "simple_python_0")


@pytest.mark.parametrize("family", FAMILIES)
def test_error_kinds_by_hand(family):
    parser = chat.get_parser(family)
    e = _simple_entry()  # calculate_triangle_area(base=10, height=5, unit='units' or omitted)
    (good,) = single_turn_oracle.oracle_calls(e)
    assert good == {"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}

    def kind(calls):
        r = st.score(e, parser.format(calls), parser)
        return r.error_kind

    args = good["arguments"]
    assert kind([good]) is None
    assert kind([{"name": "triangle_area", "arguments": args}]) == st.WRONG_FUNCTION
    assert kind([{"name": good["name"], "arguments": {"base": 10}}]) == st.MISSING_OR_EXTRA
    assert kind([{"name": good["name"], "arguments": {**args, "colour": "red"}}]) == st.MISSING_OR_EXTRA
    assert kind([{"name": good["name"], "arguments": {**args, "base": "10"}}]) == st.WRONG_TYPE
    assert kind([{"name": good["name"], "arguments": {**args, "base": 11}}]) == st.WRONG_VALUE
    assert kind([good, good]) == st.WRONG_COUNT
    assert kind([]) == st.WRONG_COUNT  # a plain answer where a call was due
    bad = st.score(
        e, "<tool_call>\n{not json\n</tool_call>" if family == "hermes" else "<|python_tag|>{not json", parser
    )
    assert bad.error_kind == st.PARSE_ERROR and bad.parse_errors and not bad.official_pass

    irrelevant = st.load_entries(["irrelevance"])[0]
    assert st.score(irrelevant, parser.format([], content="No."), parser).official_pass
    r = st.score(irrelevant, parser.format([{"name": irrelevant.functions[0]["name"], "arguments": {}}]), parser)
    assert not r.official_pass and r.error_kind == st.IRRELEVANCE_VIOLATED
    relevant = st.load_entries(["live_relevance"])[0]
    r = st.score(relevant, parser.format([], content="No."), parser)
    assert not r.official_pass and r.error_kind == st.WRONG_COUNT


def test_parallel_mismatch_names_what_was_wrong():
    parser = chat.get_parser("hermes")
    e = st.load_entries(["parallel"])[0]
    calls = single_turn_oracle.oracle_calls(e)
    assert len(calls) > 1
    assert st.score(e, parser.format(calls[::-1]), parser).official_pass  # any order
    name = calls[0]["name"]
    arg = next(iter(calls[0]["arguments"]))
    wrong = [{"name": name, "arguments": {**calls[0]["arguments"], arg: "nonsense-value"}}] + calls[1:]
    r = st.score(e, parser.format(wrong), parser)
    assert r.checker_error_type == "parallel_function_checker_no_order:cannot_find_match"
    assert r.error_kind in (st.WRONG_VALUE, st.WRONG_TYPE)
    renamed = [{"name": "no_such_function", "arguments": calls[0]["arguments"]}] + calls[1:]
    assert st.score(e, parser.format(renamed), parser).error_kind == st.WRONG_FUNCTION


def test_replay_file_and_missing_outputs(tmp_path):
    parser = chat.get_parser("hermes")
    entries = st.load_entries(["simple_python"])[:3]
    path = tmp_path / "out.jsonl"
    rows = [
        {"id": entries[0].id, "output": single_turn_oracle.oracle_text(entries[0], parser)},
        {"id": entries[1].id, "output": "hi"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    outputs = single_turn_run.read_replay(str(path))
    results = single_turn_run.score_all(entries, outputs, parser)
    assert [r.official_pass for r in results] == [True, False, False]
    assert [r.error_kind for r in results] == [None, st.WRONG_COUNT, st.MISSING_OUTPUT]
    path.write_text(json.dumps(rows[0]) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"out.jsonl:2: not a JSON object"):
        single_turn_run.read_replay(str(path))
    path.write_text(json.dumps(rows[0]) + "\n" + json.dumps(rows[0]) + "\n")
    with pytest.raises(ValueError, match="appears twice"):
        single_turn_run.read_replay(str(path))
    path.write_text(json.dumps({"id": 3, "output": "x"}) + "\n")
    with pytest.raises(ValueError, match=r"out.jsonl:1: expected"):
        single_turn_run.read_replay(str(path))
