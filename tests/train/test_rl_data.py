"""The RL data order (`train.rl_data`): every epoch one permutation, the step count, the fingerprint."""

import numpy as np

from rcgrpo_jax.train import rl_data


def test_task_order_visits_every_task_once_per_epoch():
    """The step is the data position; every epoch (10 tasks, 3 per step) is one whole permutation, and a
    step that crosses an epoch boundary takes the end of one and the start of the next."""
    a = [rl_data.task_indices(10, 3, seed=0, step=s) for s in range(20)]
    assert [list(x) for x in a] == [list(rl_data.task_indices(10, 3, seed=0, step=s)) for s in range(20)]
    assert all(len(x) == 3 for x in a)
    stream = np.concatenate(a)
    for e in range(6):  # 60 task slots = 6 whole epochs
        assert sorted(stream[e * 10 : (e + 1) * 10].tolist()) == list(range(10)), e
    assert stream[:10].tolist() != stream[10:20].tolist()  # each epoch its own permutation
    assert rl_data.steps_for(720, 256, 400) == 1125  # Table 10's 400 epochs at batch 256


def test_total_steps_caps_epochs_by_max_steps():
    assert rl_data.total_steps(2, 0, 10, 3) == 7  # ceil(2 * 10 / 3)
    assert rl_data.total_steps(2, 5, 10, 3) == 5  # capped
    assert rl_data.total_steps(0, 4, 10, 3) == 4  # max_steps alone


def test_the_fingerprint_changes_with_what_fixes_the_order():
    def fp(ids=("a", "b"), group=5, batch=40, seed=0):
        return rl_data.fingerprint(list(ids), group_size=group, batch_size=batch, seed=seed)

    base = fp()
    assert base == fp() and len(base) == 16
    for other in (fp(ids=("b", "a")), fp(group=4), fp(batch=20), fp(seed=1)):
        assert other != base
