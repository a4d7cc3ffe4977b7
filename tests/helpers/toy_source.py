"""A toy task source, registered from outside the package: the example of a new environment.

Select it with `--config.data.source=tests.helpers.toy_source:adder` (the module is imported at start-up, which
registers the source). A task asks for the sums of a few pairs of integers, one user turn per pair; the
environment is `fake_env.AdderEnv` (the `envs.base.Environment` protocol), its reward 1 when every sum was
computed with the `add` tool, in order. This file is everything a new environment needs.
"""

from __future__ import annotations

import dataclasses
import random

from rcgrpo_jax.data import sources
from tests.helpers.fake_env import AdderEnv


@dataclasses.dataclass(frozen=True)
class AdderTask:
    id: str
    category: str  # evaluation reports accuracy per category
    pairs: tuple[tuple[int, int], ...]


def _tasks(data_config, split: str) -> list[AdderTask]:
    """8 train and 4 test tasks of 1-2 turns, the same on every call (split 'all' is both)."""
    if split == "all":
        return _tasks(data_config, "train") + _tasks(data_config, "test")
    rng = random.Random({"train": 0, "test": 1}[split])
    out = []
    for i in range({"train": 8, "test": 4}[split]):
        turns = 1 + i % 2
        pairs = tuple((rng.randint(1, 9), rng.randint(1, 9)) for _ in range(turns))
        out.append(AdderTask(f"adder_{split}_{i}", f"adder_{turns}_turns", pairs))
    return out


def _env(task: AdderTask, env_config=None) -> AdderEnv:
    return AdderEnv(questions=[f"What is {a} plus {b}?" for a, b in task.pairs], answers=[a + b for a, b in task.pairs])


def _expert(task: AdderTask) -> list:
    """turn -> steps -> calls: one `add` call per turn."""
    return [[[{"name": "add", "arguments": {"a": a, "b": b}}]] for a, b in task.pairs]


ADDER = sources.register(sources.TaskSource("adder", tasks=_tasks, make_env=_env, expert=_expert), override=True)
