"""Call strings and BFCL's official multi-turn checker.

Two directions of the `name(k=v, ...)` call-string form:
- `parse_call_string` reads the ground-truth strings of possible_answer with `ast` (literal arguments
  only); it never evaluates anything.
- `format_call` writes our parsed, validated calls the way BFCL's handlers do
  (`name(k=repr(v),...)`), for the official checker only.

`official_check` runs the package's `multi_turn_checker` with a unique model name per check, removes
the instances the package caches in its module globals afterwards (pitfall 1), and restores the
package's mutable globals before and after (pitfalls 4-6), so checks are independent and repeatable.

The checker itself `eval`s call strings (pitfall 2). It only ever receives strings that this module
formatted: a visible function name plus `repr` of plain JSON values (str/int/finite float/bool/None/
list/dict), which are Python literals. Calls our environment refused to run are passed as
`REJECTED_CALL`, an undefined name that evaluates to a NameError inside the checker and touches
nothing: the step still counts as a step with a call, as it would in BFCL, but no tool runs.
"""

from __future__ import annotations

import ast
import itertools
import keyword
import math
import os
import uuid
from typing import Any, Mapping, Sequence

from rcgrpo_jax.envs.isolation import import_bfcl, numeric_context, package_lock, restore_package_state

REJECTED_CALL = "rcgrpo_rejected_call()"
FORCE_TERMINATED = "multi_turn:force_terminated"
# BFCL checker error types -> our short error kinds (anything else keeps the checker's own name).
ERROR_KINDS = {
    "multi_turn:empty_turn_model_response": "empty_turn",
    "multi_turn:instance_state_mismatch": "state_mismatch",
    "multi_turn:execution_response_mismatch": "response_mismatch",
    FORCE_TERMINATED: "force_terminated",
}

_CHECKER_MODULE = "bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker"
_UTILS_MODULE = "bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils"
_counter = itertools.count()
_PLAIN = (str, int, float, bool, type(None))


def parse_call_string(text: str) -> tuple[str, list, dict]:
    """`cd(folder='document')` -> ('cd', [], {'folder': 'document'}). Literal arguments only."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as err:
        raise ValueError(f"not a call string: {text!r}") from err
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain function call: {text!r}")
    if any(kw.arg is None for kw in node.keywords):
        raise ValueError(f"**kwargs are not supported: {text!r}")
    try:
        positional = [ast.literal_eval(arg) for arg in node.args]
        keyword = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
    except ValueError as err:
        raise ValueError(f"non-literal argument in {text!r}") from err
    return node.func.id, positional, keyword


def _check_plain(value: Any) -> None:
    stack = [value]
    while stack:
        node = stack.pop()
        if type(node) is dict:
            for key, sub in node.items():
                if type(key) is not str:
                    raise ValueError("dict keys must be strings")
                stack.append(sub)
        elif type(node) is list:
            stack.extend(node)
        elif type(node) not in _PLAIN:
            raise ValueError(f"cannot format a value of type {type(node).__name__}")
        elif type(node) is float and not math.isfinite(node):
            raise ValueError("cannot format a non-finite number")


def format_call(name: str, arguments: Mapping[str, Any]) -> str:
    """Format a validated call as BFCL's handlers do: `name(k=repr(v),...)`.

    Refuses anything but an identifier name, identifier keys and plain JSON values, so the string
    can only ever be a call with literal arguments.
    """
    if type(name) is not str or not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
        raise ValueError(f"not a public function name: {name!r}")
    for key in arguments:
        if type(key) is not str or not key.isidentifier() or keyword.iskeyword(key):
            raise ValueError(f"not an argument name: {key!r}")
    _check_plain(dict(arguments))
    return f"{name}({','.join(f'{k}={v!r}' for k, v in arguments.items())})"


def force_terminated(message: str) -> dict:
    return {"valid": False, "error_type": FORCE_TERMINATED, "error_message": message}


def official_check(
    entry: Mapping[str, Any], ground_truth: Sequence[Sequence[str]], model_calls: Sequence[Sequence[Sequence[str]]]
) -> dict:
    """BFCL's `multi_turn_checker` on call strings (turn -> step -> call), as the official runner
    calls it: a turn-count mismatch (force termination) fails without running the checker.

    Returns {"valid", "error_type", "error_message"} (None for the last two on a pass).
    """
    if len(model_calls) != len(ground_truth):
        return force_terminated(f"model played {len(model_calls)} turns of {len(ground_truth)} (force-terminated)")
    checker = import_bfcl(_CHECKER_MODULE).multi_turn_checker
    cache = vars(import_bfcl(_UTILS_MODULE))
    # Only [a-z0-9_]: the package builds global names from it.
    model_name = f"rcgrpo_{os.getpid()}_{next(_counter)}_{uuid.uuid4().hex[:12]}"
    category = entry["id"].rsplit("_", 1)[0]
    calls = [[list(step) for step in turn] for turn in model_calls]
    truth = [list(turn) for turn in ground_truth]
    with package_lock, numeric_context():  # the package's instance cache is a module global, not thread-safe
        restore_package_state()
        try:
            result = checker(calls, truth, dict(entry), category, model_name)
        except Exception as exc:  # the checker asserts on malformed input
            result = {
                "valid": False,
                "error_type": "multi_turn:checker_error",
                "error_message": f"{type(exc).__name__}: {exc}",
            }
        finally:
            for key in [k for k in cache if k.startswith(model_name)]:
                del cache[key]
            restore_package_state()
    valid = bool(result.get("valid"))
    return {
        "valid": valid,
        "error_type": None if valid else result.get("error_type"),
        "error_message": None if valid else result.get("error_message"),
    }
