"""Every stage config loads with its presets, and bad configs fail at start-up naming the field."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import ml_collections
import pytest
from ml_collections import config_flags  # noqa: F401  (the launcher's loader)

from configs import rctp_ft, sft
from rcgrpo_jax import config_checks, stages
from rcgrpo_jax.config_fields import ConfigError, MemoryFitError
from rcgrpo_jax.config_lib import common
from rcgrpo_jax.train import sft as train_sft

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STAGE_FILES = {"sft": sft, "rctp_ft": rctp_ft}


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf")
    (d / "config.json").write_text(json.dumps(common.hf_architecture("qwen2_5_7b")))
    return str(d)


@pytest.mark.parametrize("stage", sorted(STAGE_FILES))
@pytest.mark.parametrize("preset", common.PRESETS)
def test_presets_load_and_pass_checks(stage, preset, hf_dir):
    c = STAGE_FILES[stage].get_config(preset)
    assert c.stage == stage and c.preset == preset
    if preset != "tiny":
        c.model.path = hf_dir
        assert (c.optim.lr, c.train.batch_size) == (1e-5, 16)  # paper Tables 10-11
        assert c.train.epochs == {"sft": 2, "rctp_ft": 5}[stage]
        assert c.model.remat and c.mesh.fsdp == -1
    shape = config_checks.check(c, num_devices=8)
    assert shape["data"] * shape["fsdp"] * shape["tensor"] == (1 if preset == "tiny" else 8)


def test_unknown_preset():
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        sft.get_config("huge")


def _err(c, n=8) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        config_checks.check(c, num_devices=n)
    return e.value


def test_missing_checkpoint_path_is_named():
    e = _err(sft.get_config("qwen2_5_7b"))
    assert e.field == "model.path" and str(e).startswith("config.model.path: missing checkpoint path")


@pytest.mark.parametrize(
    "text,message",
    [
        ('{"model_type": "qwen2",', "config.json is not valid JSON (Expecting property name"),
        ("[1, 2]", "is not an HF model config (a JSON object with a 'model_type')"),
        ('{"hidden_size": 8}', "is not an HF model config"),
    ],
)
def test_a_malformed_config_json_fails_at_start_up(tmp_path, text, message):
    (tmp_path / "config.json").write_text(text)
    c = sft.get_config("tiny")
    c.model.path = str(tmp_path)
    e = _err(c)
    assert e.field == "model.path" and message in str(e) and "\n" not in str(e)


def test_checkpoint_path_without_config_json(tmp_path):
    c = sft.get_config("llama3_1_8b")
    c.model.path = str(tmp_path)
    assert "has no config.json" in str(_err(c)) and _err(c).field == "model.path"


def test_signature_tool_list_needs_the_qwen2_tiny_checkpoint():
    from rcgrpo_jax.models import tiny

    c = sft.get_config("tiny")
    assert c.model.tiny_tools_format == "signatures"
    for arch in tiny.QWEN_STYLE:  # the tiny builder's own list of the archs with the signature tool list
        c.model.tiny_arch = arch
        config_checks.check(c, num_devices=8)
    c.model.tiny_arch = "llama"
    e = _err(c)
    assert e.field == "model.tiny_tools_format" and "'json'" in str(e)
    c.model.tiny_tools_format = "json"
    config_checks.check(c, num_devices=8)


def test_batch_not_divisible_by_data_axis():
    c = sft.get_config("tiny")
    c.mesh.data, c.train.grad_accum = -1, 1
    c.train.batch_size = 12  # data axis = 8 devices
    e = _err(c)
    assert e.field == "train.batch_size" and "data axis" in str(e) and "= 8" in str(e)
    c.train.batch_size, c.train.grad_accum = 16, 3
    assert "grad_accum=3" in str(_err(c))


def test_mesh_larger_than_device_count():
    c = sft.get_config("tiny")
    c.mesh.data, c.mesh.fsdp = 4, 4
    e = _err(c)
    assert e.field == "mesh" and "needs 16 devices but only 8" in str(e)
    assert str(e).endswith("XLA_FLAGS=--xla_force_host_platform_device_count=16)")  # how to fake them on a CPU
    c.mesh.data, c.mesh.fsdp = 3, -1
    assert _err(c).field == "mesh.fsdp"


def _with_rl(c, **rl):
    c.unlock()
    c.rl = ml_collections.ConfigDict({"group_size": 5, **rl})
    return c


def test_batch_not_divisible_by_group_size():
    c = _with_rl(sft.get_config("tiny"))  # batch 4, group 5
    e = _err(c)
    assert e.field == "train.batch_size" and "rl.group_size=5" in str(e)


def test_trainer_kind():
    c = sft.get_config("tiny")
    c.trainer = "distill"
    e = _err(c)
    assert e.field == "trainer" and "'distill'" in str(e) and "supervised" in str(e)


def test_the_stage_table_maps_every_trainer_kind():
    """rcgrpo_jax.stages holds an entry for exactly the kinds a config may name (config_lib.common.TRAINERS)."""
    assert tuple(stages.TRAINERS) == common.TRAINERS
    assert stages.kind_of(sft.get_config("tiny")) is stages.TRAINERS["supervised"]
    assert stages.kind_of(rctp_ft.get_config("tiny")).run is train_sft.run


def test_other_fields():
    c = sft.get_config("tiny")
    c.data.buckets = (512, 256)
    assert _err(c).field == "data.buckets"
    c = sft.get_config("tiny")
    c.multihost.initialize = "sometimes"
    assert _err(c).field == "multihost.initialize"
    for field, bad in (("decode_attention", "flash"), ("failure_site", "middle")):
        c = sft.get_config("tiny")
        section = c.model if field == "decode_attention" else c.data
        section[field] = bad
        e = _err(c)
        assert e.field == f"{'model' if field == 'decode_attention' else 'data'}.{field}" and repr(bad) in str(e)
    c = sft.get_config("tiny")
    c.data.failure_kinds = "wrong_tool,typo"
    e = _err(c)
    assert e.field == "data.failure_kinds" and "unknown: typo" in str(e)
    c = sft.get_config("tiny")
    c.data.world.rl_vocab = "novel"
    e = _err(c)
    assert e.field == "data.world.rl_vocab" and "'novel'" in str(e) and "own" in str(e)
    c = sft.get_config("tiny")
    c.data.world.train_vocab = "huge"
    e = _err(c)
    assert e.field == "data.world.train_vocab" and "'huge'" in str(e) and "wide" in str(e)
    c.data.world.train_vocab, c.data.world.rl_vocab = "wide", "own"
    e = _err(c)
    assert e.field == "data.world.rl_vocab" and "narrow" in str(e)
    c = sft.get_config("tiny")
    c.data.world.rl_types = "fs_move,fs_mvoe"
    e = _err(c)
    assert e.field == "data.world.rl_types" and "'fs_mvoe'" in str(e) and "math_chain" in str(e)
    c = sft.get_config("tiny")
    c.stage = "pretrain"  # the stage is the run's name: any name runs (the trainer kind decides the code)
    config_checks.check(c, num_devices=8)


def test_memory_shortfall_is_reported():
    config_checks.check_memory("memory.device_bytes", 10**9, 2 * 10**9)
    with pytest.raises(MemoryFitError, match=r"config.memory.device_bytes: .* 3.50 GB per device, 1.50 GB over"):
        config_checks.check_memory("memory.device_bytes", 35 * 10**8, 2 * 10**9)


def test_locked_config_on_the_command_line():
    """A run is validated before anything loads or is written: a misspelt override and a missing path both stop it
    (a 7B preset on CPU JAX is refused for its backend first: `runtime.allow_cpu` lets it reach its check)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    base = [sys.executable, "-m", "rcgrpo_jax.main", "--workdir=/nonexistent/never-written"]
    typo = subprocess.run(
        base + ["--config=configs/sft.py:tiny", "--config.train.batchsize=4"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert typo.returncode == 2 and "batchsize" in typo.stderr and len(typo.stderr.strip().splitlines()) == 1
    missing = subprocess.run(
        base + ["--config=configs/sft.py:qwen2_5_7b", "--config.runtime.allow_cpu=True"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2 and missing.stderr.strip().splitlines()[-1].startswith(
        "error: config.model.path: missing checkpoint path"
    )
    assert not os.path.exists("/nonexistent/never-written")


def test_when_the_launcher_initialises_jax_distributed():
    from rcgrpo_jax.main import wants_distributed

    assert not wants_distributed("auto", {})
    assert not wants_distributed("auto", {"SLURM_NTASKS": "1"})
    assert wants_distributed("auto", {"SLURM_NTASKS": "2"})
    assert wants_distributed("auto", {"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234"})
    assert wants_distributed("always", {}) and not wants_distributed("never", {"SLURM_NTASKS": "8"})
