"""Keep the bfcl-eval tool classes from leaking state between episodes (BFCL.md pitfalls 4-6).

The package's classes mutate things that outlive an instance:
- module-level containers (long_context extensions such as LONG_WEATHER_EXTENSION, CREDIT_CARD_EXTENSION,
  DEFAULT_STATE dicts), reached through shared references after `_load_scenario`;
- mutable default arguments (`TwitterAPI.post_tweet(tags=[], mentions=[])`, which `mention()` extends);
- process-wide numeric contexts (`mpmath.mp.dps`, `decimal.getcontext().prec`) set by MathAPI.

We do not patch the package. Instead a snapshot of every mutable module container and mutable default
is taken once, and `restore()` puts back any that changed (an equality check first, so a clean state
costs only comparisons). `new_instance` loads from a copy of the scenario and, for long_context (the
only loading path that merges module-level objects into an instance), deep-copies the instance's
attributes, so an episode does not share objects with the modules or with another episode.
"""

from __future__ import annotations

import copy
import decimal
import importlib
import json
import threading
import types
from typing import Any

# The eight multi-turn classes -> module (mirrors bfcl_eval's CLASS_FILE_PATH_MAPPING, kept here so we
# can import lazily and name a clear error when the package is missing).
_PREFIX = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
CLASS_MODULES: dict[str, str] = {
    "GorillaFileSystem": f"{_PREFIX}.gorilla_file_system",
    "MathAPI": f"{_PREFIX}.math_api",
    "MessageAPI": f"{_PREFIX}.message_api",
    "TwitterAPI": f"{_PREFIX}.posting_api",
    "TicketAPI": f"{_PREFIX}.ticket_api",
    "TradingBot": f"{_PREFIX}.trading_bot",
    "TravelAPI": f"{_PREFIX}.travel_booking",
    "VehicleControlAPI": f"{_PREFIX}.vehicle_control",
}
_EXTRA_MODULES = (f"{_PREFIX}.long_context",)
STATELESS_CLASSES = frozenset({"MathAPI"})

INSTALL_HINT = "pip install --no-deps bfcl-eval==2026.3.23 mpmath"

_MUTABLE = (dict, list, set)


def import_bfcl(module: str) -> types.ModuleType:
    """Import a bfcl_eval module, or fail with the install command."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name and (err.name.startswith("bfcl_eval") or err.name == "mpmath"):
            raise ModuleNotFoundError(
                f"The BFCL environment needs the bfcl-eval package (and mpmath); install it with:\n    {INSTALL_HINT}"
            ) from err
        raise


def tool_class(class_name: str) -> type:
    if class_name not in CLASS_MODULES:
        raise KeyError(f"unknown BFCL class {class_name!r}; known: {sorted(CLASS_MODULES)}")
    return getattr(import_bfcl(CLASS_MODULES[class_name]), class_name)


class _Snapshot:
    """Deep copies of the package's mutable globals and mutable defaults, taken at first use."""

    def __init__(self) -> None:
        self.containers: list[tuple[Any, Any]] = []  # (live object, pristine copy)
        self.defaults: list[tuple[types.FunctionType, tuple]] = []
        seen: set[int] = set()
        for name in (*CLASS_MODULES.values(), *_EXTRA_MODULES):
            module = import_bfcl(name)
            for key, value in vars(module).items():
                if key.startswith("__") or not isinstance(value, _MUTABLE) or id(value) in seen:
                    continue
                seen.add(id(value))
                self.containers.append((value, copy.deepcopy(value)))
        for class_name in CLASS_MODULES:
            for attr in vars(tool_class(class_name)).values():
                if (
                    isinstance(attr, types.FunctionType)
                    and attr.__defaults__
                    and any(isinstance(d, _MUTABLE) for d in attr.__defaults__)
                ):
                    self.defaults.append((attr, copy.deepcopy(attr.__defaults__)))

    def restore(self) -> int:
        """Put back every container/default that changed; returns how many were restored."""
        restored = 0
        for live, pristine in self.containers:
            if live != pristine:
                fresh = copy.deepcopy(pristine)
                if isinstance(live, dict):
                    live.clear()
                    live.update(fresh)
                elif isinstance(live, list):
                    live[:] = fresh
                else:
                    live.clear()
                    live.update(fresh)
                restored += 1
        for func, pristine in self.defaults:
            if func.__defaults__ != pristine:
                func.__defaults__ = copy.deepcopy(pristine)
                restored += 1
        return restored


_snapshot: _Snapshot | None = None
_snapshot_lock = threading.Lock()
# The package's globals are process-wide; environments and checks that touch them take this lock.
package_lock = threading.RLock()


def restore_package_state() -> int:
    """Undo any mutation of bfcl-eval module globals and mutable defaults (see module docstring)."""
    global _snapshot
    with _snapshot_lock:
        if _snapshot is None:
            _snapshot = _Snapshot()
    with package_lock:
        return _snapshot.restore()


DECIMAL_PREC, MPMATH_DPS = 28, 15  # the libraries' own defaults


class numeric_context:
    """Run a tool call (or the official checker) at the libraries' default numeric precision, then restore
    the caller's. MathAPI sets the process-wide `mpmath.mp.dps` (e.g. in `logarithm`) and never restores
    it, so without the reset a result would depend on which episodes ran before it in the process."""

    def __enter__(self) -> "numeric_context":
        self._prec = decimal.getcontext().prec
        decimal.getcontext().prec = DECIMAL_PREC
        try:
            import mpmath

            self._mp = mpmath.mp
            self._dps = mpmath.mp.dps
            mpmath.mp.dps = MPMATH_DPS
        except ModuleNotFoundError:
            self._mp = None
        return self

    def __exit__(self, *exc: Any) -> None:
        decimal.getcontext().prec = self._prec
        if self._mp is not None:
            self._mp.dps = self._dps


def new_instance(class_name: str, scenario: dict, *, long_context: bool) -> Any:
    """A fresh tool instance loaded from a deep copy of `scenario`, sharing no objects with anything.

    Module constants are restored first (they are the long_context extensions that `_load_scenario`
    merges in), and the instance's attributes are deep-copied afterwards so later calls cannot mutate
    those constants through shared references.
    """
    restore_package_state()
    instance = tool_class(class_name)()
    if class_name not in STATELESS_CLASSES:
        # Scenarios are JSON data: a JSON round trip is a deep copy, several times faster.
        instance._load_scenario(json.loads(json.dumps(scenario)), long_context=long_context)
        if long_context:
            # Only long_context loading merges module-level extensions into the instance (the
            # classes deep-copy their DEFAULT_STATE otherwise). One deepcopy of the whole dict keeps
            # internal aliasing (a file system's current directory points into its tree).
            vars(instance).update(copy.deepcopy(vars(instance)))
    return instance
