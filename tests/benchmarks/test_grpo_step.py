"""Plumbing of `benchmarks.grpo_step` (no timing assertions): ratio and summary arithmetic, the shared reward and
GRPO advantages by hand, prompts that survive decode -> encode, the bench env's plan, and one ours-only run on
tiny shapes whose JSON rows carry their fields."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess

import numpy as np
import pytest

from benchmarks import grpo_step, trl_peer

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _round(ours, peer, **phases):
    row = {"ours_s": ours, "peer_s": peer, "ratio": grpo_step.ratio(peer, ours)}
    row.update({f"ours_{p}_s": phases.get(p, 0.0) for p in grpo_step.PHASES})
    return row


def test_ratio_is_peer_over_ours():
    assert grpo_step.ratio(6.0, 2.0) == 3.0  # ours 3x faster
    assert grpo_step.ratio(1.0, 4.0) == 0.25


def test_summarize_medians_and_ratio_range():
    rounds = [
        _round(2.0, 6.0, generate=1.0, update=1.0),
        _round(4.0, 4.0, generate=3.0, update=1.0),
        _round(3.0, 9.0, generate=2.0, update=1.0),
    ]
    s = grpo_step.summarize(rounds)
    assert s["rounds"] == 3 and s["ours_s"] == 3.0 and s["peer_s"] == 6.0
    assert s["ratio"] == 2.0  # median peer / median ours, not the median of the per-round ratios (3.0)
    assert (s["ratio_min"], s["ratio_max"]) == (1.0, 3.0)
    assert s["ours_generate_s"] == 2.0 and s["ours_update_s"] == 1.0 and s["ours_reference_s"] == 0.0


def test_summarize_cpu_seconds():
    rounds = [
        {**_round(2.0, 6.0), "ours_cpu_s": 1.0, "peer_cpu_s": 8.0},
        {**_round(4.0, 4.0), "ours_cpu_s": 3.0, "peer_cpu_s": 4.0},
    ]
    s = grpo_step.summarize(rounds)
    assert (s["ours_cpu_s"], s["peer_cpu_s"], s["cpu_ratio"]) == (2.0, 6.0, 3.0)
    assert s["ratio"] == 5.0 / 3.0


def test_summarize_without_peer_has_no_ratio():
    s = grpo_step.summarize([{"ours_s": 1.0, **{f"ours_{p}_s": 0.25 for p in grpo_step.PHASES}}])
    assert s["ours_s"] == 1.0 and "ratio" not in s and "peer_s" not in s


def test_reward_of_by_hand():
    assert trl_peer.reward_of([2, 3, 4, 5]) == 0.5
    assert trl_peer.reward_of([1, 3]) == 0.0 and trl_peer.reward_of([]) == 0.0


def test_group_advantages_by_hand():
    r = np.array([0.0, 1.0, 0.5, 0.5], np.float32)  # two groups of two
    adv = grpo_step.group_advantages(r, 2)
    # group 1: mean 0.5, population std 0.5 -> -1, +1 (up to eps); group 2: all equal -> 0.
    np.testing.assert_allclose(adv, [-1.0, 1.0, 0.0, 0.0], atol=1e-3)


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory):
    import transformers

    from rcgrpo_jax.models.tiny import build_tiny_tokenizer

    path = tmp_path_factory.mktemp("tok")
    build_tiny_tokenizer(path, arch="qwen2")
    return transformers.AutoTokenizer.from_pretrained(path)


def test_prompts_exact_length_and_round_trip(tiny_tokenizer):
    prompts = grpo_step.make_prompts(tiny_tokenizer, 3, 24, seed=0)
    assert len(prompts) == 3 and all(len(p) == 24 for p in prompts)
    for p in prompts:  # the text TRL tokenises gives back the same ids
        assert tiny_tokenizer(tiny_tokenizer.decode(p), add_special_tokens=False)["input_ids"] == p
    assert prompts == grpo_step.make_prompts(tiny_tokenizer, 3, 24, seed=0)


def test_bench_env_plan_reads_the_extra():
    out = subprocess.run(
        ["bash", os.path.join(ROOT, "launch", "bench_env.sh"), "trl", "--print-plan"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "BENCH_VENV": "/nonexistent/bench-venv"},
    ).stdout
    assert "peer: trl" in out and "bench venv: /nonexistent/bench-venv" in out
    assert "pip install trl==" in out
    bad = subprocess.run(["bash", os.path.join(ROOT, "launch", "bench_env.sh"), "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown peer" in bad.stderr


def test_devices_must_divide_a_micro_batch():
    with pytest.raises(ValueError, match="--devices 2 must divide the --micro 3 rows"):
        grpo_step.OursStep("unused", grpo_step.Work(prompts=2, group=3), [], 0.0, micro=3, chunk=8, unroll=1, devices=2)


@pytest.mark.parametrize("devices", [1, 2])
def test_ours_only_run_rows(devices):
    buf = io.StringIO()
    argv = [
        "--no-peer",
        "--peak-n",
        "64",
        "--prompts",
        "2",
        "--group",
        "2",
        "--prompt-len",
        "16",
        "--new",
        "8",
        "--micro",
        "2",
        "--devices",
        str(devices),
    ]
    with contextlib.redirect_stdout(buf):
        rows = grpo_step.main(argv + ["--rounds", "1", "--betas", "0.04", "--arch", '{"hidden_size": 32}'])
    printed = [json.loads(line) for line in buf.getvalue().splitlines() if line.startswith("{")]
    assert [r["bench"] for r in printed] == ["machine", "grpo_step_round", "grpo_step"]
    assert all("error" not in r for r in printed), printed
    assert len(rows) == len(printed)
    rnd, summary = printed[1:]
    assert rnd["beta"] == summary["beta"] == 0.04 and rnd["ours_finite"] is True
    assert (summary["prompts"], summary["group"], summary["prompt_len"], summary["new"]) == (2, 2, 16, 8)
    assert summary["devices"] == devices
    total = sum(rnd[f"ours_{p}_s"] for p in grpo_step.PHASES)
    assert np.isclose(rnd["ours_s"], total, rtol=2e-3)  # printed to 4 significant digits
    assert rnd["ours_reference_s"] > 0.0  # the KL needs the reference pass
    assert rnd["ours_cpu_s"] > 0.0 and summary["ours_cpu_s"] == rnd["ours_cpu_s"] and "cpu_ratio" not in summary
    assert "ratio" not in summary and "peer_s" not in rnd and summary["rounds"] == 1
    # prefill, decode, reference, micro-gradients, their sum, apply: all compiled at the warm-up step (the
    # sampler's programs are module-level, so other tests in this process may have added to the count)
    assert rnd["ours_compiled"] >= 6 and summary["recompiled_after_warmup"] is False
    peak = printed[0]["matmul_peak_gflop_s"]
    assert peak > 0 and summary["update_gflop"] > 0
    assert np.isclose(
        summary["ours_update_frac_peak"], summary["update_gflop"] / summary["ours_update_s"] / peak, rtol=2e-2
    )
