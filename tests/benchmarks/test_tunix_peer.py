"""Plumbing of the tunix peer of `benchmarks.sampler` (no timing assertions; the tunix env is not built here):
peer selection, the per-round arithmetic and the greedy check by hand, the worker's command line and
environment, its protocol against a stand-in worker (the real one needs tunix), its input checks, and
bench_env.sh's plan and --check."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import textwrap

import pytest

from benchmarks import sampler, tunix_peer

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A stand-in for `benchmarks.tunix_peer` that speaks its protocol: it records what it was given, then answers
# with fixed figures (FAKE_S seconds per call, all-FAKE_TOKEN greedy rows), or dies where FAKE_DIE says.
FAKE_WORKER = textwrap.dedent(
    """
    import json, os, sys
    args = sys.argv[1:]
    ckpt, work_path = args[args.index("--checkpoint") + 1], args[args.index("--work") + 1]
    work = json.load(open(work_path))
    record = {"argv": args, "work": work, "files": sorted(os.listdir(ckpt)), "env": dict(os.environ)}
    json.dump(record, open(os.environ["FAKE_RECORD"], "w"))
    die = os.environ.get("FAKE_DIE", "")
    print("a library's own print, not JSON", flush=True)
    if die == "start":
        sys.exit(3)
    print(json.dumps({"loaded": True}), flush=True)
    if die == "loaded":
        sys.exit(4)
    k = work["greedy_tokens"]
    greedy = [[int(os.environ["FAKE_TOKEN"])] * k for _ in work["prompts"]]
    print(json.dumps({"ready": True, "tunix_version": "fake", "warmup_s": 0.5, "greedy": greedy}), flush=True)
    for i, _ in enumerate(iter(sys.stdin.readline, "")):
        if die == "round" and i == 1:
            sys.exit(5)
        print(json.dumps({"round": i, "s": float(os.environ["FAKE_S"]), "cpu_s": 0.1}), flush=True)
    print(json.dumps({"done": True}), flush=True)
    """
)


@pytest.fixture
def fake_worker(tmp_path, monkeypatch):
    """Route `tunix_peer.TunixPeer` to the stand-in worker; returns the path of the record it writes."""
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    record = tmp_path / "record.json"
    monkeypatch.setattr(
        tunix_peer,
        "peer_command",
        lambda python, ckpt, work: [python, str(script), "--checkpoint", ckpt, "--work", work],
    )
    monkeypatch.setenv("FAKE_RECORD", str(record))
    monkeypatch.setenv("FAKE_S", "0.25")
    monkeypatch.setenv("FAKE_TOKEN", "0")
    monkeypatch.delenv("FAKE_DIE", raising=False)
    return record


# ------------------------------------------------------------------------------------ peer selection


def test_parse_peers_default_and_explicit():
    assert sampler.parse_peers(None, tunix_built=False) == ("hf",)  # today's behaviour
    assert sampler.parse_peers(None, tunix_built=True) == ("hf", "tunix")
    assert sampler.parse_peers("hf,tunix", tunix_built=False) == ("hf", "tunix")  # named: built on demand
    assert sampler.parse_peers(" tunix , hf,tunix", tunix_built=False) == ("tunix", "hf")
    assert sampler.parse_peers("none", tunix_built=True) == () and sampler.parse_peers("", True) == ()
    with pytest.raises(ValueError, match="unknown peer"):
        sampler.parse_peers("hf,trl", tunix_built=True)


@pytest.mark.parametrize("argv", [["--peers", "vllm"], ["--greedy-check", "-1"], ["--new", "1"]])
def test_bad_arguments_are_refused_before_any_work(argv, capsys):
    with pytest.raises(SystemExit) as e:
        sampler.main(["--models", "tiny"] + argv)
    assert e.value.code == 2 and "error" in capsys.readouterr().err


# ---------------------------------------------------------------------------------- arithmetic by hand


def test_peer_fields_medians_and_ranges():
    times = {"ours": [2.0, 4.0, 3.0], "hf": [6.0, 4.0, 9.0], "tunix": [3.0, 6.0, 1.5]}
    f = sampler.peer_fields(times, tokens=12)
    assert (f["hf_tok_s"], f["ratio"], f["ratio_min"], f["ratio_max"]) == (2.0, 2.0, 1.0, 3.0)  # 6 s median
    assert (f["tunix_tok_s"], f["ratio_tunix"]) == (4.0, 1.0)  # 3 s median: the median ratio would be 1.5
    assert (f["ratio_tunix_min"], f["ratio_tunix_max"]) == (0.5, 1.5)
    assert sampler.peer_fields({"ours": [1.0], "tunix": []}, 4) == {}  # a dropped peer leaves no figures
    with pytest.raises(ValueError, match="rounds"):
        sampler.peer_fields({"ours": [1.0, 2.0], "tunix": [1.0]}, 4)


def test_rounds_interleave_and_drop_a_failing_peer():
    calls = []

    def side(name, seconds, fail_at=None):
        count = []

        def fn():
            calls.append(name)
            count.append(1)
            if len(count) == fail_at:
                raise RuntimeError(f"{name} broke")
            return seconds

        return fn

    row = {}
    times = sampler.rounds({"ours": side("ours", 1.0), "hf": side("hf", 2.0), "tunix": side("tunix", 3.0, 2)}, 3, row)
    assert calls == ["ours", "hf", "tunix", "ours", "hf", "tunix", "ours", "hf"]  # same rounds, ours first
    assert times == {"ours": [1.0] * 3, "hf": [2.0] * 3}
    assert row == {"tunix_error": "RuntimeError: tunix broke"}
    with pytest.raises(RuntimeError, match="ours broke"):
        sampler.rounds({"ours": side("ours", 1.0, 1), "hf": side("hf", 2.0)}, 2, {})


def test_greedy_fields_by_hand():
    ours, hf, tunix = [[1, 2, 3], [4, 5, 6]], [[1, 2, 3], [4, 5, 7]], [[1, 2, 9], [4, 5, 7]]
    f = sampler.greedy_fields({"ours": ours, "hf": hf, "tunix": tunix}, 3)
    assert f == {"greedy_tokens": 3, "greedy_match_hf": 0.5, "greedy_match_tunix": 0.0, "greedy_match_hf_tunix": 0.5}
    assert sampler.greedy_fields({"ours": ours, "hf": hf, "tunix": tunix}, 2)["greedy_match_tunix"] == 1.0
    assert sampler.greedy_fields({"ours": ours, "hf": None, "tunix": tunix}, 3) == {
        "greedy_tokens": 3,
        "greedy_match_tunix": 0.0,
    }
    with pytest.raises(ValueError):
        sampler.greedy_match(ours, ours[:1], 3)


# ----------------------------------------------------------------------- the worker's command and env


def test_peer_command_and_env():
    cmd = tunix_peer.peer_command("/env/bin/python", "/ck", "/w.json")
    assert cmd == ["/env/bin/python", "-m", "benchmarks.tunix_peer", "--checkpoint", "/ck", "--work", "/w.json"]
    base = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8 --xla_other=1", "JAX_PLATFORMS": "cpu"}
    env = tunix_peer.peer_env({**base, "PYTHONPATH": "/elsewhere"})
    assert env["XLA_FLAGS"] == "--xla_other=1" and env["JAX_PLATFORMS"] == "cpu"  # same backend as ours
    assert env["PYTHONPATH"].split(os.pathsep) == [ROOT, "/elsewhere"]
    assert tunix_peer.peer_env(base)["PYTHONPATH"] == ROOT


def test_worker_module_runs_as_a_command_and_refuses_bad_work(tmp_path):
    """The worker's real command line, in this env (no tunix here): a malformed work file is refused with
    a clear error before tunix is imported."""
    work = tmp_path / "work.json"
    work.write_text(json.dumps({"prompts": [[1, 2], [3]], "new_tokens": 4, "temperature": 1.0}))
    out = subprocess.run(
        tunix_peer.peer_command(sys.executable, str(tmp_path), str(work)),
        capture_output=True,
        text=True,
        env=tunix_peer.peer_env(),
        cwd=tmp_path,
    )
    assert out.returncode == 1 and "same length" in out.stderr and out.stdout == ""


@pytest.mark.parametrize(
    "work, message",
    [
        ({"prompts": [], "new_tokens": 4, "temperature": 1.0}, "non-empty"),
        ({"prompts": [[1, 2], [3, 4]], "new_tokens": 0, "temperature": 1.0}, "new_tokens"),
        ({"prompts": [[1, 2]], "new_tokens": 4, "temperature": 0.0}, "temperature"),
        ({"prompts": [[1, 2]], "new_tokens": 4, "temperature": 1.0, "greedy_tokens": -1}, "greedy_tokens"),
    ],
)
def test_check_work_refuses(work, message):
    with pytest.raises(ValueError, match=message):
        tunix_peer.check_work(work)


def test_id_tokenizer_round_trip_and_out_of_vocab_ids():
    tok = tunix_peer.IdTokenizer(16)
    assert tok.encode(tok.decode([3, 0, 15])) == [3, 0, 15]
    assert not tok.bos_id()  # tunix prepends no BOS
    assert {tok.pad_id(), tok.eos_id()} == {16, 17}  # outside the vocabulary: never sampled
    with pytest.raises(ValueError, match="outside"):
        tok.encode("3 16")


# ------------------------------------------------------------------------- protocol, stand-in worker


def test_tunix_peer_protocol(fake_worker, tmp_path):
    work = {"prompts": [[5, 6, 7]] * 2, "new_tokens": 4, "temperature": 1.0, "seed": 0, "greedy_tokens": 2}
    peer = tunix_peer.TunixPeer(sys.executable, str(tmp_path), work, str(tmp_path))
    try:
        peer.loaded()
        info = peer.ready()
        assert info["greedy"] == [[0, 0], [0, 0]] and info["tunix_version"] == "fake"
        assert [peer(), peer()] == [0.25, 0.25]
    finally:
        peer.close()
    assert peer.proc.returncode == 0  # EOF on stdin ended it
    record = json.loads(fake_worker.read_text())
    assert record["work"] == work and "tunix_work.json" in record["files"]


@pytest.mark.parametrize("die", ["start", "loaded"])
def test_start_and_ready_report_a_dead_worker(fake_worker, tmp_path, monkeypatch, die):
    import numpy as np

    monkeypatch.setenv("FAKE_DIE", die)
    row = {}
    peer = tunix_peer.start(sys.executable, str(tmp_path), np.ones((2, 3), int), 4, 2, row)
    if die == "loaded":
        assert peer is not None and tunix_peer.ready(peer, row) is None
        peer.close()
    else:
        assert peer is None
    assert "tunix_peer exited (rc" in row["tunix_error"]
    assert tunix_peer.start(None, str(tmp_path), np.ones((2, 3), int), 4, 2, row2 := {}) is None
    assert "no tunix bench env" in row2["tunix_error"]


def _run(argv):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rows = sampler.main(argv)
    return rows, [json.loads(line) for line in buf.getvalue().splitlines() if line.startswith("{")]


ARGV = ["--models", "tiny", "--batch", "2", "--prompt", "8", "--new", "4", "--repeats", "2", "--greedy-check", "3"]


def test_sampler_row_with_tunix_peer(fake_worker):
    """One tiny run with the stand-in as tunix (no hf): the row's tunix fields follow its figures, the
    worker got the bench's own checkpoint and work, and the run is error-free."""
    (row,), (printed,) = _run(ARGV + ["--peers", "tunix", "--tunix-python", sys.executable])
    assert "error" not in printed and "tunix_error" not in printed, printed
    assert printed["peers"] == "tunix" and printed["tunix_version"] == "fake"
    assert printed["tunix_tok_s"] == 2 * 4 / 0.25
    # ratios carry 2 decimals, tok/s 4 significant digits
    assert printed["ratio_tunix"] == pytest.approx(0.25 / (2 * 4 / printed["ours_tok_s"]), rel=2e-2, abs=6e-3)
    assert printed["ratio_tunix_min"] <= printed["ratio_tunix"] <= printed["ratio_tunix_max"]
    # greedy: the stand-in answers token 0, which ours never gives on every row here
    assert printed["greedy_tokens"] == 3 and 0.0 <= printed["greedy_match_tunix"] < 1.0
    assert not {"hf_tok_s", "ratio", "bound_ratio", "greedy_match_hf"} & set(printed)  # hf not asked for
    record = json.loads(fake_worker.read_text())
    assert {"config.json", "model.safetensors"} <= set(record["files"])
    w = record["work"]
    assert (len(w["prompts"]), {len(p) for p in w["prompts"]}) == (2, {8})
    assert (w["new_tokens"], w["temperature"], w["greedy_tokens"]) == (4, 1.0, 3)
    assert "force_host_platform_device_count" not in record["env"].get("XLA_FLAGS", "")
    assert row["tunix_tok_s"] == pytest.approx(printed["tunix_tok_s"])


