"""A new environment from outside the package, end to end from the command line: `tests/helpers/toy_source.py`
registers a task source (tasks, environment, expert) in its own module; `--config.data.source=module:name`
selects it for one RL step and for the evaluation of the policy that step exported. The README points here."""

import json
import os
import subprocess
import sys

import pytest

from rcgrpo_jax import main
from tests.helpers.cli import SMALL

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = "--config.data.source=tests.helpers.toy_source:adder"


def _run(args, compile_cache):
    env = dict(
        os.environ,
        PYTHONPATH=REPO,
        JAX_PLATFORMS="cpu",
        JAX_COMPILATION_CACHE_DIR=compile_cache,
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
    )
    out = subprocess.run(
        [sys.executable, "-m", "rcgrpo_jax.main", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def toy_model(tmp_path_factory):
    from configs import grpo
    from rcgrpo_jax.data import tiny_checkpoint

    path = str(tmp_path_factory.mktemp("toy") / "model")
    return tiny_checkpoint.build_tiny(grpo.get_config("tiny"), path, hidden_size=32, intermediate_size=64, num_layers=1)


def test_a_toy_environment_trains_one_rl_step_and_evaluates(toy_model, compile_cache, tmp_path):
    rl_dir = str(tmp_path / "rl")
    grpo = os.path.join(REPO, "configs", "grpo.py")
    small = [a for a in SMALL if not a.startswith("--config.checkpoint.export_hf")]  # export the trained policy
    summary = _run(
        [f"--config={grpo}:tiny", SOURCE, *small, f"--config.model.path={toy_model}", f"--workdir={rl_dir}"],
        compile_cache,
    )
    assert summary == {"step": 1, "reason": "done", "total_steps": 1}
    from rcgrpo_jax.train import logging as log_lib

    (row,) = log_lib.read_metrics(os.path.join(rl_dir, log_lib.METRICS_FILE))
    assert row["finite"] == 1 and row["updates"] == 1 and row["loss_tokens"] > 0

    evaluation = os.path.join(REPO, "configs", "eval.py")
    common = [f"--config={evaluation}:tiny", SOURCE]
    short = "--config.eval.max_step_tokens=16"  # the random policy's steps; the oracle's calls need more
    result = _run([*common, short, f"--config.model.path={rl_dir}/hf", f"--workdir={tmp_path / 'eval'}"], compile_cache)
    assert result["n"] == 4 and set(result["categories"]) == {"adder_1_turns", "adder_2_turns"}
    assert 0.0 <= result["overall"] <= 1.0
    # The toy's expert, replayed through its own environment by the oracle policy, solves every test task.
    oracle = _run(
        [
            *common,
            "--config.eval.policy=oracle",
            f"--config.model.path={toy_model}",
            f"--workdir={tmp_path / 'oracle'}",
        ],
        compile_cache,
    )
    assert oracle["n"] == 4 and oracle["overall"] == 1.0 and oracle["reward_mean"] == 1.0


def test_a_source_module_that_does_not_import_is_one_line(tmp_path, capsys):
    argv = ["main", f"--config={REPO}/configs/grpo.py:tiny", "--config.data.source=no_such_module:adder"]
    code = main.cli([*argv, f"--workdir={tmp_path}"])
    assert code == 2
    assert "config.data.source: cannot import the module of 'no_such_module:adder'" in capsys.readouterr().err
