"""Smoke tests of the benchmark entry points on minimal sizes: every row is printed as JSON, carries its
fields, and the derived figures agree with the raw ones. No timing assertions (speed lives in the
benchmarks themselves)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import subprocess
import sys

import pytest

from benchmarks import common, gpu
from benchmarks import sampler as sampler_bench
from benchmarks import train as train_bench

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _close(a: float, b: float, rel: float = 2e-3) -> bool:  # printed floats carry 4 significant digits
    return math.isclose(a, b, rel_tol=rel)


# ---------------------------------------------------------------------------------- train benchmark


def _run(main, argv):
    """(returned rows, printed rows) of one entry point; module fixtures cannot use capsys."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rows = main(argv)
    return rows, _json_lines(buf.getvalue())


@pytest.fixture(scope="module")
def train_run():
    return _run(
        train_bench.main, ["--models", "tiny", "--batch", "1", "--seq", "16", "--repeats", "1", "--peak-n", "64"]
    )


def test_train_rows_printed_and_complete(train_run):
    rows, printed = train_run
    assert [r["bench"] for r in printed] == ["machine", "train_step"]
    assert all("error" not in r for r in printed), printed
    machine, step = printed
    assert machine["matmul_peak_gflop_s"] > 0 and machine["devices"] >= 1
    for key in (
        "ours_tok_s",
        "torch_tok_s",
        "ratio",
        "ours_frac_peak",
        "torch_frac_peak",
        "ours_step_s",
        "torch_step_s",
        "load_avg_1m",
    ):
        assert key in step and step[key] is not None, key
    assert step["model"] == "tiny" and step["batch"] == 1 and step["seq"] == 16
    assert rows[1]["ours_tok_s"] == pytest.approx(step["ours_tok_s"], rel=1e-3)


def test_train_flops_and_ratios_consistent(train_run):
    _, (machine, step) = train_run
    # Tiny Qwen2 (V 1024, D 256, F 704, L 4, H 4, Hkv 2, Dh 64, untied), counted by hand:
    per_layer = (256 * 256 + 256) + 2 * (256 * 128 + 128) + 256 * 256 + 3 * 256 * 704 + 2 * 256
    assert step["params"] == 2 * 1024 * 256 + 256 + 4 * per_layer == 3_477_760
    flops = 6 * 3_477_760 * 16 + 12 * 4 * 4 * 64 * 16 * 16
    assert _close(step["gflop_per_step"], flops / 1e9)
    assert _close(step["ratio"], step["torch_step_s"] / step["ours_step_s"], 2e-2)
    assert _close(step["ours_tok_s"], 16 / step["ours_step_s"], 2e-2)
    assert _close(step["ours_frac_peak"], flops / step["ours_step_s"] / (machine["matmul_peak_gflop_s"] * 1e9), 2e-2)


def test_train_on_a_two_device_mesh():
    common_args = ["--models", "tiny", "--seq", "16", "--repeats", "1", "--peak-n", "64", "--skip-torch"]
    _, (machine, step) = _run(train_bench.main, common_args + ["--batch", "2", "--devices", "2"])
    assert "error" not in step, step
    assert step["devices"] == 2 and step["batch"] == 2
    assert _close(step["ours_tok_s"], 2 * 16 / step["ours_step_s"], 2e-2)
    _, (_, bad) = _run(train_bench.main, common_args + ["--batch", "3", "--devices", "2"])
    assert "--devices 2 must divide --batch 3" in bad["error"]


# ------------------------------------------------------------------------------------ gpu check (tiny)


@pytest.fixture(scope="module")
def gpu_run():
    return _run(gpu.main, ["--tiny", "--decode-batches", "1,16,64"])  # the sweep (the default is 64 only)


def test_gpu_tiny_rows(gpu_run):
    rows, printed = gpu_run
    # most wanted first (benchmarks/gpu.py): the ragged decode and the update before the plain decode sweep
    want = ["machine", "ragged_decode", "packed_attention", "rl_step", "prod_decode", "decode_setup"]
    want += ["decode", "decode", "decode", "done"]
    assert [r["bench"] for r in printed] == want
    assert all("error" not in r and "skipped" not in r for r in printed), printed
    assert printed[-1]["errors"] == 0
    assert [r["batch"] for r in printed if r["bench"] == "decode"] == [1, 16, 64]
    assert len(rows) == 9


