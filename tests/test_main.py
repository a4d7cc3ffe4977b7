"""The launcher as a researcher uses it: swapping the estimator is one override from any RL config (every
registered estimator runs one RL step through the command-line entry), the README's own example of
adding a formula runs exactly as written, and a bad flag or config ends with one line and exit code 2."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from rcgrpo_jax import main
from rcgrpo_jax.config_fields import ConfigError
from rcgrpo_jax.rl import advantages
from tests.helpers.cli import SMALL

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRPO = os.path.join(REPO, "configs", "grpo.py")


@pytest.fixture(scope="module")
def world_ckpt(tmp_path_factory):
    from configs import grpo
    from rcgrpo_jax.data import tiny_checkpoint

    path = str(tmp_path_factory.mktemp("world") / "model")
    return tiny_checkpoint.build_tiny(grpo.get_config("tiny"), path, hidden_size=32, intermediate_size=64, num_layers=1)


@pytest.mark.parametrize("name", advantages.names())
def test_every_estimator_runs_one_rl_step_from_the_command_line(name, world_ckpt, compile_cache, tmp_path, capsys):
    workdir = str(tmp_path / name)
    argv = ["main", f"--config={GRPO}:tiny", f"--config.rl.advantage.name={name}", *SMALL]
    if "reward_tokens" in advantages.spec(name).needs:  # it needs tokens drawn per rollout
        argv.append("--config.rl.reward_conditioning=sampled")
    argv.append(f"--config.runtime.compile_cache_dir={compile_cache}")
    code = main.cli([*argv, f"--config.model.path={world_ckpt}", f"--workdir={workdir}"])
    assert code == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == '{"step": 1, "reason": "done", "total_steps": 1}'
    from rcgrpo_jax.train import logging as log_lib

    (row,) = log_lib.read_metrics(os.path.join(workdir, log_lib.METRICS_FILE))
    assert row["finite"] == 1 and row["updates"] == 1 and row["loss_tokens"] > 0
    assert ("estimator/gate_open_frac" in row) == (name == "awpo")  # AWPO ran its judge and gate


@pytest.mark.parametrize("stage", ["grpo", "rc_grpo", "dr_grpo", "dapo", "awpo"])
def test_every_rl_config_file_takes_every_estimator_with_one_override(stage):
    from rcgrpo_jax.train import rl_config

    cfg = os.path.join(REPO, "configs", f"{stage}.py")
    for name in advantages.names():
        config = main.parse_config(["main", f"--config={cfg}:tiny", f"--config.rl.advantage.name={name}"])
        if "reward_tokens" in advantages.spec(name).needs and config.rl.reward_conditioning != "sampled":
            with pytest.raises(ConfigError, match="needs reward tokens drawn per rollout") as e:
                rl_config.check(config, 8)
            assert e.value.field == "rl.advantage.name"
            config.rl.reward_conditioning = "sampled"
        rl_config.check(config, 8)
        chosen = rl_config.choices(config)
        assert (
            chosen.estimator == name and chosen.advantage_options.to_dict() == advantages.default_config(name).to_dict()
        )


def test_dapo_shapes_overlong_episodes_in_its_run(world_ckpt, compile_cache, tmp_path, capsys):
    """configs/dapo.py wires DAPO's soft overlong punishment (rl.shaping.dapo_overlong) into the rewards."""
    from rcgrpo_jax.train import logging as log_lib

    dapo = os.path.join(REPO, "configs", "dapo.py")
    argv = ["main", f"--config={dapo}:tiny", *SMALL, f"--config.runtime.compile_cache_dir={compile_cache}"]
    # Shaping counts response tokens (the sampled ones, not the prompt or tool output): a ramp from 1 sampled token
    # to L_max = 16, so every episode that samples more than one token is on it.
    overlong = "--config.rl.shaping.dapo_overlong"
    argv += ["--config.rl.max_context=512", f"{overlong}.max_len=16", f"{overlong}.cache_len=15"]
    argv += ["--config.data.buckets=(256,384,512)"]
    assert main.cli([*argv, f"--config.model.path={world_ckpt}", f"--workdir={tmp_path}"]) == 0
    (row,) = log_lib.read_metrics(os.path.join(str(tmp_path), log_lib.METRICS_FILE))
    assert -1.0 <= row["overlong_penalty_mean"] < 0.0 and "dapo_frac_dropped" in row


