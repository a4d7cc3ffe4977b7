"""BFCL v4 single-turn ("AST") categories: entries, prompts and scoring by BFCL's own checker (host-side only).

Data. `data/BFCL_v4_<category>.json` of the installed bfcl-eval package (JSON lines: `id`, `question`
= one turn of messages, `function` = raw BFCL docs) and `data/possible_answer/BFCL_v4_<category>.json`
(`ground_truth`: a list of ``{function: {arg: [accepted values]}}``, ``""`` among the accepted values =
"may be omitted"), aligned by index as BFCL's runner aligns them. Irrelevance and relevance categories
have no answers.

Prompt (`messages_for`, `tools_for`): the entry's messages and its functions, rendered by the
checkpoint's own chat template. The docs carry BFCL's language-specific description hints and, for
Java/JavaScript, every parameter typed ``string`` with the type named in its description
(`hinted_docs`: the facts of BFCL's `_func_doc_language_specific_pre_processing`; a test compares the
two). One difference from BFCL's local handlers, which `json.dumps` those docs as they are into the tool
block: we hand the template OpenAI-style tools with JSON-schema type names (`envs.schema.to_openai_tool`:
``dict`` -> ``object``, ``float`` -> ``number``, ...), exactly as the multi-turn environment does, so a
model trained here sees one tool format.

Scoring: `score`; error kinds: `error_kind`. The oracle is in `single_turn_oracle.py`; generating and replaying outputs in `single_turn_run.py`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
from typing import Any, Mapping, Sequence

from rcgrpo_jax import jsonl
from rcgrpo_jax.envs import ast_checker, schema
from rcgrpo_jax.envs.bfcl import data_dir

NON_LIVE = ("simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple")
LIVE = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")
IRRELEVANCE = ("irrelevance", "live_irrelevance")
RELEVANCE = ("live_relevance",)
CATEGORIES = (*NON_LIVE, "irrelevance", *LIVE, "live_irrelevance", "live_relevance")
# Entry counts of bfcl-eval 2026.3.23 (a test checks the shipped files against them).
ENTRY_COUNTS = {
    "simple_python": 400,
    "simple_java": 100,
    "simple_javascript": 50,
    "multiple": 200,
    "parallel": 200,
    "parallel_multiple": 200,
    "irrelevance": 240,
    "live_simple": 258,
    "live_multiple": 1053,
    "live_parallel": 16,
    "live_parallel_multiple": 24,
    "live_irrelevance": 884,
    "live_relevance": 16,
}

WRONG_FUNCTION = "wrong_function"
MISSING_OR_EXTRA = "missing_or_extra_argument"
WRONG_TYPE = "wrong_type"
WRONG_VALUE = "wrong_value"
WRONG_COUNT = "wrong_count"
PARSE_ERROR = "parse_error"
IRRELEVANCE_VIOLATED = "irrelevance_violated"
MISSING_OUTPUT = "missing_output"
TRUNCATED = "truncated"
RENDER_ERROR = "render_error"
CHECKER_ERROR = ast_checker.CHECKER_ERROR
ERROR_KINDS = (
    WRONG_FUNCTION,
    MISSING_OR_EXTRA,
    WRONG_TYPE,
    WRONG_VALUE,
    WRONG_COUNT,
    PARSE_ERROR,
    IRRELEVANCE_VIOLATED,
    MISSING_OUTPUT,
    TRUNCATED,
    RENDER_ERROR,
    CHECKER_ERROR,
)
# Text of the oracle's answer to an irrelevance entry (no function fits).
NO_CALL_ANSWER = "None of the provided functions can answer this request."

_HINTS = {
    "python": " Note that the provided function is in Python 3 syntax.",
    "java": " Note that the provided function is in Java 8 SDK syntax.",
    "javascript": " Note that the provided function is in JavaScript syntax.",
}


def language(category: str) -> str:
    """python | java | javascript, by BFCL's `is_java` / `is_js` tests on the category name."""
    if "javascript" in category:
        return "javascript"
    return "java" if "java" in category else "python"


# --------------------------------------------------------------------------------------------- data


@dataclasses.dataclass(frozen=True, eq=False)
class Entry:
    """One single-turn entry; `ground_truth` is None for (ir)relevance categories. Read-only by convention."""

    id: str
    category: str
    messages: tuple[Mapping[str, Any], ...]
    functions: tuple[Mapping[str, Any], ...]  # raw BFCL docs, as the checker reads them
    ground_truth: tuple[Mapping[str, Any], ...] | None

    @property
    def kind(self) -> str:
        """ast | irrelevance | relevance."""
        if self.category in IRRELEVANCE:
            return "irrelevance"
        return "relevance" if self.category in RELEVANCE else "ast"


