"""The launcher: one entry point for every stage, driven by an ml_collections config file.

  python -m rcgrpo_jax.main --config=configs/sft.py:tiny --workdir=/tmp/sft [--config.train.max_steps=10]
  python -m rcgrpo_jax.main --config=configs/grpo.py:tiny --config.rl.advantage.name=rloo --workdir=/tmp/rloo
  python -m rcgrpo_jax.main --config=configs/sft.py:qwen2_5_7b --dry_run     # will it fit? (no weights)

The config is locked (a misspelt override fails) and dispatched by `config.trainer` through
`rcgrpo_jax.stages.TRAINERS`; the stage's run (or dry run) validates it first of all, once (the error names the
field), before any model is loaded or anything is written to --workdir.
A run resumes from the latest readable checkpoint in --workdir. A bad config or flag ends the process with one
line on stderr (`error: config.<field>: ...`) and exit code 2; `--verbose` keeps the traceback. SIGTERM or
SIGINT saves a checkpoint after the current step and exits with PREEMPTED_EXIT (75); the summary line's
`reason` says which signal.

A registry entry of the user's own module is selected as `module:entry`
(`--config.rl.advantage.name=my_module:my_estimator`). The launcher imports every module named so in a
`--config.<field>=module:entry` override before it builds the config, so the entry is registered when the
config's selection sections are made (`registry.selection`): its options get their subsection and can be set
on the same command line (`--config.rl.advantage.my_estimator.alpha=0.3`).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import sys
import threading
from typing import Any, Sequence

from absl import app, flags, logging
from ml_collections import config_flags

from rcgrpo_jax import config_checks, config_fields, runtime, stages
from rcgrpo_jax.config_fields import ConfigError, InputError

# Environment variables that mean "this process is one of several": then jax.distributed is initialised.
_MULTIPROCESS_ENV = ("JAX_COORDINATOR_ADDRESS", "COORDINATOR_ADDRESS")
USAGE_EXIT = 2
# EX_TEMPFAIL (sysexits.h): the run was stopped by SIGTERM or SIGINT after saving a checkpoint (the summary's
# reason is 'sigterm' or 'sigint'); rerunning the same command resumes it. launch/pipeline.sh and
# launch/slurm.sbatch read it: the stage is rerun (requeued), never followed by the next stage.
PREEMPTED_EXIT = 75
PREEMPTED_REASONS = ("sigterm", "sigint")
# The run stopped itself after a save because a service it depends on failed past its budget (the summary's
# reason names it, e.g. 'judge_failures'; its `message` is printed); rerun once the service is back.
STOPPED_EXIT = 3


def define_flags(fv: flags.FlagValues, sys_argv: Sequence[str] | None = None) -> None:
    """The launcher's flags on `fv`; `sys_argv` (default sys.argv) is where ml_collections finds overrides."""
    config_flags.DEFINE_config_file(
        "config",
        None,
        "Stage config file and preset: configs/<stage>.py:<preset>.",
        lock_config=True,
        flag_values=fv,
        sys_argv=None if sys_argv is None else list(sys_argv),
    )
    flags.DEFINE_string("workdir", None, "Run directory: checkpoints, metrics, exported model.", flag_values=fv)
    flags.DEFINE_bool(
        "dry_run",
        False,
        "Compile the update step on abstract parameters and print the per-device memory from XLA's memory "
        "analysis; allocates no model.",
        flag_values=fv,
    )
    flags.DEFINE_bool("verbose", False, "Show the full traceback of configuration errors.", flag_values=fv)


define_flags(flags.FLAGS)


def wants_distributed(mode: str, environ=os.environ) -> bool:
    """`multihost.initialize`: always / never / auto (a coordinator address is set, or SLURM runs more than
    one task, or Open MPI more than one rank)."""
    if mode in ("always", "never"):
        return mode == "always"
    if any(environ.get(k) for k in _MULTIPROCESS_ENV):
        return True
    for k in ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"):
        if int(environ.get(k, "1") or 1) > 1:
            return True
    return False


def launch(config, workdir: str | None, *, dry_run: bool = False) -> dict[str, Any]:
    """Runs `config`'s stage (or its dry run), which checks the config first of all (once: the trainer's own
    check, before any model is loaded or anything is written to `workdir`). Returns what the process prints."""
    if not dry_run:
        if not workdir:
            raise app.UsageError("--workdir is required")
        runtime.check_workdir(workdir, flag="--workdir")  # before anything starts
    import jax

    if wants_distributed(config.multihost.initialize):
        jax.distributed.initialize()  # reads SLURM / coordinator settings from the environment
    logging.info(
        "process %d of %d, %d devices (%d local)",
        jax.process_index(),
        jax.process_count(),
        jax.device_count(),
        jax.local_device_count(),
    )

    kind = stages.kind_of(config)
    if dry_run:
        if kind.dry_run is None:
            raise config_fields.ConfigError("trainer", f"no dry run for trainer kind {config.trainer!r}")
        report = kind.dry_run(config)
        config_checks.check_memory("memory.device_bytes", int(report["peak_gb"] * 1e9), int(report["budget_gb"] * 1e9))
        return {"stage": config.stage, "preset": config.get("preset"), **report}
    runtime.check_backend(config, jax.default_backend(), dry_run)  # a 7B preset on CPU JAX stops here
    cache = config.runtime.compile_cache_dir or os.environ.get("JAX_COMPILATION_CACHE_DIR")
    runtime.enable_compilation_cache(cache or os.path.join(workdir, "xla_cache"))
    summary = kind.run(config, workdir)
    logging.info("finished: %s", summary)
    return {k: v for k, v in summary.items() if k != "metrics"}


_USER_ENTRY = re.compile(r"^--config\.([\w.]+)=([A-Za-z_][\w.]*):([A-Za-z_]\w*)$")


