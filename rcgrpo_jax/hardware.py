"""The accelerator the paper targets and the code budgets for: one NVIDIA H200 SXM, from NVIDIA's datasheet.

`H200` is the one home of its figures: the fit check's per-device memory budget (`config_lib.common`), the
roofline peaks of the accelerator check (`benchmarks.gpu`) and rollout plan (`benchmarks.rollout_plan`), and the abstract
device the CUDA lowering targets (`benchmarks.cuda_lower`). It imports nothing of the package.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Accelerator:
    """One accelerator's nominal figures (a datasheet's, not a measurement)."""

    kind: str  # the device kind JAX reports (`jax.Device.device_kind`)
    cores: int  # streaming multiprocessors
    hbm_bytes: int  # HBM per device, bytes
    hbm_bytes_s: float  # HBM bandwidth, bytes/s
    bf16_flops: float  # bf16 dense peak (no sparsity), FLOP/s


# 141 GB of HBM at 4.8 TB/s, 989 TFLOP/s bf16 dense, 132 SMs (compute capability 9.0).
H200 = Accelerator(kind="NVIDIA H200", cores=132, hbm_bytes=141 * 10**9, hbm_bytes_s=4.8e12, bf16_flops=989e12)
