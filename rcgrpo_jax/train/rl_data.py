"""The RL stages' data order: which tasks each step takes, and how many steps a run makes. The step is the data
position, so a resumed run (same `fingerprint`) takes the same tasks at the same step.
"""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np


def steps_for(num_tasks: int, tasks_per_step: int, epochs: int) -> int:
    """Steps that make `epochs` passes over the tasks: ceil(epochs * num_tasks / tasks_per_step)."""
    return math.ceil(epochs * num_tasks / tasks_per_step)


def total_steps(epochs: int, max_steps: int, num_tasks: int, tasks_per_step: int) -> int:
    """`epochs` (`train.epochs`) passes over the tasks, capped by `max_steps` (`train.max_steps`) when that is > 0
    (alone when epochs <= 0)."""
    n = steps_for(num_tasks, tasks_per_step, int(epochs)) if int(epochs) > 0 else 0
    cap = int(max_steps)
    return (min(n, cap) if n > 0 else cap) if cap > 0 else n


def task_indices(num_tasks: int, tasks_per_step: int, seed: int, step: int) -> np.ndarray:
    """Step `step`'s tasks: consecutive slices of an endless stream of permutations, epoch e's seeded by
    (seed, e). Every epoch visits every task exactly once, and every step has `tasks_per_step` tasks (a step
    that crosses an epoch boundary takes the end of one permutation and the start of the next)."""
    if tasks_per_step > num_tasks:
        raise ValueError(f"{tasks_per_step} tasks per step but only {num_tasks} tasks")
    out: list[np.ndarray] = []
    pos, need = int(step) * tasks_per_step, tasks_per_step
    while need:
        epoch, i = divmod(pos, num_tasks)
        take = min(need, num_tasks - i)
        out.append(np.random.default_rng([seed, epoch, 7]).permutation(num_tasks)[i : i + take])
        pos, need = pos + take, need - take
    return np.concatenate(out)


def fingerprint(task_ids, *, group_size: int, batch_size: int, seed: int) -> str:
    """What fixes the run's data order (the pool's task ids, `rl.group_size`, `train.batch_size`, `seed`), hashed:
    a resumed run with another fingerprint would see other tasks at the same step."""
    h = hashlib.sha256(json.dumps([list(task_ids), int(group_size), int(batch_size), int(seed)]).encode())
    return h.hexdigest()[:16]
