"""Length and batch buckets: few distinct static shapes, so few compilations."""

from __future__ import annotations


def length_bucket(n: int, minimum: int = 16) -> int:
    """Smallest of {minimum, ..., 2^k, 3 * 2^(k-1), 2^(k+1), ...} that holds n (waste <= 33%)."""
    b = minimum
    while b < n:
        half_step = b + b // 2
        if half_step >= n and half_step % minimum == 0:
            return half_step
        b *= 2
    return b


def batch_bucket(n: int, multiple: int = 1) -> int:
    """Next power of two >= n, rounded up to a multiple of the batch-sharding size."""
    b = 1
    while b < n:
        b *= 2
    return -(-b // multiple) * multiple
