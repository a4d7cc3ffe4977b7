"""Safe execution of model tool calls on BFCL tool instances.

Model output is data, never code. A call `{name, arguments}` runs only when
1. `name` is a string naming a callable function of the episode (a documented public method of an
   involved class; on miss_func the environment decides whether held-out ones count), and
2. `arguments` is plain JSON data (bounded depth and size, finite numbers) that satisfies the
   function's JSON schema and binds to the method's signature, and
3. it passes a small table of cost guards for calls that would run for minutes inside one C
   operation (big-integer powers, huge decimal precisions), which no timeout can interrupt.
Otherwise the model gets an error string and nothing runs. Lookup is by dictionary, the method is
fetched with `getattr` on a name from that dictionary only, and nothing is ever passed to eval/exec.

Per-call time limit: on the main thread (and when no other ITIMER_REAL timer is armed) a SIGALRM
timer interrupts the call between bytecodes by raising `CallTimeout` (a BaseException, so the tools'
own `except Exception` clauses cannot swallow it). Elsewhere signals are unavailable, so the call runs
in a daemon thread that is abandoned after the limit; the caller must then treat the instance as
unusable (the environment ends the episode).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import signal
import threading
from typing import Any, Callable, Mapping

from rcgrpo_jax.envs import schema as schema_lib
from rcgrpo_jax.envs.isolation import numeric_context

# Statuses of one call.
OK = "ok"  # executed and returned
ERROR = "error"  # executed and raised -> "Error during execution: ..."
REJECTED = "rejected"  # not executed: unknown name / invalid arguments / cost guard
TIMEOUT = "timeout"  # executed past the time limit and was stopped
SKIPPED = "skipped"  # not executed: the episode's tool-call budget was spent

EXECUTED = (OK, ERROR)


class CallTimeout(BaseException):
    """Raised inside a tool call that ran past its time limit."""


@dataclasses.dataclass(frozen=True)
class Limits:
    call_timeout_s: float | None = 2.0
    max_argument_depth: int = 8
    max_argument_chars: int = 100_000


@dataclasses.dataclass(frozen=True)
class FunctionSpec:
    """A tool the model may call: which class owns it, its JSON schema and its Python signature."""

    name: str
    class_name: str
    parameters: Mapping[str, Any]  # converted JSON schema of the arguments object
    signature: inspect.Signature  # of the unbound method, `self` removed


@dataclasses.dataclass
class CallRecord:
    """What happened to one requested call. `arguments` is a deep copy of the model's arguments
    taken before execution (tools keep references to list arguments), or None if they were not
    plain JSON data. `bound` holds every parameter, defaults filled, for executed/valid calls."""

    name: str | None
    arguments: dict | None
    status: str
    result: str
    bound: dict | None = None

    def to_json(self) -> dict:
        return {"name": self.name, "arguments": self.arguments, "status": self.status, "result": self.result}


def method_signature(cls: type, name: str) -> inspect.Signature:
    sig = inspect.signature(getattr(cls, name))
    params = [p for p in sig.parameters.values() if p.name != "self"]
    return sig.replace(parameters=params)


def bind_arguments(
    sig: inspect.Signature, positional: list | tuple = (), keyword: Mapping[str, Any] | None = None
) -> dict:
    """Bind to the signature and fill defaults (fresh copies, so mutable defaults are never shared).

    Positional arguments become keywords. Raises TypeError when they do not bind.
    """
    bound = sig.bind(*positional, **dict(keyword or {}))
    out = {}
    for name, param in sig.parameters.items():
        if name in bound.arguments:
            out[name] = bound.arguments[name]
        elif param.default is not inspect.Parameter.empty:
            out[name] = copy.deepcopy(param.default)
    return out


def render_result(value: Any) -> str:
    """BFCL's rendering of a tool result for the model (pitfall 7)."""
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except Exception:
            return str(value)
    return str(value)


def error_result(exc: BaseException) -> str:
    return f"Error during execution: {exc}"


# --- cost guards -------------------------------------------------------------------------------


def _guard_power(args: Mapping[str, Any]) -> str | None:
    base, exponent = args.get("base"), args.get("exponent")
    if type(base) is int and type(exponent) is int and abs(base) > 1 and abs(exponent) > 10_000:
        return "exponent too large for an integer base (limit 10000)"
    return None


def _guard_precision(args: Mapping[str, Any]) -> str | None:
    precision = args.get("precision")
    if type(precision) is int and precision > 1_000:
        return "precision must be at most 1000"
    return None


COST_GUARDS: dict[tuple[str, str], Callable[[Mapping[str, Any]], str | None]] = {
    ("MathAPI", "power"): _guard_power,
    ("MathAPI", "logarithm"): _guard_precision,
    ("MathAPI", "square_root"): _guard_precision,
}


# --- call normalisation and execution ----------------------------------------------------------


def _loads_strict(text: str) -> Any:
    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not a valid number")

    return json.loads(text, parse_constant=no_constants)


