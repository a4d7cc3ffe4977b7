"""The multi-device check: does this host's mesh work before a pipeline spends an hour on it?

    python -m benchmarks.mesh_check --preset qwen2_5_7b [--workdir DIR] [--fit]    # launch/pipeline.sh, gpu_check.sh

One JSON line per row, each guarded (a failure prints an "error" row and the later rows still run); exit 1 when
any row failed, so launch/pipeline.sh stops before SFT:
  mesh_env  the XLA, NCCL and allocator settings (`runtime.GPU_ENV`, `runtime.XLA_GPU_FLAGS`) and whether this
            process set them (`runtime.apply_backend_env`: on a CUDA jax, when run as a command)
  mesh      the preset's mesh section (configs/sft.py:<preset>) over every local device (`sharding.make_mesh`): its
            shape, the device count and kind. With --fit, a section the devices cannot hold (one GPU, tensor 2)
            gives way to fsdp over all of them (`fitted` says so); without it that is this row's error
  psum      each device's position + 1 summed over every mesh axis (`jax.shard_map`): value, expected n(n+1)/2
  tiny_model  configs/sft.py:tiny's checkpoint, built offline, with the preset's head_dim (the kernels' head size)
  sft_step  one step of the real SFT trainer (`train.sft.SFTTrainer`, configs/sft.py:tiny on that model with the
            preset's mesh and compute settings, `PRESET_MODEL_FIELDS`) on that mesh
  rl_step   one step of the real RC-GRPO trainer (`train.rl_trainer.RLTrainer`, configs/rc_grpo.py:tiny, likewise):
            rollouts, reference, update
  done      the number of rows that failed
Each step row: build_s (data, compilation), step_s (the first step, its compiles included), loss, grad_norm, finite.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from typing import Any

from benchmarks import common
from rcgrpo_jax import runtime
from rcgrpo_jax import sharding as sharding_lib

# The compute settings the check takes from the preset, so a GPU runs the dtypes and kernels the stages will.
PRESET_MODEL_FIELDS = ("dtype", "param_dtype", "decode_dtype", "remat", "attention_impl", "decode_attention")


def preset_mesh(preset: str) -> dict[str, int]:
    """The mesh section of configs/sft.py:<preset> (every stage shares it: config_lib.common.mesh)."""
    from configs import sft

    return {k: int(v) for k, v in sft.get_config(preset).mesh.items()}


def build_mesh(section: dict[str, int], devices: list, fit: bool) -> tuple[Any, bool]:
    """(mesh over `devices` from `section`, whether it was fitted). `fit`: a section the devices cannot hold
    becomes fsdp over all of them; otherwise `make_mesh`'s ValueError. Every device must be in the mesh."""
    try:
        mesh = sharding_lib.make_mesh(section, devices)
    except ValueError:
        if not fit:
            raise
        return sharding_lib.make_mesh({"fsdp": -1}, devices), True
    if mesh.devices.size != len(devices):
        if not fit:
            raise ValueError(f"mesh {section} uses {mesh.devices.size} of the {len(devices)} local devices")
        return sharding_lib.make_mesh({"fsdp": -1}, devices), True
    return mesh, False


def psum_row(mesh) -> dict[str, Any]:
    """psum over every mesh axis of each device's position + 1 (int32); the value, the expected, the time of the
    first call (compilation included) and of a second one."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    axes = sharding_lib.MESH_AXES
    n = mesh.devices.size
    x = jax.device_put(np.arange(1, n + 1, dtype=np.int32).reshape(mesh.devices.shape), NamedSharding(mesh, P(*axes)))
    fn = jax.jit(jax.shard_map(lambda v: jax.lax.psum(v, axes), mesh=mesh, in_specs=P(*axes), out_specs=P()))
    t0 = time.perf_counter()
    jax.block_until_ready(fn(x))
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(x))
    value = int(np.asarray(out).reshape(-1)[0])
    expected = n * (n + 1) // 2
    if value != expected:
        raise RuntimeError(f"psum over {n} devices gave {value}, expected {expected}")
    return {"value": value, "expected": expected, "first_s": first, "s": time.perf_counter() - t0}


def build_model(preset: str, path: str) -> dict[str, Any]:
    """configs/sft.py:tiny's checkpoint at `path` (built offline, `data.tiny_checkpoint.build_tiny`) with the
    preset's head_dim, so the attention kernels run at the head size the stages will."""
    from configs import sft
    from rcgrpo_jax.data import tiny_checkpoint
    from rcgrpo_jax.train import model_prep

    head_dim = model_prep.abstract_model_config(sft.get_config(preset)).head_dim
    t0 = time.perf_counter()
    tiny_checkpoint.build_tiny(sft.get_config("tiny"), path, head_dim=head_dim)
    return {"path": path, "head_dim": head_dim, "s": time.perf_counter() - t0}


