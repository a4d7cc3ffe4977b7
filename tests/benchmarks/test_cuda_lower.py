"""`benchmarks.cuda_lower --tiny`: every program of an RL and an SFT stage exports for CUDA on 8 fake CPU devices
with the kernels `auto` picks on an H200 (the Pallas kernels as Triton calls on jax 0.10 and 0.11), and says
which those are; a kernel a CPU host cannot lower is named as not lowered; a failed export is reported, not
raised."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from benchmarks import cuda_lower
from rcgrpo_jax.models import attention
from rcgrpo_jax.sampling import decode_step, tokamax_decode

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _lower(config: str) -> tuple[int, list[dict]]:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # the entry point sets its own devices
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.cuda_lower", f"--config={config}", "--tiny"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    assert lines, proc.stderr[-3000:]
    return proc.returncode, lines


@pytest.mark.parametrize(
    "config, programs",
    [
        ("configs/rc_grpo.py:qwen2_5_7b", cuda_lower.RL_PROGRAMS),
        ("configs/awpo.py:qwen3_8b", cuda_lower.RL_PROGRAMS),  # q/k norms; a JSONL trajectory source unset
        ("configs/sft.py:qwen2_5_7b", cuda_lower.SFT_PROGRAMS),
        ("configs/rc_grpo.py:tiny", cuda_lower.RL_PROGRAMS),  # the tiny preset's own model, one device
    ],
)
def test_tiny_programs_lower_for_cuda(config, programs):
    import jax

    rc, lines = _lower(config)
    *rows, summary = lines
    assert [r["program"] for r in rows] == list(programs)
    # every line names the JAX that lowered it and the GPU it lowered for (an abstract H200 where JAX has them)
    target = cuda_lower.TARGET_KIND if hasattr(jax.sharding, "AbstractDevice") else None
    # What `auto` picks on an H200: for the bf16 presets' training the Pallas flash kernel where this JAX ships
    # it (0.10, 0.11), cuDNN where it does not (0.12; not lowerable here, XLA stands in); the tiny preset computes
    # in float32, where auto keeps XLA. Decode: the Pallas decode kernel where JAX ships it. Prefill: XLA.
    has_flash = not attention.pallas_mha_unavailable()
    training = ("pallas" if has_flash else "cudnn") if not config.endswith(":tiny") else "xla"
    # decode on 0.12: tokamax's Triton kernel where tokamax has the pl.dot fix (>= 0.0.13), else XLA
    no_tokamax = tokamax_decode.unavailable(gpu=True)
    decode = "ragged" if not decode_step.ragged_kernel_unavailable() else "xla" if no_tokamax else "tokamax"
    auto = {"training": training, "prefill": "xla", "decode": decode}
    lowered = {**auto, "training": "xla" if training == "cudnn" else training}
    info = {
        "jax": jax.__version__,
        "target": target,
        "attention": lowered["training"],
        "decode_attention": decode,
        "kernels_auto": auto,
        "auto_lowered": auto == lowered,
    }
    assert info["auto_lowered"] == (has_flash or training == "xla")  # the default is what is proven (jax <= 0.11)
    for r in rows:
        assert r["ok"] and r["error"] is None, r
        assert {k: r[k] for k in info} == info, r
        # exported over the preset's mesh: 8 devices, the tiny preset's one
        assert r["devices"] == (1 if config.endswith(":tiny") else 8), r
        assert r["kernel"] == lowered.get(cuda_lower.PROGRAM_ATTENTION[r["program"]]), r
        has_triton = cuda_lower.TRITON_CALL in r["custom_calls"]
        assert has_triton == (r["kernel"] in ("pallas", "ragged", "tokamax")), r
        assert "cudnn" not in " ".join(r["custom_calls"]).lower(), r
    assert summary == {"ok": True, "programs": len(programs), "failed": [], **info}
    assert rc == 0


@pytest.mark.parametrize(
    "impl, auto, lowered",
    [
        ("auto", None, None),  # the Pallas kernel where JAX ships it, else cuDNN (not lowerable here: XLA instead)
        ("xla", "xla", "xla"),
        ("cudnn", "cudnn", "xla"),  # "cuDNN is not detected" on a CPU host
        ("tokamax", "tokamax", "xla"),  # its Mosaic GPU kernel reads the host's device at trace time
    ],
)
def test_kernels_name_what_the_h200_runs_and_what_was_lowered(impl, auto, lowered):
    """`kernels` of the 7B SFT preset (bf16, head_dim 128) under each setting: `auto_lowered` is false exactly
    where the H200's kernel could not be lowered and XLA attention stood in for it."""
    import dataclasses

    from configs import sft
    from rcgrpo_jax.train import model_prep

    if impl == "auto":
        auto = "cudnn" if attention.pallas_mha_unavailable() else "pallas"
        lowered = "xla" if auto == "cudnn" else auto
    config = sft.get_config("qwen2_5_7b")
    config.model.attention_impl = impl
    model_cfg = model_prep.abstract_model_config(config)
    assert (model_cfg.dtype, model_cfg.head_dim, model_cfg.attention_impl) == ("bfloat16", 128, impl)
    k = cuda_lower.kernels(config, model_cfg)
    assert k.auto["training"] == auto and k.lowered["training"] == lowered
    assert k.auto["prefill"] == k.lowered["prefill"] == "xla"
    assert k.fields()["auto_lowered"] == (auto == lowered)
    assert k.fields()["attention"] == lowered and k.fields()["kernels_auto"] == k.auto
    # a float32 model: auto keeps XLA attention on the H200 too (the fused kernels take bf16/fp16)
    f32 = cuda_lower.kernels(config, dataclasses.replace(model_cfg, dtype="float32", attention_impl="auto"))
    assert f32.auto["training"] == f32.lowered["training"] == "xla"


