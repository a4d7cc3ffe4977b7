"""The `api_bank` evaluation suite: API-Bank levels 1-3 from `eval.api_bank.path` (`data.api_bank`), one
episode per API call of the benchmark through the rollout engine and `envs.api_bank.ApiBankEnv` (the
`api_bank` task source), greedy (or the oracle), each episode one assistant step.

Scores, as the benchmark's evaluators count them: accuracy per level = correct calls / the level's API
calls; `overall` = correct calls / all calls of the levels run (every call once); `mean_of_levels` beside
it; level 3 also its dialogue accuracy (samples whose every call is correct, `lv3_evaluator`'s "sample
accuracy"). A call that could not be scored (the API's module did not import here, the prompt did not fit,
the template refused it) counts as wrong and is named under `unscored_ids`; ToolSearcher calls scored by
name only are counted under `tool_searcher_by_name`. Importing the module registers the suite (`eval.suites`).
"""

from __future__ import annotations

from typing import Any, Sequence

import ml_collections

from rcgrpo_jax.config_fields import ConfigError
from rcgrpo_jax.data import api_bank as data
from rcgrpo_jax.envs import api_bank as env_lib
from rcgrpo_jax.eval import run as run_lib
from rcgrpo_jax.eval import suites

PATH_FIELD = "eval.api_bank.path"
UNSCORED = ("api_unavailable", "truncated", "render_error", "scorer_error")


def load_checked(eval_cfg) -> list[data.Task]:
    """The tasks at eval.api_bank.path, with the API classes they need imported; a bad path, layout or record
    raises ConfigError naming the field (start-up: before any model loads)."""
    section = eval_cfg.api_bank
    try:
        levels = data.parse_levels(section.levels)
    except ValueError as err:
        raise ConfigError("eval.api_bank.levels", str(err)) from None
    if not section.path:
        raise ConfigError(PATH_FIELD, "the api_bank suite needs a copy of the benchmark's api-bank/ folder (DIR)")
    try:
        tasks = data.load(section.path, levels)
        for sub in sorted({data.API_DIRS[lv] for lv in levels}):
            env_lib.load_catalog(tasks[0].root if tasks else section.path, sub)
    except (data.ApiBankDataError, OSError) as err:
        raise ConfigError(PATH_FIELD, str(err)) from None
    except Exception as err:  # noqa: BLE001 - the copy's apis/api.py itself does not import
        raise ConfigError(PATH_FIELD, f"the copy's API classes do not import: {type(err).__name__}: {err}") from None
    return tasks


def _first_per_level(tasks: Sequence[data.Task], limit: int) -> list[data.Task]:
    if limit <= 0:
        return list(tasks)
    seen: dict[int, int] = {}
    out = []
    for t in tasks:
        if seen.get(t.level, 0) < limit:
            seen[t.level] = seen.get(t.level, 0) + 1
            out.append(t)
    return out


def records(
    eval_cfg, tokenizer, model_cfg, params, policy: str, *, mesh=None, progress: bool = False
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(one record per API call, the suite summary) under `policy` (model | oracle)."""
    tasks = _first_per_level(load_checked(eval_cfg), int(eval_cfg.max_tasks))
    cfg = ml_collections.ConfigDict(eval_cfg.to_dict())
    cfg.max_steps_per_turn = 0  # one assistant step per episode
    results, _ = run_lib.evaluate(
        model_cfg, params, tokenizer, tasks, cfg, policy=policy, mesh=mesh, progress=progress, source="api_bank"
    )
    by_id = {t.id: t for t in tasks}
    recs = [{**r, "expected_api": by_id[r["id"]].api_name, "dialogue": by_id[r["id"]].dialogue} for r in results]
    return recs, summarize(recs, tasks)


def summarize(recs: Sequence[dict[str, Any]], tasks: Sequence[data.Task]) -> dict[str, Any]:
    """The suite's figures (module docstring)."""
    by_level: dict[str, list[dict]] = {}
    for r in recs:
        by_level.setdefault(r["category"], []).append(r)
    correct = {c: sum(bool(r["official_pass"]) for r in rs) for c, rs in sorted(by_level.items())}
    n = {c: len(rs) for c, rs in sorted(by_level.items())}
    levels = {c: correct[c] / n[c] for c in n}
    kinds: dict[str, int] = {}
    unscored: dict[str, list[str]] = {}
    for r in recs:
        k = r.get("error_kind")
        if k:
            kinds[k] = kinds.get(k, 0) + 1
            if k in UNSCORED:
                unscored.setdefault(k, []).append(r["id"])
    out: dict[str, Any] = {
        "levels": levels,
        "n": n,
        "correct": correct,
        "overall": sum(correct.values()) / len(recs) if recs else None,
        "mean_of_levels": sum(levels.values()) / len(levels) if levels else None,
        "calls": len(recs),
        "error_kinds": dict(sorted(kinds.items(), key=lambda kv: -kv[1])),
        "tool_searcher_by_name": sum(r["expected_api"] == env_lib.TOOL_SEARCHER for r in recs),
        "unscored": {k: len(v) for k, v in sorted(unscored.items())},
        "unscored_ids": dict(sorted(unscored.items())),
    }
    l3 = [r for r in recs if r["category"] == "level_3"]
    if l3:
        dialogues: dict[str, bool] = {}
        for r in l3:
            dialogues[r["dialogue"]] = dialogues.get(r["dialogue"], True) and bool(r["official_pass"])
        out["level_3_dialogues"] = {"n": len(dialogues), "accuracy": sum(dialogues.values()) / len(dialogues)}
    return out


def markdown(summary: dict[str, Any], label: str) -> str:
    """The suite's table: accuracy (%) per level, overall (every call) and the mean of the levels."""
    lines = [f"| API-Bank | {label} | calls |", "|---|---:|---:|"]
    lines += [f"| {c} | {100 * a:.2f} | {summary['n'][c]} |" for c, a in summary["levels"].items()]
    if "level_3_dialogues" in summary:
        d = summary["level_3_dialogues"]
        lines.append(f"| level_3 dialogues (every call right) | {100 * d['accuracy']:.2f} | {d['n']} |")
    lines.append(f"| overall (every call) | {100 * summary['overall']:.2f} | {summary['calls']} |")
    lines.append(f"| mean of levels | {100 * summary['mean_of_levels']:.2f} | |")
    notes = []
    if summary["tool_searcher_by_name"]:
        notes.append(f"{summary['tool_searcher_by_name']} ToolSearcher calls scored by name only (not executed)")
    if summary["unscored"]:
        notes.append("not scored: " + ", ".join(f"{k} {v}" for k, v in summary["unscored"].items()))
    return "\n".join(lines) + ("\n\n" + "; ".join(notes) if notes else "") + "\n"


SUITE = suites.register(suites.Suite("api_bank", load_checked, records, markdown))
