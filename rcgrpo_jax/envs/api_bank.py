"""API-Bank's APIs run host-side, and one API-Bank task (`data.api_bank.Task`) as an `Environment`.

The API classes are the benchmark's own Python files in the user's copy (`apis/`, `lv3_apis/`): `Catalog`
imports them (with the copy's folder on `sys.path`, as the benchmark's `ToolManager` runs from it) and
builds each instance as that ToolManager does: its database from `init_database/<database_name>.json`, then
a `CheckToken` instance when the API takes a `token`. This is the benchmark's code, like BFCL's classes;
model output only ever reaches it as a parsed JSON call dispatched by name to a class of the catalog, its
arguments converted by the class's declared parameter types. Calls run with outbound network connections
refused (`no_network`): the benchmark's few web-backed APIs (dictionary, translation) fail as exceptions.

Episode: `reset()` gives the context (the dialogue before the call, rendered as chat messages: User -> user,
AI -> assistant, each earlier API item -> an assistant tool call and its tool result) and the tools (level 1:
the dialogue's APIs; levels 2-3: ToolSearcher plus the APIs its earlier results revealed). The policy takes
one step; its first call is the prediction (the benchmark extracts one call), executed on fresh instances
(the evaluator builds a fresh ToolManager per prediction) and judged by the ground-truth API's own
`check_api_call_correctness(result, ground_truth_result)` after the names agree: the arguments as the
executed result's input, and the response where the class compares it.

ToolSearcher is not executed: the benchmark's ranks APIs with a sentence-embedding model that it downloads,
which a run here may not do. A ToolSearcher prediction is scored by its name only and marked
`by_name_only` in the verdict (the suite counts them).

Error kinds: `ApiBankEnv.official_verdict`.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import importlib
import inspect
import json
import os
import socket
import sys
from typing import Any, Iterator, Mapping, Sequence

from rcgrpo_jax.envs.base import Message, Tool

TOOL_SEARCHER = "ToolSearcher"
CHECK_TOKEN = "CheckToken"
CHECKER = "api_bank check_api_call_correctness (the benchmark's API classes)"
SYSTEM_PROMPT = (
    "You are an AI assistant that can call APIs. Based on the API descriptions and the conversation so far, make "
    "the API call the AI should make next. The current year is 2023."
)
# ToolSearcher's interface (used when its module does not import here: it needs sentence-transformers)
TOOL_SEARCHER_DOC = {
    "name": TOOL_SEARCHER,
    "description": "Searches for relevant tools in library based on the keywords.",
    "input_parameters": {"keywords": {"type": "str", "description": "The keyword to search for."}},
}
_JSON_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "list": "array"}
NOT_EXECUTED = "[not executed: this step is scored against the dialogue's API call]"


class CallError(Exception):
    """A prediction that cannot be executed; `kind` is its error kind."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


# ---------------------------------------------------------------- the benchmark's API classes


