"""Tiny RC-GRPO end to end on the miniature world: several steps from an SFT-style checkpoint (no reward
tokens: they are added), every diagnostic logged, the final policy exported, and exact resume after a
crash."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import train_helpers

from rcgrpo_jax.train import logging as log_lib
from rcgrpo_jax.train import rl

DIAGNOSTICS = (
    "frac_zero_var_groups",
    "estimator/frac_zero_std_groups",
    "adv_std",
    "adv_abs_mean",
    "entropy_mean",
    "entropy_reward_pearson",
    "entropy_reward_spearman",
    "kl",
    "clip_frac_low",
    "clip_frac_high",
    "grad_norm",
    "reward_mean",
    "reward_mean_high_token",
    "reward_mean_low_token",
    "frac_high_token",
    "loss",
    "lr",
    "time/rollout_s",
    "time/env_s",
    "time/reference_s",
    "time/update_s",
    "time/tokens_per_s",
    "rollout/tokens_mean",
    "rollout/official_valid",
)


@pytest.fixture(scope="module")
def world_ckpt(tmp_path_factory):
    """A tiny random checkpoint whose tokenizer was trained on the world's text (short prompts)."""
    from configs import rc_grpo
    from rcgrpo_jax.train import sft

    path = str(tmp_path_factory.mktemp("world") / "model")
    return sft.build_tiny(rc_grpo.get_config("tiny"), path, hidden_size=32, intermediate_size=64)


def _config(ckpt, **over):
    from configs import rc_grpo

    c = rc_grpo.get_config("tiny")
    c.model.path = ckpt
    c.train.batch_size, c.train.grad_accum, c.rl.num_minibatches = 8, 2, 2  # 2 tasks x 4 rollouts
    c.train.max_steps = 3
    c.rl.max_step_tokens, c.rl.max_context = 16, 1024
    c.data.buckets = (640, 768, 1024)
    c.checkpoint.every_steps = 2
    c.log.progress = False
    return train_helpers.set_overrides(c, over)


@pytest.fixture(scope="module")
def straight(world_ckpt, tmp_path_factory, compile_cache):
    workdir = str(tmp_path_factory.mktemp("rc_grpo"))
    out = rl.run(_config(world_ckpt), workdir)
    return workdir, out


def test_runs_and_logs_every_diagnostic(straight):
    workdir, out = straight
    assert out["reason"] == "done" and out["step"] == out["total_steps"] == 3
    rows = log_lib.read_metrics(os.path.join(workdir, log_lib.METRICS_FILE))
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        missing = [k for k in DIAGNOSTICS if k not in r]
        assert not missing, missing
        assert all(math.isfinite(v) for v in r.values()), r
        assert r["finite"] == 1 and r["updates"] == 2
        assert 0.0 <= r["frac_zero_var_groups"] <= 1.0 and 0.0 <= r["frac_high_token"] <= 1.0
        assert r["entropy_mean"] > 0 and r["kl"] >= 0 and r["loss_tokens"] > 0
    # the first update of a step is on-policy: the sampler's log-probs match the training forward closely
    assert abs(rows[0]["ratio_mean"] - 1.0) < 0.05
    assert os.path.isdir(os.path.join(workdir, "tb"))
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["2", "3"]


def test_export_has_the_reward_tokens(straight, world_ckpt):
    from transformers import AutoTokenizer

    from rcgrpo_jax.models.hf_io import load_hf

    workdir, _ = straight
    tok = AutoTokenizer.from_pretrained(os.path.join(workdir, "hf"))
    assert rl.has_reward_tokens(tok) and not rl.has_reward_tokens(AutoTokenizer.from_pretrained(world_ckpt))
    cfg, params = load_hf(os.path.join(workdir, "hf"))
    assert cfg.vocab_size >= len(tok) and params["embed"]["embedding"].shape[0] == cfg.vocab_size


def test_resume_after_a_crash_is_exact(straight, world_ckpt, tmp_path):
    workdir, _ = straight
    c = _config(world_ckpt, checkpoint__export_hf=False)
    first = rl.run(c, str(tmp_path), stop_after=2)  # "crash" after the step-2 checkpoint
    assert first["reason"] == "stop_after" and first["step"] == 2
    second = rl.run(c, str(tmp_path))
    assert second["reason"] == "done" and second["step"] == 3
    want = [log_lib.deterministic(r) for r in log_lib.read_metrics(os.path.join(workdir, log_lib.METRICS_FILE))]
    got = [log_lib.deterministic(r) for r in log_lib.read_metrics(str(tmp_path / log_lib.METRICS_FILE))]
    assert got == want


def test_rollout_conditioning_matches_the_rctp_data_format(world_ckpt):
    from rcgrpo_jax.data import datasets, sources
    from rcgrpo_jax.envs import bfcl
    from rcgrpo_jax.rollout.engine import with_reward_goal

    c = _config(world_ckpt)
    task = sources.tasks(c.data, "train")[0]
    plain, _ = bfcl.BFCLEnv(task).reset()
    messages = with_reward_goal(plain, datasets.LOW_REWARD_TOKEN)
    assert messages == datasets.add_reward_goal(plain, high=False)
    assert messages[0]["content"].endswith("\n\n[Reward Goal: <|low_reward|>]")


def test_task_order_is_a_pure_function_of_the_step():
    a = [rl.task_indices(10, 3, seed=0, step=s) for s in range(6)]
    assert [list(x) for x in a] == [list(rl.task_indices(10, 3, seed=0, step=s)) for s in range(6)]
    epoch0 = np.concatenate(a[:3])
    assert len(set(epoch0.tolist())) == 9  # no task twice within an epoch
