"""Evaluation reports: per-episode results -> accuracy per category and overall, as BFCL scores them.

An episode result is `{id, category, official_pass: bool, reward: float, error_kind: str | None}`
(`category` may be omitted: it is then `id.rsplit('_', 1)[0]`, BFCL's rule). Overall accuracy is the
unweighted mean of the per-category accuracies, as BFCL does; `reward_mean` is our own reward averaged
over episodes. Accuracies are fractions in [0, 1]; the Markdown table prints them as percentages.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

Summary = dict[str, Any]


def _category(result: Mapping[str, Any]) -> str:
    return result.get("category") or result["id"].rsplit("_", 1)[0]


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def summarize(results: Iterable[Mapping[str, Any]]) -> Summary:
    """One run's summary: {n, overall, reward_mean, categories: {cat: {n, accuracy, reward_mean}},
    error_kinds: {kind: count}} (over episodes whose error_kind is set, most common first)."""
    by_cat: dict[str, list[Mapping[str, Any]]] = {}
    for r in results:
        by_cat.setdefault(_category(r), []).append(r)
    if not by_cat:
        raise ValueError("no episode results to summarise")
    cats = {
        c: {
            "n": len(rs),
            "accuracy": _mean([float(bool(r["official_pass"])) for r in rs]),
            "reward_mean": _mean([float(r["reward"]) for r in rs]),
        }
        for c, rs in sorted(by_cat.items())
    }
    everything = [r for rs in by_cat.values() for r in rs]
    kinds = Counter(r["error_kind"] for r in everything if r.get("error_kind"))
    return {
        "n": len(everything),
        "overall": _mean([c["accuracy"] for c in cats.values()]),
        "reward_mean": _mean([float(r["reward"]) for r in everything]),
        "categories": cats,
        "error_kinds": dict(kinds.most_common()),
    }


def _spread(xs: Sequence[float]) -> float:
    """Sample standard deviation (ddof=1); 0 for a single run."""
    if len(xs) < 2:
        return 0.0
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def aggregate(summaries: Sequence[Summary]) -> Summary:
    """Several runs of one row (e.g. seeds): mean and sample std of overall, reward_mean and each
    category's accuracy, over the runs that have that category; error kinds summed."""
    if not summaries:
        raise ValueError("no summaries to aggregate")

    def stat(xs: list[float]) -> dict[str, float]:
        return {"mean": _mean(xs), "std": _spread(xs), "runs": len(xs)}

    cats = sorted({c for s in summaries for c in s["categories"]})
    kinds: Counter = Counter()
    for s in summaries:
        kinds.update(s["error_kinds"])
    return {
        "runs": len(summaries),
        "overall": stat([s["overall"] for s in summaries]),
        "reward_mean": stat([s["reward_mean"] for s in summaries]),
        "categories": {
            c: stat([s["categories"][c]["accuracy"] for s in summaries if c in s["categories"]]) for c in cats
        },
        "error_kinds": dict(kinds.most_common()),
    }


def _cell(stat: Mapping[str, float] | None, scale: float, digits: int) -> str:
    if stat is None:
        return "-"
    text = f"{stat['mean'] * scale:.{digits}f}"
    if stat["runs"] > 1:
        text += f" ± {stat['std'] * scale:.{digits}f}"
    return text


def markdown_table(
    rows: Mapping[str, Summary | Sequence[Summary]], categories: Sequence[str] | None = None, after: Sequence[str] = ()
) -> str:
    """A Markdown table, one row per name: accuracy (%) per category, overall (%), reward mean.
    A row given as a list of summaries (several seeds) shows mean ± sample std. `after` names
    categories shown after the reward column (e.g. held-out ones that `overall` leaves out)."""
    agg = {name: aggregate(v if isinstance(v, (list, tuple)) else [v]) for name, v in rows.items()}
    if categories is None:
        categories = sorted({c for a in agg.values() for c in a["categories"]})
    header = ["Row", *categories, "Overall", "Reward", *after]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for name, a in agg.items():
        cells = [
            name,
            *(_cell(a["categories"].get(c), 100.0, 2) for c in categories),
            _cell(a["overall"], 100.0, 2),
            _cell(a["reward_mean"], 1.0, 3),
            *(_cell(a["categories"].get(c), 100.0, 2) for c in after),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_json(path: str, obj: Any) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True, allow_nan=True)
        f.write("\n")
    return path


def write_report(
    out_dir: str,
    rows: Mapping[str, Summary | Sequence[Summary]],
    categories: Sequence[str] | None = None,
    title: str = "Evaluation",
) -> dict[str, str]:
    """report.json (each row's aggregate, plus per-run summaries) and report.md (the table)."""
    payload = {
        name: {
            "aggregate": aggregate(v if isinstance(v, (list, tuple)) else [v]),
            "runs": list(v) if isinstance(v, (list, tuple)) else [v],
        }
        for name, v in rows.items()
    }
    json_path = write_json(os.path.join(out_dir, "report.json"), payload)
    md_path = os.path.join(out_dir, "report.md")
    with open(md_path, "w") as f:
        f.write(
            f"# {title}\n\nAccuracy (%) by BFCL's official multi-turn checker; overall = unweighted "
            f"mean over categories; reward = our reward, mean over episodes.\n\n"
        )
        f.write(markdown_table(rows, categories))
    return {"json": json_path, "markdown": md_path}
