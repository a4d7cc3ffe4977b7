"""rcgrpo_jax.runtime: the start-up backend check and the persistent compilation cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import ml_collections
import pytest

from rcgrpo_jax import runtime
from rcgrpo_jax.config_fields import ConfigError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _config(preset: str, allow_cpu: bool | None = None) -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict({"preset": preset, "stage": "rc_grpo"})
    if allow_cpu is not None:
        c.runtime = ml_collections.ConfigDict({"allow_cpu": allow_cpu})
    return c


@pytest.mark.parametrize("preset", ["qwen2_5_7b", "llama3_1_8b"])
def test_production_preset_on_cpu_is_refused_with_the_fix(preset):
    with pytest.raises(ConfigError) as e:
        runtime.check_backend(_config(preset), "cpu", dry_run=False)
    assert e.value.field == "runtime.allow_cpu"
    msg = str(e.value)
    assert msg.startswith("config.runtime.allow_cpu:")
    for needle in (preset, "'cpu'", "--dry_run", "--config.runtime.allow_cpu=True", "setup_env.sh --gpu"):
        assert needle in msg, needle
    # the field explicitly off is the same as absent
    with pytest.raises(ConfigError):
        runtime.check_backend(_config(preset, allow_cpu=False), "cpu", dry_run=False)


@pytest.mark.parametrize(
    "preset, backend, dry_run, allow_cpu",
    [
        ("tiny", "cpu", False, None),  # CPU preset
        ("qwen2_5_7b", "gpu", False, None),  # the backend the preset is sized for
        ("qwen2_5_7b", "GPU", False, None),
        ("llama3_1_8b", "cuda", False, None),
        ("llama3_1_8b", "tpu", False, None),
        ("qwen2_5_7b", "cpu", True, None),  # dry runs are meant for CPUs
        ("qwen2_5_7b", "cpu", False, True),  # explicit override
    ],
)
def test_allowed_combinations_pass(preset, backend, dry_run, allow_cpu):
    assert runtime.check_backend(_config(preset, allow_cpu), backend, dry_run) is None


def test_unknown_backend_is_refused():
    with pytest.raises(ConfigError, match="'METAL'"):
        runtime.check_backend(_config("qwen2_5_7b"), "METAL", dry_run=False)


def _run(code: str, cache: str) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": REPO}
    env.pop("XLA_FLAGS", None)  # one device: the programs are the same in both processes either way
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), cache], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


_PROGRAM = """
    import json, sys
    import jax, jax.numpy as jnp
    from rcgrpo_jax import runtime

    hits = []
    jax.monitoring.register_event_listener(lambda name, **kw: hits.append(name))
    path = runtime.enable_compilation_cache(sys.argv[1], min_compile_time_s=0.0)
    f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum(axis=0) * 3.0)
    y = f(jnp.arange(12.0).reshape(3, 4))
    print(json.dumps({
        "path": path,
        "dir": jax.config.jax_compilation_cache_dir,
        "min_time": jax.config.jax_persistent_cache_min_compile_time_secs,
        "hits": hits.count("/jax/compilation_cache/cache_hits"),
        "value": float(y.sum()),
    }))
