"""Float comparisons whose tolerance scales with the magnitude compared.

A fixed atol (say 1e-6) is flaky for float32 results of sums: their rounding error grows with the size of
the summands, so one element of a gradient whose entries reach 0.3 can miss 1e-6 by chance on another
machine or thread count. `assert_close` takes the absolute tolerance as a fraction of max|desired|.
"""

from __future__ import annotations

import jax
import numpy as np


def assert_close(actual, desired, *, rtol: float = 1e-5, scaled_atol: float = 1e-5, err_msg: str = "") -> None:
    """Elementwise |actual - desired| <= rtol |desired| + scaled_atol * max|desired| (over the array)."""
    desired = np.asarray(desired, np.float64)
    scale = float(np.max(np.abs(desired))) if desired.size else 0.0
    np.testing.assert_allclose(actual, desired, rtol=rtol, atol=scaled_atol * scale, err_msg=err_msg)


def assert_trees_close(actual, desired, *, rtol: float = 1e-5, scaled_atol: float = 1e-5) -> None:
    """`assert_close` leaf by leaf (each leaf scaled by its own magnitude)."""
    jax.tree.map(lambda a, b: assert_close(a, b, rtol=rtol, scaled_atol=scaled_atol), actual, desired)
