"""configs/awpo.py:tiny end to end from the command line on AWPO's own backbone family: with no
model.path it builds a tiny Qwen3 under the workdir (q/k RMSNorm, no attention biases, head_dim apart from
hidden/heads), runs one AWPO step with the rule judge and exports a Qwen3 checkpoint HF transformers loads."""

from __future__ import annotations

import json
import os

import pytest

from configs import awpo
from rcgrpo_jax import main
from rcgrpo_jax.config_fields import ConfigError
from rcgrpo_jax.config_lib import common, rl_stage
from tests.helpers import cli

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AWPO = os.path.join(REPO, "configs", "awpo.py")

# One RL step of 2 world tasks x 2 rollouts with short steps (tests/helpers/cli.py's SMALL), exporting the HF
# checkpoint this test reads.
SMALL = [a for a in cli.SMALL if not a.startswith("--config.checkpoint.export_hf")]


def test_awpo_tiny_preset_builds_a_qwen3_and_runs_from_the_cli(tmp_path, compile_cache, capsys):
    import torch
    import transformers

    from rcgrpo_jax.models import load_hf
    from rcgrpo_jax.train import logging as log_lib

    workdir = str(tmp_path / "awpo")
    argv = ["main", f"--config={AWPO}:tiny", *SMALL, f"--config.runtime.compile_cache_dir={compile_cache}"]
    assert main.cli([*argv, f"--workdir={workdir}"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == '{"step": 1, "reason": "done", "total_steps": 1}'

    with open(os.path.join(workdir, "tiny_model", "config.json")) as f:
        built = json.load(f)
    assert built["model_type"] == "qwen3" and built["architectures"] == ["Qwen3ForCausalLM"]
    assert built["head_dim"] == 2 * built["hidden_size"] // built["num_attention_heads"]
    assert built["attention_bias"] is False and built["tie_word_embeddings"] is True

    (row,) = log_lib.read_metrics(os.path.join(workdir, log_lib.METRICS_FILE))
    assert row["finite"] == 1 and row["updates"] == 1 and row["loss_tokens"] > 0
    assert 0.0 <= row["estimator/gate_open_frac"] <= 1.0 and row["judge/stand_in"] == 1
    assert row["judge/calls"] == 4 and row["judge/failures"] == 0  # 2 tasks x 2 rollouts, all scored

    # The exported policy is a Qwen3 with its q/k norms; HF and our decoder give the same logits on it.
    exported = os.path.join(workdir, "hf")
    config, params = load_hf(exported)
    assert config.model_type == "qwen3" and config.qk_norm
    assert config.head_dim * config.num_heads != config.hidden_size
    assert params["layers"]["attn"]["q_norm"]["scale"].shape == (config.num_layers, config.head_dim)
    model = transformers.AutoModelForCausalLM.from_pretrained(exported, attn_implementation="eager")
    assert type(model).__name__ == "Qwen3ForCausalLM"
    import jax.numpy as jnp
    import numpy as np

    from rcgrpo_jax.models import apply

    ids = np.random.default_rng(0).integers(0, config.vocab_size, size=(1, 12))
    with torch.no_grad():
        ref = model(torch.tensor(ids)).logits.numpy()
    ours = np.asarray(apply(config, params, jnp.asarray(ids)))
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-4 * max(1.0, float(np.abs(ref).max())))


# --- the GPU presets: AWPO's own data, BFCL v4 evaluation, what is borrowed ---------------------------

GPU_PRESETS = [p for p in common.PRESETS if p != "tiny"]
STEPS_FIXTURE = os.path.join(REPO, "tests", "data", "fixtures", "steps_chats.jsonl")


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf")
    (d / "config.json").write_text(json.dumps(common.hf_architecture("qwen3_8b")))
    return str(d)


@pytest.mark.parametrize("preset", GPU_PRESETS)
def test_gpu_presets_train_on_the_users_step_data_and_never_on_bfcl_silently(preset, hf_dir):
    from rcgrpo_jax.data import sources
    from rcgrpo_jax.train import rl_config

    c = awpo.get_config(preset)
    c.model.path = hf_dir
    assert (c.data.source, c.data.steps.trajectories, c.data.steps.path) == ("steps", "jsonl", "")
    assert c.rl.max_steps_per_turn == 0  # one assistant step per episode
    with pytest.raises(ConfigError) as err:  # no path: stops at start-up, naming the field and the schema
        rl_config.check(rl_config.resolve_config(c), 8)
    assert err.value.field == "data.steps.path" and '{"messages": [' in str(err.value)
    c.data.steps.path = STEPS_FIXTURE
    rl_config.check(rl_config.resolve_config(c), 8)
    tasks = sources.tasks(c.data, "rl")
    assert tasks and all(type(t).__name__ == "StepInstance" for t in tasks)  # single steps, not BFCL episodes


def test_the_dry_run_without_a_path_stops_with_one_line(capsys):
    """The issue's check: `python -m rcgrpo_jax.main --config=configs/awpo.py:qwen3_8b --dry_run` (8 devices;
    tests/conftest.py sets 8 fake CPU ones) stops before compiling anything, with one line."""
    assert main.cli(["main", f"--config={AWPO}:qwen3_8b", "--dry_run"]) == main.USAGE_EXIT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("error: config.data.steps.path: required for data.source=steps")
    assert err[0].endswith("(full schema: rcgrpo_jax/data/steps.py)")


def test_the_step_budget_fits_the_papers_reasoning_lengths():
    # ~400 tokens (AWPO) and ~600 (naive mixture) on average: the builder's 512 is below the baseline's mean
    builder = rl_stage.base("x", "qwen3_8b", estimator="awpo")
    assert builder.rl.max_step_tokens < 600
    assert awpo.get_config("qwen3_8b").rl.max_step_tokens >= 2 * 600  # room for the tail past the mean
    assert awpo.get_config("qwen3_8b,eval").eval.max_step_tokens == awpo.get_config("qwen3_8b").rl.max_step_tokens


@pytest.mark.parametrize("preset", GPU_PRESETS)
def test_borrowed_hyperparameters_are_the_rc_grpo_builders(preset):
    """Every field marked as borrowed is a real field and still holds the RL builder's value
    (rcgrpo_jax/config_lib/rl_stage.py), so the marking cannot rot; the AWPO-specific ones are not in the list."""
    from rcgrpo_jax.config_fields import get as _get

    c, builder = awpo.get_config(preset), rl_stage.base("x", preset, estimator="awpo")
    missing = object()
    for field in awpo.BORROWED_FROM_RC_GRPO:
        assert _get(c, field, missing) is not missing, field
        assert _get(c, field) == _get(builder, field), field
    assert not {"rl.max_step_tokens", "data.source", "rl.advantage.name"} & set(awpo.BORROWED_FROM_RC_GRPO)


@pytest.mark.parametrize("preset", [p for p in GPU_PRESETS if p.startswith("qwen3")])
def test_eval_mode_names_the_papers_three_benchmarks(preset, hf_dir, tmp_path):
    from rcgrpo_jax.config_fields import ConfigError
    from rcgrpo_jax.eval import api_bank_run, mmlu_pro_run, run  # noqa: F401  (the first two register their suites)
    from tests.helpers import api_bank_fixture, mmlu_pro_fixture

    e = awpo.get_config(f"{preset},eval")
    assert e.trainer == "eval" and e.preset == preset
    assert (e.eval.suite, e.eval.split, e.data.source) == ("bfcl_v4,api_bank,mmlu_pro", "all", "bfcl")
    assert (e.eval.api_bank.path, e.eval.mmlu_pro.path) == ("", "")  # the user's copies: required at start-up
    e.model.path = hf_dir
    with pytest.raises(ConfigError, match="config.eval.api_bank.path"):
        run.check_eval_config(e)
    e.eval.api_bank.path = api_bank_fixture.write_copy(str(tmp_path / "api-bank"))
    e.eval.mmlu_pro.path = mmlu_pro_fixture.write_release(str(tmp_path / "mmlu-pro"))
    run.check_eval_config(e)
    with pytest.raises(ValueError, match="unknown mode 'evl'"):
        awpo.get_config(f"{preset},evl")


def test_the_tiny_preset_keeps_the_cpu_world():
    c = awpo.get_config("tiny")
    assert c.data.source == "world" and c.model.tiny_arch == "qwen3"
    assert awpo.get_config("tiny,eval").data.source == "world"
