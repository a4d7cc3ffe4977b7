"""Shared benchmark helpers: JSON-line output, warm-up-excluded medians, the machine's measured peaks,
and the FLOP/byte counts the utilisation figures divide by.

Every benchmark prints one JSON object per line (a "row"); a row that failed carries an "error" field
instead of figures, so one broken measurement never hides the others.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import sys
import time
import traceback
from typing import Any, Callable, Iterator, Mapping

from rcgrpo_jax import sharding


def emit(row: Mapping[str, Any], stream=None) -> dict[str, Any]:
    """Print `row` as one JSON line (floats to 4 significant digits, non-finite ones as null); return it."""
    out = {k: _round(v) for k, v in row.items()}
    print(json.dumps(out), file=stream or sys.stdout, flush=True)
    return out


def _round(v: Any) -> Any:
    if isinstance(v, float):
        return float(f"{v:.4g}") if math.isfinite(v) else None  # NaN/inf are not JSON
    return v


DEVICES_HELP = (
    "XLA CPU devices our side runs on, as a data-parallel mesh (rows split, weights copied; default 1). "
    "XLA's CPU runtime runs one program's ops mostly one after another, so a second device's program uses "
    "the second core; `python -m` sets the host's device count to this"
)


def argv_devices(argv: list[str] | None = None) -> int:
    """The `--devices N` of a benchmark's command line (1 when absent), read before jax is imported."""
    import argparse

    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--devices", type=int, default=1)
    ns, _ = ap.parse_known_args(sys.argv[1:] if argv is None else argv)
    return ns.devices


def as_command(argv: list[str] | None = None) -> None:
    """Environment of a benchmark run as a command (`python -m`, before jax is imported; never inside a
    caller's process, whose later subprocesses inherit os.environ): one real CPU device, since the test
    suite's 8 fake devices would split the host's cores between them; `--devices N` (N > 1) in the
    command line makes it N host devices, for `data_mesh`."""
    import os

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "force_host_platform_device_count" not in f]
    devices = argv_devices(argv)
    if devices > 1:
        flags.append(f"--xla_force_host_platform_device_count={devices}")
    os.environ["XLA_FLAGS"] = " ".join(flags)


def data_mesh(devices: int):
    """None for one device (the benchmark's single-device path); else a ('data',) mesh over the first
    `devices` XLA devices: each takes an equal share of a batch's rows and a copy of the weights, and XLA
    runs the devices' programs at the same time."""
    if devices < 1:
        raise ValueError(f"--devices must be >= 1, got {devices}")
    if devices == 1:
        return None
    import jax

    have = jax.devices()
    if len(have) < devices:
        raise ValueError(
            f"--devices {devices}: only {len(have)} XLA device(s) exist; run the benchmark as `python -m ...` (which "
            f"sets the host's device count from --devices) or set XLA_FLAGS=--xla_force_host_platform_device_count="
            f"{devices}"
        )
    return sharding.make_mesh({"data": devices}, have[:devices])


@contextlib.contextmanager
def guarded(row: dict[str, Any], stream=None) -> Iterator[dict[str, Any]]:
    """Fill `row` inside the block; it is emitted on exit, with `error` set if the block raised.
    The exception is swallowed so the next measurement still runs (its traceback goes to stderr)."""
    t0 = time.perf_counter()
    try:
        yield row
    except Exception as e:  # noqa: BLE001 - a benchmark row must report, not abort the run
        traceback.print_exc(file=sys.stderr)
        row["error"] = f"{type(e).__name__}: {e}"[:500]
    row.setdefault("phase_s", time.perf_counter() - t0)
    emit(row, stream)


def time_call(fn: Callable[[], Any], *, repeats: int, warmup: int = 1) -> tuple[float, list[float]]:
    """(median seconds, all timings) of `fn()` over `repeats` calls after `warmup` untimed calls.
    `fn` must block until its work is done (e.g. end in `jax.block_until_ready`)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(max(repeats, 1)):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), times


def load_average() -> float | None:
    """1-minute load average (the machine may be shared; figures are only as quiet as this)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def machine_info() -> dict[str, Any]:
    """Backend, device kind and host facts to stamp on every run."""
    import jax

    dev = jax.devices()[0]
    return {
        "jax_backend": jax.default_backend(),
        "device_kind": dev.device_kind,
        "devices": jax.device_count(),
        "cpus": os.cpu_count(),
        "load_avg_1m": load_average(),
        "jax_version": jax.__version__,
    }


