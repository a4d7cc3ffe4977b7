"""rollout.distributed's lockstep driver is `multihost.LockstepPolicy` (replace included): in one process
it is transparent (the inner policy sees exactly the engine's calls, in a single process's order, and the
episodes equal the bare policy's in both render modes), and an inner policy without `replace` is refused
by the re-render mode's start-up check. The two-process runs are in tests/multihost."""

from __future__ import annotations

import numpy as np
import pytest

from rcgrpo_jax import chat, multihost
from rcgrpo_jax.rollout import (
    EpisodeSpec,
    RolloutConfig,
    ScriptedPolicy,
    StepSample,
    distributed,
    oracle_texts,
    run_episodes,
)
from tests.helpers.fake_env import AdderEnv


class Recorder:
    """An inner policy that logs every call and answers act with a one-token sample naming the row."""

    def __init__(self):
        self.log: list[tuple] = []

    def start(self, prompts, groups):
        self.log.append(("start", [list(p) for p in prompts], list(groups)))

    def finish(self, rows):
        self.log.append(("finish", list(rows)))

    def replace(self, rows, contexts):
        self.log.append(("replace", list(rows), [list(c) for c in contexts]))

    def extend(self, rows, deltas):
        self.log.append(("extend", list(rows), [list(d) for d in deltas]))

    def act(self, rows, budgets):
        self.log.append(("act", list(rows), list(budgets)))
        return [StepSample([100 + r], np.zeros((1,), np.float32), True) for r in rows]


def test_lockstep_holds_calls_and_applies_them_in_a_single_processs_order():
    inner = Recorder()
    lock = multihost.LockstepPolicy(inner)
    lock.start([[1], [2, 2], [3]], [0, 0, 1])
    assert inner.log == [("start", [[1], [2, 2], [3]], [0, 0, 1])] and lock.offset == 0
    lock.extend([1], [[7]])
    lock.replace([0], [[5, 6]])
    lock.finish([2])
    assert len(inner.log) == 1  # held until the next act
    samples = lock.act([1, 0], [4, 3])
    assert [s.tokens for s in samples] == [[101], [100]]  # in the order asked
    assert inner.log[1:] == [
        ("finish", [2]),
        ("replace", [0], [[5, 6]]),
        ("extend", [1], [[7]]),
        ("act", [0, 1], [3, 4]),  # rows ascending, each with its own budget
    ]
    lock.finish([0, 1])
    lock.drain()  # applies the held finish, then no process asks for a step
    assert inner.log[5:] == [("finish", [0, 1])]


def test_an_inner_policy_without_replace_is_refused_by_the_rerender_check(tiny_qwen):
    _, _, _, tok, parser = tiny_qwen

    class AppendOnly:
        start = act = extend = finish = Recorder.start

    lock = multihost.LockstepPolicy(AppendOnly())
    assert lock.replace is None
    specs = [EpisodeSpec(AdderEnv(), "adder_0", group=0, rollout_index=0)]
    with pytest.raises(TypeError, match="needs a policy with replace"):
        run_episodes(specs, lock, tok, parser, RolloutConfig(max_context=512, render_mode=chat.RERENDER))


@pytest.mark.parametrize("mode", [chat.APPEND, chat.RERENDER])
def test_lockstep_in_one_process_gives_the_bare_policys_episodes(tiny_qwen, mode):
    _, _, _, tok, parser = tiny_qwen
    calls = [[[{"name": "add", "arguments": {"a": 2, "b": 3}}]], [[{"name": "add", "arguments": {"a": 4, "b": 5}}]]]
    wrong = [[[{"name": "add", "arguments": {"a": 1, "b": 1}}]], [[]]]
    scripts = [oracle_texts(calls, parser), oracle_texts(wrong, parser), oracle_texts(calls[:1], parser)]
    config = RolloutConfig(max_context=512, max_step_tokens=64, render_mode=mode)

    def episodes(wrap: bool):
        specs = [EpisodeSpec(AdderEnv(), f"adder_{k}", group=k, rollout_index=0) for k in range(len(scripts))]
        policy = ScriptedPolicy(tok, scripts, chat.end_of_turn_ids(tok)[0])
        driver = multihost.LockstepPolicy(policy) if wrap else policy
        out, _ = run_episodes(specs, driver, tok, parser, config)
        if wrap:
            driver.drain()
        return out

    bare, locked = episodes(False), episodes(True)
    assert [e.reward for e in bare] == [1.0, 0.0, 0.0]  # the script solves only the first
    for a, b in zip(bare, locked):
        assert distributed.to_record(a, messages=True) == distributed.to_record(b, messages=True)
    # the exchange format round-trips what the other processes receive
    for e in locked:
        back = distributed.from_record(distributed.to_record(e))
        assert distributed.to_record(back) == distributed.to_record(e) and back.tokens == e.tokens
