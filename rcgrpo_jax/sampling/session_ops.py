"""What a `DecodeSession` does for each call, as data: the operations, and each row's length and the span after
each. Pure (host integers only): the session executes exactly this sequence, and the rollout planner
(`benchmarks.rollout_plan`) replays it over lengths alone.

Calls (what a caller asks): `Append` (per-row token deltas; only their lengths matter here), `Truncate`,
`Select`, `Copy`, `Decode`. Operations (what the session runs, in order): `Resize` (the cache's span),
`SetLengths`, `PackedPrefill` / `PackedAppend` (token-packed forwards on m > 1 row shards: `sampling.packed`,
`sampling.packed_append`), `AppendChunk` (a row-block forward), `CopyRows`, `TakeRows`, `DecodeRows`.
`operations(sizes, state, call)` lists (operation, `State` after it); a decode's state is the one before it
(its rows grow by what they sample, known after the call: `State.advanced`).

Span rules (module docstring of `sampling.session`): append and decode grow the span to hold what they write
(`grown_span`); truncate, select and copy shrink it to the longest row + one decode call (`shrunk_span`). Off
the packed path an append runs in pieces of at most `Sizes.chunk` columns (`append_chunks`).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence, Union

import numpy as np

from rcgrpo_jax.sampling import buckets, packed, packed_append


class CapacityError(RuntimeError):
    """A row would hold more tokens than the session's capacity."""


def grown_span(span: int, need: int, capacity: int, min_span: int = buckets.MIN_SPAN) -> int:
    """The span a session of span `span` works on once its rows need `need` slots (the most any row holds
    after the next append or decode): `span` if it holds them, else buckets.span_bucket(need, capacity,
    min_span). need > capacity raises `CapacityError`. Pure."""
    if need > capacity:
        raise CapacityError(f"a row needs {need} slots, capacity {capacity}")
    return int(span) if need <= span else buckets.span_bucket(need, capacity, min_span)


def shrunk_span(span: int, longest: int, max_new: int, capacity: int, min_span: int = buckets.MIN_SPAN) -> int:
    """The span after a truncate or select left the longest row holding `longest` tokens: the smaller of
    `span` and buckets.span_bucket(min(longest + max_new, capacity), capacity, min_span) (room for one decode
    call of `max_new` tokens). Pure."""
    return min(int(span), buckets.span_bucket(min(int(longest) + int(max_new), capacity), capacity, min_span))


def append_chunks(counts: Sequence[int], chunk: int) -> list[tuple[int, np.ndarray, int]]:
    """The pieces of a row-block append of counts[r] tokens to row r: one (start, piece_counts, width) per
    piece, start = 0, chunk, 2 x chunk, ... below the largest count; piece_counts[r] = clip(counts[r] - start,
    0, chunk), the tokens row r has in the piece; width = min(chunk, buckets.length_bucket(max(piece_counts))),
    the columns its forward computes. Pure; no count (or all zero) gives no piece."""
    n = np.asarray(counts, np.int64).reshape(-1)
    out = []
    for start in range(0, int(n.max(initial=0)), int(chunk)):
        piece = np.clip(n - start, 0, int(chunk))
        out.append((start, piece, min(int(chunk), buckets.length_bucket(int(piece.max())))))
    return out


@dataclasses.dataclass(frozen=True)
class Sizes:
    """The session's settings the operations depend on: slots per row, one decode call's most tokens
    (`Sampler.max_new_tokens`), the row-block append's columns, the smallest span, and whether appends are
    token-packed (a mesh of m > 1 row shards)."""

    capacity: int
    max_new: int
    chunk: int
    min_span: int = buckets.MIN_SPAN
    packed: bool = False


@dataclasses.dataclass(frozen=True)
class State:
    """The host's picture of a session: each row's length (its row count is len(lengths)) and the span."""

    lengths: tuple[int, ...]
    span: int

    @property
    def rows(self) -> int:
        return len(self.lengths)

    def advanced(self, counts: Sequence[int]) -> State:
        """Row r grown by counts[r] tokens (what a decode sampled; missing rows: 0)."""
        n = list(counts) + [0] * (self.rows - len(counts))
        return dataclasses.replace(self, lengths=tuple(a + int(b) for a, b in zip(self.lengths, n)))


