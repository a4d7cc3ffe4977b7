"""Start N local JAX processes joined by `jax.distributed` (coordinator on a free localhost port), wait
for them within a deadline, and kill every one that is still running when any fails or time runs out."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "multihost_worker.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_workers(
    args: list[str],
    *,
    num_processes: int = 2,
    local_devices: int = 4,
    timeout: float = 120.0,
    log_dir: str,
    suffix: str = "npz",
) -> list[str]:
    """Runs `worker.py <args> --process_id i` in `num_processes` processes of `local_devices` CPU devices.
    Returns their log paths; raises (after killing the rest) when one fails or the deadline passes."""
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={local_devices}",
        "PYTHONPATH": REPO,
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
    }
    coordinator = f"localhost:{free_port()}"
    procs, logs = [], []
    try:
        for i in range(num_processes):
            log = os.path.join(log_dir, f"worker_{i}.log")
            logs.append(log)
            with open(log, "w") as f:
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            WORKER,
                            *args,
                            "--coordinator",
                            coordinator,
                            "--num_processes",
                            str(num_processes),
                            "--process_id",
                            str(i),
                            "--out",
                            os.path.join(log_dir, f"out_{i}.{suffix}"),
                        ],
                        env=env,
                        cwd=REPO,
                        stdout=f,
                        stderr=subprocess.STDOUT,
                    )
                )
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in procs):
            failed = [i for i, p in enumerate(procs) if p.returncode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                reason = f"process {failed[0]} exited with {procs[failed[0]].returncode}" if failed else "timed out"
                raise RuntimeError(f"workers failed ({reason}):\n" + _tails(logs))
            time.sleep(0.2)
        if any(p.returncode for p in procs):
            raise RuntimeError(f"workers exited with {[p.returncode for p in procs]}:\n" + _tails(logs))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [os.path.join(log_dir, f"out_{i}.{suffix}") for i in range(num_processes)]


def _tails(logs: list[str], n: int = 3000) -> str:
    out = []
    for log in logs:
        with open(log) as f:
            out.append(f"--- {os.path.basename(log)}\n" + f.read()[-n:])
    return "\n".join(out)