def _read_jsonl(path) -> list[dict]:
    return jsonl.read(path, what="BFCL entries", check=jsonl.json_object("id"))


@functools.lru_cache(maxsize=None)
def _category_entries(category: str) -> tuple[Entry, ...]:

    if category not in CATEGORIES:
        raise ValueError(f"unknown single-turn category {category!r}; known: {', '.join(CATEGORIES)}")
    root = data_dir()
    rows = _read_jsonl(root / f"BFCL_v4_{category}.json")
    answers_path = root / "possible_answer" / f"BFCL_v4_{category}.json"
    answers = _read_jsonl(answers_path) if category not in (*IRRELEVANCE, *RELEVANCE) else None
    if answers is not None and len(answers) != len(rows):
        raise ValueError(f"{answers_path}: {len(answers)} answers for {len(rows)} entries")
    out = []
    for i, row in enumerate(rows):
        if len(row["question"]) != 1:
            raise ValueError(f"{row['id']}: a single-turn entry with {len(row['question'])} turns")
        out.append(
            Entry(
                id=row["id"],
                category=category,
                messages=tuple(row["question"][0]),
                functions=tuple(row["function"]),
                ground_truth=None if answers is None else tuple(answers[i]["ground_truth"]),
            )
        )
    return tuple(out)


def load_entries(categories: Sequence[str] = CATEGORIES) -> list[Entry]:
    """The entries of `categories`, in category order then file order."""
    return [e for c in categories for e in _category_entries(c)]


# ------------------------------------------------------------------------------------------- prompt


def hinted_docs(functions: Sequence[Mapping[str, Any]], category: str) -> list[dict]:
    """Copies of the docs as BFCL shows them to a model: the language hint appended to each
    description; for Java/JavaScript each parameter becomes ``"type": "string"`` with a sentence naming
    its type (list item types and JavaScript dict schemas move into the description)."""
    lang = language(category)
    docs = copy.deepcopy([dict(f) for f in functions])
    for doc in docs:
        doc["description"] = doc.get("description", "") + _HINTS[lang]
        if lang == "python":
            continue
        name = "Java" if lang == "java" else "JavaScript"
        for prop in doc["parameters"]["properties"].values():
            typ = prop["type"]
            if typ == "any":
                prop["description"] += f" This parameter can be of any type of {name} object in string representation."
            else:
                prop["description"] += f" This is {name} {typ} type parameter in string representation."
            if (lang == "java" and typ in ("ArrayList", "Array")) or (lang == "javascript" and typ == "array"):
                prop["description"] += (
                    f" The list elements are of type {prop['items']['type']}; they are not in string representation."
                )
                del prop["items"]
            if lang == "javascript" and typ == "dict" and "properties" in prop:
                prop["description"] += (
                    " The dictionary entries have the following schema; they are not in string representation. "
                    + json.dumps(prop["properties"])
                )
                del prop["properties"]
            prop["type"] = "string"
    return docs


def tools_for(entry: Entry) -> list[dict]:
    """OpenAI-style tools of an entry (hinted docs, JSON-schema type names)."""
    return [schema.to_openai_tool(doc, hint="") for doc in hinted_docs(entry.functions, entry.category)]


def messages_for(entry: Entry) -> list[dict]:
    """The entry's conversation (system/user/assistant messages), as fresh dicts."""
    return [dict(m) for m in entry.messages]


# ------------------------------------------------------------------------------------------ scoring


