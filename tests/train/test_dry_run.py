"""The dry run's memory plan: one JSON object as the command's last line, with the per-device phases, the
resident buffers and the peak, checked against hand-computed sizes on a tiny RL config (8 fake devices)."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
import train_helpers

from rcgrpo_jax import main, models
from rcgrpo_jax.train import dry_run, model_prep

SMALL_RL = (  # a tiny RL step: 20 rollouts (5 tasks x 4), 16-token steps, a 192-token context, 64-wide prefill
    "--config.data.buckets=(128,256)",
    "--config.rl.max_context=192",
    "--config.rl.max_step_tokens=16",
    "--config.rl.prefill_chunk=64",
    "--config.train.batch_size=20",
    "--config.rl.rollout_chunk=20",
    "--config.train.grad_accum=5",
    "--config.rl.num_minibatches=1",
)


def test_memory_plan_arithmetic():
    plan = model_prep.memory_plan(
        phases={"update": 50.0, "prefill": 9.0, "decode": 4.0},
        resident={"train_state": 12.0, "reference": 4.0, "decode_weights": 8.0, "kv_cache": 30.0},
        resident_during={
            "update": ["train_state", "reference"],
            "prefill": ["train_state", "reference", "decode_weights", "kv_cache"],
            "decode": ["train_state", "reference", "decode_weights", "kv_cache"],
        },
        limit_gb=65.0,
    )
    assert plan["per_device_gb"] == {"update": 50.0, "prefill": 9.0, "decode": 4.0, "resident": 54.0, "peak": 66.0}
    assert plan["peak_phase"] == "update" and plan["resident_during_gb"]["prefill"] == 54.0
    assert plan["fits"] is False  # 66 > 65
    with pytest.raises(ValueError, match="unknown resident"):
        model_prep.memory_plan({"update": 1.0}, {"a": 1.0}, {"update": ["b"]}, 10.0)


def test_rl_dry_run_prints_the_memory_plan_last(tiny_ckpt, capsys):
    argv = ["main", "--config=configs/rc_grpo.py:tiny", f"--config.model.path={tiny_ckpt}", *SMALL_RL, "--dry_run"]
    assert main.cli(argv) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    report = json.loads(last)
    gb = report["per_device_gb"]
    assert set(gb) == {"update", "prefill", "decode", "resident", "peak"}
    assert isinstance(report["fits"], bool) and report["limit_gb"] == pytest.approx(141.0)
    resident = report["resident_gb"]
    assert set(resident) == {"train_state", "reference", "decode_weights", "kv_cache"}
    assert gb["resident"] == pytest.approx(sum(resident.values()), rel=1e-9)
    during = report["resident_during_gb"]
    assert during["update"] == pytest.approx(resident["train_state"] + resident["reference"], rel=1e-9)
    assert during["prefill"] == during["decode"] == pytest.approx(gb["resident"], rel=1e-9)
    assert gb["peak"] == pytest.approx(max(gb[p] + during[p] for p in ("update", "prefill", "decode")), rel=1e-9)
    assert report["fits"] == (gb["peak"] <= report["limit_gb"]) and min(gb.values()) > 0

    # Hand-computed sizes (the tiny preset's mesh is one device: every buffer is whole on it).
    config = models.ModelConfig.from_hf(tiny_ckpt)
    n_params = sum(x.size for x in jax.tree.leaves(models.abstract_params(config)))
    n_params += 2 * config.hidden_size * (1 if config.tie_word_embeddings else 2)  # the 2 reward tokens' rows
    rows, capacity = 24, 192 + 64  # 20 rollouts -> a multiple of 8; max_context + max(prefill_chunk, 16)
    assert report["rollout"] == {
        "rows": rows,
        "capacity": capacity,
        "prefill_width": 64,
        "max_new_tokens": 16,
        "decode_dtype": "float32",  # the tiny preset decodes in its compute dtype
    }
    kv = 2 * config.num_layers * rows * config.num_kv_heads * config.head_dim * capacity * 4 + 4 * rows
    assert resident["kv_cache"] == pytest.approx(kv / 1e9, rel=1e-9)
    assert resident["decode_weights"] == pytest.approx(n_params * 4 / 1e9, rel=1e-9)
    assert resident["reference"] == pytest.approx(n_params * 4 / 1e9, rel=1e-9)
    assert resident["train_state"] == pytest.approx(3 * n_params * 4 / 1e9, rel=0.01)  # params + 2 moments


def test_sft_dry_run_has_the_same_shape(tiny_ckpt, data_path):
    report = dry_run.supervised(train_helpers.make_config(tiny_ckpt, data_path))
    gb = report["per_device_gb"]
    assert set(gb) == {"update", "prefill", "decode", "resident", "peak"}
    assert gb["prefill"] == gb["decode"] == 0.0  # SFT has no rollout phase
    assert gb["resident"] == pytest.approx(report["params_gb"] + report["opt_state_gb"], rel=1e-9)
    assert gb["peak"] == pytest.approx(gb["update"] + gb["resident"], rel=1e-9) == report["peak_gb"]
    assert report["fits"] and np.isfinite(gb["peak"])