def normalize_call(raw: Any) -> tuple[Any, Any, str | None]:
    """Accept `{name, arguments}` (or the OpenAI `{"function": {...}}` wrapper); arguments may be a
    JSON string. Returns (name, arguments, error)."""
    if isinstance(raw, Mapping) and isinstance(raw.get("function"), Mapping):
        raw = raw["function"]
    if not isinstance(raw, Mapping):
        return None, None, "a tool call must be an object with 'name' and 'arguments'"
    name = raw.get("name")
    arguments = raw.get("arguments", {})
    if arguments is None:
        arguments = {}
    if type(arguments) is str:
        try:
            arguments = _loads_strict(arguments)
        except (ValueError, RecursionError) as err:
            return name, None, f"arguments are not valid JSON: {str(err)[:200]}"
    return name, arguments, None


def _show_name(name: Any) -> str:
    text = name if type(name) is str else repr(type(name).__name__)
    return json.dumps(text[:100])


def _reject(name: Any, arguments: Any, message: str) -> CallRecord:
    safe_name = name if type(name) is str else None
    return CallRecord(safe_name, arguments, REJECTED, f"Error: {message}")


def prepare_call(
    raw: Any, visible: Mapping[str, FunctionSpec], limits: Limits
) -> tuple[CallRecord, FunctionSpec | None]:
    """Validate one requested call. Returns a record (status REJECTED with its message, or OK with
    `bound` filled and an empty result, ready to run) and the spec of the function to run."""
    name, arguments, err = normalize_call(raw)
    if type(name) is not str or name not in visible:
        return _reject(name, None, f"unknown function {_show_name(name)}; call one of the provided functions"), None
    if err:
        return _reject(name, None, f"invalid call to {name}: {err}"), None
    spec = visible[name]
    err = schema_lib.check_arguments(
        arguments, spec.parameters, max_depth=limits.max_argument_depth, max_chars=limits.max_argument_chars
    )
    if err:
        # Only plain-JSON arguments are kept in the trace.
        ok_json = (
            schema_lib.check_json_value(
                arguments, max_depth=limits.max_argument_depth, max_chars=limits.max_argument_chars
            )
            is None
        )
        return _reject(
            name, copy.deepcopy(arguments) if ok_json else None, f"invalid arguments for {name}: {err}"
        ), None
    guard = COST_GUARDS.get((spec.class_name, name))
    message = guard(arguments) if guard else None
    if message:
        return _reject(name, copy.deepcopy(arguments), f"invalid arguments for {name}: {message}"), None
    try:
        bound = bind_arguments(spec.signature, (), copy.deepcopy(arguments))
    except TypeError as exc:
        return _reject(name, copy.deepcopy(arguments), f"invalid arguments for {name}: {exc}"), None
    return CallRecord(name, copy.deepcopy(arguments), OK, "", bound), spec


def run_call(instance: Any, record: CallRecord, limits: Limits) -> CallRecord:
    """Execute a prepared call on its instance; fills status and result in place and returns it."""
    method = getattr(instance, record.name)
    kwargs = copy.deepcopy(record.bound)  # the tool may keep and mutate what it is given
    try:
        with numeric_context():  # the result is rendered at the call's precision too (an mpf prints by mp.dps)
            value = call_with_timeout(method, kwargs, limits.call_timeout_s)
            record.result = render_result(value)
        record.status = OK
    except CallTimeout:
        record.status = TIMEOUT
        record.result = (
            f"Error during execution: the call exceeded the time limit of {limits.call_timeout_s} s and was stopped"
        )
    except Exception as exc:  # a tool raising is normal model feedback
        record.status = ERROR
        try:
            record.result = error_result(exc)
        except Exception:
            record.result = f"Error during execution: {type(exc).__name__}"
    return record


# --- time limit ---------------------------------------------------------------------------------


class _Alarm:
    active = False

    @classmethod
    def handler(cls, signum: int, frame: Any) -> None:
        if cls.active:
            cls.active = False
            raise CallTimeout()


def _signals_usable() -> bool:
    return (
        threading.current_thread() is threading.main_thread()
        and hasattr(signal, "setitimer")
        and signal.getitimer(signal.ITIMER_REAL)[0] == 0.0
    )


def call_with_timeout(fn: Callable[..., Any], kwargs: Mapping[str, Any], timeout_s: float | None) -> Any:
    """Run fn(**kwargs), raising CallTimeout after `timeout_s` seconds (None = no limit)."""
    if timeout_s is None:
        return fn(**kwargs)
    if _signals_usable():
        previous = signal.signal(signal.SIGALRM, _Alarm.handler)
        _Alarm.active = True
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            return fn(**kwargs)
        finally:
            _Alarm.active = False
            signal.setitimer(signal.ITIMER_REAL, 0.0)
            signal.signal(signal.SIGALRM, previous)
    return _call_in_thread(fn, kwargs, timeout_s)


def _call_in_thread(fn: Callable[..., Any], kwargs: Mapping[str, Any], timeout_s: float) -> Any:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(**kwargs)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target, daemon=True, name="bfcl-tool-call")
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise CallTimeout()
    if "error" in box:
        raise box["error"]
    return box.get("value")
