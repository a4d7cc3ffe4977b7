"""The SFT-length probe's rule, by hand: the largest pass@k - greedy among the lengths with greedy >= 20%."""

from __future__ import annotations

from experiments import sft_probe


def _p(steps, greedy, pass_at_k):
    return {"steps": steps, "greedy": greedy, "pass_at_k": pass_at_k}


def test_choose_takes_the_largest_gap_among_lengths_greedy_enough():
    points = [_p(128, 0.10, 0.60), _p(320, 0.25, 0.55), _p(640, 0.50, 0.70), _p(1280, 0.60, 0.75)]
    # 128 has the largest gap (0.50) but greedy 10% < 20%; of the rest 320's gap 0.30 beats 0.20 and 0.15.
    assert sft_probe.choose(points)["steps"] == 320
    assert sft_probe.choose([_p(128, 0.0, 0.0), _p(320, 0.19, 0.9)]) is None  # none qualifies
    tie = [_p(640, 0.30, 0.50), _p(320, 0.20, 0.40)]  # equal gaps: the shorter run
    assert sft_probe.choose(tie)["steps"] == 320
