"""launch/pipeline.sh runs the multi-GPU check (benchmarks.mesh_check) before SFT, with the stages' interpreter,
unless RCGRPO_SKIP_MESH_CHECK=1: read from its --dry-run, which prints every command and runs none."""

from __future__ import annotations

import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _dry_run(tmp_path, **env) -> list[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("RCGRPO_") and k != "EXTRA"}
    out = subprocess.run(
        ["bash", os.path.join(REPO, "launch", "pipeline.sh"), "qwen2_5_7b", "/models/q", str(tmp_path), "--dry-run"],
        env={**base, "PYTHON": "/opt/py/bin/python", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert os.listdir(tmp_path) == []  # a dry run makes nothing
    return [line[2:] for line in out.stdout.splitlines() if line.startswith("+ ")]


def test_the_check_runs_first_with_the_stages_interpreter(tmp_path):
    commands = _dry_run(tmp_path)
    check = f"/opt/py/bin/python -m benchmarks.mesh_check --preset qwen2_5_7b --workdir {tmp_path}/mesh_check"
    assert commands[0] == check
    assert (
        commands[1].startswith("/opt/py/bin/python -m rcgrpo_jax.main --config=") and "configs/sft.py:" in commands[1]
    )
    assert sum("benchmarks.mesh_check" in c for c in commands) == 1


def test_the_flag_skips_the_check(tmp_path):
    commands = _dry_run(tmp_path, RCGRPO_SKIP_MESH_CHECK="1")
    assert not any("mesh_check" in c for c in commands)
    assert "configs/sft.py:qwen2_5_7b" in commands[0]
    assert commands[1:] == _dry_run(tmp_path)[2:]  # nothing else changes
