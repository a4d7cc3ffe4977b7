"""AWPO's ablation in miniature: the rows' configs by hand (the smoke run is in test_ablation.py, where it
reuses the RC-GRPO ablation's stage 1)."""

from __future__ import annotations

from rcgrpo_jax.pipeline import awpo_ablation, budgets
from rcgrpo_jax.train import rl_config


def test_rows_are_the_papers_table_4_switches():
    b = budgets.get("smoke")
    chosen = {row: rl_config.choices(awpo_ablation.row_config(row, b, None, 0)) for row in awpo_ablation.ROWS}
    assert chosen["GRPO"].estimator == "grpo" and not chosen["GRPO"].uses_judge
    full = chosen["AWPO"].advantage_options
    assert (full.gate, full.difficulty, full.clip_tighten) == ("ratio_above", "quadratic", 0.5)
    assert chosen["AWPO w/o gate"].advantage_options.gate == "always"
    assert chosen["AWPO w/o difficulty weight"].advantage_options.difficulty == "none"
    assert chosen["AWPO w/o dynamic clip"].advantage_options.clip_tighten == 0.0
    naive = chosen["mixed reward (GRPO on r + s)"].advantage_options
    assert (naive.gate, naive.saturation_gate, naive.difficulty, naive.clip_tighten) == ("always", False, "none", 0.0)
    for row in awpo_ablation.ROWS:  # equal budgets: the rows differ only in their advantage options
        c = awpo_ablation.row_config(row, b, "/init", 0)
        assert (c.train.max_steps, c.train.batch_size, c.rl.group_size) == (1, 8, 4) and c.model.path == "/init"
