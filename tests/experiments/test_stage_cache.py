"""Cached stage outputs checked against the settings that made them (experiments.cache)."""

from __future__ import annotations

import ml_collections
import pytest

from experiments import cache


def test_differences_name_every_changed_field_and_read_tuples_as_lists():
    stored = {"world": {"seed": 0, "vocab": "narrow"}, "buckets": [256, 512], "gone": 1}
    wanted = {"world": {"seed": 0, "vocab": "wide"}, "buckets": (256, 512), "new": {"a": 2}}
    assert cache.differences(stored, wanted) == [
        "gone: 1 -> '<unset>'",
        "new.a: '<unset>' -> 2",
        "world.vocab: 'narrow' -> 'wide'",
    ]
    assert cache.differences(stored, stored) == []


def test_check_accepts_the_same_request_and_an_unrecorded_one_and_stops_on_another():
    cache.check({"a": (1, 2)}, {"a": [1, 2]}, "x")
    cache.check(None, {"a": 1}, "an output from before requests were kept")
    many = {f"k{i}": i for i in range(9)}
    with pytest.raises(cache.StaleCacheError, match=r"the data in /w was made with other settings \(k0: 0 -> 1;") as e:
        cache.check(many, {k: v + 1 for k, v in many.items()}, "the data in /w")
    assert "and 3 more" in str(e.value) and "nothing was overwritten" in str(e.value)


def test_requests_round_trip_through_their_file(tmp_path):
    assert cache.read_request(str(tmp_path)) is None
    cache.write_request(str(tmp_path / "d"), {"b": (1, 2), "a": {"c": None}})
    assert cache.read_request(str(tmp_path / "d")) == {"a": {"c": None}, "b": [1, 2]}


def test_config_requests_leave_out_where_files_live():
    c = ml_collections.ConfigDict(
        {
            "seed": 3,
            "model": {"path": "/a/hf", "dtype": "float32"},
            "data": {"path": "/a/d.jsonl", "exploration_path": None},
        }
    )
    c.checkpoint = ml_collections.ConfigDict({"out_dir": "/a/ck", "every_steps": 4})
    assert cache.config_request(c) == {
        "seed": 3,
        "model": {"dtype": "float32"},
        "data": {},
        "checkpoint": {"every_steps": 4},
    }
    moved = ml_collections.ConfigDict(c.to_dict())
    moved.model.path = "/b/hf"
    assert cache.differences(cache.config_request(c), cache.config_request(moved)) == []
