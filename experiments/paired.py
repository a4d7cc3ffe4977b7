"""Is one RL row better than another? Paired comparisons over seeds and test tasks (pure numpy).

Both rows are evaluated on the same test tasks for each seed, so they are compared pair by pair:

  sign test         over seeds: d_s = overall_a(s) - overall_b(s); under H0 (no difference) each non-zero
                    d_s is positive with probability 1/2, so p = P(|Binomial(n, 1/2) - n/2| >= |k - n/2|),
                    k = #{d_s > 0}, n = #{d_s != 0}. With 3 seeds the smallest possible p is 0.25: three seeds
                    alone cannot show significance at 5%, and the report says so.
  paired bootstrap  resamples seeds (pairs kept) and, within each category, test tasks (pairs kept), B times;
                    statistic = mean over the drawn seeds of overall_a - overall_b, with overall = the unweighted
                    mean over categories of the pass rate (the report's Overall). Reports the 95% percentile
                    interval and p_one_sided = the share of draws with a difference <= 0. Resampling tasks as
                    well as seeds counts the test set's finite size as noise, not only the seeds.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Paired:
    mean_diff: float  # mean over seeds of overall_a - overall_b (fraction)
    per_seed_diff: tuple[float, ...]
    sign_test_p: float  # two-sided, exact
    bootstrap_ci95: tuple[float, float]
    bootstrap_p_one_sided: float  # P(diff <= 0) under the bootstrap
    significant: bool  # the bootstrap's 95% interval excludes 0


def sign_test(diffs: Sequence[float]) -> float:
    """Two-sided exact sign test p-value; ties (d == 0) are dropped; 1.0 when every d is 0."""
    nz = [d for d in diffs if d != 0]
    n = len(nz)
    if n == 0:
        return 1.0
    k = sum(d > 0 for d in nz)
    dev = abs(k - n / 2)
    p = sum(math.comb(n, i) for i in range(n + 1) if abs(i - n / 2) >= dev) / 2**n
    return min(1.0, p)


def overall(passes: np.ndarray, categories: Sequence[str]) -> np.ndarray:
    """[..., tasks] 0/1 -> [...] the unweighted mean over categories of each category's pass rate."""
    cats = sorted(set(categories))
    idx = np.asarray([cats.index(c) for c in categories])
    return np.mean([passes[..., idx == j].mean(-1) for j in range(len(cats))], axis=0)


def compare(a: np.ndarray, b: np.ndarray, categories: Sequence[str], *, draws: int = 4000, seed: int = 0) -> Paired:
    """a, b: [seeds, tasks] 0/1 pass matrices of two rows over the same tasks, in the same order."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape or a.ndim != 2 or a.shape[1] != len(categories):
        raise ValueError(
            f"paired rows need equal [seeds, tasks] shapes over {len(categories)} tasks: {a.shape} vs {b.shape}"
        )
    per_seed = overall(a, categories) - overall(b, categories)
    rng = np.random.default_rng(seed)
    cats = np.asarray(categories)
    groups = [np.flatnonzero(cats == c) for c in sorted(set(categories))]
    d = a - b
    stats = np.empty(draws)
    for t in range(draws):
        s = rng.integers(0, a.shape[0], a.shape[0])
        rows = d[s]
        stats[t] = np.mean([rows[:, g[rng.integers(0, len(g), len(g))]].mean() for g in groups])
    lo, hi = np.percentile(stats, [2.5, 97.5])
    return Paired(
        mean_diff=float(per_seed.mean()),
        per_seed_diff=tuple(float(x) for x in per_seed),
        sign_test_p=sign_test(per_seed.tolist()),
        bootstrap_ci95=(float(lo), float(hi)),
        bootstrap_p_one_sided=float(np.mean(stats <= 0)),
        significant=bool(lo > 0 or hi < 0),
    )