@dataclasses.dataclass(frozen=True)
class EntryResult:
    id: str
    category: str
    official_pass: bool
    error_kind: str | None
    checker_error_type: str | None = None
    error_message: str | None = None
    calls: list[dict] = dataclasses.field(default_factory=list)
    parse_errors: list[str] = dataclasses.field(default_factory=list)
    output: str | None = None

    def record(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def checker_calls(calls: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Parsed calls ``{"name", "arguments"}`` -> the checker's ``[{name: arguments}]`` (copies)."""
    return [{c["name"]: copy.deepcopy(dict(c["arguments"]))} for c in calls]


def _kind_of_error_type(error_type: str, error: Any, names_match: bool = True) -> str:
    if error_type.endswith(":wrong_count") or error_type == "relevance_error:decoder_failed":
        return WRONG_COUNT  # (relevance: no call where at least one was due)
    if error_type == "simple_function_checker:wrong_func_name":
        return WRONG_FUNCTION
    if error_type in (
        "simple_function_checker:missing_required",
        "simple_function_checker:missing_optional",
        "simple_function_checker:unexpected_param",
    ):
        return MISSING_OR_EXTRA
    if error_type.startswith("type_error"):
        return WRONG_TYPE
    if error_type.startswith("value_error") or error_type in ("dict_checker:unclear", "list_dict_checker:unclear"):
        return WRONG_VALUE
    if error_type == "parallel_function_checker_no_order:cannot_find_match":
        # Unordered matching failed. Different function names than the answer's: wrong_function; else
        # the first candidate with the right name says what was wrong with it.
        if not names_match:
            return WRONG_FUNCTION
        subs = [
            v.get("sub_error_type", "")
            for item in (error if isinstance(error, list) else [])
            if isinstance(item, dict)
            for v in item.values()
            if isinstance(v, dict)
        ]
        named = [s for s in subs if s != "simple_function_checker:wrong_func_name"]
        return _kind_of_error_type(named[0], None) if named else WRONG_FUNCTION
    if error_type == CHECKER_ERROR:
        return CHECKER_ERROR
    return error_type


def error_kind(category: str, verdict: Mapping[str, Any], parsed, ground_truth=None) -> str | None:
    """None for a pass; else the error kind of a scored entry.

    Error kinds (`error_kind`), one per failed entry: wrong_function, missing_or_extra_argument,
    wrong_type, wrong_value, wrong_count, parse_error (nothing parsed and the parser reported errors),
    irrelevance_violated; plus missing_output (replay: no output for the id), truncated (the prompt does
    not fit `eval.max_context`), render_error (the chat template refused the entry) and checker_error (the
    checker raised). The checker's own error type is kept beside it.
    """
    if verdict.get("valid") is True:
        return None
    if category in IRRELEVANCE:
        return IRRELEVANCE_VIOLATED
    if not parsed.calls and parsed.errors:
        return PARSE_ERROR
    names_match = True
    if ground_truth is not None:
        names_match = sorted(c["name"] for c in parsed.calls) == sorted(n for a in ground_truth for n in a)
    return _kind_of_error_type(str(verdict.get("error_type", "")), verdict.get("error"), names_match)


def official_verdict(entry: Entry, parsed) -> dict[str, Any]:
    """BFCL's verdict on the parsed calls of one entry."""
    has_call = bool(parsed.calls)
    if entry.kind == "irrelevance":
        if has_call:
            return {"valid": False, "error_type": "irrelevance_error:decoder_success"}
        return {"valid": True}
    if entry.kind == "relevance":
        return {"valid": True} if has_call else {"valid": False, "error_type": "relevance_error:decoder_failed"}
    return ast_checker.check(entry.functions, checker_calls(parsed.calls), entry.ground_truth, entry.category)


def score(entry: Entry, text: str, parser) -> EntryResult:
    """Parse one raw assistant text with the family parser and score it as BFCL does.

    Scoring (`score`). The raw assistant text is parsed by the checkpoint family's own parser
    (`chat.get_parser(family)`). A call that does not parse is dropped, as BFCL's Qwen handler drops a
    ``<tool_call>`` block that is not JSON; the rest go to the checker as ``[{name: arguments}]`` with
    their JSON values unchanged, as BFCL's function-calling handlers pass them (for Java and JavaScript the
    model was told every value is a string in the language's syntax, and the checker converts those
    strings; a non-string value there fails with the checker's own ``type_error:java|js``).
    - AST categories: the verdict of the official `ast_checker` (`envs.ast_checker.check`) on the raw docs.
    - Irrelevance categories: pass when no call decodes; relevance: pass when at least one does (BFCL's
      `_evaluate_single_relevance_entry`: a successful decode with a non-empty call list is a call).
    """
    parsed = parser.parse(text)
    verdict = official_verdict(entry, parsed)
    message = verdict.get("error")
    return EntryResult(
        id=entry.id,
        category=entry.category,
        official_pass=verdict.get("valid") is True,
        error_kind=error_kind(entry.category, verdict, parsed, entry.ground_truth),
        checker_error_type=None if verdict.get("valid") is True else verdict.get("error_type"),
        error_message=None if not message else json.dumps(message, default=str)[:300],
        calls=[dict(c) for c in parsed.calls],
        parse_errors=list(parsed.errors),
        output=text,
    )


def failed(entry: Entry, kind: str, message: str, output: str | None = None) -> EntryResult:
    """An entry that could not be scored from an output (missing, truncated, unrenderable)."""
    return EntryResult(entry.id, entry.category, False, kind, None, message[:300], [], [], output)
