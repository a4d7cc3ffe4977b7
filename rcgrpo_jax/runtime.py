"""Start-up facts about the machine a run lands on: is the backend one the preset was sized for, the process
environment a GPU run needs, and where compiled programs are kept between runs.

  apply_backend_env()                                     # an entry point's first act, before JAX starts a backend
  check_workdir(path, flag="--workdir")                   # first: a directory the run can write
  check_backend(config, jax.default_backend(), dry_run)   # before any model is loaded
  enable_compilation_cache(path)                          # before the first compilation

All are called by `rcgrpo_jax.main`; none allocates device memory. `GPU_ENV` and `XLA_GPU_FLAGS` are the one
place the presets' XLA, NCCL and allocator settings are written (`backend_env` says what a process gets).

  compile_totals()   # (XLA compilations, their seconds) in this process so far: a step's delta is its recompiles
"""

from __future__ import annotations

import os
from typing import Any, Mapping, MutableMapping

from rcgrpo_jax.config_fields import ConfigError, InputError, get

# Backends a production preset may train on. The presets are sized for GPUs; a TPU runs the same XLA
# programs (no fused-attention kernel), so it is not refused either. Everything else (CPU, "METAL",
# unknown plugins) is refused unless overridden.
ACCELERATOR_BACKENDS = frozenset({"gpu", "cuda", "rocm", "tpu"})
CPU_PRESETS = frozenset({"tiny"})  # presets sized for a CPU run

# The environment a GPU run of the presets needs, read when JAX starts its backend (XLA, the allocator) or NCCL
# its communicators; a variable the user set keeps the user's value.
GPU_ENV: dict[str, str] = {
    # JAX's allocator takes this fraction of each GPU's HBM (0.75 when unset: 105.75 of an H200's 141 GB). 0.9
    # (126.9 GB) is what `--dry_run`'s memory plan is checked against (limit_gb) and leaves ~14 GB for the CUDA
    # context, cuDNN/Triton workspaces and NCCL buffers outside the allocator.
    "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.9",
    # NCCL's own reason for a failed init or a broken link on stderr, not only XLA's status code.
    "NCCL_DEBUG": "WARN",
}
# Added to XLA_FLAGS (a flag the user's XLA_FLAGS names keeps the user's value). XLA aborts on a flag it does not
# know, so each one is checked against the jaxlib installed (tests/test_runtime.py).
XLA_GPU_FLAGS: tuple[str, ...] = (
    # Overlap FSDP's per-layer all-gathers and reduce-scatters with the layers' compute (off by default in XLA).
    "--xla_gpu_enable_latency_hiding_scheduler=true",
)


def backend_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The value of each variable `GPU_ENV` names, and of XLA_FLAGS, that a process with `environ` (default
    os.environ) gets from `apply_backend_env(environ, force=True)`: the user's value where `environ` sets one, else
    ours; XLA_FLAGS is `environ`'s flags followed by each of `XLA_GPU_FLAGS` whose name they do not set."""
    environ = os.environ if environ is None else environ
    out = {k: environ.get(k) or v for k, v in GPU_ENV.items()}
    flags = environ.get("XLA_FLAGS", "").split()
    named = {f.split("=", 1)[0] for f in flags}
    out["XLA_FLAGS"] = " ".join(flags + [f for f in XLA_GPU_FLAGS if f.split("=", 1)[0] not in named])
    return out


def cuda_jax(environ: Mapping[str, str] | None = None) -> bool:
    """Whether JAX will start a CUDA backend in a process with `environ`: a jax CUDA plugin is installed and
    JAX_PLATFORMS, when set, names cuda or gpu. Reads package metadata only; starts nothing."""
    from importlib import metadata

    environ = os.environ if environ is None else environ
    platforms = environ.get("JAX_PLATFORMS", "")
    if platforms and not {"cuda", "gpu"} & set(platforms.lower().split(",")):
        return False
    names = (d.metadata["Name"] or "" for d in metadata.distributions())
    return any(n.lower().replace("_", "-").startswith(("jax-cuda12-plugin", "jax-cuda13-plugin")) for n in names)


def apply_backend_env(environ: MutableMapping[str, str] | None = None, *, force: bool = False) -> dict[str, Any]:
    """Sets `backend_env(environ)` in `environ` (default os.environ) on a CUDA jax (`cuda_jax`), or always with
    `force`; returns {"applied": bool, "env": the settings}. Call it first in a command's entry point, before JAX
    starts a backend (later it changes nothing), and never inside a caller's process (tests, notebooks): later
    subprocesses inherit os.environ, and XLA_FLAGS is part of JAX's compilation-cache key."""
    environ = os.environ if environ is None else environ
    settings = backend_env(environ)
    applied = force or cuda_jax(environ)
    if applied:
        environ.update(settings)
    return {"applied": applied, "env": settings}


