"""The GPU box's layout, built on the CPU, offline: `launch/setup_env.sh --gpu` run by a python3 that is
itself a venv holding a stand-in CUDA jax, with no index and a wheel folder, must end with an interpreter
that imports rcgrpo_jax and everything it needs, having installed only the wheel folder's packages.

The parent venv stands in for the image: its site-packages links every entry of this project's .venv
except the distributions the image lacks (launch/gpu_wheels.txt) and the editable rcgrpo_jax, plus a fake
`jax_plugins.xla_cuda13` so the CUDA-jax probe finds a plugin. The wheel folder is made offline by
repacking this .venv's installed copies of the missing distributions (pure Python) into wheels."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
import zipfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "launch", "setup_env.sh")
_spec = importlib.util.spec_from_file_location("gpu_env", os.path.join(REPO, "launch", "gpu_env.py"))
gpu_env = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_env)

SITE = sysconfig.get_path("purelib")
PY_DIR = os.path.relpath(SITE, sys.prefix)  # lib/pythonX.Y/site-packages
WHEELS = gpu_env.read_list(gpu_env.WHEEL_LIST)
# The image keeps these; none may be installed (or replaced) by setup_env.sh
IMAGE_ONLY = ("jax", "jaxlib", "torch", "numpy", "flax", "jax_plugins")

pytestmark = pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="needs the project's .venv")
pytestmark = [pytestmark, pytest.mark.slow]  # the fast lane skips it (pytest.ini)


def _top_level(dist: importlib.metadata.Distribution) -> set[str]:
    return {str(f).split("/")[0] for f in dist.files or () if not str(f).startswith("..")}


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def repack_wheel(dist: importlib.metadata.Distribution, folder: str) -> str:
    """An installed pure-Python distribution back into a py3-none-any wheel (its dist-info without the
    installer's files; a fresh RECORD). Stored, not deflated: this is about layout, not size."""
    info = next(str(f).split("/")[0] for f in dist.files if str(f).split("/")[0].endswith(".dist-info"))
    name, version = info[: -len(".dist-info")].rsplit("-", 1)
    path = os.path.join(folder, f"{name}-{version}-py3-none-any.whl")
    record = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for f in dist.files:
            rel = str(f)
            if rel.startswith("..") or "__pycache__" in rel or rel.endswith(".pyc"):
                continue
            if rel.startswith(info + "/") and rel.split("/")[1] in (
                "RECORD",
                "INSTALLER",
                "REQUESTED",
                "direct_url.json",
            ):
                continue
            src = os.path.join(SITE, rel)
            if not os.path.isfile(src):
                continue
            data = open(src, "rb").read()
            z.writestr(rel, data)
            record.append(f"{rel},{_record_hash(data)},{len(data)}")
        record.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


def make_parent(tmp_path) -> str:
    """A venv (of this venv's base) whose site-packages links this .venv's, minus what the image lacks."""
    parent = tmp_path / "image-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(parent)], check=True, timeout=60)
    site = parent / PY_DIR
    hidden = set()
    for name in [n for n, _ in WHEELS] + ["rcgrpo_jax"]:
        hidden |= _top_level(importlib.metadata.distribution(name))
    hidden |= {e for e in os.listdir(SITE) if e.startswith("__editable__")}
    for entry in os.listdir(SITE):
        if entry not in hidden and entry != "__pycache__":
            os.symlink(os.path.join(SITE, entry), site / entry)
    assert not (site / "jax_plugins").exists()  # a CPU jax: the fake plugin below is the only one
    (site / "jax_plugins" / "xla_cuda13").mkdir(parents=True)
    (site / "jax_plugins" / "xla_cuda13" / "__init__.py").write_text("def initialize():\n    pass\n")
    return str(parent / "bin" / "python")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RCGRPO_", "PIP_", "PYTHON")) and k != "VENV"}
    env.update(JAX_PLATFORMS="cpu", PIP_NO_INDEX="1", **extra)
    return env


def test_setup_env_gpu_over_a_venv_python3_offline(tmp_path):
    parent_python = make_parent(tmp_path)
    # the stand-in image lacks exactly the wheel list's modules, and has jax and torch
    probe = "import importlib.util as u; print([m for m in ('ml_collections', 'tensorboardX', 'jax', 'torch') if u.find_spec(m)])"
    out = subprocess.run([parent_python, "-c", probe], capture_output=True, text=True, env=_env(), timeout=60)
    assert out.stdout.split() == ["['jax',", "'torch']"], out.stderr

    folder = tmp_path / "wheels"
    folder.mkdir()
    for name, _ in WHEELS:
        repack_wheel(importlib.metadata.distribution(name), str(folder))
    check = subprocess.run(
        [sys.executable, gpu_env.__file__, "wheels", str(folder)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stderr  # pure, complete, dependencies on the image list, < 64 MiB

    venv = tmp_path / "venv-gpu"
    env = _env(PYTHON=parent_python, VENV=str(venv), RCGRPO_WHEELS=str(folder))
    plan = subprocess.run(["bash", SCRIPT, "--gpu", "--print-plan"], env=env, capture_output=True, text=True)
    assert plan.returncode == 0, plan.stderr
    assert "mode=gpu-reuse" in plan.stdout.splitlines()
    want_pip = f"pip=install -q --no-deps --only-binary=:all: --no-index --find-links {folder} " + " ".join(
        f"{n}=={v}" for n, v in WHEELS
    )
    assert want_pip in plan.stdout.splitlines()

    run = subprocess.run(["bash", SCRIPT, "--gpu"], env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "skipped: CPU host" in run.stdout
    assert f"ok rcgrpo_jax: {os.path.join(REPO, 'rcgrpo_jax')}" in run.stdout
    assert "MISSING" not in run.stdout

    for dist in gpu_env.package_needs():  # setup_env's check imported each, in the overlay's interpreter
        assert f"ok {dist}: import {gpu_env.import_names(dist)[0]}" in run.stdout

    # ... from the right places: the checkout's rcgrpo_jax, the image's jax and torch (this .venv's files,
    # through the parent), the wheels' packages from the overlay's own site-packages.
    mods = ["rcgrpo_jax", "jax", "torch"] + [gpu_env.import_names(n)[0] for n in gpu_env.package_needs()]
    code = "import importlib.util as u, os; " + "; ".join(
        f"print({m!r}, os.path.realpath(u.find_spec({m!r}).origin))" for m in dict.fromkeys(mods)
    )
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, env=_env())
    assert out.returncode == 0, out.stderr[-3000:]
    where = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    overlay_site = os.path.realpath(venv / PY_DIR)
    wheel_mods = {gpu_env.import_names(n)[0] for n, _ in WHEELS}
    for mod, path in where.items():
        if mod == "rcgrpo_jax":
            assert path == os.path.join(REPO, "rcgrpo_jax", "__init__.py")
        elif mod in wheel_mods:
            assert path.startswith(overlay_site + os.sep), (mod, path)
        else:
            assert path.startswith(os.path.realpath(SITE) + os.sep), (mod, path)
    # nothing else went into the overlay: no jax, jaxlib, plugin, torch, numpy; only the wheels' files
    installed = {e for e in os.listdir(venv / PY_DIR) if e != "__pycache__" and not e.startswith("_rcgrpo_")}
    expected = set()
    for name, _ in WHEELS:
        expected |= _top_level(importlib.metadata.distribution(name))
    assert installed == expected and not any(e.split("-")[0] in IMAGE_ONLY for e in installed)

    # warm: stamped (the plan's stamp), so the next run (gpu_check's below) skips pip
    stamp = dict(line.split("=", 1) for line in plan.stdout.splitlines())["stamp"]
    assert open(venv / ".rcgrpo_install_stamp").read().strip() == stamp

    # gpu_check.sh on that box with the wheel folder: the RL update's row (rl/ imports ml_collections,
    # which only the wheel folder brings) measures through the overlay.
    check_env = {k: v for k, v in env.items() if k != "XLA_FLAGS"}
    check_env["GPU_CHECK_OUT"] = str(tmp_path / "check.jsonl")
    check_env["RCGRPO_SKIP_MESH_CHECK"] = (
        "1"  # the multi-GPU stage has its own test (tests/benchmarks/test_mesh_check.py)
    )
    skip = "attention,ragged_decode,packed_attention,prod_decode,decode"
    check = subprocess.run(
        ["bash", os.path.join(REPO, "launch", "gpu_check.sh"), "--tiny", "--skip", skip],
        env=check_env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    rows = {r["bench"]: r for r in map(json.loads, open(tmp_path / "check.jsonl"))}
    assert rows["image_packages"]["venv"] is True  # the stand-in python3 is a venv interpreter...
    assert not any(p.startswith(("ml-collections==", "tensorboardx==")) for p in rows["image_packages"]["packages"])
    assert rows["setup_env"]["ok"] is True and "skipped: CPU host" in rows["setup_env"]["log"]
    rl = rows["rl_step"]
    assert "error" not in rl and rl["finite"] is True and rl["mfu"] > 0 and rl["tok_s"] > 0
    assert rows["done"]["errors"] == 0
