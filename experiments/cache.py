"""Stage outputs cached in a workdir, checked against the settings that made them.

The ablations skip a stage whose output exists, so an interrupted run resumes and `reproduce.sh --workdir`
reuses the quickstart's stage 1. A reused output is only right if it was made with the settings asked for
now: a workdir made with another budget (say `data.world.train_vocab=narrow`, or the AWPO budget beside the
quickstart's in one workdir) would otherwise be read as if it were this one's. Each cached output keeps its
request (a JSON object); a rerun that asks for something else stops with the fields that differ.

Where files live is not what they are: fields named `path`, `*_path` or `*_dir` are left out of config
requests, so a moved workdir still resumes. Outputs from before requests were kept carry none and are reused.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

REQUEST_FILE = "request.json"


class StaleCacheError(RuntimeError):
    """A cached stage output was made with other settings than the ones asked for."""


def plain(value: Any) -> Any:
    """`value` as JSON reads it back (tuples become lists), so a stored request compares equal to a new one."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def differences(stored: Mapping[str, Any], wanted: Mapping[str, Any]) -> list[str]:
    """Dotted fields whose values differ, as 'field: stored -> wanted' (a missing side reads <unset>)."""
    a, b = _flat(plain(dict(stored))), _flat(plain(dict(wanted)))
    unset = "<unset>"
    return [f"{k}: {a.get(k, unset)!r} -> {b.get(k, unset)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def check(stored: Mapping[str, Any] | None, wanted: Mapping[str, Any], what: str) -> None:
    """Raise StaleCacheError when a stored request exists and differs from `wanted`."""
    if stored is None:
        return
    diffs = differences(stored, wanted)
    if diffs:
        shown = "; ".join(diffs[:6]) + (f"; and {len(diffs) - 6} more" if len(diffs) > 6 else "")
        raise StaleCacheError(
            f"{what} was made with other settings ({shown}). Delete it or choose another --workdir; "
            "nothing was overwritten."
        )


def read_request(directory: str) -> dict | None:
    path = os.path.join(directory, REQUEST_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def write_request(directory: str, request: Mapping[str, Any]) -> None:
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, REQUEST_FILE), "w") as f:
        json.dump(plain(dict(request)), f, indent=1, sort_keys=True)


def _is_location(key: str) -> bool:
    return key == "path" or key.endswith("_path") or key.endswith("_dir")


def _drop_locations(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_locations(v) for k, v in value.items() if not _is_location(str(k))}
    return value


def config_request(config) -> dict:
    """A trainer config (ml_collections.ConfigDict) as a request: its fields, less where files live."""
    return _drop_locations(plain(json.loads(config.to_json_best_effort())))
