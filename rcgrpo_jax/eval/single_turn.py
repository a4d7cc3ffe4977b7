"""BFCL v4 single-turn ("AST") categories: entries, prompts, scoring by BFCL's own checker, the oracle.

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

Scoring (`score`). The raw assistant text is parsed by the checkpoint family's own parser
(`chat.get_parser(family)`). A call that does not parse is dropped, as BFCL's Qwen handler drops a
``<tool_call>`` block that is not JSON; the rest go to the checker as ``[{name: arguments}]`` with
their JSON values unchanged, as BFCL's function-calling handlers pass them (for Java and JavaScript the
model was told every value is a string in the language's syntax, and the checker converts those
strings; a non-string value there fails with the checker's own ``type_error:java|js``).
- AST categories: the verdict of the official `ast_checker` (`envs.ast_checker.check`) on the raw docs.
- Irrelevance categories: pass when no call decodes; relevance: pass when at least one does (BFCL's
  `_evaluate_single_relevance_entry`: a successful decode with a non-empty call list is a call).

Error kinds (`error_kind`), one per failed entry: wrong_function, missing_or_extra_argument,
wrong_type, wrong_value, wrong_count, parse_error (nothing parsed and the parser reported errors),
irrelevance_violated; plus missing_output (replay: no output for the id), truncated (the prompt does
not fit `eval.max_context`), render_error (the chat template refused the entry) and checker_error (the
checker raised). The checker's own error type is kept beside it.

Oracle (`oracle_calls`, `oracle_text`): the first accepted value of each argument (omitted when
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

import copy
import dataclasses
import functools
import json
from typing import Any, Mapping, Sequence

from rcgrpo_jax import chat, sharding
from rcgrpo_jax.envs import ast_checker, schema
from rcgrpo_jax.envs.bfcl import data_dir
from rcgrpo_jax.rollout import ModelPolicy
from rcgrpo_jax.rollout.engine import with_reward_goal
from rcgrpo_jax.sampling import SamplingParams

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
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


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
    """None for a pass; else the error kind of a scored entry (see the module docstring)."""
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
    """Parse one raw assistant text with the family parser and score it as BFCL does."""
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


# ------------------------------------------------------------------------------------------- oracle


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


# ------------------------------------------------------------------------------------ policies / run


def read_replay(path: str) -> dict[str, str]:
    """Outputs made elsewhere: JSON lines ``{"id": <BFCL entry id>, "output": "<raw assistant text>"}``.
    Blank lines are skipped; a malformed line, a non-string field or an id given twice raises
    ValueError naming the file and line."""
    out: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{n}: not a JSON object: {err}") from None
            if (
                not isinstance(row, dict)
                or not isinstance(row.get("id"), str)
                or not isinstance(row.get("output"), str)
            ):
                raise ValueError(f'{path}:{n}: expected {{"id": str, "output": str}}, got {line.strip()[:120]}')
            if row["id"] in out:
                raise ValueError(f"{path}:{n}: id {row['id']!r} appears twice")
            out[row["id"]] = row["output"]
    return out


def prompt_messages(entry: Entry, reward_token: str | None) -> list[dict]:

    return with_reward_goal(messages_for(entry), reward_token)


def render_prompts(entries: Sequence[Entry], tokenizer, reward_token: str | None) -> tuple[list[str | None], dict]:
    """The chat template's prompt text of each entry (None where it failed) and the failures
    (id -> EntryResult of kind render_error)."""

    texts: list[str | None] = []
    failures: dict[str, EntryResult] = {}
    for e in entries:
        try:
            texts.append(
                chat.render_text(tokenizer, prompt_messages(e, reward_token), tools_for(e), add_generation_prompt=True)
            )
        except Exception as err:  # noqa: BLE001 - one entry the template refuses must not stop the suite
            texts.append(None)
            failures[e.id] = failed(e, RENDER_ERROR, f"{type(err).__name__}: {err}")
    return texts, failures


def oracle_outputs(entries: Sequence[Entry], tokenizer, parser) -> dict[str, str]:
    """The oracle's texts, through the tokenizer and back (as a model's sampled tokens would be)."""
    texts = [oracle_text(e, parser) for e in entries]
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return {e.id: tokenizer.decode(t, skip_special_tokens=False) for e, t in zip(entries, ids)}


def generate_outputs(
    entries: Sequence[Entry],
    prompts: Sequence[str | None],
    tokenizer,
    model_cfg,
    params,
    eval_cfg,
    *,
    mesh=None,
    progress: bool = False,
) -> tuple[dict[str, str], dict[str, EntryResult]]:
    """One greedy assistant message per entry with our sampler (`rollout.ModelPolicy`), in batches of
    `eval.batch_size` entries of similar prompt length. Returns (id -> text, id -> failure) where a
    prompt of `eval.max_context` tokens or more fails as truncated. Every process makes the same
    device calls and gets the same texts."""
    import time

    max_context, max_step = int(eval_cfg.max_context), int(eval_cfg.max_step_tokens)
    stop_ids = chat.end_of_turn_ids(tokenizer)
    outputs: dict[str, str] = {}
    failures: dict[str, EntryResult] = {}
    todo: list[tuple[int, list[int]]] = []
    for i, (e, text) in enumerate(zip(entries, prompts)):
        if text is None:
            continue
        tokens = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        if len(tokens) >= max_context:
            failures[e.id] = failed(e, TRUNCATED, f"prompt of {len(tokens)} tokens >= eval.max_context={max_context}")
        else:
            todo.append((i, tokens))
    todo.sort(key=lambda x: len(x[1]))
    batch = max(int(eval_cfg.batch_size), 1)
    t0 = time.perf_counter()
    for start in range(0, len(todo), batch):
        chunk = todo[start : start + batch]
        policy = ModelPolicy(
            model_cfg,
            params,
            stop_ids=stop_ids,
            max_step_tokens=max_step,
            max_context=max_context,
            sampling=SamplingParams(temperature=0.0),
            prefill_chunk=int(eval_cfg.prefill_chunk),
            mesh=mesh,
            rules=sharding.DECODE_RULES,
            share_prefix=False,
        )
        rows = list(range(len(chunk)))
        policy.start([t for _, t in chunk], rows)
        samples = policy.act(rows, [min(max_step, max_context - len(t) - 1) for _, t in chunk])
        policy.finish(rows)
        for (i, _), s in zip(chunk, samples):
            body = s.tokens[:-1] if s.stopped else s.tokens
            outputs[entries[i].id] = tokenizer.decode(body, skip_special_tokens=False)
        if progress:
            done = start + len(chunk)
            eta = (time.perf_counter() - t0) / done * (len(todo) - done)
            print(f"[eval] single-turn {done}/{len(todo)} entries, ETA {eta:.0f}s", flush=True)
    return outputs, failures


def score_all(
    entries: Sequence[Entry], outputs: Mapping[str, str], parser, failures: Mapping[str, EntryResult] = {}
) -> list[EntryResult]:
    """Each entry's result: its failure if it has one, else its output scored, else missing_output."""
    out = []
    for e in entries:
        if e.id in failures:
            out.append(failures[e.id])
        elif e.id in outputs:
            out.append(score(e, outputs[e.id], parser))
        else:
            out.append(failed(e, MISSING_OUTPUT, "no output for this id"))
    return out