def test_a_users_own_entries_run_one_rl_step(world_ckpt, compile_cache, tmp_path, capsys):
    """A group filter, a reward shaping, a KL estimator and a reward registered in a user's module
    (tests/helpers/my_entries.py), each selected as module:name on the command line, run one RL step."""
    from rcgrpo_jax.train import logging as log_lib

    mod = "tests.helpers.my_entries"
    argv = ["main", f"--config={GRPO}:tiny", *SMALL, f"--config.runtime.compile_cache_dir={compile_cache}"]
    argv += [
        f"--config.rl.group_filter.name={mod}:unsolved_groups",
        f"--config.rl.shaping.name={mod}:sampled_token_cost",
        f"--config.rl.loss.ppo_clip.kl_estimator={mod}:abs_log_ratio",
        f"--config.rl.reward={mod}:any_call",
    ]
    assert main.cli([*argv, f"--config.model.path={world_ckpt}", f"--workdir={tmp_path}"]) == 0
    (row,) = log_lib.read_metrics(os.path.join(str(tmp_path), log_lib.METRICS_FILE))
    assert row["finite"] == 1 and row["token_cost_mean"] > 0.0 and "solved_groups" in row and row["kl"] >= 0.0


def _readme_example() -> tuple[str, str]:
    """(the Python module, the command) of the README's "Adding an advantage formula" section."""
    with open(os.path.join(REPO, "README.md")) as f:
        text = f.read()
    section = text.split("## Adding an advantage formula", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    (command,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    return code, " ".join(line.rstrip("\\").strip() for line in command.strip().splitlines())


def test_the_readmes_formula_example_runs_exactly_as_written(tmp_path, world_ckpt, compile_cache):
    code, command = _readme_example()
    module = re.search(r"save it as `(\w+)\.py`", open(os.path.join(REPO, "README.md")).read()).group(1)
    (tmp_path / f"{module}.py").write_text(code)
    args = command.split()
    assert args[:3] == ["python", "-m", "rcgrpo_jax.main"] and any(a.startswith("--workdir=") for a in args)
    workdir = str(tmp_path / "run")
    args = [sys.executable, *args[1:]]
    args = [f"--workdir={workdir}" if a.startswith("--workdir=") else a for a in args]
    env = dict(
        os.environ,
        PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        JAX_PLATFORMS="cpu",
        JAX_COMPILATION_CACHE_DIR=compile_cache,  # the programs the estimator runs above compiled
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
    )
    # The example as written (it builds its own tiny checkpoint); only the model is swapped for the cached one.
    out = subprocess.run(
        [*args, f"--config.model.path={world_ckpt}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1].startswith('{"step": ')
    from rcgrpo_jax.train import logging as log_lib

    rows = log_lib.read_metrics(os.path.join(workdir, log_lib.METRICS_FILE))
    assert rows and "estimator/adv_scale_mean" in rows[-1]  # the example's own metric reached the log


@pytest.mark.slow
def test_a_dead_judge_saves_and_stops_the_run(world_ckpt, compile_cache, tmp_path, capsys):
    """AWPO with an http judge whose port refuses connections: the first step's items all fail, more than
    rl.judge.max_failed_frac, so the run saves the state before that step and exits 3 with one line."""
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = tmp_path / "awpo"
    judge = "--config.rl.judge"
    argv = [
        "main",
        f"--config={GRPO}:tiny",
        "--config.rl.advantage.name=awpo",
        *SMALL,
        f"{judge}.name=http",
        f"{judge}.http.url=http://127.0.0.1:{port}/v1",
        f"{judge}.http.model=judge",
        f"{judge}.http.api_key_env=",
        f"{judge}.http.backoff_s=0.01",
        f"--config.runtime.compile_cache_dir={compile_cache}",
        f"--config.model.path={world_ckpt}",
        f"--workdir={workdir}",
    ]
    code = main.cli(argv)
    out, err = capsys.readouterr()
    assert code == main.STOPPED_EXIT
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert lines == [
        "error: judge http:judge: 4 of 4 items failed this step (more than rl.judge.max_failed_frac=0.2); "
        "checkpoint saved before the step; fix the judge and rerun to resume"
    ]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["reason"] == "judge_failures" and summary["step"] == 0
    assert os.listdir(workdir / "checkpoints") == ["0"] and not (workdir / "hf").exists()


@pytest.mark.parametrize(
    "override, message",
    [
        ("--config.rl.advantage.name=grpoo", "error: config.rl.advantage.name: unknown advantage estimator 'grpoo'"),
        ("--config.rl.advantage.grpo.std=pop", "error: config.rl.advantage.grpo.std: 'pop' is not one of"),
        ("--config.rl.advantag.name=rloo", 'error: config.rl.advantag: no such field. Did you mean "advantage"?'),
        ("--config.optim.lrr=1", 'error: config.optim.lrr: no such field. Did you mean "lr"?'),
        ("--config.rl.loss.ppo_clip.kl_beta=abc", "error: flag --config.rl.loss.ppo_clip.kl_beta=abc"),
    ],
)
def test_a_bad_flag_or_config_is_one_line_and_exit_code_2(override, message, tmp_path, capsys):
    code = main.cli(["main", f"--config={GRPO}:tiny", override, f"--workdir={tmp_path / 'never'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == main.USAGE_EXIT and len(err) == 1 and message in err[0], err
    assert not os.path.exists(tmp_path / "never")
    with pytest.raises(Exception):  # --verbose keeps the traceback
        main.cli(["main", f"--config={GRPO}:tiny", override, "--verbose", f"--workdir={tmp_path / 'never'}"])


def test_the_readmes_dry_run_fakes_eight_cpu_devices():
    with open(os.path.join(REPO, "README.md")) as f:
        lines = [line for line in f if "--dry_run" in line and line.lstrip().startswith(("XLA_FLAGS", "python"))]
    assert lines and all(line.startswith("XLA_FLAGS=--xla_force_host_platform_device_count=8 python") for line in lines)


def test_a_gpu_preset_on_cpu_jax_stops_at_start_up(tmp_path, capsys):
    """A 7B preset whose checks pass still refuses a CPU backend (the usual cause: a CPU-only jax on a GPU
    box), naming the override; its --dry_run is allowed (it sizes the run without weights)."""
    import json

    from rcgrpo_jax.config_lib import common

    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps(common.hf_architecture("qwen2_5_7b")))
    sft_cfg = os.path.join(REPO, "configs", "sft.py")
    code = main.cli(
        ["main", f"--config={sft_cfg}:qwen2_5_7b", f"--config.model.path={hf}", f"--workdir={tmp_path / 'w'}"]
    )
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and line.startswith("error: config.runtime.allow_cpu: preset 'qwen2_5_7b' is sized for GPUs")
    assert not os.path.exists(tmp_path / "w")


def test_an_rl_preset_with_only_its_model_path_passes_start_up(tmp_path, capsys):
    """`reference.path` defaults to `model.path` (config_lib.rl_stage): the launch checks the config the trainer
    runs, resolved, so the first refusal on CPU JAX is the backend's, not a missing reference path."""
    from rcgrpo_jax.config_lib import common

    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps(common.hf_architecture("qwen2_5_7b")))
    code = main.cli(["main", f"--config={GRPO}:qwen2_5_7b", f"--config.model.path={hf}", f"--workdir={tmp_path / 'w'}"])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and line.startswith("error: config.runtime.allow_cpu: preset 'qwen2_5_7b' is sized for GPUs")
    assert not os.path.exists(tmp_path / "w")


@pytest.mark.parametrize(
    "config, stops",
    [(f"{GRPO}:tiny", "rcgrpo_jax.train.rl_trainer.RLTrainer"), ("sft.py:tiny", "rcgrpo_jax.train.model_prep.load")],
)
def test_a_launch_checks_its_config_once(config, stops, world_ckpt, tmp_path, monkeypatch, capsys):
    """The launcher leaves the check to the stage's run, which checks first of all: one `config_checks.check`
    per launch, before the model loads (here the first step after the check is made to stop the run)."""
    from rcgrpo_jax import config_checks

    calls = []
    real = config_checks.check
    monkeypatch.setattr(config_checks, "check", lambda c, n: calls.append(n) or real(c, n))

    def stop(*a, **k):
        raise ConfigError("model.path", "stopped after the check")

    monkeypatch.setattr(stops, stop)
    if not config.startswith(GRPO):
        config = os.path.join(REPO, "configs", config)
    code = main.cli(["main", f"--config={config}", f"--config.model.path={world_ckpt}", f"--workdir={tmp_path / 'w'}"])
    assert code == main.USAGE_EXIT and "stopped after the check" in capsys.readouterr().err
    assert len(calls) == 1


def test_a_rerendered_rollout_trains_one_row_per_step(world_ckpt, compile_cache, tmp_path, capsys):
    """rl.render_mode=rerender (what the render check picks for Qwen3's template): every assistant step is a
    training sample of its own, with its episode's advantage; the update sees one row per step."""
    from rcgrpo_jax.train import logging as log_lib

    argv = ["main", f"--config={GRPO}:tiny", *SMALL, f"--config.runtime.compile_cache_dir={compile_cache}"]
    argv += ["--config.rl.render_mode=rerender", f"--config.model.path={world_ckpt}", f"--workdir={tmp_path}"]
    assert main.cli(argv) == 0
    (row,) = log_lib.read_metrics(os.path.join(str(tmp_path), log_lib.METRICS_FILE))
    assert row["finite"] == 1 and row["rollout/samples_mean"] >= 1.0
    episodes = 4  # 2 tasks x 2 rollouts
    assert row["rows"] == pytest.approx(episodes * row["rollout/samples_mean"], abs=1)  # (+1 padding row at most)
    assert row["rows"] % 2 == 0  # whole micro-batches of 2