def small_config(stage_module, preset: str, mesh_shape: dict[str, int], model_path: str):
    """`stage_module.get_config("tiny")` on `model_path` and `mesh_shape` with the preset's compute settings: one
    step, a batch of one row (SFT) or one group (RL) per batch shard, short rollouts, no checkpoint or export."""
    c = stage_module.get_config("tiny")
    c.model.path = model_path
    big = stage_module.get_config(preset)
    for field in PRESET_MODEL_FIELDS:
        c.model[field] = big.model[field]
    c.mesh.data, c.mesh.fsdp, c.mesh.tensor = mesh_shape["data"], mesh_shape["fsdp"], mesh_shape["tensor"]
    shards = mesh_shape["data"] * mesh_shape["fsdp"]
    c.train.max_steps = 1
    c.train.grad_accum = -1  # one row per batch shard per micro-batch
    c.log.progress = c.log.tensorboard = False
    c.checkpoint.export_hf = False
    c.memory.check_fit = False  # a tiny model fits: the check would only compile more programs
    if "rl" in c:
        c.train.batch_size = shards * int(c.rl.group_size)  # one task per batch shard
        c.rl.num_minibatches = 1
        c.rl.max_step_tokens, c.rl.max_context = 16, 1024
        c.data.buckets = (640, 768, 1024)
    else:
        c.train.batch_size = shards
        c.data.max_examples = 4 * shards
        c.data.buckets = (1024,)  # one program, compiled at build (longer examples are cut to it)
    return c


def step_row(make_trainer, config, workdir: str) -> dict[str, Any]:
    """Builds `make_trainer(config, workdir)` (a real trainer; SFT builds its data in `workdir`) and runs its
    first step on its mesh."""
    import jax

    t0 = time.perf_counter()
    trainer = make_trainer(config, workdir)
    build = time.perf_counter() - t0
    with jax.set_mesh(trainer.mesh):
        state = trainer.init_state()
        compiles0, _ = runtime.compile_totals()
        t0 = time.perf_counter()
        state, metrics = trainer.step(state, 0)
        jax.block_until_ready(state)
        step = time.perf_counter() - t0
    loss, grad_norm = float(metrics["loss"]), float(metrics["grad_norm"])
    row = {"build_s": build, "step_s": step, "compiles": runtime.compile_totals()[0] - compiles0, "loss": loss}
    row["grad_norm"] = grad_norm
    row["finite"] = bool(metrics["finite"]) and math.isfinite(loss) and math.isfinite(grad_norm)
    row["mesh_shape"] = dict(trainer.mesh.shape)
    if not row["finite"]:
        raise RuntimeError(f"non-finite step: loss {loss}, grad_norm {grad_norm}, finite {metrics['finite']}")
    return row


def _needs(value, row_name: str):
    """`value`, or a RuntimeError naming the earlier row that failed to make it."""
    if value is None:
        raise RuntimeError(f"not run: the {row_name} row failed")
    return value


def run(preset: str, workdir: str, *, fit: bool = False, env: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every row, printed as it is made; `env` is what `runtime.apply_backend_env` returned (None: not applied)."""
    import jax

    from configs import rc_grpo, sft
    from rcgrpo_jax.train import rl_trainer
    from rcgrpo_jax.train import sft as sft_trainer

    runtime.compile_totals()  # start counting before the first compilation
    rows = [common.emit({"bench": "mesh_env", **(env or {"applied": False, "env": runtime.backend_env()})})]
    mesh = model = None
    with common.guarded({"bench": "mesh", "preset": preset}) as row:
        devices = jax.local_devices()
        row.update(section=preset_mesh(preset), devices=len(devices), platform=devices[0].platform)
        row["device_kind"] = devices[0].device_kind
        built, row["fitted"] = build_mesh(row["section"], devices, fit)
        row["shape"], mesh = dict(built.shape), built
    rows.append(row)
    with common.guarded({"bench": "psum"}) as row:
        row.update(psum_row(_needs(mesh, "mesh")))
    rows.append(row)
    with common.guarded({"bench": "tiny_model"}) as row:
        row.update(build_model(preset, os.path.join(workdir, "model")))
        model = row["path"]
    rows.append(row)
    for name, module, make_trainer in (
        ("sft_step", sft, sft_trainer.SFTTrainer),
        ("rl_step", rc_grpo, rl_trainer.make),
    ):
        with common.guarded({"bench": name}) as row:
            shape = dict(_needs(mesh, "mesh").shape)
            config = small_config(module, preset, shape, _needs(model, "tiny_model"))
            row.update(step_row(make_trainer, config, workdir))
        rows.append(row)
    rows.append(common.emit({"bench": "done", "errors": sum("error" in r for r in rows)}))
    return rows


def main(argv: list[str] | None = None, *, env: dict[str, Any] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="qwen2_5_7b", help="the preset whose mesh and compute settings to check")
    ap.add_argument("--workdir", default=None, help="where the tiny model and data are built (default: a temp dir)")
    ap.add_argument("--fit", action="store_true", help="fsdp over every device when the preset's mesh does not fit")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mesh_check_") as tmp:
        rows = run(args.preset, args.workdir or tmp, fit=args.fit, env=env)
    return 1 if rows[-1]["errors"] else 0


if __name__ == "__main__":
    applied = runtime.apply_backend_env()  # before JAX starts a backend
    sys.exit(main(env=applied))
