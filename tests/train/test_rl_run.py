"""Tiny RC-GRPO end to end on the miniature world: several steps from an SFT-style checkpoint (no reward
tokens: they are added), every diagnostic logged, the final policy exported, and exact resume after a
crash."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from rcgrpo_jax.data import tiny_checkpoint
from rcgrpo_jax.models import reward_tokens
from rcgrpo_jax.train import logging as log_lib
from rcgrpo_jax.train import rl_trainer
from tests.helpers import train as train_helpers

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)

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
    "time/compiles",
    "time/compile_s",
    "rollout/tokens_mean",
    "rollout/official_valid",
)


@pytest.fixture(scope="module")
def world_ckpt(tmp_path_factory):
    """A tiny random checkpoint whose tokenizer was trained on the world's text (short prompts)."""
    from configs import rc_grpo

    path = str(tmp_path_factory.mktemp("world") / "model")
    return tiny_checkpoint.build_tiny(rc_grpo.get_config("tiny"), path, hidden_size=32, intermediate_size=64)


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
    out = rl_trainer.run(_config(world_ckpt), workdir)
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
        # the step's own recompiles (a persistent-cache hit counts none), inside the step's time
        assert r["time/compiles"] >= 0 and 0.0 <= r["time/compile_s"] <= r["time/step_s"]
        assert (r["time/compiles"] == 0) == (r["time/compile_s"] == 0.0)
    # the first update of a step is on-policy: the sampler's log-probs match the training forward closely
    assert abs(rows[0]["ratio_mean"] - 1.0) < 0.05
    assert os.path.isdir(os.path.join(workdir, "tb"))
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["2", "3"]


def test_export_has_the_reward_tokens(straight, world_ckpt):
    from transformers import AutoTokenizer

    from rcgrpo_jax.models.hf_io import load_hf

    workdir, _ = straight
    tok = AutoTokenizer.from_pretrained(os.path.join(workdir, "hf"))
    assert reward_tokens.known_by(tok) and not reward_tokens.known_by(AutoTokenizer.from_pretrained(world_ckpt))
    cfg, params = load_hf(os.path.join(workdir, "hf"))
    assert cfg.vocab_size >= len(tok) and params["embed"]["embedding"].shape[0] == cfg.vocab_size


def test_resume_after_a_crash_is_exact(straight, world_ckpt, tmp_path):
    workdir, _ = straight
    c = _config(world_ckpt, checkpoint__export_hf=False)
    first = rl_trainer.run(c, str(tmp_path), stop_after=2)  # "crash" after the step-2 checkpoint
    assert first["reason"] == "stop_after" and first["step"] == 2
    second = rl_trainer.run(c, str(tmp_path))
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


def test_nonfinite_rewards_are_kept_out_of_the_group_and_the_loss():
    """A NaN reward is replaced by the mean of its group's finite rewards (the group's mean and so every
    other rollout's advantage under a centred estimator is unchanged) and marked invalid."""
    from types import SimpleNamespace

    eps = [
        SimpleNamespace(task_id=f"t{i // 4}", reward=r, done_reason="completed")
        for i, r in enumerate([1.0, 0.0, float("nan"), 1.0, float("inf"), float("nan"), float("nan"), float("nan")])
    ]
    rewards, valid, bad = rl_trainer.finite_rewards(np.array([e.reward for e in eps]), eps, 4)
    np.testing.assert_allclose(rewards, [[1.0, 0.0, 2 / 3, 1.0], [0.0, 0.0, 0.0, 0.0]], rtol=1e-6)
    assert valid.tolist() == [[True, True, False, True], [False] * 4]
    assert len(bad) == 5 and "t0 (rollout 2): reward nan" in bad[0]
    from rcgrpo_jax.rl import advantages

    adv, _ = advantages.get("dr_grpo")(rewards)  # r - mean_g: the finite members' advantages are the clean group's
    clean, _ = advantages.get("dr_grpo")(np.array([[1.0, 0.0, 1.0]]))
    np.testing.assert_allclose(np.asarray(adv)[0, [0, 1, 3]], np.asarray(clean)[0], rtol=1e-6, atol=1e-7)
    assert np.all(np.isfinite(np.asarray(adv)))
