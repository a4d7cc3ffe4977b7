"""Start-up facts about the machine a run lands on: is the backend one the preset was sized for, and where
compiled programs are kept between runs.

  check_workdir(path, flag="--workdir")                   # first: a directory the run can write
  check_backend(config, jax.default_backend(), dry_run)   # before any model is loaded
  enable_compilation_cache(path)                          # before the first compilation

All are called by `rcgrpo_jax.main`; none allocates device memory.

  compile_totals()   # (XLA compilations, their seconds) in this process so far: a step's delta is its recompiles
"""

from __future__ import annotations

import os
from typing import Any

from rcgrpo_jax.config_fields import ConfigError, InputError, get

# Backends a production preset may train on. The presets are sized for GPUs; a TPU runs the same XLA
# programs (no fused-attention kernel), so it is not refused either. Everything else (CPU, "METAL",
# unknown plugins) is refused unless overridden.
ACCELERATOR_BACKENDS = frozenset({"gpu", "cuda", "rocm", "tpu"})
CPU_PRESETS = frozenset({"tiny"})  # presets sized for a CPU run


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
    """Turns on JAX's persistent compilation cache in `path` (created if missing) for this process.

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
    os.makedirs(path, exist_ok=True)
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
