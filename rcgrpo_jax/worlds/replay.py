"""Run calls on real BFCL environment instances, without `eval`.

The world is built by executing its own calls on the benchmark's classes, so every value a task
asks the model to read (a file name in a listing, a count, a sum) is what the real tool prints.
Call strings are BFCL's format (`mv(source='a.txt', destination='docs')`); we write them with
`format_call` and read them back with `parse_call`, which accepts only a name and literal arguments.
"""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import json
from typing import Any

from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING, STATELESS_CLASSES

Call = tuple[str, dict[str, Any]]


def format_call(name: str, kwargs: dict[str, Any]) -> str:
    """BFCL's Python-call string, keyword arguments in the given order."""
    return f"{name}(" + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")"


def parse_call(text: str) -> Call:
    """Inverse of `format_call` for literal arguments; raises ValueError on anything else."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise ValueError(f"not a call: {text!r}") from e
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        raise ValueError(f"not a plain function call: {text!r}")
    if node.args:
        raise ValueError(f"positional arguments are not used in this world: {text!r}")
    try:
        kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
    except (ValueError, TypeError, SyntaxError, RecursionError) as e:
        raise ValueError(f"non-literal argument in {text!r}") from e
    if None in kwargs:
        raise ValueError(f"**kwargs not allowed: {text!r}")
    return node.func.id, kwargs


def format_result(result: Any) -> str:
    """A tool result as the model (and BFCL's checker) sees it: str as is, dict as JSON, else str()."""
    if isinstance(result, str):
        return result
    if isinstance(result, dict):
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


def make_instances(initial_config: dict, involved_classes: list[str]) -> dict[str, Any]:
    """Fresh instances of the involved classes, scenarios loaded from deep copies (BFCL pitfall 4)."""
    instances = {}
    for class_name in involved_classes:
        cls = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)
        inst = cls()
        if class_name not in STATELESS_CLASSES:
            inst._load_scenario(copy.deepcopy(initial_config.get(class_name, {})), long_context=False)
        instances[class_name] = inst
    return instances


def public_methods(instances: dict[str, Any]) -> dict[str, Any]:
    """name -> bound method over all instances (later classes win on a clash, as in BFCL)."""
    methods = {}
    for inst in instances.values():
        for name, fn in inspect.getmembers(inst, predicate=inspect.ismethod):
            if not name.startswith("_"):
                methods[name] = fn
    return methods


class Session:
    """Live instances plus the turns recorded so far. Host-side builder state for one task."""

    def __init__(self, initial_config: dict, involved_classes: list[str]):
        self.initial_config = copy.deepcopy(initial_config)
        self.involved_classes = list(involved_classes)
        self._methods = public_methods(make_instances(initial_config, involved_classes))
        self.questions: list[str] = []
        self.ground_truth: list[list[str]] = []

    def turn(self, text: str) -> None:
        self.questions.append(text)
        self.ground_truth.append([])

    def call(self, name: str, **kwargs: Any) -> Any:
        """Execute on the real instance, record the call string, return the raw result."""
        if not self.ground_truth:
            raise RuntimeError("call() before the first turn()")
        self.ground_truth[-1].append(format_call(name, kwargs))
        return self._methods[name](**copy.deepcopy(kwargs))


def replay(task: dict) -> list[list[str]]:
    """Execute a task's ground truth on fresh instances: formatted results per turn."""
    methods = public_methods(make_instances(task["initial_config"], task["involved_classes"]))
    out = []
    for turn in task["ground_truth"]:
        results = []
        for text in turn:
            name, kwargs = parse_call(text)
            results.append(format_result(methods[name](**kwargs)))
        out.append(results)
    return out