"""


def test_compilation_cache_is_written_and_read_by_a_later_process(tmp_path):
    cache = str(tmp_path / "xla_cache" / "nested")  # created when missing
    first = _run(_PROGRAM, cache)
    assert first["path"] == first["dir"] == os.path.abspath(cache)
    assert first["min_time"] == 0.0
    assert first["hits"] == 0
    entries = os.listdir(cache)
    assert entries, "no cache entry written"
    second = _run(_PROGRAM, cache)
    assert second["hits"] >= 1  # the later process read the program back instead of compiling it
    assert second["value"] == first["value"]
    assert sorted(os.listdir(cache)) == sorted(entries)  # nothing new to write


def test_compilation_cache_moves_to_a_new_directory_in_the_same_process(tmp_path):
    code = """
        import json, os, sys
        import jax, jax.numpy as jnp
        from rcgrpo_jax import runtime

        a, b = sys.argv[1] + "/a", sys.argv[1] + "/b"
        runtime.enable_compilation_cache(a, min_compile_time_s=0.0)
        jax.jit(lambda x: x * 2 + 1)(jnp.ones(3)).block_until_ready()
        runtime.enable_compilation_cache(b, min_compile_time_s=0.0)
        jax.jit(lambda x: x * 5 - 1)(jnp.ones(3)).block_until_ready()
        print(json.dumps({"a": len(os.listdir(a)), "b": len(os.listdir(b))}))
    """
    got = _run(code, str(tmp_path))
    assert got["a"] >= 1 and got["b"] >= 1


def test_compile_totals_count_a_new_program_once():
    import jax
    import jax.numpy as jnp

    runtime.compile_totals()  # registers the listener before the compilations below
    x = jnp.ones((13, 29), jnp.float32)
    x2 = x + 1.0
    n0, s0 = runtime.compile_totals()
    f = jax.jit(lambda v: jnp.tanh(v * 1.2345) + 7.0)
    f(x).block_until_ready()
    n1, s1 = runtime.compile_totals()
    assert n1 >= n0 + 1 and s1 > s0  # the new program compiled
    f(x).block_until_ready()
    f(x2).block_until_ready()  # same shape and dtype: jit's cache, nothing compiles
    assert runtime.compile_totals() == (n1, s1)


def test_an_unusable_workdir_is_one_line_naming_the_flag(tmp_path, capsys):
    from rcgrpo_jax import main

    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    cases = {
        str(a_file): f"error: --workdir: {a_file} exists and is not a directory",
        str(a_file / "sub"): f"error: --workdir: cannot create {a_file / 'sub'}: {a_file} is not a directory",
        "/proc/rcgrpo_x": "error: --workdir: cannot create /proc/rcgrpo_x in /proc: ",
    }
    for workdir, message in cases.items():
        code = main.cli(["main", "--config=configs/sft.py:tiny", f"--workdir={workdir}"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == main.USAGE_EXIT and len(err) == 1 and err[0].startswith(message), err


def test_a_read_only_workdir_is_refused(tmp_path, monkeypatch):
    """A read-only mount refuses the probe file with EROFS (simulated: root ignores permission bits here)."""
    import errno
    import tempfile

    from rcgrpo_jax.config_fields import InputError

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", read_only)
    with pytest.raises(InputError) as e:
        runtime.check_workdir(str(tmp_path))
    assert str(e.value) == f"--workdir: {tmp_path} is not writable: Read-only file system"


def test_a_usable_workdir_is_left_as_it_was(tmp_path):
    fresh = tmp_path / "new" / "run"
    assert runtime.check_workdir(str(fresh)) == str(fresh) and not (tmp_path / "new").exists()
    assert runtime.check_workdir(str(tmp_path)) == str(tmp_path) and os.listdir(tmp_path) == []


# -- the presets' GPU environment (runtime.GPU_ENV, XLA_GPU_FLAGS) -------------------------------------------


def test_backend_env_keeps_what_the_user_set():
    fresh = runtime.backend_env({})
    assert fresh == {**runtime.GPU_ENV, "XLA_FLAGS": " ".join(runtime.XLA_GPU_FLAGS)}
    assert fresh["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.9" and fresh["NCCL_DEBUG"] == "WARN"
    flag = runtime.XLA_GPU_FLAGS[0].split("=")[0]
    user = {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.8", "XLA_FLAGS": f"--xla_dump_to=/tmp/d {flag}=false"}
    got = runtime.backend_env(user)
    assert got["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.8" and got["NCCL_DEBUG"] == "WARN"
    assert got["XLA_FLAGS"].split() == ["--xla_dump_to=/tmp/d", f"{flag}=false", *runtime.XLA_GPU_FLAGS[1:]]


def test_apply_backend_env_sets_them_only_on_a_cuda_jax():
    environ = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    assert not runtime.cuda_jax(environ)  # CPU forced (and this venv has no CUDA plugin)
    before = dict(environ)
    out = runtime.apply_backend_env(environ)
    assert out == {"applied": False, "env": runtime.backend_env(before)} and environ == before
    out = runtime.apply_backend_env(environ, force=True)
    assert out["applied"] and environ == {**before, **runtime.backend_env(before)}
    assert environ["XLA_FLAGS"].startswith("--xla_force_host_platform_device_count=8 --xla_gpu_")


def _backend_start(xla_flags: str, code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": REPO, "XLA_FLAGS": xla_flags}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=REPO)


def test_xla_knows_every_flag_and_the_entry_points_set_them_in_time():
    """XLA aborts on a flag it does not know (the GPU flags are parsed on a CPU backend too), so this jaxlib
    takes XLA_GPU_FLAGS; and importing an entry point starts no backend, so the settings its command sets
    before JAX starts are read."""
    start = "import jax, jax.numpy as jnp; print(int(jax.jit(lambda x: x + 1)(jnp.int32(1))))"
    ok = _backend_start(runtime.backend_env({})["XLA_FLAGS"], start)
    assert ok.returncode == 0 and ok.stdout.split() == ["2"], ok.stderr[-2000:]
    imports = (
        "import rcgrpo_jax.main, rcgrpo_jax.train.exploration, benchmarks.mesh_check; print('imported', flush=True); "
    )
    bad = _backend_start("--xla_gpu_no_such_flag_anywhere=true", imports + start)
    assert bad.stdout.split() == ["imported"] and bad.returncode != 0
    assert "Unknown flag" in bad.stderr and "xla_gpu_no_such_flag_anywhere" in bad.stderr
