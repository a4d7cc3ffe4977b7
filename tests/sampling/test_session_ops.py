"""`sampling.session_ops`: the operations a `DecodeSession` runs for each call, by hand on small schedules, and
(slow) the real session following them call by call."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from rcgrpo_jax import models, sharding
from rcgrpo_jax.sampling import SamplingParams, packed, packed_append, session_ops
from rcgrpo_jax.sampling.session import DecodeSession
from rcgrpo_jax.sampling.session_ops import (
    Append,
    AppendChunk,
    Copy,
    CopyRows,
    Decode,
    DecodeRows,
    PackedAppend,
    PackedPrefill,
    Resize,
    Select,
    SetLengths,
    Sizes,
    State,
    TakeRows,
    Truncate,
)
from tests.helpers.tiny_sizes import TINY_QWEN2

SIZES = Sizes(capacity=1016, max_new=16, chunk=16)  # spans 256, 384, ..., capped at 1016


def ops(state: State, call, sizes: Sizes = SIZES):
    return session_ops.operations(sizes, state, call)


def test_append_chunks_by_hand():
    # rows of 20, 0, 5 tokens in chunks of 16: [16, 0, 5] (width 16), then [4, 0, 0] (length_bucket(4) = 16)
    got = session_ops.append_chunks([20, 0, 5], 16)
    assert [(s, c.tolist(), w) for s, c, w in got] == [(0, [16, 0, 5], 16), (16, [4, 0, 0], 16)]
    # chunk 64, longest 40: one piece 48 wide (length_bucket(40) = 48); chunk 32 caps the width
    assert [(s, w) for s, _, w in session_ops.append_chunks([40, 3], 64)] == [(0, 48)]
    assert [(s, w) for s, _, w in session_ops.append_chunks([40, 3], 32)] == [(0, 32), (32, 16)]
    assert session_ops.append_chunks([0, 0], 16) == [] and session_ops.append_chunks([], 16) == []


def test_grown_and_shrunk_span_by_hand():
    cap = 16896
    # a span that holds the need stays; past it: span_bucket(700) = 768 (length_bucket 512 -> 768)
    assert session_ops.grown_span(1024, 700, cap) == 1024 and session_ops.grown_span(512, 700, cap) == 768
    assert session_ops.grown_span(256, 16500, cap) == cap  # the bucket (24576) capped at the capacity
    with pytest.raises(session_ops.CapacityError, match="capacity"):
        session_ops.grown_span(256, cap + 1, cap)
    # longest 300 + 16 new = 316 -> span_bucket 384; never above the current span
    assert session_ops.shrunk_span(4096, 300, 16, cap) == 384 and session_ops.shrunk_span(256, 300, 16, cap) == 256
    assert session_ops.shrunk_span(4096, 0, 16, cap) == 256  # MIN_SPAN
    assert session_ops.shrunk_span(cap, 16890, 512, cap) == cap  # the need capped at the capacity
    assert session_ops.shrunk_span(4096, 300, 16, cap, min_span=64) == 384


def test_appends_by_hand():
    s = State((0, 0, 0, 0), 256)
    # 20 tokens to row 0 and 5 to row 3 in chunks of 16: [16, 0, 0, 5] then [4, 0, 0, 0] (16 wide); no resize
    assert ops(s, Append((range(20), (), (), range(5)), "prefix")) == [
        (AppendChunk(0, (16, 0, 0, 5), 16), State((16, 0, 0, 5), 256)),
        (AppendChunk(16, (4, 0, 0, 0), 16), State((20, 0, 0, 5), 256)),
    ]
    # 30 more to row 1 of a session whose row 2 holds 300: the span grows first (span_bucket(330) = 384)
    s = State((20, 0, 300, 5), 256)
    assert ops(s, Append(((), range(30)))) == [
        (Resize(384), State((20, 0, 300, 5), 384)),
        (AppendChunk(0, (0, 16, 0, 0), 16), State((20, 16, 300, 5), 384)),
        (AppendChunk(16, (0, 14, 0, 0), 16), State((20, 30, 300, 5), 384)),
    ]
    assert ops(s, Append(((), ()))) == [] and ops(s, Append(())) == []
    with pytest.raises(session_ops.CapacityError, match="capacity"):
        ops(s, Append(((), (), range(717))))
    with pytest.raises(ValueError, match="5 rows given to a session of 4"):
        ops(s, Append(((1,),) * 5))


def test_packed_appends_by_hand():
    # On row shards: fresh rows first (one `packed` forward), then the rows with context (`packed_append`).
    s = State((0, 0, 0, 7), 256)
    got = ops(s, Append((range(3), (), range(2), range(4))), Sizes(1016, 16, 16, packed=True))
    assert got == [
        (PackedPrefill(packed.PackedForward((0, 2), (3, 2))), State((3, 0, 2, 7), 256)),
        (PackedAppend(packed_append.AppendForward((3,), (4,), (7,))), State((3, 0, 2, 11), 256)),
    ]


def test_truncate_select_copy_by_hand():
    s = State((20, 0, 300, 5), 384)
    assert ops(s, Truncate((20, 0, 400, 5))) == []  # capped at the lengths: nothing changes
    # row 2 cut to 10: the longest row (20) + one decode call (16) fits 256
    assert ops(s, Truncate((20, 0, 10, 5))) == [
        (SetLengths((20, 0, 10, 5)), State((20, 0, 10, 5), 384)),
        (Resize(256), State((20, 0, 10, 5), 256)),
    ]
    # as many rows: only the rows that change are copied, in place, over a window of span_bucket(300) = 384
    assert ops(s, Select((2, 2, 2, 3))) == [
        (CopyRows((2, 2), (0, 1), 384), State((300, 300, 300, 5), 384)),
    ]
    assert ops(s, Select((0, 1, 2, 3))) == []
    assert ops(s, Copy((3,), (2,))) == [
        (CopyRows((3,), (2,), 256), State((20, 0, 5, 5), 384)),
        (Resize(256), State((20, 0, 5, 5), 256)),
    ]
    # fewer rows: a new batch, then the span shrinks to its longest row's need
    assert ops(s, Select((3, 0))) == [(TakeRows((3, 0)), State((5, 20), 384)), (Resize(256), State((5, 20), 256))]


def test_decode_by_hand():
    s = State((250, 5), 256)
    # budgets clipped to max_new (16); the span grows to hold 250 + 16 (span_bucket(266) = 384)
    assert ops(s, Decode((100, 3))) == [
        (Resize(384), State((250, 5), 384)),
        (DecodeRows((16, 3)), State((250, 5), 384)),
    ]
    assert ops(s, Decode((0, -2))) == [] and ops(s, Decode(())) == []
    assert ops(s, Decode((0, 4))) == [(DecodeRows((0, 4)), s)]  # the rows after it grow by what they sample:
    assert s.advanced((0, 3)) == State((250, 8), 256) and s.advanced((1,)) == State((251, 5), 256)
    with pytest.raises(ValueError, match="budgets"):
        ops(s, Decode((1, 1, 1)))
    with pytest.raises(TypeError, match="not a session call"):
        ops(s, "decode")


# ------------------------------------------------------------------------------------------- the real session


def _next_call(rng: np.random.Generator, rows: int, shrunk: bool):
    """A random call on a session of `rows` rows (deltas of at most 40 tokens a row); a select to half the
    rows only while not `shrunk`."""
    kind = rng.choice(["append", "truncate", "select", "copy", "decode", "fewer"])
    if kind == "append":
        return Append(tuple(range(int(n)) if rng.random() < 0.6 else () for n in rng.integers(1, 40, rows)))
    if kind == "truncate":
        return Truncate(tuple(int(k) for k in rng.integers(1, 60, rows)))
    if kind == "select":
        return Select(tuple(int(r) for r in rng.integers(0, rows, rows)))
    if kind == "copy":
        k = int(rng.integers(1, rows))
        return Copy(tuple(int(r) for r in rng.integers(0, rows, k)), tuple(int(r) for r in rng.permutation(rows)[:k]))
    if kind == "fewer" and not shrunk:
        return Select(tuple(int(r) for r in rng.permutation(rows)[: rows // 2]))
    return Decode(tuple(int(b) for b in rng.integers(0, 24, rows)))


def _follows(session: DecodeSession, rng: np.random.Generator, calls: int) -> list[type]:
    """Run `calls` random calls on the session, checking after each that its state is the one `operations`
    listed and that it ran as many forwards, resizes, row copies and decodes as listed (a call the listing
    refuses past the capacity, the session refuses, changing nothing). Returns the operations' types."""
    seen: list[type] = []
    rows = session.rows
    for k in range(calls):
        if k == 0:  # every row gets context
            call = Append(tuple(range(int(n)) for n in rng.integers(1, 40, rows)))
        else:
            call = _next_call(rng, session.rows, session.rows < rows)
        before, stats = session.state, dict(session.stats)
        try:
            listed = session.operations(call)
        except session_ops.CapacityError:
            with pytest.raises(session_ops.CapacityError):
                session.decode(call.budgets, ()) if isinstance(call, Decode) else session.perform(call)
            assert session.state == before
            continue
        want = listed[-1][1] if listed else before
        if isinstance(call, Decode):
            start = session.lengths.copy()
            session.decode(call.budgets, ())
            assert session.state == want.advanced(session.lengths - start), call
        else:
            session.perform(call)
            assert session.state == want, call
        kinds = [type(op) for op, _ in listed]
        forwards = sum(k in (AppendChunk, PackedPrefill, PackedAppend) for k in kinds)
        assert session.stats["prefill_calls"] - stats["prefill_calls"] == forwards
        assert session.stats["resizes"] - stats["resizes"] == kinds.count(Resize)
        assert session.stats["row_copies"] - stats["row_copies"] == kinds.count(CopyRows)
        assert session.stats["decode_calls"] - stats["decode_calls"] == kinds.count(DecodeRows)
        seen += kinds
    return seen


@pytest.mark.slow
@pytest.mark.parametrize("meshed", [False, True])
def test_the_real_session_runs_the_listed_operations(meshed):
    """Random schedules of appends, truncates, selects, copies and decodes on a tiny model's session (off a
    mesh: row-block chunks; on 4 row shards: token-packed appends): after every call its lengths and span
    are the listed ones, and it ran the listed forwards, resizes and copies."""
    params = models.init_params(TINY_QWEN2, jax.random.key(0))
    mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2}) if meshed else None
    if mesh is not None:
        params = sharding.shard_params(params, mesh, sharding.DECODE_RULES)
    session = DecodeSession(
        TINY_QWEN2,
        params,
        8,
        192,
        sampling=SamplingParams(),
        max_new_tokens=16,
        prefill_chunk=32,
        min_span=64,
        mesh=mesh,
    )
    assert session.packed_prefill == meshed
    seen = set(_follows(session, np.random.default_rng(1), 24))
    forwards = {PackedPrefill, PackedAppend} if meshed else {AppendChunk}
    assert forwards | {Resize, SetLengths, CopyRows, TakeRows, DecodeRows} <= seen  # every kind ran
