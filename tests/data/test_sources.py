"""The task sources' splits: the world's i.i.d. test and dev splits beside train, the fresh-name test and the RL
pool, and the clear errors where a source has no such split."""

from __future__ import annotations

import pytest

from rcgrpo_jax.config_fields import ConfigError
from rcgrpo_jax.config_lib import common
from rcgrpo_jax.data import sources


def _world(**fields):
    d = common.data()
    d.source = "world"
    d.world.update({"train_per_type": 6, "test_per_type": 2, "rl_per_type": 2, **fields})
    return d


def test_world_iid_and_dev_splits_are_sized_disjoint_and_of_the_trained_types():
    d = _world(iid_test_per_type=3, dev_per_type=1)
    split = {name: sources.tasks(d, name) for name in ("train", "test", "rl", "iid", "dev")}
    assert len(split["iid"]) == 4 * 3 and len(split["dev"]) == 4 * 1
    ids = [t.id for tasks in split.values() for t in tasks]
    assert len(ids) == len(set(ids))  # no task in two splits
    assert {t.category for t in split["iid"]} == {t.category for t in split["train"]}
    assert "compose_heldout" in {t.category for t in split["test"]}  # the fresh-name test keeps it


def test_the_pretrain_split_repeats_no_train_iid_or_dev_task():
    d = _world(iid_test_per_type=3, dev_per_type=2, pretrain_per_type=5, train_vocab="coded")
    split = {name: sources.tasks(d, name) for name in ("train", "iid", "dev", "pretrain")}
    assert len(split["pretrain"]) == 4 * 5
    questions = {name: {str(t.entry["question"]) for t in tasks} for name, tasks in split.items()}
    for other in ("train", "iid", "dev"):
        assert not questions["pretrain"] & questions[other], other
    ids = [t.id for tasks in split.values() for t in tasks]
    assert len(ids) == len(set(ids))
    assert sources.tasks(d, "pretrain") == split["pretrain"]  # the same draw on every call
    with pytest.raises(ConfigError, match=r"data\.world\.pretrain_per_type: must be positive"):
        sources.tasks(_world(), "pretrain")


def test_a_split_the_source_lacks_is_a_config_error():
    with pytest.raises(ConfigError, match=r"data\.world\.iid_test_per_type: must be positive"):
        sources.tasks(_world(), "iid")
    with pytest.raises(ConfigError, match=r"data\.world\.dev_per_type: must be positive"):
        sources.tasks(_world(), "dev")
    bfcl = common.data()
    with pytest.raises(ConfigError, match="its 'test' split is i.i.d."):
        sources.tasks(bfcl, "iid")
    with pytest.raises(ValueError, match="data split must be one of"):
        sources.tasks(_world(), "validation")
    with pytest.raises(ConfigError, match=r"data\.world\.dev_per_type: must be 0"):
        sources.check(_world(dev_per_type=-1))
