"""Generated-world tasks (BFCL format + `allowed_functions`) through the same BFCLEnv and checker."""

import pytest

from rcgrpo_jax.envs.bfcl import BFCLEnv, Task, ground_truth_script, run_script
from rcgrpo_jax.worlds import generate_world


@pytest.fixture(scope="module")
def world():
    train, test = generate_world(0, 4, 2)
    return [Task.from_entry(e) for e in train + test]


def test_world_ground_truth_scores_one_and_passes_official(world):
    for task in world:
        env = run_script(BFCLEnv(task), ground_truth_script(task))
        assert env.reward() == 1.0, task.id
        assert env.official_verdict()["valid"], task.id


def test_allowed_functions_limit_tools_and_calls(world):
    task = world[0]
    env = BFCLEnv(task)
    _, tools = env.reset()
    assert {t["function"]["name"] for t in tools} == set(task.allowed_functions)
    # A public method of an involved class that the task does not allow is refused, not run.
    hidden = "rm" if "GorillaFileSystem" in task.involved_classes else "logarithm"
    assert hidden not in task.allowed_functions
    [result] = env.step([{"name": hidden, "arguments": {"file_name": "x"}}])
    assert "rror" in result and env.executed_calls() == []


def test_from_entry_rejects_incomplete_entries():
    with pytest.raises(ValueError, match="ground_truth"):
        Task.from_entry({"id": "x_0", "question": [], "initial_config": {}, "involved_classes": []})
