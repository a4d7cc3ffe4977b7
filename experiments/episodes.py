"""What a row's evaluation episodes did, read from its eval JSONs: the pass matrix that pairs rows task by
task, and the episode profile (call shares, tool errors, made-up arguments) behind a row that moved or
collapsed. Host-side reading only; `summary.py` writes the report from it."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping, Sequence

import numpy as np

HELDOUT = ("compose_heldout",)  # the generalisation column, not in Overall


def pass_matrix(paths: Sequence[str]) -> tuple[np.ndarray, list[str], list[str]]:
    """[seeds, tasks] 0/1 official passes of one row's eval files (trained categories only), with the task
    ids and categories; every file must hold the same tasks in the same order (paired by construction)."""
    rows, ids, cats = [], None, None
    for path in paths:
        with open(path) as f:
            eps = [e for e in json.load(f)["episodes"] if e["category"] not in HELDOUT]
        these = [e["id"] for e in eps]
        if ids is None:
            ids, cats = these, [e["category"] for e in eps]
        elif these != ids:
            raise ValueError(f"{path}: its tasks differ from {paths[0]}'s; rows are compared task by task")
        rows.append([float(e["official_pass"]) for e in eps])
    return np.asarray(rows), ids or [], cats or []


@dataclasses.dataclass(frozen=True)
class EpisodeProfile:
    """What a row's test episodes did, read from its eval JSONs (every seed): the evidence behind a row
    that moved or collapsed. Call shares are over all calls; tool errors are the environment's own results
    (`envs.dispatch`: "Error: unknown function ...", "Error: invalid arguments ..."; a class method's
    {"error": ...}, e.g. a mistyped name)."""

    episodes: int
    first_action_call: float  # episodes whose first assistant message calls a tool (not text)
    calls_per_episode: float
    unknown_function: float  # calls to a function the task does not offer
    invalid_arguments: float  # calls whose arguments do not fit the function's signature
    tool_error: float  # calls the method itself rejected (no such file, ...)
    reward_mean: float
    # Calls with an argument (a string, or a number) written in no user or tool message before the call: a
    # name or operand the model made up or miscopied (`made_up_argument`). No expert step of the world has one.
    made_up_argument: float = 0.0
    # Of the episodes that failed BFCL's checker, the share with such a call.
    failed_with_made_up: float = 0.0


def _arguments(call: Mapping[str, Any]) -> dict:
    args = (call.get("function") or {}).get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return {}
    return args if isinstance(args, dict) else {}


def made_up_argument(call: Mapping[str, Any], context: str) -> bool:
    """Whether a call passes a string or number that `context` (the user and tool messages before it) does
    not contain: 12 and 12.0 both count as written when the text has "12"."""
    for v in _arguments(call).values():
        if isinstance(v, bool):
            continue
        if isinstance(v, str):
            if v not in context:
                return True
        elif isinstance(v, (int, float)):
            forms = {str(v), repr(float(v))} | ({str(int(v))} if float(v).is_integer() else set())
            if not any(f in context for f in forms):
                return True
    return False


def episode_profile(paths: Sequence[str]) -> EpisodeProfile | None:
    eps = []
    for p in paths:
        if os.path.exists(p):
            with open(p) as f:
                eps += json.load(f).get("episodes", [])
    if not eps:
        return None
    first_call = calls = unknown = invalid = failed = made_up = episodes_failed = failed_made_up = 0
    for e in eps:
        msgs = e.get("messages") or []
        assistant = [m for m in msgs if m.get("role") == "assistant"]
        first_call += bool(assistant and assistant[0].get("tool_calls"))
        calls += sum(len(m.get("tool_calls") or []) for m in assistant)
        context, any_made_up = "", False
        for m in msgs:
            for call in m.get("tool_calls") or []:
                bad = made_up_argument(call, context)
                made_up += bad
                any_made_up |= bad
            if m.get("role") == "user":
                context += str(m.get("content") or "") + "\n"
            if m.get("role") != "tool":
                continue
            text = str(m.get("content") or "")
            context += text + "\n"
            unknown += text.startswith("Error: unknown function")
            invalid += text.startswith("Error: invalid arguments")
            failed += text.startswith('{"error"')
        if not e.get("official_pass", False):
            episodes_failed += 1
            failed_made_up += any_made_up
    n = len(eps)
    per_call = max(calls, 1)
    return EpisodeProfile(
        episodes=n,
        first_action_call=first_call / n,
        calls_per_episode=calls / n,
        unknown_function=unknown / per_call,
        invalid_arguments=invalid / per_call,
        tool_error=failed / per_call,
        reward_mean=float(np.mean([float(e.get("reward", 0.0)) for e in eps])),
        made_up_argument=made_up / per_call,
        failed_with_made_up=failed_made_up / max(episodes_failed, 1),
    )


def episode_profiles(eval_paths: Mapping[str, Sequence[str]]) -> dict[str, EpisodeProfile]:
    """Every row's episode profile (rows without eval JSONs left out); read once for the report."""
    profiles = {name: episode_profile(paths) for name, paths in eval_paths.items()}
    return {k: v for k, v in profiles.items() if v is not None}
