"""Preemption through the launch scripts: a stage stopped by a signal saves and exits 75
(rcgrpo_jax.main.PREEMPTED_EXIT); launch/pipeline.sh then stops without starting the next stage, and
launch/slurm.sbatch requeues the job. pipeline.sh drives the real SFT stage; slurm.sbatch runs against stub
`srun` and `scontrol` commands on PATH (no SLURM here)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from rcgrpo_jax import main
from tests.helpers import train as train_helpers

REPO = train_helpers.REPO


def test_the_scripts_name_the_launchers_exit_code():
    assert main.PREEMPTED_EXIT == 75
    for script in ("pipeline.sh", "slurm.sbatch"):
        with open(os.path.join(REPO, "launch", script)) as f:
            assert f"PREEMPTED={main.PREEMPTED_EXIT}" in f.read(), script


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


@pytest.mark.slow
def test_pipeline_stops_after_a_preempted_stage(tmp_path, compile_cache):
    from rcgrpo_jax.models.tiny import build_tiny_checkpoint

    model = build_tiny_checkpoint(str(tmp_path / "model"), arch="qwen2")
    data = train_helpers.write_jsonl(str(tmp_path / "sft.jsonl"))
    out = tmp_path / "out"
    extra = [o for o in train_helpers.cli_overrides(model, data) if not o.startswith("--config.model.path")]
    env = dict(
        os.environ,
        RCGRPO_SETUP="0",
        RCGRPO_SKIP_MESH_CHECK="1",  # the SFT stage is the first child (the multi-GPU check: test_pipeline_mesh_check)
        PYTHON=sys.executable,
        PYTHONPATH=REPO,
        JAX_PLATFORMS="cpu",
        JAX_COMPILATION_CACHE_DIR=compile_cache,
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
        TOKENIZERS_PARALLELISM="false",
        EXTRA=" ".join([*extra, "--config.train.max_steps=500", "--config.checkpoint.every_steps=1000"]),
    )
    proc = subprocess.Popen(
        ["bash", os.path.join(REPO, "launch", "pipeline.sh"), "tiny", model, str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = out / "sft" / "metrics.jsonl"
    end = time.monotonic() + 240
    while not (metrics.exists() and metrics.stat().st_size > 0):  # the stage is inside its step loop
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            pytest.fail(f"the SFT stage never reached a step (rc {proc.poll()}):\n{proc.stderr.read()[-3000:]}")
        time.sleep(0.1)
    (stage,) = _children(proc.pid)
    os.kill(stage, signal.SIGINT)  # Ctrl-C to the stage (SIGTERM: tests/train/test_train_resume.py)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == main.PREEMPTED_EXIT, stderr[-3000:]
    assert "pipeline: stage sft was preempted (exit 75" in stderr
    summary = json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])
    assert summary["reason"] == "sigint" and 1 <= summary["step"] < 500
    assert str(summary["step"]) in os.listdir(out / "sft" / "checkpoints")  # saved before it stopped
    assert "rcgrpo_jax.train.exploration" not in stdout and not (out / "explore").exists()  # next stage never began
    assert sorted(os.listdir(out)) == ["sft"]


def _stub(path, body: str) -> None:
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def _sbatch(tmp_path, srun_body: str, *, signal_after: float | None = None) -> tuple[int, str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stub(bin_dir / "srun", srun_body)
    _stub(bin_dir / "scontrol", f'echo "$@" >> {tmp_path}/scontrol.log\n')
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", RCGRPO_SETUP="0", SLURM_JOB_ID="1234")
    proc = subprocess.Popen(
        ["bash", os.path.join(REPO, "launch", "slurm.sbatch"), "configs/sft.py:tiny", str(tmp_path / "w")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if signal_after is not None:
        time.sleep(signal_after)
        proc.send_signal(signal.SIGTERM)  # SLURM signals the batch shell with the step
    stdout, stderr = proc.communicate(timeout=30)
    log = tmp_path / "scontrol.log"
    return proc.returncode, stderr, log.read_text() if log.exists() else ""


def test_slurm_requeues_a_preempted_stage(tmp_path):
    rc, stderr, scontrol = _sbatch(tmp_path, "exit 75\n")
    assert rc == 75 and scontrol == "requeue 1234\n" and "preempted" in stderr


def test_slurm_forwards_sigterm_waits_for_the_save_then_requeues(tmp_path):
    # The stub stage saves for a moment after SIGTERM, as the launcher does, then exits 75.
    rc, stderr, scontrol = _sbatch(
        tmp_path, "trap 'sleep 0.5; exit 75' TERM\nfor i in $(seq 100); do sleep 0.1; done\nexit 0\n", signal_after=1.0
    )
    assert rc == 75 and scontrol == "requeue 1234\n", stderr


@pytest.mark.parametrize("code", [0, 1])
def test_slurm_does_not_requeue_a_finished_or_failed_stage(tmp_path, code):
    rc, _, scontrol = _sbatch(tmp_path, f"exit {code}\n")
    assert rc == code and scontrol == ""