# --------------------------------------------------------------------------------------------- calls


@dataclasses.dataclass(frozen=True)
class Append:
    """deltas[r] appended to row r (missing or empty: nothing). kind: a label for the caller's own accounts
    (a planner's prefix / suffix / delta); the session ignores it."""

    deltas: tuple[Sequence[int], ...]
    kind: str = ""

    @property
    def counts(self) -> tuple[int, ...]:
        return tuple(len(d) for d in self.deltas)


@dataclasses.dataclass(frozen=True)
class Truncate:
    """Row r keeps its first keep[r] tokens (capped at its length)."""

    keep: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Select:
    """The rows become rows[0], rows[1], ... of the old ones (as many rows: copies in place; else a new batch)."""

    rows: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Copy:
    """Row dst[i] becomes a copy of row src[i] (sources read before any row is written)."""

    src: tuple[int, ...]
    dst: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Decode:
    """Up to budgets[r] tokens sampled for row r (missing: 0)."""

    budgets: tuple[int, ...]


Call = Union[Append, Truncate, Select, Copy, Decode]


# ---------------------------------------------------------------------------------------- operations


@dataclasses.dataclass(frozen=True)
class Resize:
    """The cache's slot axis cut or zero-padded to `span`."""

    span: int


@dataclasses.dataclass(frozen=True)
class SetLengths:
    """The cache's row lengths set to `lengths` (a truncate: no K/V moves)."""

    lengths: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class PackedPrefill:
    """One `sampling.packed` forward: fresh rows' tokens packed over the row shards."""

    forward: packed.PackedForward


@dataclasses.dataclass(frozen=True)
class PackedAppend:
    """One `sampling.packed_append` forward: rows with context get more tokens."""

    forward: packed_append.AppendForward


@dataclasses.dataclass(frozen=True)
class AppendChunk:
    """One row-block forward (`append_chunks`): row r gets its tokens [start, start + counts[r]) of its delta,
    in a block `width` columns wide."""

    start: int
    counts: tuple[int, ...]
    width: int


@dataclasses.dataclass(frozen=True)
class CopyRows:
    """Rows dst copy rows src on their first `window` slots (`buckets.span_bucket` of the longest source)."""

    src: tuple[int, ...]
    dst: tuple[int, ...]
    window: int


@dataclasses.dataclass(frozen=True)
class TakeRows:
    """A new batch of len(rows) rows, row i the old row rows[i]."""

    rows: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class DecodeRows:
    """One decode call of budgets[r] tokens at most for row r (each in [0, Sizes.max_new], one > 0)."""

    budgets: tuple[int, ...]


Operation = Union[Resize, SetLengths, PackedPrefill, PackedAppend, AppendChunk, CopyRows, TakeRows, DecodeRows]


def _resized(state: State, span: int) -> list[tuple[Operation, State]]:
    return [] if span == state.span else [(Resize(span), dataclasses.replace(state, span=span))]


def _grown(sizes: Sizes, state: State, need: int) -> list[tuple[Operation, State]]:
    return _resized(state, grown_span(state.span, need, sizes.capacity, sizes.min_span))


def _shrunk(sizes: Sizes, state: State) -> list[tuple[Operation, State]]:
    longest = max(state.lengths, default=0)
    return _resized(state, shrunk_span(state.span, longest, sizes.max_new, sizes.capacity, sizes.min_span))


def _per_row(values: Sequence[int], rows: int, what: str) -> np.ndarray:
    """values padded with zeros to `rows`; more than `rows` raises."""
    v = np.asarray(values, np.int64).reshape(-1)
    if len(v) > rows:
        raise ValueError(f"{what}: {len(v)} rows given to a session of {rows}")
    return np.concatenate([v, np.zeros((rows - len(v),), np.int64)])


