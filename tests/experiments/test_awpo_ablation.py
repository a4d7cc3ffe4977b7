"""AWPO's ablation in miniature: the rows' configs by hand (the smoke run is in test_ablation.py, where it
reuses the RC-GRPO ablation's stage 1)."""

from __future__ import annotations

import json

import pytest

from experiments import awpo_ablation, budgets
from rcgrpo_jax.train import rl_config


def test_rows_are_the_papers_table_4_switches():
    b = budgets.get("smoke")
    chosen = {row: rl_config.choices(awpo_ablation.row_config(row, b, None, 0)) for row in awpo_ablation.ROWS}
    assert chosen["GRPO"].estimator == "grpo" and not chosen["GRPO"].uses_judge
    full = chosen["AWPO"].advantage_options
    assert (full.gate, full.difficulty, full.clip_tighten) == ("dispersion", "quadratic", 0.5)
    assert full.saturation_gate is True
    # Table 4's "w/o gate": the mixed reward directly, so no saturation factor either; the other two parts stay
    no_gate = chosen["AWPO w/o gate"].advantage_options
    assert (no_gate.gate, no_gate.saturation_gate) == ("always", False)
    assert (no_gate.difficulty, no_gate.clip_tighten) == (full.difficulty, full.clip_tighten)
    assert chosen["AWPO w/o difficulty weight"].advantage_options.difficulty == "none"
    assert chosen["AWPO w/o dynamic clip"].advantage_options.clip_tighten == 0.0
    naive = chosen["mixed reward (GRPO on r + s)"].advantage_options
    assert (naive.gate, naive.saturation_gate, naive.difficulty, naive.clip_tighten) == ("always", False, "none", 0.0)
    for row in awpo_ablation.ROWS:  # equal budgets: the rows differ only in their advantage options
        c = awpo_ablation.row_config(row, b, "/init", 0)
        assert (c.train.max_steps, c.train.batch_size, c.rl.group_size) == (1, 8, 4) and c.model.path == "/init"


def test_without_the_gate_a_saturated_group_learns_from_the_mixed_reward():
    """By hand: every rollout solved (r = 1), the judge prefers the first: m = r + s = [2, 1, 1, 1], mean 5/4,
    population std sqrt(3/16); difficulty weight at p = 1 is d_min = .25. AWPO (gate and saturation factor)
    gives the group nothing; "w/o gate" gives d * A_mix, as the mixed reward directly would."""
    import jax.numpy as jnp
    import numpy as np

    from rcgrpo_jax.rl import advantages

    r, s = jnp.ones((1, 4)), jnp.asarray([[1.0, 0.0, 0.0, 0.0]])
    b = budgets.get("smoke")
    adv = {}
    for row in ("AWPO", "AWPO w/o gate"):
        options = rl_config.choices(awpo_ablation.row_config(row, b, None, 0)).advantage_options
        adv[row] = np.asarray(advantages.get("awpo")(r, aux={"reasoning": s}, config=options)[0])
    np.testing.assert_array_equal(adv["AWPO"], 0.0)
    expected = 0.25 * np.array([0.75, -0.25, -0.25, -0.25]) / np.sqrt(3 / 16)
    np.testing.assert_allclose(adv["AWPO w/o gate"][0], expected, rtol=1e-5)


def test_awpo_budget_is_the_quickstarts_world_base_and_sft_with_awpos_rl_settings():
    a, q = awpo_ablation.AWPO_BUDGET, budgets.QUICKSTART
    assert awpo_ablation.get_budget("awpo") is a and awpo_ablation.get_budget("smoke") is budgets.SMOKE
    # the same world, base and stage-1 SFT as the RC-GRPO ablation: one base model for both papers' miniatures
    assert (a.world, a.model, a.arch, a.pretrain, a.pretrain_corpus, a.sft) == (
        q.world,
        q.model,
        q.arch,
        q.pretrain,
        q.pretrain_corpus,
        q.sft,
    )
    assert a.arch == "qwen3" and a.model["head_dim"] != a.model["hidden_size"] // a.model["num_heads"]
    assert not a.rctp and not a.controls
    assert (a.rl["train.max_steps"], a.rl["rl.group_size"], a.rl["rl.slot_mode"]) == (3, 4, "shrink")
    c = awpo_ablation.row_config("AWPO", a, "/init", 0)
    assert (c.train.max_steps, c.train.batch_size, c.rl.group_size) == (3, 64, 4)


def test_diagnostics_mean_per_step_and_the_judge_failures_counter_last(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [
        {"step": 1, "estimator/gate_open_frac": 0.25, "judge/failures": 2, "frac_zero_var_groups": 1.0},
        {"step": 2, "estimator/gate_open_frac": 0.75, "judge/failures": 5, "frac_zero_var_groups": 0.5},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    d = awpo_ablation.diagnostics(str(path))
    assert d["estimator/gate_open_frac"] == 0.5 and d["frac_zero_var_groups"] == 0.75
    assert d["judge/failures"] == 5  # cumulative: its last value, not the mean 3.5
    assert d["judge_score_mean"] is None  # not logged


def _s(overall: float, n: int = 64) -> dict:
    return {"overall": overall, "n": n}


def test_verdict_wording_by_hand():
    evals = {"SFT": [_s(0.10)], **{row: [_s(0.10)] for row in awpo_ablation.ROWS}}
    evals["AWPO"] = [_s(0.125)]  # +2.5 points = 1.6 episodes of 64 (1.5625 points each): within two
    diag = {
        "AWPO": {
            "frac_zero_var_groups": 0.9,
            "estimator/gate_open_frac": 0.05,
            "estimator/rho_g_mean": 1.25,
            "estimator/difficulty_mean": 0.31,
            "estimator/clip_scale_mean": 0.97,
            "judge/failures": 3.0,
        }
    }
    text = awpo_ablation.verdict(evals, diag)
    assert "One test episode is 1.56 points. The RL rows span 2.5 points; the best is AWPO (12.5%" in text
    assert "cannot rank them" in text and "90% of the groups had all-equal outcome rewards" in text
    assert "gate was open in 5% of the groups" in text and "mean rho_g = sigma_mix/sigma_out" in text and "1.25" in text
    assert "d_g 0.31" in text and "scale 0.97" in text and "Judge failures (scored as the default): 3." in text
    evals["AWPO"] = [_s(0.30)]
    assert "cannot rank them" not in awpo_ablation.verdict(evals, {})


def test_the_sft_policy_starts_from_the_worlds_base():
    """quickstart and awpo: the base the repository ships (the RC-GRPO ablation's; nothing built), keyed by its
    settings; a budget without a base, or whose base is not a Qwen3, is refused."""
    import dataclasses

    from experiments import ablation

    q = budgets.QUICKSTART
    base, key = awpo_ablation.init_base("unused", q)
    assert base == ablation.shipped_base(q) == ablation.pretrained_base("unused", q) and key is not None
    assert key == {"base": ablation.base_request(q)}
    a = awpo_ablation.AWPO_BUDGET
    assert awpo_ablation.init_base("unused", a) == (base, key)  # the same base as the RC-GRPO ablation's
    with pytest.raises(ValueError, match="starts from the world's base"):
        awpo_ablation.init_base("unused", dataclasses.replace(q, pretrain={}, explore_with="sft"))
    with pytest.raises(ValueError, match="runs on a qwen3, the world's base is a llama"):
        awpo_ablation.init_base("unused", dataclasses.replace(q, arch="llama"))