def test_gpu_packed_attention_row(gpu_run):
    """The packed append's attention at the production row's (tiny) shapes: rows 0, 2, 4, 6 of 8 get 40 tokens
    after 32, 93, 154 and 216 (linspace(32, 216), floored) in a 256-slot span: two blocks each (32 + 8
    queries), 8 blocks; with 128-slot key blocks they see 1 + 1, 1 + 2, 2 + 2 and 2 + 2 key blocks: 13 pairs
    -> 16. The pairs equal the dense attention over the span."""
    _, printed = gpu_run
    (row,) = [r for r in printed if r["bench"] == "packed_attention"]
    assert (row["rows"], row["span"], row["stepping_rows"], row["tokens_per_row"]) == (8, 256, 4, 40)
    assert (row["blocks"], row["block_k"]) == (8, 128)
    assert row["pairs_computed"] == 16 * 32 * 128 and row["dense_pairs_computed"] == 8 * 32 * 256
    assert row["real_pairs"] == 40 * (32 + 93 + 154 + 216) + 4 * (40 * 41 // 2)
    assert _close(row["pairs_tflop_s"], 4 * 4 * 16 * 16 * 32 * 128 / (row["pairs_ms"] / 1e3) / 1e12, 2e-2)
    assert _close(row["speedup"], row["dense_ms"] / row["pairs_ms"], 2e-2)
    # bf16 queries, keys, values and outputs, each path summing in float32 (0.003 under jax 0.10 and 0.11)
    assert row["max_rel_diff"] < 2e-2


def test_gpu_ragged_decode_row(gpu_run):
    """Both decode attentions at the production row's (tiny) shapes: 8 rows of lengths spread over [32, 248]
    in a 256-slot span, 8 tokens; slots read per step by hand; the two paths sample alike."""
    import numpy as np

    _, printed = gpu_run
    (row,) = [r for r in printed if r["bench"] == "ragged_decode"]
    assert (row["rows"], row["span"], row["new_tokens"], row["block_k"]) == (8, 256, 8, 128)
    lengths = np.linspace(32, 248, 8).astype(int)
    ragged = np.mean([np.sum(-(-(lengths + t) // 128) * 128) for t in range(1, 9)])
    assert row["xla_kv_slots_read_per_step"] == 8 * 256 and _close(row["ragged_kv_slots_read_per_step"], ragged)
    assert row["ragged_kv_slots_read_per_step"] < row["xla_kv_slots_read_per_step"]
    assert _close(row["kv_read_utilisation_xla"], (lengths.mean() + 4.5) / 256)
    slot = 2 * 2 * 2 * 16 * 2  # (k, v) x L x Hkv x Dh x bf16
    for path in ("xla", "ragged"):
        assert _close(row[f"{path}_bytes_per_step"], row["weight_bytes"] + row[f"{path}_kv_slots_read_per_step"] * slot)
        assert _close(row[f"{path}_decode_tok_s"], 8 * 8 / row[f"{path}_decode_s"], 2e-2)
    assert row["ragged_interpret"] is (row["backend"] != "gpu")
    assert row["tokens_alike"] > 0.5 and row["max_rel_diff_logprobs"] < 2e-2  # bf16 caches and weights
    # The ragged path's program never re-lays out a cache layer (the swaps around the kernel cancel).
    ops = row["ragged_cache_sized_ops"]
    assert isinstance(ops, dict) and not {"copy", "transpose"} & set(ops), ops


def test_cache_sized_ops_reads_compiled_hlo():
    text = """
  %p = bf16[4,2,64,16]{3,2,1,0} parameter(0)
  %t = bf16[4,64,2,16]{3,2,1,0} transpose(%p), dimensions={0,2,1,3}
  %c = bf16[4,2,64,16]{3,2,1,0} copy(%t)
  %s = bf16[4,2,64,16]{3,2,1,0} scatter(%c, %i, %u), update_window_dims={}
  %small = bf16[4,2,16]{2,1,0} copy(%q)
  ROOT %g = bf16[4,2,64,16]{3,2,1,0} get-tuple-element(%w), index=0
"""
    assert gpu.cache_sized_ops(text, (4, 2, 64, 16)) == {"copy": 1, "scatter": 1, "transpose": 1}


def test_gpu_decode_bytes_and_fraction(gpu_run):
    _, printed = gpu_run
    (setup,) = [r for r in printed if r["bench"] == "decode_setup"]
    # tiny: V 512, D 64, F 128, L 2, H 4, Hkv 2, Dh 16, tied, q/k/v biases; bf16 = 2 bytes.
    per_layer = (64 * 64 + 64) + 2 * (64 * 32 + 32) + 64 * 64 + 3 * 64 * 128 + 2 * 64
    assert setup["params"] == 512 * 64 + 64 + 2 * per_layer
    assert setup["weight_bytes"] == 2 * setup["params"]
    for row in (r for r in printed if r["bench"] == "decode"):
        b = row["batch"]
        kv = 2 * 2 * 2 * 16 * (16 + 8 // 2) * b * 2  # (k, v) x L x Hkv x Dh x live context x rows x bytes
        assert _close(row["bytes_per_step"], setup["weight_bytes"] + kv)
        assert _close(row["decode_tok_s"], b * 8 / row["decode_s"], 2e-2)
        assert _close(row["hbm_bound_fraction"], row["bytes_per_step"] / (row["decode_s"] / 8) / 4.8e12, 2e-2)


def test_gpu_rl_step_row(gpu_run):
    _, printed = gpu_run
    (rl,) = [r for r in printed if r["bench"] == "rl_step"]
    assert rl["finite"] is True and math.isfinite(rl["loss"])
    assert rl["batch"] == 2 and rl["seq"] == 64 and rl["remat"] is True
    flops = common.train_flops(
        rl["params"], gpu.model_config("gpu_tiny", param_dtype="float32", dtype="bfloat16", remat=True), 2, 64
    )
    assert _close(rl["tflop_per_step"], flops / 1e12)
    assert _close(rl["mfu"], flops / rl["step_s"] / 989e12, 2e-2)


def test_gpu_deadline_skips_rather_than_runs(capsys):
    rows = gpu.main(["--tiny", "--deadline-s", "0", "--skip", "rl_step"])
    printed = _json_lines(capsys.readouterr().out)
    assert [r["bench"] for r in printed] == [
        "machine",
        "ragged_decode",
        "packed_attention",
        "prod_decode",
        "decode_setup",
        "decode",
        "done",
    ]
    assert all("skipped" in r for r in rows) and len(rows) == 6


def test_gpu_check_script_preflight():
    """The launcher itself: its dated header, the image's packages and the environment's rows, then the
    module's machine and done lines (nothing measured)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHON"] = sys.executable  # the interpreter running the tests, whatever python3 on PATH is
    env["RCGRPO_SKIP_MESH_CHECK"] = "1"  # the multi-GPU stage has its own test (tests/benchmarks/test_mesh_check.py)
    out = subprocess.run(
        [
            "bash",
            os.path.join(ROOT, "launch", "gpu_check.sh"),
            "--tiny",
            "--skip",
            "decode,prod_decode,ragged_decode,packed_attention,rl_step,attention",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    ).stdout
    printed = _json_lines(out)
    assert printed[0]["bench"] == "gpu_check" and printed[0]["args"].startswith("--tiny")
    benches = [r["bench"] for r in printed]
    assert benches.index("image_packages") < benches.index("setup_env") < benches.index("machine")
    assert [r["bench"] for r in printed if r["bench"] in ("machine", "done")] == ["machine", "done"]
    assert printed[-1]["errors"] == 0


# ------------------------------------------------------------------------------------------ helpers


def test_guarded_reports_error_and_continues(capsys):
    row = {"bench": "x"}
    with common.guarded(row):
        row["a"] = 1.0
        raise ValueError("boom")
    printed = _json_lines(capsys.readouterr().out)
    assert len(printed) == 1 and row["error"] == "ValueError: boom"
    assert {k: printed[0][k] for k in ("bench", "a", "error")} == {"bench": "x", "a": 1.0, "error": "ValueError: boom"}


def test_time_call_excludes_warmup():
    calls = []
    median, times = common.time_call(lambda: calls.append(1), repeats=3, warmup=2)
    assert len(calls) == 5 and len(times) == 3 and median == sorted(times)[1]


def test_flop_and_byte_counts_by_hand():
    cfg = gpu.model_config("qwen2.5-1.5b", param_dtype="bfloat16", dtype="bfloat16", remat=False)
    # 6 N T + 12 L (H Dh) S T with N = 1e9, T = 2 x 4096 tokens, S = 4096.
    assert common.train_flops(10**9, cfg, 2, 4096) == 6e9 * 8192 + 12 * 28 * 1536 * 4096 * 8192
    # KV cache of one row at 1000 tokens in bf16: 2 x 28 layers x 2 kv heads x 128 x 1000 x 2 bytes.
    assert common.decode_step_bytes(3_000_000_000, cfg, 1, 1000) == 3e9 + 2 * 28 * 2 * 128 * 1000 * 2


def test_as_command_sets_the_device_count_from_devices(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8 --xla_other=1")
    common.as_command(["--models", "tiny", "--devices", "2"])
    assert os.environ["XLA_FLAGS"] == "--xla_other=1 --xla_force_host_platform_device_count=2"
    common.as_command(["--models", "tiny"])  # one real device unless asked
    assert os.environ["XLA_FLAGS"] == "--xla_other=1"
    assert common.argv_devices(["--devices=3", "--repeats", "1"]) == 3 and common.argv_devices([]) == 1


def test_data_mesh_sizes_and_errors():
    import jax

    assert common.data_mesh(1) is None
    mesh = common.data_mesh(2)
    assert dict(mesh.shape) == {"data": 2, "fsdp": 1, "tensor": 1} and list(mesh.devices.flat) == jax.devices()[:2]
    with pytest.raises(ValueError, match=">= 1"):
        common.data_mesh(0)
    with pytest.raises(ValueError, match=f"only {jax.device_count()} XLA device"):
        common.data_mesh(jax.device_count() + 1)


def test_emit_rounds_to_four_digits(capsys):
    common.emit({"a": 1.234567, "b": 3, "c": None, "d": float("nan")})
    text = capsys.readouterr().out
    assert json.loads(text) == {"a": 1.235, "b": 3, "c": None, "d": None}  # non-finite -> null: valid JSON


# ------------------------------------------------------------------------------- sampler benchmark


def test_sampler_row_fields_and_bound():
    env = dict(os.environ)
    (row,) = sampler_bench.main(
        ["--models", "tiny", "--batch", "2", "--prompt", "8", "--new", "4", "--repeats", "1", "--peers", "hf"]
    )
    assert "error" not in row, row
    # Later subprocesses of this process inherit XLA_FLAGS (the 8-device flag). (Only that variable:
    # building a transformers torch model sets TORCHINDUCTOR_CACHE_DIR in the process, bench or not.)
    assert os.environ.get("XLA_FLAGS") == env.get("XLA_FLAGS")
    assert (row["model"], row["batch"], row["prompt"], row["new_tokens"]) == ("tiny", 2, 8, 4)
    assert _close(row["ratio"], row["ours_tok_s"] / row["hf_tok_s"], 2e-2)
    # Tiny Qwen2 (V 1024, D 256, F 704, L 4, Hkv 2, Dh 64, untied): all weights but the embedding
    # table, plus K and V over the 32-slot span (16-token length buckets for the prompt and the budget), f32.
    per_layer = (256 * 256 + 256) + 2 * (256 * 128 + 128) + 256 * 256 + 3 * 256 * 704 + 2 * 256
    weights = 4 * (1024 * 256 + 256 + 4 * per_layer)
    assert row["step_bytes"] == weights + 2 * 4 * 2 * 2 * 64 * 32 * 4
    step_s = row["decode_step_ms"] / 1e3
    assert _close(row["decode_tok_s"], 2 / step_s, 2e-2)
    assert _close(
        row["bandwidth_bound_fraction"], row["step_bytes"] / (row["read_bandwidth_gb_s"] * 1e9) / step_s, 2e-2
    )
    assert row["bound_ratio"] > 0


def test_sampler_on_a_two_device_mesh():
    """--devices 2: ours decodes on a data mesh (one row per device here), greedy-equal to HF; the bound
    counts each device's copy of the weights."""
    (row,) = sampler_bench.main(
        ["--models", "tiny", "--batch", "2", "--prompt", "8", "--new", "4", "--repeats", "1", "--peers", "hf"]
        + ["--devices", "2"]
    )
    assert "error" not in row, row
    assert row["devices"] == 2 and row["greedy_match_hf"] == 1.0
    per_layer = (256 * 256 + 256) + 2 * (256 * 128 + 128) + 256 * 256 + 3 * 256 * 704 + 2 * 256
    weights = 4 * (1024 * 256 + 256 + 4 * per_layer)
    assert row["step_bytes"] == 2 * weights + 2 * 4 * 2 * 2 * 64 * 32 * 4
    with pytest.raises(SystemExit):
        sampler_bench.main(["--models", "tiny", "--devices", "0"])