@contextlib.contextmanager
def no_network() -> Iterator[None]:
    """Refuse outbound IP connections while the benchmark's APIs run (restored afterwards)."""
    connect, connect_ex, create = socket.socket.connect, socket.socket.connect_ex, socket.create_connection

    def refuse(sock, address, *_, **__):
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            raise OSError("network access is refused while API-Bank's APIs run")
        return connect(sock, address)

    def refuse_ex(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            return 101  # ENETUNREACH
        return connect_ex(sock, address)

    def refuse_create(*_, **__):
        raise OSError("network access is refused while API-Bank's APIs run")

    socket.socket.connect, socket.socket.connect_ex, socket.create_connection = refuse, refuse_ex, refuse_create
    try:
        yield
    finally:
        socket.socket.connect, socket.socket.connect_ex, socket.create_connection = connect, connect_ex, create


def _forget_other_copies(root: str) -> None:
    """Drop imported `apis`/`lv3_apis` modules of another copy (the package names are the benchmark's)."""
    for name in list(sys.modules):
        if name.split(".")[0] in ("apis", "lv3_apis"):
            path = getattr(sys.modules[name], "__file__", None) or ""
            paths = list(getattr(sys.modules[name], "__path__", []) or [])
            where = [path] if path else paths
            if not all(os.path.abspath(p).startswith(root + os.sep) for p in where):
                del sys.modules[name]


@dataclasses.dataclass
class Catalog:
    """The API classes of one folder of a copy (`apis` or `lv3_apis`), and how to build their instances."""

    root: str
    subdir: str
    classes: dict[str, type]
    unavailable: dict[str, str]  # module -> why it did not import
    databases: dict[str, Any]

    def doc(self, name: str) -> dict | None:
        """{name, description, input_parameters} of an API, None when the catalog lacks it."""
        cls = self.classes.get(name)
        if cls is None:
            return dict(TOOL_SEARCHER_DOC) if name == TOOL_SEARCHER else None
        return {
            "name": name,
            "description": getattr(cls, "description", ""),
            "input_parameters": getattr(cls, "input_parameters", {}),
        }

    def required(self, name: str) -> list[str] | None:
        """The parameters `call` needs (no default), None when unknown."""
        cls = self.classes.get(name)
        if cls is None:
            return None
        try:
            sig = inspect.signature(cls.call)
        except (TypeError, ValueError):
            return None
        return [
            p.name
            for p in list(sig.parameters.values())[1:]
            if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        ]

    def instance(self, name: str):
        """A fresh instance of API `name`, built as the benchmark's ToolManager builds it."""
        cls = self.classes[name]
        args: list[Any] = []
        db = getattr(cls, "database_name", None)
        if db is not None and db in self.databases:
            args.append(copy.deepcopy(self.databases[db]))
        if name != CHECK_TOKEN and "token" in getattr(cls, "input_parameters", {}) and CHECK_TOKEN in self.classes:
            args.append(self.instance(CHECK_TOKEN))
        return cls(*args)


@functools.lru_cache(maxsize=8)
def load_catalog(root: str, subdir: str) -> Catalog:
    """The API classes defined in `root/subdir/*.py` (subclasses of the copy's `apis.api.API`)."""
    root = os.path.abspath(root)
    _forget_other_copies(root)
    if root not in sys.path:
        sys.path.insert(0, root)
    base = importlib.import_module("apis.api").API
    classes: dict[str, type] = {}
    unavailable: dict[str, str] = {}
    folder = os.path.join(root, subdir)
    for file in sorted(os.listdir(folder)):
        if not file.endswith(".py") or file in ("__init__.py", "api.py"):
            continue
        module = f"{subdir}.{file[:-3]}"
        try:
            mod = importlib.import_module(module)
        except Exception as err:  # noqa: BLE001 - an optional dependency of one API must not stop the others
            unavailable[module] = f"{type(err).__name__}: {err}"
            continue
        for obj in vars(mod).values():
            if isinstance(obj, type) and issubclass(obj, base) and obj is not base and obj.__module__ == mod.__name__:
                classes[obj.__name__] = obj
    databases = {}
    db_dir = os.path.join(root, "init_database")
    for file in sorted(os.listdir(db_dir)):
        if file.endswith(".json"):
            with open(os.path.join(db_dir, file), encoding="utf-8") as f:
                databases[file[: -len(".json")]] = json.load(f)
    return Catalog(root, subdir, classes, unavailable, databases)


def coerce_arguments(input_parameters: Mapping[str, Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """JSON arguments as the benchmark's ToolManager passes them to `call`: each name must be a declared
    parameter; int/float take numbers or their digit strings, bool True/False or "True"/"False", str
    takes a string (a number or boolean is written as the benchmark's text parser would read it), list
    types as given. Raises CallError(invalid_input_parameter)."""
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        spec = input_parameters.get(key)
        if spec is None:
            raise CallError("invalid_input_parameter", f"invalid parameter name. parameter: {key}")
        kind = str(spec.get("type", "str"))
        bad = CallError("invalid_input_parameter", f"invalid parameter type. parameter {key}: {value!r} for {kind}")
        if kind == "int":
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise bad
            if isinstance(value, str) and not value.isdigit():
                raise bad
            out[key] = int(value)
        elif kind == "float":
            if isinstance(value, bool):
                raise bad
            if isinstance(value, str) and not value.replace(".", "", 1).isdigit():
                raise bad
            if not isinstance(value, (int, float, str)):
                raise bad
            out[key] = float(value)
        elif kind == "bool":
            out[key] = value if isinstance(value, bool) else str(value) == "True"
        elif kind == "str":
            out[key] = value if isinstance(value, str) else (str(value) if isinstance(value, (int, float)) else value)
        else:  # list, list(str), ...: as given
            out[key] = value
    return out


def execute(catalog: Catalog, name: str, arguments: Mapping[str, Any]):
    """(instance, result) of calling API `name` with `arguments` on fresh instances; raises CallError."""
    if name not in catalog.classes:
        kind = "api_unavailable" if catalog.unavailable else "api_name_mismatch"
        why = "; ".join(f"{m}: {r}" for m, r in catalog.unavailable.items())[:200]
        raise CallError(kind, f"{name} is not an API of {catalog.subdir}/" + (f" (not imported: {why})" if why else ""))
    cls = catalog.classes[name]
    kwargs = coerce_arguments(getattr(cls, "input_parameters", {}), arguments)
    inst = catalog.instance(name)
    try:
        with no_network():
            result = inst.call(**kwargs)
    except TypeError as err:
        raise CallError("missing_input_argument", str(err)) from None
    except Exception as err:  # noqa: BLE001 - the benchmark's call raised: the prediction fails
        raise CallError("execution_error", f"{type(err).__name__}: {err}") from None
    return inst, result


def judge(catalog: Catalog, name: str, arguments: Mapping[str, Any], gt_name: str, gt_result: Mapping) -> dict:
    """The verdict of one predicted call against the dialogue's API item (module docstring)."""
    base = {"checker": CHECKER, "predicted": {"name": name, "arguments": arguments}, "expected": gt_name}
    if name != gt_name:
        return {**base, "valid": False, "error_type": "api_name_mismatch", "error_message": f"{name} vs {gt_name}"}
    if name == TOOL_SEARCHER:
        return {**base, "valid": True, "error_type": None, "error_message": None, "by_name_only": True}
    try:
        inst, result = execute(catalog, name, arguments)
    except CallError as err:
        return {**base, "valid": False, "error_type": err.kind, "error_message": str(err)[:300]}
    try:
        ok = bool(inst.check_api_call_correctness(result, copy.deepcopy(dict(gt_result))))
    except KeyError as err:
        return {
            **base,
            "valid": False,
            "error_type": "key_error",
            "error_message": f"KeyError: {err}",
            "result": _safe(result),
        }
    except Exception as err:  # noqa: BLE001 - the class's check raised (AssertionError, ...): not correct
        return {
            **base,
            "valid": False,
            "error_type": "result_mismatch",
            "error_message": f"{type(err).__name__}: {err}"[:300],
            "result": _safe(result),
        }
    if ok:
        return {**base, "valid": True, "error_type": None, "error_message": None, "result": _safe(result)}
    if isinstance(result, dict) and result.get("exception"):
        kind = "has_exception"
    elif isinstance(result, dict) and result.get("output") != gt_result.get("output"):
        kind = "output_mismatch"
    elif isinstance(result, dict) and result.get("input") != gt_result.get("input"):
        kind = "input_mismatch"
    else:
        kind = "result_mismatch"
    return {
        **base,
        "valid": False,
        "error_type": kind,
        "error_message": f"got {_safe(result)}"[:300],
        "result": _safe(result),
    }


def _safe(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


# ---------------------------------------------------------------- prompt


def tool_of(doc: Mapping[str, Any], required: Sequence[str] | None = None) -> Tool:
    """An API description ({name, description, input_parameters}) as an OpenAI tool."""
    props = {}
    for key, spec in (doc.get("input_parameters") or {}).items():
        spec = spec if isinstance(spec, dict) else {}
        kind = str(spec.get("type", "str"))
        json_type = _JSON_TYPES.get(kind, "array" if kind.startswith("list") else "string")
        prop: dict[str, Any] = {"type": json_type, "description": str(spec.get("description", ""))}
        if json_type == "array":
            prop["items"] = {"type": "string"} if kind == "list(str)" else {}
        elif kind not in _JSON_TYPES:
            prop["description"] += f" (type: {kind})"
        props[key] = prop
    req = list(props) if required is None else [r for r in required if r in props]
    return {
        "type": "function",
        "function": {
            "name": str(doc["name"]),
            "description": str(doc.get("description", "")),
            "parameters": {"type": "object", "properties": props, "required": req},
        },
    }


def _result_text(result: Mapping[str, Any]) -> str:
    payload = result.get("output") if not result.get("exception") else {"exception": result.get("exception")}
    try:
        return json.dumps(payload, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(payload)


def messages_of(context: Sequence[Mapping[str, Any]]) -> list[Message]:
    """The dialogue items as chat messages (module docstring), after the system prompt."""
    out: list[Message] = [{"role": "system", "content": SYSTEM_PROMPT}]
    for item in context:
        if item["role"] == "User":
            out.append({"role": "user", "content": item["text"]})
        elif item["role"] == "AI":
            out.append({"role": "assistant", "content": item["text"]})
        else:
            call = {"type": "function", "function": {"name": item["api_name"], "arguments": dict(item["param_dict"])}}
            out.append({"role": "assistant", "content": "", "tool_calls": [call]})
            out.append({"role": "tool", "name": item["api_name"], "content": _result_text(item["result"])})
    return out


def revealed_docs(context: Sequence[Mapping[str, Any]]) -> list[dict]:
    """The API descriptions that the context's ToolSearcher results returned, in order, once each."""
    out: dict[str, dict] = {}
    for item in context:
        if item["role"] != "API" or item["api_name"] != TOOL_SEARCHER:
            continue
        found = item["result"].get("output")
        for doc in found if isinstance(found, list) else [found]:
            if isinstance(doc, dict) and isinstance(doc.get("name"), str):
                out.setdefault(doc["name"], doc)
    return list(out.values())


def tools_for(task, catalog: Catalog) -> list[Tool]:
    """Level 1: every API of the dialogue; levels 2-3: ToolSearcher and the APIs the context revealed."""
    if task.level == 1:
        docs = [d for d in (catalog.doc(n) for n in task.dialogue_apis) if d is not None]
    else:
        docs = [catalog.doc(TOOL_SEARCHER)] + [d for d in revealed_docs(task.context) if d["name"] != TOOL_SEARCHER]
    return [tool_of(d, catalog.required(d["name"])) for d in docs]


# ---------------------------------------------------------------- environment


class ApiBankEnv:
    """One API-Bank task as a one-step episode (module docstring; protocol in `envs.base`)."""

    def __init__(self, task, catalog: Catalog | None = None):
        self.task = task
        self.catalog = catalog or load_catalog(task.root, "lv3_apis" if task.level == 3 else "apis")
        self.done = True
        self.done_reason: str | None = None
        self._verdict: dict | None = None
        self._calls: list[Any] = []

    def reset(self) -> tuple[list[Message], list[Tool]]:
        self.done, self.done_reason, self._verdict, self._calls = False, None, None, []
        return messages_of(self.task.context), tools_for(self.task, self.catalog)

    def step(self, tool_calls: Sequence[Any]) -> list[str]:
        if self.done:
            raise RuntimeError(f"episode {self.task.id} is over ({self.done_reason}); call reset()")
        if not tool_calls:
            return []
        self._calls = copy.deepcopy(list(tool_calls))
        first = self._calls[0]
        name, args = first.get("name"), first.get("arguments")
        if not isinstance(name, str) or not isinstance(args, dict):
            self._verdict = {
                "valid": False,
                "error_type": "no_api_call",
                "error_message": f"not a call: {first!r}"[:300],
                "checker": CHECKER,
            }
        else:
            self._verdict = judge(self.catalog, name, args, self.task.api_name, self.task.result)
        self.done, self.done_reason = True, "completed"
        result = self._verdict.get("result")
        text = _result_text(result) if isinstance(result, dict) else (self._verdict.get("error_message") or "")
        return [text] + [NOT_EXECUTED] * (len(self._calls) - 1)

    def end_turn(self) -> None:
        if not self.done:
            self.done, self.done_reason = True, "completed"
        return None

    def official_verdict(self) -> dict:
        """The verdict of the ground-truth API's check, with an error kind when it fails.

        Error kinds (the evaluator's error statistics, lower-cased): no_api_call, api_name_mismatch,
        invalid_input_parameter, missing_input_argument, has_exception, output_mismatch, input_mismatch,
        result_mismatch (the class's check said no otherwise), key_error, execution_error, api_unavailable (the
        class's module did not import here; the reason is kept)."""
        if self._verdict is None:
            return {
                "valid": False,
                "error_type": "no_api_call",
                "error_message": "the step made no API call",
                "checker": CHECKER,
            }
        return {k: v for k, v in self._verdict.items() if k != "result"}

    def reward(self) -> float:
        return float(self.official_verdict()["valid"])

    def trace(self) -> dict:
        return {
            "id": self.task.id,
            "category": self.task.category,
            "done": self.done,
            "done_reason": self.done_reason,
            "calls": self._calls,
            "expected": {"name": self.task.api_name, "arguments": self.task.param_dict},
            "verdict": self.official_verdict(),
        }
