"""`benchmarks.cuda_lower --tiny`: every program of an RL and an SFT stage exports for CUDA on 8 fake CPU devices,
the Pallas kernels as Triton calls where they run; and a failed export is reported, not raised."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from benchmarks import cuda_lower
from rcgrpo_jax.models import attention
from rcgrpo_jax.sampling import tokamax_decode

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
    # the Pallas kernels where this JAX ships them (0.10, 0.11), XLA attention where it does not (0.12); decode
    # on 0.12 through tokamax's Triton kernel where tokamax has the pl.dot fix (>= 0.0.13), else XLA
    kernels = cuda_lower.kernels()
    has_kernels = not attention.pallas_mha_unavailable()
    fused_decode = "ragged" if has_kernels else "xla" if tokamax_decode.unavailable(gpu=True) else "tokamax"
    assert kernels == {"attention": "pallas" if has_kernels else "xla", "decode_attention": fused_decode}
    info = {"jax": jax.__version__, "target": target, **kernels}
    for r in rows:
        assert r["ok"] and r["error"] is None, r
        assert {k: r[k] for k in info} == info, r
        # exported over the preset's mesh: 8 devices, the tiny preset's one
        assert r["devices"] == (1 if config.endswith(":tiny") else 8), r
        has_triton = cuda_lower.TRITON_CALL in r["custom_calls"]
        fused = fused_decode != "xla" if r["program"] == "decode" else has_kernels
        assert has_triton == (fused and r["program"] in cuda_lower.TRITON_PROGRAMS), r
        assert "cudnn" not in " ".join(r["custom_calls"]).lower(), r
    assert summary == {"ok": True, "programs": len(programs), "failed": [], **info}
    assert rc == 0


def test_a_failed_export_is_a_row_and_fails_the_summary(capsys):
    def broken():
        raise ValueError("head_dim 96 is not a power of two\nmore detail")

    row = cuda_lower._run("decode", broken, {})
    assert row["ok"] is False and row["custom_calls"] == [] and row["jax"]
    assert row["error"] == "ValueError: head_dim 96 is not a power of two"
    assert json.loads(capsys.readouterr().out.strip()) == row


def test_custom_calls_are_read_from_module_text():
    text = (
        'stablehlo.custom_call @"__gpu$xla.gpu.triton"(%0)\n'
        "%1 = stablehlo.custom_call @Sharding(%0)\n"
        '"stablehlo.custom_call"(%2) {call_target_name = "__gpu$xla.gpu.triton"}\n'
    )
    assert cuda_lower.custom_calls(text) == ["Sharding", "__gpu$xla.gpu.triton"]