def _append(sizes: Sizes, state: State, counts: Sequence[int]) -> list[tuple[Operation, State]]:
    n = _per_row(counts, state.rows, "deltas")
    if n.max(initial=0) == 0:
        return []
    out = _grown(sizes, state, int((np.asarray(state.lengths, np.int64) + n).max()))
    span, lengths = (out[-1][1] if out else state).span, list(state.lengths)

    def step(op: Operation) -> None:
        out.append((op, State(tuple(lengths), span)))

    if sizes.packed:  # rows with no token yet first, then the rows that hold context
        fresh = {r: int(n[r]) for r in np.flatnonzero((n > 0) & (np.asarray(lengths) == 0))}
        for fwd in packed.pack(fresh):
            for r, c in zip(fwd.rows, fwd.counts):
                lengths[r] = c
            step(PackedPrefill(fwd))
        held = {int(r): int(n[r]) for r in np.flatnonzero(n) if int(r) not in fresh}
        for fwd in packed_append.pack(held, {r: lengths[r] for r in held}):
            for r, c, b in zip(fwd.rows, fwd.counts, fwd.bases):
                lengths[r] = b + c
            step(PackedAppend(fwd))
        return out
    for start, piece, width in append_chunks(n, sizes.chunk):
        lengths = [a + int(b) for a, b in zip(lengths, piece)]
        step(AppendChunk(start, tuple(int(x) for x in piece), width))
    return out


def _truncate(sizes: Sizes, state: State, keep: Sequence[int]) -> list[tuple[Operation, State]]:
    keep = tuple(int(k) for k in np.minimum(np.asarray(keep, np.int64), state.lengths))
    if keep == state.lengths:
        return []
    after = State(keep, state.span)
    return [(SetLengths(keep), after)] + _shrunk(sizes, after)


def _copy(sizes: Sizes, state: State, src: Sequence[int], dst: Sequence[int]) -> list[tuple[Operation, State]]:
    src, dst = tuple(int(r) for r in src), tuple(int(r) for r in dst)
    if not dst:
        return []
    window = buckets.span_bucket(max(state.lengths[r] for r in src), state.span, sizes.min_span)
    lengths = list(state.lengths)
    for s, d in zip(src, dst):
        lengths[d] = state.lengths[s]
    after = State(tuple(lengths), state.span)
    return [(CopyRows(src, dst, window), after)] + _shrunk(sizes, after)


def _select(sizes: Sizes, state: State, rows: Sequence[int]) -> list[tuple[Operation, State]]:
    idx = tuple(int(r) for r in rows)
    if len(idx) == state.rows:
        changed = [r for r in range(state.rows) if idx[r] != r]
        out = _copy(sizes, state, [idx[r] for r in changed], changed)
        return out + _shrunk(sizes, out[-1][1] if out else state)
    after = State(tuple(state.lengths[r] for r in idx), state.span)
    return [(TakeRows(idx), after)] + _shrunk(sizes, after)


def _decode(sizes: Sizes, state: State, budgets: Sequence[int]) -> list[tuple[Operation, State]]:
    b = np.clip(_per_row(budgets, state.rows, "budgets"), 0, sizes.max_new)
    if b.max(initial=0) <= 0:
        return []
    out = _grown(sizes, state, int((np.asarray(state.lengths, np.int64) + b).max()))
    return out + [(DecodeRows(tuple(int(x) for x in b)), out[-1][1] if out else state)]


def operations(sizes: Sizes, state: State, call: Call) -> list[tuple[Operation, State]]:
    """The operations a session of `sizes` in `state` runs for `call`, in order, each with the state after it
    (none: the call changes nothing). Pure; the arguments' checks are the session's (`DecodeSession`)."""
    if isinstance(call, Append):
        return _append(sizes, state, call.counts)
    if isinstance(call, Truncate):
        return _truncate(sizes, state, call.keep)
    if isinstance(call, Select):
        return _select(sizes, state, call.rows)
    if isinstance(call, Copy):
        return _copy(sizes, state, call.src, call.dst)
    if isinstance(call, Decode):
        return _decode(sizes, state, call.budgets)
    raise TypeError(f"not a session call: {call!r}")


def after(sizes: Sizes, state: State, call: Call) -> State:
    """The state once `call` has run (a decode's before its rows grow by what they sample)."""
    ops = operations(sizes, state, call)
    return ops[-1][1] if ops else state