def test_sampler_row_survives_a_peer_dying_mid_run(fake_worker, monkeypatch):
    monkeypatch.setenv("FAKE_DIE", "round")
    (_,), (printed,) = _run(ARGV + ["--peers", "tunix", "--tunix-python", sys.executable, "--greedy-check", "0"])
    assert "error" not in printed and printed["ours_tok_s"] > 0
    assert "tunix_peer exited (rc 5)" in printed["tunix_error"] and "tunix_tok_s" not in printed
    assert "greedy_tokens" not in printed


# ------------------------------------------------------------------------------------- bench_env.sh


def test_bench_env_plan_and_check(tmp_path, monkeypatch):
    script = os.path.join(ROOT, "launch", "bench_env.sh")
    monkeypatch.setenv("BENCH_VENV", str(tmp_path / "venv"))
    monkeypatch.setenv("PYTHON", sys.executable)
    plan = subprocess.run(["bash", script, "tunix", "--print-plan"], capture_output=True, text=True, check=True)
    assert "peer: tunix" in plan.stdout and "pip install google-tunix==" in plan.stdout
    check = subprocess.run(["bash", script, "tunix", "--check"], capture_output=True, text=True)
    assert check.returncode == 1 and check.stdout == "" and "no current tunix env" in check.stderr
    with pytest.raises(RuntimeError, match="--check failed"):
        sampler.bench_env("tunix", check=True)
    assert not (tmp_path / "venv").exists()  # --check never builds
