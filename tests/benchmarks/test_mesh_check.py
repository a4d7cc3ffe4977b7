"""benchmarks.mesh_check, the multi-GPU stage of launch/gpu_check.sh and launch/pipeline.sh, on the suite's 8 fake
CPU devices: the preset's mesh over all of them, the psum's value, one step each of the real SFT and RL trainers
with finite losses, and the JSON lines' fields. No timing assertions."""

from __future__ import annotations

import contextlib
import io
import json
import math

import jax
import pytest

from benchmarks import mesh_check
from configs import rc_grpo, sft
from rcgrpo_jax import runtime

SHAPE_8 = {"data": 1, "fsdp": 4, "tensor": 2}  # the presets' mesh section (1, -1, 2) on 8 devices


def test_the_presets_mesh_over_every_device_or_fitted():
    devices = jax.devices()
    assert len(devices) == 8  # tests/conftest.py
    assert mesh_check.preset_mesh("qwen2_5_7b") == {"data": 1, "fsdp": -1, "tensor": 2}
    mesh, fitted = mesh_check.build_mesh(mesh_check.preset_mesh("qwen2_5_7b"), devices, fit=False)
    assert dict(mesh.shape) == SHAPE_8 and not fitted and mesh.devices.size == 8
    with pytest.raises(ValueError, match="only 8 exist"):  # more than this host holds
        mesh_check.build_mesh({"data": 2, "fsdp": 4, "tensor": 2}, devices[:8], fit=False)
    with pytest.raises(ValueError, match="uses 4 of the 8 local devices"):  # a mesh that leaves devices out
        mesh_check.build_mesh({"fsdp": 2, "tensor": 2}, devices, fit=False)
    for section, devs in (({"fsdp": -1, "tensor": 2}, devices[:1]), ({"fsdp": 2, "tensor": 2}, devices)):
        mesh, fitted = mesh_check.build_mesh(section, devs, fit=True)  # one GPU (tensor 2) / devices left out
        assert fitted and dict(mesh.shape) == {"data": 1, "fsdp": len(devs), "tensor": 1}


def test_psum_over_every_device():
    mesh, _ = mesh_check.build_mesh(mesh_check.preset_mesh("qwen2_5_7b"), jax.devices(), fit=False)
    row = mesh_check.psum_row(mesh)
    assert row["value"] == row["expected"] == 36  # 1 + 2 + ... + 8
    assert row["first_s"] > 0 and row["s"] > 0


def test_small_configs_take_the_presets_mesh_and_compute_settings():
    for module in (sft, rc_grpo):
        c = mesh_check.small_config(module, "qwen2_5_7b", SHAPE_8, "/m")
        big = module.get_config("qwen2_5_7b")
        assert c.preset == "tiny" and c.model.path == "/m" and c.train.max_steps == 1
        assert (c.mesh.data, c.mesh.fsdp, c.mesh.tensor) == (1, 4, 2)
        assert {f: c.model[f] for f in mesh_check.PRESET_MODEL_FIELDS} == {
            f: big.model[f] for f in mesh_check.PRESET_MODEL_FIELDS
        }
        assert c.model.dtype == "bfloat16" and c.model.remat  # the presets', not tiny's float32
    assert mesh_check.small_config(sft, "qwen2_5_7b", SHAPE_8, "/m").train.batch_size == 4  # a row per shard
    assert mesh_check.small_config(rc_grpo, "qwen2_5_7b", SHAPE_8, "/m").train.batch_size == 4 * 4  # a group


@pytest.mark.slow  # the tiny model, one SFT step and one RL step compiled on 8 devices: ~2 min on this CPU
def test_the_stage_on_8_fake_devices(tmp_path):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = mesh_check.main(["--preset", "qwen2_5_7b", "--workdir", str(tmp_path)])
    rows = [json.loads(line) for line in buf.getvalue().splitlines() if line.startswith("{")]
    assert [r["bench"] for r in rows] == ["mesh_env", "mesh", "psum", "tiny_model", "sft_step", "rl_step", "done"]
    for r in rows:
        assert "error" not in r, r
    assert rc == 0 and rows[-1] == {"bench": "done", "errors": 0}
    env, mesh, psum, model, *steps = rows[:-1]
    # in-process (not as a command), so the settings are reported, not set
    assert env == {"bench": "mesh_env", "applied": False, "env": runtime.backend_env()}
    assert set(runtime.GPU_ENV) | {"XLA_FLAGS"} == set(env["env"])
    assert mesh["shape"] == SHAPE_8 and mesh["devices"] == 8 and mesh["platform"] == "cpu" and not mesh["fitted"]
    assert mesh["section"] == {"data": 1, "fsdp": -1, "tensor": 2}
    assert psum["value"] == psum["expected"] == 36
    assert model["head_dim"] == 128 and model["s"] > 0  # Qwen2.5-7B's head size
    for r in steps:
        assert r["mesh_shape"] == SHAPE_8 and r["finite"] is True
        assert math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) and r["loss"] >= 0
        assert r["build_s"] > 0 and r["step_s"] > 0 and r["compiles"] >= 0
    sft_row, rl_row = steps
    assert sft_row["loss"] > 1.0  # cross-entropy of a random model over a ~1k-token vocabulary (ln 1033 = 6.9)
    assert sft_row["grad_norm"] > 0 and rl_row["compiles"] > 0  # the rollouts' programs compile inside the step