def import_user_modules(argv: Sequence[str]) -> list[str]:
    """Imports the module of every `--config.<field>=module:entry` override in argv (module docstring);
    returns their names. A module that does not import raises ConfigError naming the field."""
    names = []
    for arg in argv[1:]:
        m = _USER_ENTRY.match(arg)
        if m is None:
            continue
        field, module, value = m.group(1), m.group(2), f"{m.group(2)}:{m.group(3)}"
        try:
            importlib.import_module(module)
        except ImportError as e:  # the start-up check's words (`registry.check_entry`)
            raise ConfigError(field, f"cannot import the module of {value!r}: {e}") from e
        names.append(module)
    return names


_SUGGESTION = re.compile(r'Did you mean "([^"]+)"')


def unknown_field_line(e: BaseException, argv: Sequence[str]) -> str | None:
    """One line for an override of a field the config does not have (ml_collections raises a KeyError,
    wrapped, whose text is the repr of the key and a suggestion): `error: config.<path>: no such field. Did
    you mean "<name>"?`, the path being the override's up to the unknown name. None for any other error."""
    err: BaseException | None = e
    while err is not None and not isinstance(err, KeyError):
        err = err.__cause__ or err.__context__
    if err is None or not err.args:
        return None
    text = str(err.args[0])
    key = text.splitlines()[0].strip().strip("'\"")
    suggestion = _SUGGESTION.search(text)
    for arg in argv[1:]:
        m = re.match(r"^--config\.([\w.]+)=", arg)
        parts = m.group(1).split(".") if m else []
        if key in parts:
            field = ".".join(parts[: parts.index(key) + 1])
            hint = f' Did you mean "{suggestion.group(1)}"?' if suggestion else ""
            return f"error: config.{field}: no such field.{hint}"
    return None


def _error_line(e: BaseException) -> str:
    """One line for the user: the message, or for a chained report (a config file that raised while the
    flag was parsed) its first line and its last (the original error)."""
    text = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    if not lines:
        return f"error: {type(e).__name__}"
    if len(lines) == 1:
        return f"error: {lines[0]}"
    return f"error: {lines[0].rstrip(':')}: {lines[-1]}"


def parse_config(argv: Sequence[str]):
    """The config that `argv` (argv[0] the program name) selects, with its overrides applied (raises on a
    bad flag or config file, as the command line does)."""
    import_user_modules(argv)
    fv = flags.FlagValues()
    define_flags(fv, sys_argv=argv)
    fv(list(argv))
    return fv["config"].value


def cli(argv: Sequence[str], *, fv: flags.FlagValues | None = None) -> int:
    """The command line in-process: parse `argv` (argv[0] is the program name), launch, print the summary
    as the last line. Returns the exit code: 0, USAGE_EXIT (2) for a bad flag, config or input,
    STOPPED_EXIT (3) when the run stopped itself after a save (a failure budget, e.g. the judge's),
    PREEMPTED_EXIT (75) when SIGTERM or SIGINT stopped the run (inside the step loop after a save; before
    or after it, e.g. while the model loads, with nothing new to save)."""

    if fv is None:
        fv = flags.FlagValues()
        define_flags(fv, sys_argv=argv)
    verbose = "--verbose" in argv
    previous = _raise_on_sigterm()
    try:
        import_user_modules(argv)  # so their entries' options exist when the config file is loaded
        try:
            fv(list(argv))  # loads the config file and applies the overrides: every error here is the user's
        except Exception as e:
            raise _UsageError(unknown_field_line(e, argv) or _error_line(e)) from e
        config = fv["config"].value
        if config is None:
            raise app.UsageError("--config=configs/<stage>.py:<preset> is required")
        out = launch(config, fv["workdir"].value, dry_run=fv["dry_run"].value)
    except (_UsageError, app.UsageError, ConfigError, InputError) as e:
        if verbose:
            raise
        print(str(e) if isinstance(e, _UsageError) else _error_line(e), file=sys.stderr)
        return USAGE_EXIT
    except (KeyboardInterrupt, _Terminated) as e:
        if verbose:
            raise
        name = "SIGTERM" if isinstance(e, _Terminated) else "SIGINT"
        print(
            f"stopped by {name} outside the step loop: nothing new saved; rerun the same command to resume from "
            f"the latest checkpoint (exit {PREEMPTED_EXIT})",
            file=sys.stderr,
        )
        return PREEMPTED_EXIT
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    import jax

    if jax.process_index() == 0:
        print(json.dumps(out))
    if out.get("reason") in PREEMPTED_REASONS:
        print(
            f"stopped by {out['reason'].upper()} after step {out.get('step')}: checkpoint saved; rerun the same "
            f"command to resume (exit {PREEMPTED_EXIT})",
            file=sys.stderr,
        )
        return PREEMPTED_EXIT
    if out.get("message"):
        print(f"error: {out['message']}", file=sys.stderr)
        return STOPPED_EXIT
    return 0


class _Terminated(BaseException):
    """SIGTERM outside the step loop (the loop's own handler turns it into a save, train/checkpoint.py)."""


def _raise_on_sigterm():
    """Makes SIGTERM raise `_Terminated` (as SIGINT raises KeyboardInterrupt); returns the previous handler, or
    None off the main thread, where handlers cannot be set."""

    def handler(signum, frame):  # noqa: ARG001
        raise _Terminated

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, handler)


class _UsageError(Exception):
    """A flag or config-file error found while parsing the command line (a misspelt override, a bad preset)."""


def main() -> None:
    runtime.apply_backend_env()  # the presets' XLA, NCCL and allocator settings, before JAX starts a backend
    sys.exit(cli(sys.argv, fv=flags.FLAGS))


if __name__ == "__main__":
    main()