@pytest.mark.parametrize("stage", ["sft", "rctp_ft", "rc_grpo", "grpo", "dapo", "dr_grpo", "awpo"])
def test_every_gpu_preset_is_lowered_with_what_auto_picks(stage):
    """Every stage at every GPU preset (bf16, head_dim 128): `auto` picks the Pallas kernels on an H200 where
    this JAX ships them, and those are what the proof lowers (`auto_lowered`); on jax 0.12 it is cuDNN, which
    the proof names as not lowered."""
    import importlib

    from rcgrpo_jax.config_lib import common
    from rcgrpo_jax.train import model_prep

    has_flash = not attention.pallas_mha_unavailable()
    for preset in common.PRESETS:
        if preset == "tiny":
            continue
        config = importlib.import_module(f"configs.{stage}").get_config(preset)
        k = cuda_lower.kernels(config, model_prep.abstract_model_config(config))
        assert k.auto["training"] == ("pallas" if has_flash else "cudnn"), (stage, preset)
        assert k.fields()["auto_lowered"] is has_flash, (stage, preset)


def test_a_failed_export_is_a_row_and_fails_the_summary(capsys):
    def broken():
        raise ValueError("head_dim 96 is not a power of two\nmore detail")

    k = cuda_lower.Kernels(*({"training": "xla", "prefill": "xla", "decode": "ragged"},) * 2)
    row = cuda_lower._run("decode", broken, {}, k)
    assert row["ok"] is False and row["custom_calls"] == [] and row["jax"] and row["kernel"] == "ragged"
    assert row["error"] == "ValueError: head_dim 96 is not a power of two"
    assert json.loads(capsys.readouterr().out.strip()) == row


def test_help_prints_the_usage_and_the_flags(capsys):
    assert cuda_lower.main(["cuda_lower", "--help"]) == 0
    out = capsys.readouterr().out
    assert "python -m benchmarks.cuda_lower --config=configs/rc_grpo.py:qwen2_5_7b" in out
    assert all(f"--{name}" in out for name in ("config", "tiny", "devices")), out


def test_custom_calls_are_read_from_module_text():
    text = (
        'stablehlo.custom_call @"__gpu$xla.gpu.triton"(%0)\n'
        "%1 = stablehlo.custom_call @Sharding(%0)\n"
        '"stablehlo.custom_call"(%2) {call_target_name = "__gpu$xla.gpu.triton"}\n'
    )
    assert cuda_lower.custom_calls(text) == ["Sharding", "__gpu$xla.gpu.triton"]