def check_workdir(path: str, *, flag: str = "--workdir") -> str:
    """Makes sure the run can create and write `path`; returns its absolute path. Creates nothing that stays:
    an existing directory gets a temporary file, a missing one's nearest existing parent a temporary
    directory, both removed at once. Anything else (a file, a read-only mount, a pseudo file system such as
    /proc) raises `InputError` whose one line names `flag`, the path and what is wrong."""
    import tempfile

    path = os.path.abspath(os.path.expanduser(path))
    if os.path.exists(path) and not os.path.isdir(path):
        raise InputError(f"{flag}: {path} exists and is not a directory")
    parent = path
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise InputError(f"{flag}: cannot create {path}: {parent} is not a directory")
    try:
        if parent == path:
            with tempfile.NamedTemporaryFile(dir=path, prefix=".write_check_"):
                pass
        else:
            os.rmdir(tempfile.mkdtemp(dir=parent, prefix=".write_check_"))
    except OSError as e:
        what = f"{path} is not writable" if parent == path else f"cannot create {path} in {parent}"
        raise InputError(f"{flag}: {what}: {e.strerror or e}") from None
    return path


def check_backend(config: Any, backend: str, dry_run: bool) -> None:
    """Refuses a production preset on a backend without an accelerator.

    Passes when the preset is a CPU preset (`tiny`), when `backend` is an accelerator (gpu/cuda/rocm/tpu),
    when `dry_run` (a dry run compiles on abstract weights and is meant for CPUs), or when
    `config.runtime.allow_cpu` is true. Otherwise raises `ConfigError('runtime.allow_cpu', ...)`: a 7B
    preset on CPU JAX would only crawl or run out of host memory hours later, and the usual cause is a
    CPU-only jax wheel on a GPU machine, which the message names.
    """
    preset = get(config, "preset", None)
    if preset is None or preset in CPU_PRESETS:
        return
    if str(backend).lower() in ACCELERATOR_BACKENDS or dry_run:
        return
    if bool(get(config, "runtime.allow_cpu", False)):
        return
    raise ConfigError(
        "runtime.allow_cpu",
        f"preset {preset!r} is sized for GPUs but JAX's backend is {backend!r}. On a GPU machine this "
        "usually means a CPU-only jax: install the CUDA build (`bash launch/setup_env.sh --gpu`, or "
        "`pip install -e .[gpu]`) and check `python -c 'import jax; print(jax.devices())'`. To size the "
        "run without a GPU use --dry_run; to run it on this backend anyway set "
        "--config.runtime.allow_cpu=True.",
    )


def enable_compilation_cache(
    path: str | os.PathLike,
    *,
    min_compile_time_s: float = 1.0,
    min_entry_size_bytes: int = 0,
) -> str:
    """Turns on JAX's persistent compilation cache in `path` for this process. JAX creates `path` at this
    process's first compilation, so a run that stops at its config check (before compiling) leaves none.

    A program whose compilation took at least `min_compile_time_s` seconds (and whose serialised
    executable has at least `min_entry_size_bytes` bytes) is written there, and a later process
    compiling the same program on the same backend and jax version reads it back instead of
    recompiling. The 1 s default keeps the many sub-second compilations of CPU tests and tiny runs
    from paying a disk write each, while a 7B run's ~90 programs of many seconds each are all kept.

    When this process already initialised a cache in another directory, that cache is reset so the
    new directory takes effect. Returns the absolute path. The cache is trusted code: keep it in a
    directory only you can write (the run's workdir).
    """
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    path = os.path.abspath(os.fspath(path))
    if jax.config.jax_compilation_cache_dir not in (None, path):
        compilation_cache.reset_cache()
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_time_s))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", int(min_entry_size_bytes))
    return path


_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"  # jax._src.dispatch.BACKEND_COMPILE_EVENT
_compiles = [0, 0.0]  # [count, seconds] since the listener was registered
_listening = False


def _on_duration(event: str, seconds: float, **_: Any) -> None:
    if event == _COMPILE_EVENT:
        _compiles[0] += 1
        _compiles[1] += float(seconds)


def compile_totals() -> tuple[int, float]:
    """(XLA backend compilations, their seconds) in this process since the first call; a persistent-cache
    hit compiles nothing and counts nothing. The first call registers a `jax.monitoring` listener (once per
    process), so call it before the compilations to be counted: the difference of two calls is what ran
    between them."""
    global _listening
    if not _listening:
        import jax

        jax.monitoring.register_event_duration_secs_listener(_on_duration)
        _listening = True
    return _compiles[0], _compiles[1]
