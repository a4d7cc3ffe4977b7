"""Length, batch and span buckets: few distinct static shapes, so few compilations.

The rules that size a decode session's calls:
  rows  `batch_bucket(n, m)`: n rounded up to a multiple of lcm(8, m) (m = the batch-sharding size);
  span  `span_bucket(need, capacity)`: the KV slots a prefill/decode call works on,
        min(capacity, length_bucket(max(need, MIN_SPAN))), where need = the most slots any row of the
        call holds after it (its length plus what the call writes into it);
  packed  `token_bucket(n)`: the tokens each row shard computes in a token-packed prefill of fresh rows
        (`sampling.packed`): n rounded up to a multiple of a quarter of its power of two (>= 64);
  sub-batch  `row_bucket(n, rows, minimum)`: the rows a prefill/append forward computes when n of a
        session's `rows` rows have tokens (`DecodeSession.append` gathers those rows, runs the forward
        over the sub-batch and scatters their K/V back): the smallest of minimum * 2^k >= n, capped at
        rows. The session passes minimum = its batch-sharding size (1 off a mesh), so one row's prefill
        computes about one row; the default minimum is ROW_MULTIPLE.
"""

from __future__ import annotations

import math

ROW_MULTIPLE = 8  # rows of a decode batch come in multiples of this (not powers of two)
MIN_SPAN = 256  # the smallest KV span a session works on


def length_bucket(n: int, minimum: int = 16) -> int:
    """Smallest of {minimum, ..., 2^k, 3 * 2^(k-1), 2^(k+1), ...} that holds n (waste <= 33%)."""
    b = minimum
    while b < n:
        half_step = b + b // 2
        if half_step >= n and half_step % minimum == 0:
            return half_step
        b *= 2
    return b


def token_bucket(n: int, minimum: int = 64, per_octave: int = 4) -> int:
    """n rounded up to a multiple of max(minimum, 2^floor(log2 n) / per_octave): `per_octave` sizes per octave,
    at most 1 / per_octave padding past the first, and always a multiple of `minimum` (with the defaults: 64,
    128, ..., 512, 640, 768, 896, 1024, 1280, ...). `minimum` and `per_octave` must be powers of two."""
    n, minimum, per_octave = int(n), int(minimum), int(per_octave)
    for name, x in (("minimum", minimum), ("per_octave", per_octave)):
        if x < 1 or x & (x - 1):
            raise ValueError(f"token_bucket: {name} must be a power of two, got {x}")
    if n <= minimum:
        return minimum
    step = max(minimum, (1 << (n.bit_length() - 1)) // per_octave)
    return -(-n // step) * step


def batch_bucket(n: int, multiple: int = 1) -> int:
    """n rounded up to a multiple of lcm(ROW_MULTIPLE, multiple) (at least one such multiple).

    160 episodes on a batch-sharding of 4 stay 160 rows (a power of two would make them 256)."""
    step = math.lcm(ROW_MULTIPLE, max(int(multiple), 1))
    return max(1, -(-int(n) // step)) * step


def row_bucket(n: int, max_rows: int, minimum: int = ROW_MULTIPLE) -> int:
    """Rows of a sub-batch holding n rows: the smallest of minimum, 2 * minimum, 4 * minimum, ... that is
    >= n, capped at max_rows (with the default minimum: 8, 16, 32, 64, ..., so multiples of 8).

    Doubling keeps the distinct sub-batch shapes (compilations) at about log2(max_rows / minimum) and the
    padding rows under half of the sub-batch. `DecodeSession` passes its batch-sharding size as minimum
    (1 off a mesh, data x fsdp on one), which keeps the sub-batch divisible over the row shards."""
    n, max_rows, minimum = int(n), int(max_rows), int(minimum)
    if n < 0 or max_rows < 1 or minimum < 1:
        raise ValueError(f"row_bucket: needs n >= 0, max_rows >= 1, minimum >= 1 (got {n}, {max_rows}, {minimum})")
    if n > max_rows:
        raise ValueError(f"row_bucket: {n} rows do not fit max_rows {max_rows}")
    b = minimum
    while b < n:
        b *= 2
    return min(b, max_rows)


def span_bucket(need: int, capacity: int, minimum: int = MIN_SPAN) -> int:
    """KV slots a call works on when its rows need `need` slots: a length bucket, capped at capacity."""
    if need > capacity:
        raise ValueError(f"{need} KV slots needed, capacity {capacity}")
    return min(int(capacity), length_bucket(max(int(need), minimum)))
