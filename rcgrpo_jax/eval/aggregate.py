"""BFCL v4 leaderboard aggregates, computed as bfcl-eval's leaderboard code computes them.

The package's `eval_checker/eval_runner_helper.py` (`generate_leaderboard_csv`) builds, per model:

- non_live    = unweighted mean of [simple, multiple, parallel, parallel_multiple], where
                simple = unweighted mean of [simple_python, simple_java, simple_javascript];
- live        = count-weighted mean of [live_simple, live_multiple, live_parallel, live_parallel_multiple]
                (sum of accuracy x entries / sum of entries);
- irrelevance = unweighted mean of [irrelevance, live_irrelevance];
- multi_turn  = unweighted mean of [multi_turn_base, multi_turn_miss_func, multi_turn_miss_param,
                multi_turn_long_context];
- agentic     = unweighted mean of [web_search, memory], each the unweighted mean of its categories;
- overall     = weighted mean of [non_live, live, irrelevance, multi_turn, agentic] with weights
                `WEIGHTS` = 10, 10, 10, 30, 40, normalised to sum to 1 (`calculate_percentage_weighted_accuracy`).

`live_relevance` enters no group (the leaderboard shows it in its own column).

The agentic group (web search, memory) needs the internet and cannot run offline. `overall_offline`
is the same weighted mean over the groups that ran of non_live, live, irrelevance and multi_turn, the
weights renormalised over them (`offline_weights`: all four = 1/6, 1/6, 1/6, 1/2). It is not the
leaderboard's overall: that one scores a missing agentic group as 0, which is
`overall_with_agentic_zero` = overall_offline x (sum of the offline weights that ran / 100).

The package counts a category that was not evaluated as accuracy 0 in its groups; here a group is
reported only when all its categories ran (`groups`), so no group silently mixes in zeros.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

SIMPLE = ("simple_python", "simple_java", "simple_javascript")
NON_LIVE_PARTS = ("multiple", "parallel", "parallel_multiple")
LIVE = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")
IRRELEVANCE = ("irrelevance", "live_irrelevance")
MULTI_TURN = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
WEB_SEARCH = ("web_search_base", "web_search_no_snippet")
MEMORY = ("memory_kv", "memory_vector", "memory_rec_sum")
GROUP_CATEGORIES = {
    "non_live": SIMPLE + NON_LIVE_PARTS,
    "live": LIVE,
    "irrelevance": IRRELEVANCE,
    "multi_turn": MULTI_TURN,
    "agentic": WEB_SEARCH + MEMORY,
}
WEIGHTS = {"non_live": 10, "live": 10, "irrelevance": 10, "multi_turn": 30, "agentic": 40}
OFFLINE_GROUPS = ("non_live", "live", "irrelevance", "multi_turn")


@dataclasses.dataclass(frozen=True)
class Score:
    """An accuracy in [0, 1] over `count` entries."""

    accuracy: float
    count: int


def unweighted(scores: Sequence[Score]) -> Score:
    """Plain mean of the accuracies; the count is the total (`calculate_unweighted_accuracy`)."""
    return Score(sum(s.accuracy for s in scores) / len(scores), sum(s.count for s in scores))


def weighted(scores: Sequence[Score]) -> Score:
    """Entry-count-weighted mean: sum(acc x count) / sum(count) (`calculate_weighted_accuracy`)."""
    total = sum(s.count for s in scores)
    return Score(sum(s.accuracy * s.count for s in scores) / total, total)


def percentage_weighted(scores: Sequence[Score], weights: Sequence[float]) -> Score:
    """sum(acc_i x w_i / sum(w)) (`calculate_percentage_weighted_accuracy`)."""
    if len(scores) != len(weights):
        raise ValueError(f"{len(scores)} scores for {len(weights)} weights")
    total = sum(weights)
    if total <= 0:
        raise ValueError("the weights must sum to more than 0")
    return Score(sum(s.accuracy * w / total for s, w in zip(scores, weights)), sum(s.count for s in scores))


def _group(name: str, table: Mapping[str, Score]) -> Score:
    t = table
    if name == "non_live":
        return unweighted([unweighted([t[c] for c in SIMPLE])] + [t[c] for c in NON_LIVE_PARTS])
    if name == "live":
        return weighted([t[c] for c in LIVE])
    if name == "agentic":
        return unweighted([unweighted([t[c] for c in WEB_SEARCH]), unweighted([t[c] for c in MEMORY])])
    return unweighted([t[c] for c in GROUP_CATEGORIES[name]])


def groups(table: Mapping[str, Score]) -> dict[str, Score]:
    """The groups whose categories all appear in `table` (BFCL category name -> Score)."""
    return {g: _group(g, table) for g, cats in GROUP_CATEGORIES.items() if all(c in table for c in cats)}


def offline_weights(present: Sequence[str]) -> dict[str, float]:
    """BFCL's weights of the offline groups in `present`, renormalised to sum to 1."""
    names = [g for g in OFFLINE_GROUPS if g in present]
    total = sum(WEIGHTS[g] for g in names)
    return {g: WEIGHTS[g] / total for g in names}


def overall(group_scores: Mapping[str, Score]) -> Score:
    """BFCL's overall over all five groups (needs the agentic group)."""
    missing = [g for g in WEIGHTS if g not in group_scores]
    if missing:
        raise ValueError(f"BFCL's overall needs every group; missing: {', '.join(missing)}")
    return percentage_weighted([group_scores[g] for g in WEIGHTS], [WEIGHTS[g] for g in WEIGHTS])


def overall_offline(group_scores: Mapping[str, Score]) -> Score | None:
    """BFCL's weighted overall restricted to the offline groups that ran (see the module docstring);
    None when none ran."""
    names = [g for g in OFFLINE_GROUPS if g in group_scores]
    if not names:
        return None
    return percentage_weighted([group_scores[g] for g in names], [WEIGHTS[g] for g in names])


def summary(table: Mapping[str, Score]) -> dict:
    """Groups, `overall_offline` with the groups it covers, and the leaderboard's overall with a
    missing agentic group scored 0, as plain JSON."""
    gs = groups(table)
    off = overall_offline(gs)
    covers = [g for g in OFFLINE_GROUPS if g in gs]
    share = sum(WEIGHTS[g] for g in covers) / sum(WEIGHTS.values())
    return {
        "groups": {g: s.accuracy for g, s in gs.items()},
        "overall_offline": None if off is None else off.accuracy,
        "overall_offline_covers": covers,
        "overall_offline_weights": offline_weights(covers),
        "overall_with_agentic_zero": None if off is None or "agentic" in gs else off.accuracy * share,
        "overall": overall(gs).accuracy if all(g in gs for g in WEIGHTS) else None,
    }
