"""Exact resume after SIGKILL, and SIGTERM leaving a checkpoint, with real `rcgrpo_jax.main` processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from rcgrpo_jax.train import logging as log_lib
from rcgrpo_jax.train import sft
from tests.helpers import train as train_helpers

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)

STEPS = 10  # compared steps
SCHEDULE_STEPS = 200  # the run's nominal length (lr schedule); runs are cut short before it
EVERY = 2


def _launch(workdir, ckpt, data, cache):
    env = dict(
        os.environ,
        JAX_PLATFORMS="cpu",
        XLA_FLAGS="--xla_force_host_platform_device_count=8",
        JAX_COMPILATION_CACHE_DIR=cache,
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
        JAX_DEFAULT_MATMUL_PRECISION="highest",
        TOKENIZERS_PARALLELISM="false",
    )
    cmd = [
        sys.executable,
        "-m",
        "rcgrpo_jax.main",
        "--config=configs/sft.py:tiny",
        f"--workdir={workdir}",
        *train_helpers.cli_overrides(ckpt, data),
        f"--config.train.max_steps={SCHEDULE_STEPS}",
        f"--config.checkpoint.every_steps={EVERY}",
    ]
    return subprocess.Popen(
        cmd, cwd=train_helpers.REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_for(predicate, proc, timeout=240.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        if proc.poll() is not None:
            pytest.fail(f"run exited early (rc {proc.returncode}):\n{proc.stderr.read()[-3000:]}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail("timed out waiting for the run")


def _committed_steps(workdir):
    d = os.path.join(workdir, "checkpoints")
    return sorted(int(s) for s in os.listdir(d) if s.isdigit()) if os.path.isdir(d) else []


def _rows(workdir):
    return [log_lib.deterministic(r) for r in log_lib.read_metrics(os.path.join(workdir, log_lib.METRICS_FILE))]


def _config(ckpt, data):
    return train_helpers.make_config(ckpt, data, train__max_steps=SCHEDULE_STEPS, checkpoint__every_steps=EVERY)


def test_resume_after_sigkill_repeats_the_uninterrupted_run(tiny_ckpt, data_path, tmp_path, compile_cache):
    killed = str(tmp_path / "killed")
    proc = _launch(killed, tiny_ckpt, data_path, compile_cache)
    _wait_for(lambda: bool(_committed_steps(killed)), proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    k = max(_committed_steps(killed))
    assert 0 < k < STEPS and proc.returncode == -signal.SIGKILL

    straight = str(tmp_path / "straight")
    assert sft.run(_config(tiny_ckpt, data_path), straight, stop_after=STEPS)["step"] == STEPS
    resumed = sft.run(_config(tiny_ckpt, data_path), killed, stop_after=STEPS - k)
    assert resumed["step"] == STEPS
    expected = _rows(straight)
    assert [r["step"] for r in expected] == list(range(1, STEPS + 1))
    assert _rows(killed) == expected  # every deterministic metric, step by step, bit for bit


def test_sigterm_leaves_a_checkpoint(tiny_ckpt, data_path, tmp_path, compile_cache):
    workdir = str(tmp_path / "run")
    proc = _launch(workdir, tiny_ckpt, data_path, compile_cache)
    metrics = os.path.join(workdir, log_lib.METRICS_FILE)
    _wait_for(lambda: os.path.exists(metrics) and len(log_lib.read_metrics(metrics)) >= 3, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err[-3000:]  # rcgrpo_jax.main.PREEMPTED_EXIT
    assert "stopped by SIGTERM after step" in err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["reason"] == "sigterm" and 3 <= summary["step"] < SCHEDULE_STEPS
    assert summary["step"] in _committed_steps(workdir)
    assert log_lib.read_metrics(metrics)[-1]["step"] == summary["step"]
