"""Per-device memory figures, for the dry runs (`train.dry_run`) and the trainers' start-up fit checks: the bytes
of a tree under its shardings, of a compiled program (XLA's memory analysis), a compiled step's report, the
memory plan over a trainer's phases, and the device's budget (what it reports, else `memory.device_bytes`, as
the allocator's share of it).
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

JAX_DEFAULT_MEM_FRACTION = 0.75  # XLA_PYTHON_CLIENT_MEM_FRACTION when unset (JAX's GPU memory docs)


def device_budget(device_bytes: int) -> int:
    """Bytes one device may use: what the device reports, else `device_bytes` (`memory.device_bytes`)."""
    stats = None
    try:
        stats = jax.local_devices()[0].memory_stats()
    except Exception:  # CPU devices do not report
        pass
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    return int(device_bytes)


def allocator_limit_bytes(device_bytes: int, env: dict | None = None) -> int:
    """Bytes JAX's allocator may use on one device: the device's own `bytes_limit` where it reports one
    (a GPU), else XLA_PYTHON_CLIENT_MEM_FRACTION (default 0.75) x `device_bytes` (`memory.device_bytes`)."""
    env = os.environ if env is None else env
    raw = env.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "") or str(JAX_DEFAULT_MEM_FRACTION)
    try:
        fraction = float(raw)
    except ValueError:
        raise ValueError(f"XLA_PYTHON_CLIENT_MEM_FRACTION: {raw!r} is not a number") from None
    if not 0 < fraction <= 1:
        raise ValueError(f"XLA_PYTHON_CLIENT_MEM_FRACTION: {fraction} must be in (0, 1]")
    reported = device_budget(device_bytes)
    if reported != int(device_bytes):  # the device reported its allocator's limit
        return reported
    return int(fraction * int(device_bytes))


def shard_bytes(tree, shardings) -> int:
    """Bytes one device holds of `tree` (abstract or concrete) under `shardings`."""
    total = 0
    for a, s in zip(jax.tree.leaves(tree), jax.tree.leaves(shardings)):
        total += int(np.prod(s.shard_shape(a.shape))) * jnp.dtype(a.dtype).itemsize
    return total


def program_bytes(compiled) -> int:
    """Bytes one device needs while a compiled program runs: its arguments, its outputs not aliased to
    (donated) arguments, its temporaries and its code (XLA's memory analysis)."""
    ma = compiled.memory_analysis()
    code = int(getattr(ma, "generated_code_size_in_bytes", 0))
    return (
        int(ma.argument_size_in_bytes)
        + int(ma.output_size_in_bytes)
        - int(ma.alias_size_in_bytes)
        + int(ma.temp_size_in_bytes)
        + code
    )


def memory_report(compiled, abstract_state, state_sh) -> dict[str, float]:
    """Per-device GB: parameters and optimizer state (from their shardings), and XLA's figures."""
    ma = compiled.memory_analysis()
    args = int(ma.argument_size_in_bytes)
    out = int(ma.output_size_in_bytes)
    alias = int(ma.alias_size_in_bytes)
    temp = int(ma.temp_size_in_bytes)
    code = int(getattr(ma, "generated_code_size_in_bytes", 0))
    return {
        "params_gb": shard_bytes(abstract_state.params, state_sh.params) / 1e9,
        "opt_state_gb": shard_bytes(abstract_state.opt_state, state_sh.opt_state) / 1e9,
        "arguments_gb": args / 1e9,
        "outputs_gb": out / 1e9,
        "aliased_gb": alias / 1e9,
        "temp_gb": temp / 1e9,
        "code_gb": code / 1e9,
        "peak_gb": (args + out - alias + temp + code) / 1e9,
    }


PHASES = ("update", "reference", "cast", "prefill", "session", "decode")  # session: its row copies


def memory_plan(
    phases: dict[str, float],
    resident: dict[str, float],
    resident_during: dict[str, Sequence[str]],
    limit_gb: float,
) -> dict[str, Any]:
    """The dry run's per-device memory plan (GB).

    phases: what each program needs beyond the resident buffers it reads (a phase a trainer does not
      run is 0); resident: the buffers that outlive a program (train state, reference, decode weights,
      KV cache); resident_during[phase]: the names of those that are alive while the phase runs.
      per_device_gb.resident = sum(resident); per_device_gb.peak = max over phases of
      (phase + its resident buffers); fits = peak <= limit_gb.
    """
    unknown = {n for names in resident_during.values() for n in names} - set(resident)
    if unknown or set(phases) - set(PHASES) or set(resident_during) != set(phases):
        raise ValueError(f"memory plan: unknown resident buffers {sorted(unknown)} or phases {sorted(phases)}")
    during = {ph: sum(resident[n] for n in resident_during[ph]) for ph in phases}
    totals = {ph: phases[ph] + during[ph] for ph in phases}
    peak_phase = max(totals, key=totals.get)
    per_device = {ph: float(phases.get(ph, 0.0)) for ph in PHASES}
    per_device["resident"] = float(sum(resident.values()))
    per_device["peak"] = float(totals[peak_phase])
    return {
        "per_device_gb": per_device,
        "resident_gb": {k: float(v) for k, v in resident.items()},
        "resident_during_gb": during,
        "peak_phase": peak_phase,
        "limit_gb": float(limit_gb),
        "fits": bool(per_device["peak"] <= limit_gb),
    }
