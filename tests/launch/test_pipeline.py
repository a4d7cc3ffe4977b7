"""launch/pipeline.sh's interpreter: every stage (each rcgrpo_jax.main stage and the exploration command)
runs with the interpreter of the environment launch/setup_env.sh sets up (its RCGRPO_PYTHON), not with
PYTHON (the Python setup_env.sh reuses or builds from); with RCGRPO_SETUP=0 or --dry-run, with PYTHON.
Run against a fake PYTHON and a fake, already stamped .venv-gpu whose `python` only records its arguments:
no install, no stage, no network. A real stage under the script: tests/launch/test_preemption.py."""

from __future__ import annotations

import os
import stat
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PIPELINE = os.path.join(REPO, "launch", "pipeline.sh")
SETUP_ENV = os.path.join(REPO, "launch", "setup_env.sh")
# The stages of one run: SFT, exploration, RCTP-FT, 2 inits x 2 algorithms, the base model's and 4 evaluations
N_MAIN, N_EXPLORE, N_MESH = 1 + 1 + 4 + 1 + 4, 1, 1  # the stages, exploration and the multi-GPU check


def _executable(path, body: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("#!/usr/bin/env bash\n" + body)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return str(path)


def _lines(path) -> list[str]:
    return open(path).read().splitlines() if os.path.exists(path) else []


def _setup(tmp_path) -> tuple[dict, str, str, str]:
    """(the environment, PYTHON's log, the venv python's log, the venv python): PYTHON answers setup_env's
    CUDA-jax probe with "none" (so GPU mode plans an install) and records any other call; the venv's python
    records every call; the venv is stamped with the plan's stamp, so setup_env.sh runs no pip."""
    py_log, venv_log = str(tmp_path / "python.log"), str(tmp_path / "venv.log")
    python = _executable(
        tmp_path / "image" / "python",
        f'if [ "${{1:-}}" = - ]; then cat > /dev/null; exit 1; fi\necho "$*" >> {py_log}\n',
    )
    venv = tmp_path / "venv-gpu"
    venv_python = _executable(venv / "bin" / "python", f'echo "$*" >> {venv_log}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("RCGRPO_") and k not in ("VENV", "PYTHON", "EXTRA")}
    env.update(PYTHON=python, VENV=str(venv))
    plan = subprocess.run(
        ["bash", SETUP_ENV, "--gpu", "--print-plan"], env=env, capture_output=True, text=True, timeout=60
    )
    assert plan.returncode == 0, plan.stderr
    fields = dict(line.split("=", 1) for line in plan.stdout.splitlines() if not line.startswith("pip="))
    assert fields["mode"] == "gpu-install" and fields["venv"] == str(venv)
    (venv / ".rcgrpo_install_stamp").write_text(fields["stamp"] + "\n")
    return env, py_log, venv_log, venv_python


def _pipeline(tmp_path, env: dict, *extra: str) -> subprocess.CompletedProcess:
    out = subprocess.run(
        ["bash", PIPELINE, "qwen2_5_7b", str(tmp_path / "model"), str(tmp_path / "out"), *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return out


def _stage_calls(calls: list[str]) -> list[str]:
    return [
        c
        for c in calls
        if c.startswith(("-m rcgrpo_jax.main ", "-m rcgrpo_jax.train.exploration ", "-m benchmarks.mesh_check "))
    ]


def _assert_every_stage(calls: list[str]) -> None:
    stages = _stage_calls(calls)
    assert sum(c.startswith("-m rcgrpo_jax.main ") for c in stages) == N_MAIN
    assert sum(c.startswith("-m rcgrpo_jax.train.exploration ") for c in stages) == N_EXPLORE
    assert sum(c.startswith("-m benchmarks.mesh_check ") for c in stages) == N_MESH
    assert len(stages) == N_MAIN + N_EXPLORE + N_MESH


def test_every_stage_runs_with_the_environment_setup_env_made_not_python(tmp_path):
    env, py_log, venv_log, venv_python = _setup(tmp_path)
    out = _pipeline(tmp_path, env)
    calls = _lines(venv_log)
    assert calls[0] == f"{REPO}/launch/gpu_env.py check --gpu"  # setup_env.sh ran (GPU mode), stamped: no pip
    assert not any("-m pip" in c for c in calls)
    _assert_every_stage(calls)
    assert _stage_calls(_lines(py_log)) == []  # PYTHON ran no stage
    printed = [line[2:] for line in out.stdout.splitlines() if line.startswith("+ ")]
    assert len(printed) == N_MAIN + N_EXPLORE + N_MESH and all(p.startswith(venv_python + " -m ") for p in printed)


def test_without_setup_the_stages_run_with_python(tmp_path):
    env, py_log, venv_log, _ = _setup(tmp_path)
    _pipeline(tmp_path, dict(env, RCGRPO_SETUP="0"))
    _assert_every_stage(_lines(py_log))
    assert _lines(venv_log) == []  # setup_env.sh not sourced: the venv never ran
    dry = _pipeline(tmp_path, env, "--dry-run")
    printed = [line[2:] for line in dry.stdout.splitlines() if line.startswith("+ ")]
    assert len(printed) == N_MAIN + N_EXPLORE + N_MESH and all(p.startswith(env["PYTHON"] + " -m ") for p in printed)
    assert (
        _lines(venv_log) == [] and len(_stage_calls(_lines(py_log))) == N_MAIN + N_EXPLORE + N_MESH
    )  # printed, not run
