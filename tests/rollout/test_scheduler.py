"""RowScheduler: whole groups enter free rows FIFO, every episode runs exactly once, rows are reused."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcgrpo_jax.rollout.scheduler import Admission, RowScheduler


def test_fifo_whole_groups_hand_computed():
    # Groups a (2), b (3), c (1) over 4 rows: a fills 0-1; b needs 3 but only 2 are free, so it waits and c
    # may not overtake it.
    s = RowScheduler(4, ["a", "a", "b", "b", "b", "c"])
    assert s.admit() == [Admission("a", (0, 1), (0, 1))]
    assert s.free_rows == (2, 3) and s.waiting == 4
    s.end([1])
    assert s.admit() == [Admission("b", (2, 3, 4), (1, 2, 3))]
    s.end([0])
    assert s.admit() == [Admission("c", (5,), (0,))]
    assert s.waiting == 0 and s.row_of == {5: 0, 2: 1, 3: 2, 4: 3}


def test_free_rows_are_striped_over_the_row_shards():
    # 8 rows on 4 shards (blocks 0-1, 2-3, 4-5, 6-7): the hand-out order is 0, 2, 4, 6, 1, 3, 5, 7, so a
    # group of 4 takes one row on each shard; freed rows go back into that order.
    s = RowScheduler(8, [0, 0, 0, 0, 1, 1, 2, 2], shards=4)
    assert s.free_rows == (0, 2, 4, 6, 1, 3, 5, 7)
    assert s.admit() == [
        Admission(0, (0, 1, 2, 3), (0, 2, 4, 6)),
        Admission(1, (4, 5), (1, 3)),
        Admission(2, (6, 7), (5, 7)),
    ]
    s.end([1, 4])  # rows 2 and 1 free: 1 is the second row of shard 0, 2 the first of shard 1
    assert s.free_rows == (2, 1)
    with pytest.raises(ValueError, match="must split over shards"):
        RowScheduler(6, [0], shards=4)


def test_ended_before_admission_and_group_too_big():
    s = RowScheduler(2, [0, 0, 1, 1])
    s.end([2])  # never started (e.g. its prompt alone is too long): it never takes a row
    assert [a.episodes for a in s.admit()] == [(0, 1)]
    s.end([0, 1])
    assert [a.episodes for a in s.admit()] == [(3,)]
    with pytest.raises(ValueError, match="only 2 rows"):
        RowScheduler(2, [0, 0, 0])


def test_shrink_renumbers_in_episode_order():
    s = RowScheduler(4, [0, 0, 1, 1])
    s.admit()
    s.end([0, 2])
    assert s.shrink(2) == [1, 3] and s.row_of == {1: 0, 3: 1} and s.free_rows == ()
    t = RowScheduler(2, [0, 1, 2])
    t.admit()
    with pytest.raises(ValueError, match="still waiting"):
        t.shrink(1)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 9),
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=12),
    seed=st.integers(0, 10**6),
)
def test_every_episode_runs_exactly_once(rows, sizes, seed):
    sizes = [min(x, rows) for x in sizes]
    groups = [g for g, k in enumerate(sizes) for _ in range(k)]
    s, rng = RowScheduler(rows, groups), random.Random(seed)
    admitted, order = [], []
    while s.waiting or s.row_of:
        for a in s.admit():
            assert len(set(a.rows)) == len(a.rows) and set(groups[i] for i in a.episodes) == {a.group}
            admitted += a.episodes
            order.append(a.group)
        assert len(set(s.row_of.values())) == len(s.row_of) and all(0 <= r < rows for r in s.row_of.values())
        running = sorted(s.row_of)
        s.end(rng.sample(running, rng.randint(1, len(running))))
    assert sorted(admitted) == list(range(len(groups))) and order == sorted(order)


def test_priority_orders_groups_stably():
    # Longest prompt first: group 1 (priority -9) before group 2 (-5) before groups 0 and 3 (tie: first seen).
    s = RowScheduler(8, [0, 0, 1, 1, 2, 3], priority=[-1, -1, -9, -9, -5, -1])
    assert [a.group for a in s.admit()] == [1, 2, 0, 3]
    with pytest.raises(ValueError, match="priorities"):
        RowScheduler(2, [0, 1], priority=[0])
