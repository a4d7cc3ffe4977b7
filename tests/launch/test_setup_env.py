"""launch/setup_env.sh: which environment it builds (CPU, GPU install, GPU reuse of a preinstalled CUDA jax)
and the pip calls it makes, checked without installing anything: `--print-plan`, and runs against a fake
venv whose `python` only records its arguments. No network. The GPU reuse mode's real run, offline over a
venv python3, is tests/launch/test_gpu_layout.py."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "launch", "setup_env.sh")
CPU_STEPS = [
    "install -q --upgrade pip",
    "install -q torch==2.13.0",
    f"install -q -e {REPO}[test,serving]",
    "install -q --no-deps bfcl-eval==2026.3.23",
]


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RCGRPO_") and k not in ("VENV", "PYTHON")}
    env.update(extra)
    return env


def _plan(*args, _script: str = SCRIPT, **env) -> dict:
    out = subprocess.run(
        ["bash", _script, *args, "--print-plan"], env=_env(**env), capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    plan: dict = {"pip": [], "version": []}
    for line in out.stdout.splitlines():
        key, _, value = line.partition("=")
        if key in ("pip", "version"):
            plan[key].append(value)
        else:
            plan[key] = value
    return plan


def _executable(path, body: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("#!/usr/bin/env bash\n" + textwrap.dedent(body))
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return str(path)


def _stub_python(tmp_path, versions: None = None) -> str:
    """A PYTHON whose CUDA-jax probe fails (no CUDA jax)."""
    assert versions is None
    return _executable(tmp_path / "stub" / "python", "cat > /dev/null; exit 1\n")


def _cpu_stamp() -> str:
    with open(os.path.join(REPO, "setup.py"), "rb") as a, open(SCRIPT, "rb") as b:
        return hashlib.sha256(a.read() + b.read()).hexdigest()


def test_cpu_plan_is_todays_install():
    plan = _plan()
    assert plan["mode"] == "cpu"
    assert plan["venv"] == os.path.join(REPO, ".venv") and plan["venv_args"] == "" and plan["constraints"] == ""
    assert plan["pip"] == CPU_STEPS
    assert plan["stamp"] == _cpu_stamp()  # same stamp inputs as before: setup.py + this script


def test_gpu_without_a_cuda_jax_installs_the_gpu_extra_and_no_torch(tmp_path):
    for plan in (
        _plan("--gpu", PYTHON=_stub_python(tmp_path, None)),
        _plan(RCGRPO_GPU="1", PYTHON=_stub_python(tmp_path, None)),
    ):
        assert plan["mode"] == "gpu-install"
        assert plan["venv"] == os.path.join(REPO, ".venv-gpu") and plan["venv_args"] == ""
        assert plan["pip"] == [
            "install -q --upgrade pip",
            f"install -q -e {REPO}[gpu,test]",
            "install -q --no-deps bfcl-eval==2026.3.23",
        ]
        assert plan["stamp"] != _cpu_stamp()
    cuda12 = _plan("--gpu", PYTHON=_stub_python(tmp_path, None), RCGRPO_GPU_EXTRA="gpu-cuda12")
    assert f"install -q -e {REPO}[gpu-cuda12,test]" in cuda12["pip"]


def _fake_cuda_python(
    tmp_path, jax_version: str = "0.11.2", plugin: str | None = "xla_cuda13", dists: dict[str, str] | None = None
) -> tuple[str, dict]:
    """A real Python (-S: none of this machine's site-packages) that sees only fake `jax`, `jaxlib` and
    `jax_plugins.<plugin>` packages, and the installed metadata (a dist-info) of each of `dists` (name ->
    version): (its path, the environment that shows them)."""
    import sys

    site = tmp_path / "site"
    for name, version in (dists or {}).items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    for pkg, body in (("jax", f"__version__ = {jax_version!r}\n"), ("jaxlib", f"__version__ = {jax_version!r}\n")):
        (site / pkg).mkdir(parents=True)
        (site / pkg / "__init__.py").write_text(body)
    if plugin:
        (site / "jax_plugins" / plugin).mkdir(parents=True)
        (site / "jax_plugins" / plugin / "__init__.py").write_text("")
    python = _executable(tmp_path / "bin" / "python", f'exec {sys.executable} -S "$@"\n')
    return python, {"PYTHON": python, "PYTHONPATH": str(site)}


# launch/gpu_wheels.txt's lines, in the normal form pip is given (names lower case)
WHEEL_LINES = [
    line.split("#")[0].strip().lower()
    for line in open(os.path.join(REPO, "launch", "gpu_wheels.txt"))
    if line.split("#")[0].strip()
]


def test_gpu_with_a_cuda_jax_reuses_it(tmp_path):
    import sys

    python, env = _fake_cuda_python(tmp_path)
    venv = str(tmp_path / "venv")
    plan = _plan("--gpu", VENV=venv, **env)
    assert plan["mode"] == "gpu-reuse"
    assert plan["venv"] == venv and plan["venv_args"] == "--without-pip"  # an overlay, not a system-site venv
    assert plan["constraints"] == "jax==0.11.2 jaxlib==0.11.2"
    assert plan["parent"] == sys.base_prefix  # the probed interpreter's sys.prefix (-S: no venv applied)
    # that Python has none of the wheel list: all of it, --no-deps, wheels only, nothing else
    assert plan["pip"] == ["install -q --no-deps --only-binary=:all: " + " ".join(WHEEL_LINES)]
    assert not any(w in s for s in plan["pip"] for w in ("torch", "jax", "upgrade", "-e ", "[gpu"))
    assert plan["check"] == f"{venv}/bin/python {REPO}/launch/gpu_env.py check --gpu"
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    offline = _plan("--gpu", VENV=venv, RCGRPO_WHEELS=str(wheels), **env)
    assert offline["pip"] == [
        f"install -q --no-deps --only-binary=:all: --no-index --find-links {wheels} " + " ".join(WHEEL_LINES)
    ]
    assert offline["stamp"] != plan["stamp"]  # another wheel folder: another install
    out = subprocess.run(
        ["bash", SCRIPT, "--gpu", "--print-plan"],
        env=_env(VENV=venv, RCGRPO_WHEELS=str(tmp_path / "nowhere"), **env),
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0 and "RCGRPO_WHEELS" in out.stderr and "not a directory" in out.stderr
    # forced either way
    assert _plan("--gpu", RCGRPO_GPU_REUSE="0", **env)["mode"] == "gpu-install"
    out = subprocess.run(
        ["bash", SCRIPT, "--gpu", "--print-plan"],
        env=_env(PYTHON=_stub_python(tmp_path, None), RCGRPO_GPU_REUSE="1"),
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0 and "no CUDA jax" in out.stderr


@pytest.mark.parametrize(
    "jax_version, plugin, want",
    [
        ("0.11.2", "xla_cuda13", "gpu-reuse"),
        ("0.10.2", "xla_cuda12", "gpu-reuse"),
        ("0.11.2", None, "gpu-install"),  # a CPU jax
        ("0.12.0", "xla_cuda13", "gpu-install"),  # outside the supported range
        ("0.9.2", "xla_cuda12", "gpu-install"),
    ],
)
def test_the_probe_reads_jax_and_its_cuda_plugin(tmp_path, jax_version, plugin, want):
    """The real probe, run by this Python on fake `jax`, `jaxlib` and `jax_plugins` packages (-S: no
    site-packages, so a real jax or CUDA plugin of this machine cannot answer instead)."""
    _, env = _fake_cuda_python(tmp_path, jax_version, plugin)
    plan = _plan("--gpu", **env)
    assert plan["mode"] == want
    if want == "gpu-reuse":
        assert plan["constraints"] == f"jax=={jax_version} jaxlib=={jax_version}"


def _copied_root(tmp_path, pins: list[str]) -> str:
    """This checkout's setup script, gpu_env.py, setup.py and the two lists under tmp_path/root, `pins`
    appended to the wheel list (setup_env.sh reads the files beside itself): a wheel list that pins some of
    the checked libraries, which today's does not."""
    import shutil

    root = tmp_path / "root"
    (root / "launch").mkdir(parents=True)
    shutil.copy(os.path.join(REPO, "setup.py"), root / "setup.py")
    for name in ("setup_env.sh", "gpu_env.py", "gpu_image_packages.txt", "gpu_wheels.txt"):
        shutil.copy(os.path.join(REPO, "launch", name), root / "launch" / name)
    with open(root / "launch" / "gpu_wheels.txt", "a") as f:
        f.write("".join(p + "\n" for p in pins))
    return str(root)


# The image's metadata: flax too old for setup.py, orbax-checkpoint absent; the wheel list pins both
IMAGE = {"jax": "0.11.2", "jaxlib": "0.11.2", "flax": "0.11.3", "optax": "0.2.8", "chex": "0.1.92"}
PINS = ["flax==0.12.12", "orbax-checkpoint==0.12.8"]


@pytest.mark.parametrize("transformers", ["5.17.0", "4.49.0"])
def test_gpu_reuse_checks_the_images_versions_against_setup_py(tmp_path, transformers):
    """The plan's version lines, then a real run over an overlay whose python runs gpu_env.py as the fake
    image's Python (its metadata) and only records pip: the too old and the missing library get the wheel
    list's pin, and a too old one with no pin (transformers 4.49 < setup.py's 4.50) fails the setup."""
    import sysconfig

    root = _copied_root(tmp_path, PINS)
    script = os.path.join(root, "launch", "setup_env.sh")
    python, env = _fake_cuda_python(tmp_path, dists={**IMAGE, "transformers": transformers})
    venv = tmp_path / "venv"
    plan = _plan("--gpu", _script=script, VENV=str(venv), **env)
    assert plan["mode"] == "gpu-reuse"
    refused = transformers == "4.49.0"
    versions = [
        "jax: installed 0.11.2; setup.py needs >=0.10,<0.13; keep",
        "flax: installed 0.11.3; setup.py needs >=0.12; install flax==0.12.12",
        "optax: installed 0.2.8; setup.py needs any version; keep",
        "orbax-checkpoint: not installed; setup.py needs any version; install orbax-checkpoint==0.12.8",
        "chex: installed 0.1.92; setup.py needs any version; keep",
        f"transformers: installed {transformers}; setup.py needs >=4.50; "
        + ("REFUSED: launch/gpu_wheels.txt pins no transformers to install instead" if refused else "keep"),
    ]
    assert plan["version"] == versions
    pip = "install -q --no-deps --only-binary=:all: " + " ".join(WHEEL_LINES + PINS)
    assert plan["pip"] == [pip]

    # the real run: an overlay of the fake image (its parent recorded, its purelib made)
    log = tmp_path / "calls.log"
    _executable(
        venv / "bin" / "python",
        f"""\
        echo "$*" >> {log}
        case "$1" in
          -m) exit 0 ;;  # pip: recorded, not run
          *) [ "${{2:-}}" = check ] && exit 0; exec {python} "$@" ;;
        esac
        """,
    )
    (venv / "rcgrpo-parent.txt").write_text(plan["parent"] + "\n")
    os.makedirs(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    run = lambda: subprocess.run(
        ["bash", script, "--gpu"], env=_env(VENV=str(venv), **env), capture_output=True, text=True, timeout=60
    )
    out = run()
    assert out.stdout.splitlines()[: len(versions)] == versions
    gpu_env = f"{root}/launch/gpu_env.py"
    wheels = f"{root}/launch/gpu_wheels.txt"
    if refused:
        assert out.returncode == 1 and "setup_env.sh: transformers: not what setup.py requires" in out.stderr
        assert _calls(str(log)) == [f"{gpu_env} versions {wheels}"]  # nothing installed, nothing checked
        return
    assert out.returncode == 0, out.stderr
    calls = [f"{gpu_env} versions {wheels}", f"{gpu_env} missing {wheels}", "-m pip --version", f"-m pip {pip}"]
    calls.append(f"{gpu_env} check --gpu")
    assert _calls(str(log)) == calls
    os.remove(log)
    assert run().returncode == 0 and _calls(str(log)) == calls  # stamped, and still read every run


def _fake_venv(tmp_path, system_site: bool) -> tuple[str, str]:
    """A venv whose python records each call's arguments in calls.log (one call per line)."""
    venv = tmp_path / "venv"
    log = tmp_path / "calls.log"
    _executable(venv / "bin" / "python", f'echo "$*" >> {log}\n')
    (venv / "pyvenv.cfg").write_text(f"include-system-site-packages = {'true' if system_site else 'false'}\n")
    return str(venv), str(log)


def _calls(log: str) -> list[str]:
    return open(log).read().splitlines() if os.path.exists(log) else []


def test_cpu_run_makes_the_planned_pip_calls_then_skips_them_when_stamped(tmp_path):
    venv, log = _fake_venv(tmp_path, system_site=False)
    run = lambda: subprocess.run(["bash", SCRIPT], env=_env(VENV=venv), capture_output=True, text=True, timeout=60)
    assert run().returncode == 0
    assert _calls(log) == [f"-m pip {s}" for s in CPU_STEPS]
    assert open(os.path.join(venv, ".rcgrpo_install_stamp")).read().strip() == _cpu_stamp()
    os.remove(log)
    assert run().returncode == 0 and _calls(log) == []  # warm: no pip at all


def test_gpu_reuse_refuses_a_venv_that_is_not_its_overlay(tmp_path):
    """An older .venv-gpu (a --system-site-packages venv, or an overlay of another Python) is not reused."""
    venv, log = _fake_venv(tmp_path, system_site=True)
    _, env = _fake_cuda_python(tmp_path)
    out = subprocess.run(["bash", SCRIPT, "--gpu"], env=_env(VENV=venv, **env), capture_output=True, text=True)
    assert out.returncode != 0 and "is not an overlay" in out.stderr
    assert _calls(log) == []  # nothing installed into it, nothing run by it


def test_gpu_install_ends_with_the_import_check(tmp_path):
    venv, log = _fake_venv(tmp_path, system_site=False)
    env = _env(VENV=venv, PYTHON=_stub_python(tmp_path, None))
    out = subprocess.run(["bash", SCRIPT, "--gpu"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert _calls(log) == [
        "-m pip install -q --upgrade pip",
        f"-m pip install -q -e {REPO}[gpu,test]",
        "-m pip install -q --no-deps bfcl-eval==2026.3.23",
        f"{REPO}/launch/gpu_env.py check --gpu",
    ]


def test_sourcing_ignores_the_callers_arguments(tmp_path):
    """test.sh sources the script with pytest's arguments still set: they must not be read as options."""
    venv, log = _fake_venv(tmp_path, system_site=False)
    with open(os.path.join(venv, ".rcgrpo_install_stamp"), "w") as f:
        f.write(_cpu_stamp() + "\n")
    code = f'set -- --gpu -k "not slow"; source {SCRIPT}; echo "mode=$MODE"; command -v python; echo "$RCGRPO_PYTHON"'
    out = subprocess.run(["bash", "-c", code], env=_env(VENV=venv), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # the venv on PATH, and its interpreter exported for launchers (pipeline.sh: tests/launch/test_pipeline.py)
    assert out.stdout.splitlines() == ["mode=cpu"] + [os.path.join(venv, "bin", "python")] * 2
    assert _calls(log) == []


@pytest.mark.parametrize("script", ["pipeline.sh", "slurm.sbatch"])
def test_gpu_launchers_source_the_gpu_mode(script):
    text = open(os.path.join(REPO, "launch", script)).read()
    assert 'RCGRPO_GPU="${RCGRPO_GPU:-1}" source "$ROOT/launch/setup_env.sh"' in text
    for cpu_script in ("test.sh", "quickstart.sh"):  # the CPU entry points keep the CPU mode
        assert "RCGRPO_GPU" not in open(os.path.join(REPO, "launch", cpu_script)).read()
