"""launch/gpu_check.sh's attention comparison (benchmarks.gpu --attention) on tiny shapes on the CPU:
the fused side is then the library's XLA attention on the arguments built for cuDNN, so the rows carry
real differences to check. No timing assertions."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys

import pytest

from benchmarks import gpu

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_gpu_check_script_compares_attention_paths_on_cpu(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "VENV") and not k.startswith("RCGRPO_")}
    env.update(PYTHON=sys.executable, GPU_CHECK_OUT=str(tmp_path / "check.jsonl"), VENV=str(tmp_path / "venv"))
    env.update(RCGRPO_SKIP_MESH_CHECK="1")  # the multi-GPU stage: tests/benchmarks/test_mesh_check.py
    out = subprocess.run(
        ["bash", os.path.join(REPO, "launch", "gpu_check.sh"), "--tiny", "--skip", "decode,rl_step"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = _json_lines(out.stdout)
    assert _json_lines(open(tmp_path / "check.jsonl").read()) == rows  # every line also in the dated file
    head, image, setup = rows[:3]
    assert head["bench"] == "gpu_check" and head["date_utc"].startswith("20") and "--tiny" in head["args"]
    assert image["bench"] == "image_packages" and image["python"] == sys.version.split()[0]
    assert "jax-cuda13-plugin" in image["absent_from_image"]  # this CPU venv is not the image
    # a CPU jax: no setup at all (never a networked install), and nothing made
    assert setup == {"bench": "setup_env", "skipped": f"{sys.executable} holds no CUDA jax: running with it as it is"}
    assert not os.path.exists(tmp_path / "venv")
    assert rows[3] == {"bench": "mesh_check", "skipped": "RCGRPO_SKIP_MESH_CHECK=1"}
    benches = [r["bench"] for r in rows[4:]]
    assert benches == ["machine"] + ["attention"] * len(gpu.TINY.attn_seqs) + [
        "ragged_decode",
        "packed_attention",
        "prod_decode",
        "done",
    ]
    attn = [r for r in rows if r["bench"] == "attention"]
    assert [r["seq"] for r in attn] == list(gpu.TINY.attn_seqs)
    for r in attn:
        assert "error" not in r and "skipped" not in r, r
        assert r["fused_impl"] == "xla_with_cudnn_arguments"  # no GPU here
        assert r["real_tokens"] == r["seq"] - r["seq"] // 16
        for key in ("xla_fwd_ms", "xla_fwd_bwd_ms", "fused_fwd_ms", "fused_fwd_bwd_ms"):
            assert r[key] > 0, key
        # bf16 inputs, f32 inside both: the two computations agree to bf16 rounding of the outputs
        assert 0 <= r["max_rel_diff_out"] < 1e-2 and 0 <= r["max_rel_diff_dq"] < 2e-2
        # every implementation that can run here is timed (pallas only on a GPU), the fastest named
        assert r["paths"] == ["xla", "fused", "tokamax"]
        assert r["tokamax_fwd_ms"] > 0 and r["tokamax_fwd_bwd_ms"] > 0
        assert 0 <= r["max_rel_diff_out_tokamax"] < 1e-2 and 0 <= r["max_rel_diff_dq_tokamax"] < 2e-2
        assert r["fastest_fwd_bwd"] in ("xla", "xla_with_cudnn_arguments", "tokamax")
        assert r["auto_impl"] == "xla" and r["override"] is None  # a CPU: auto is XLA, no kernel to override it
    (prod,) = [r for r in rows if r["bench"] == "prod_decode"]  # the production decode row, on tiny shapes
    assert "error" not in prod and (prod["rows"], prod["span"]) == (gpu.TINY.prod_rows, gpu.TINY.prod_span)
    shape = gpu.model_config(gpu.TINY.prod_shape, param_dtype="bfloat16", dtype="bfloat16", remat=False)
    kv = 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * prod["rows"] * prod["span"] * 2
    # every weight + every row's whole span, bf16 (rows print 4 significant digits)
    assert prod["bytes_per_step"] == pytest.approx(prod["weight_bytes"] + kv, rel=1e-3)
    assert prod["decode_tok_s"] > 0 and 0 < prod["hbm_bound_fraction"] < 1
    assert rows[-1]["bench"] == "done" and rows[-1]["errors"] == 0


def test_a_failing_path_keeps_the_other_paths_figures(monkeypatch):
    from rcgrpo_jax.models import attention

    def broken(*a, **k):
        raise RuntimeError("no kernel")

    monkeypatch.setattr(attention, "cudnn_arguments", broken)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        gpu.main(["--tiny", "--attention", "--skip", "decode,prod_decode,rl_step", "--attn-seqs", "32"])
    rows = _json_lines(buf.getvalue())
    (row,) = [r for r in rows if r["bench"] == "attention"]
    assert row["fused_error"] == "RuntimeError: no kernel" and "error" in row
    assert row["xla_fwd_ms"] > 0 and "max_rel_diff_out" not in row
    assert rows[-1]["errors"] == 1