def matmul_peak(n: int = 2048, dtype: str = "float32", repeats: int = 5, device=None) -> float:
    """Measured FLOP/s of one large square jnp matmul (2 n^3 flops), median of `repeats` after warm-up.
    The practical peak our kernels compete with on this machine (XLA's own dot, default precision)."""
    import jax
    import jax.numpy as jnp

    device = device or jax.devices()[0]
    a = jax.device_put(jax.random.normal(jax.random.key(0), (n, n), dtype), device)
    b = jax.device_put(jax.random.normal(jax.random.key(1), (n, n), dtype), device)
    mm = jax.jit(jnp.matmul)
    t, _ = time_call(lambda: mm(a, b).block_until_ready(), repeats=repeats)
    return 2.0 * n**3 / t


def param_count(params) -> int:
    import jax

    return sum(int(x.size) for x in jax.tree.leaves(params))


def train_flops(n_params: int, config, batch: int, seq: int) -> float:
    """Model FLOPs of one training step (forward + backward), PaLM's MFU convention:
    6 * params * tokens for the matmuls, plus 12 * layers * heads * head_dim * seq per token for the
    attention scores and values (causal masking not discounted; rematerialisation not counted)."""
    tokens = batch * seq
    attn = 12 * config.num_layers * config.num_heads * config.head_dim * seq * tokens
    return 6.0 * n_params * tokens + attn


def decode_step_bytes(param_bytes: int, config, batch: int, context: int, kv_bytes: int = 2) -> float:
    """HBM bytes one decode step must read: every weight once plus the live KV cache
    (2 (k, v) * layers * kv_heads * head_dim * context tokens per row * batch rows)."""
    kv = 2 * config.num_layers * config.num_kv_heads * config.head_dim * context * batch * kv_bytes
    return float(param_bytes + kv)


def op_time_breakdown(fn: Callable[[], Any], top: int = 8) -> dict[str, float]:
    """Milliseconds per XLA op family (fusion names with their numeric suffix dropped; YNNPACK dots
    grouped as "ynn(dot)", layout copies as "copy/transpose") over one profiled call of `fn`, summed
    over the compute threads, largest first. Where the time goes, for the benchmark to report."""
    import collections
    import glob
    import re
    import tempfile

    import jax

    with tempfile.TemporaryDirectory() as d:
        jax.profiler.start_trace(d)
        try:
            fn()
        finally:
            jax.profiler.stop_trace()
        path = sorted(glob.glob(os.path.join(d, "**", "*.xplane.pb"), recursive=True))[-1]
        data = jax.profiler.ProfileData.from_file(path)
        totals: collections.Counter = collections.Counter()
        for plane in data.planes:
            for line in plane.lines:
                if "XLAEigen" not in line.name and "Stream" not in line.name:
                    continue  # host threads that only wait
                for ev in line.events:
                    if ev.name.startswith("ThunkExecutor") or "Await" in ev.name:
                        continue
                    name = re.sub(r"\.\d+$", "", ev.name)
                    name = (
                        "ynn(dot)"
                        if name.startswith("ynn")
                        else "copy/transpose"
                        if name.startswith(("copy", "transpose"))
                        else name
                    )
                    totals[name] += ev.duration_ns / 1e6
    return {k: round(v, 1) for k, v in totals.most_common(top)}


def constant_optim(lr: float, clip_norm: float = 1.0):
    """The project's optimizer section (`config_lib.common.optim`: AdamW's betas, eps, no weight decay) at a
    constant learning rate (no warmup, no decay): what a benchmark's step, and a peer's AdamW, run with."""
    from rcgrpo_jax.config_lib import common as config_common

    c = config_common.optim(lr)
    c.warmup_ratio, c.end_lr_ratio, c.weight_decay, c.clip_norm = 0.0, 1.0, 0.0, clip_norm
    return c


def rollout_inputs(estimator: str, rows: int, config=None) -> dict:
    """Neutral per-rollout loss inputs for `rows` rollouts of `estimator`: ones of each shape its
    `advantages.per_rollout_shapes` declares (AWPO's clip scale 1: the plain clip), {} for one that declares none."""
    import numpy as np

    from rcgrpo_jax.rl import advantages

    shapes = advantages.per_rollout_shapes(estimator, config)
    return {k: np.ones((rows, *s.shape), s.dtype) for k, s in shapes.items()}
