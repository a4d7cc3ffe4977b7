"""The judge's bounds: the http defaults end one item within a minute, a hung server is given up by the
item's deadline, and the per-step failure budget stops the run after a save (train/loop.py `StopRun`)."""

from __future__ import annotations

import socket
import threading
import time

import jax.numpy as jnp
import numpy as np
import pytest

from rcgrpo_jax import judges
from rcgrpo_jax.config_fields import ConfigError
from rcgrpo_jax.judges.http import http_config
from rcgrpo_jax.train import checkpoint as ckpt_lib
from rcgrpo_jax.train import logging as log_lib
from rcgrpo_jax.train import loop as loop_lib
from rcgrpo_jax.train import rl_trainer


def test_http_defaults_bound_one_item_under_a_minute():
    d = http_config()
    # An attempt lasts at most 2 x timeout_s (connect, then a read); a retry starts only if it can end by
    # max_item_s; a refused connection is retried at once.
    worst = max(d.max_item_s, 2 * d.timeout_s)
    assert worst < 60.0
    assert d.retries >= 1 and 2 * d.timeout_s + d.backoff_s <= d.max_item_s  # a fast failure still gets a retry
    judge = judges.HttpJudge("http://127.0.0.1:9/v1", "m", api_key_env="")
    assert (judge.timeout_s, judge.retries, judge.max_item_s) == (d.timeout_s, d.retries, d.max_item_s)


@pytest.fixture
def hung_server():
    """A port that accepts connections and never replies."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept():
        srv.settimeout(0.05)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}/v1"
    stop.set()
    t.join()
    for c in held:
        c.close()
    srv.close()


def test_a_hung_judge_is_given_up_by_the_items_deadline(hung_server):
    judge = judges.HttpJudge(
        hung_server, "m", api_key_env="", timeout_s=0.2, retries=10, backoff_s=0.01, max_item_s=0.5, log_first=0
    )
    t0 = time.monotonic()
    scores = judge([judges.JudgeInput(questions=("q",), reasoning=("r",))])
    elapsed = time.monotonic() - t0
    stats = judge.stats()
    assert scores.tolist() == [0.0] and stats["failures/timeout"] == 1
    # the first attempt times out at 0.2 s; a retry would end at 0.2 + 0.01 + 2 x 0.2 > 0.5, so none starts
    assert stats["requests"] == 1 and stats["retries"] == 0 and elapsed < 0.5


@pytest.mark.parametrize("failed,stops", [(0, False), (1, False), (2, True), (5, True)])
def test_the_budget_is_a_share_of_the_steps_items(failed, stops):
    if stops:  # more than 20% of 5 items
        with pytest.raises(loop_lib.StopRun, match=f"{failed} of 5 items failed"):
            rl_trainer.check_judge_budget(failed, 5, 0.2, "http:j")
    else:
        rl_trainer.check_judge_budget(failed, 5, 0.2, "http:j")


def test_the_budget_is_a_checked_field_of_the_judge_section():
    section = judges.default_config("http")
    assert judges.failure_budget(section) == 0.2
    section.max_failed_frac = 1.5
    with pytest.raises(ConfigError, match=r"config\.rl\.judge\.max_failed_frac: 1\.5 is not a share"):
        judges.check_config(section)


def test_a_stop_run_saves_the_state_before_that_step_and_stops(tmp_path):
    ck = ckpt_lib.Checkpointer(str(tmp_path / "checkpoints"), every_steps=100, max_to_keep=2)
    logger = log_lib.MetricsLogger(str(tmp_path), tensorboard=False)
    calls = []

    def step_fn(state, step):
        calls.append(step)
        if step == 2:
            raise loop_lib.StopRun("judge_failures", "judge x: 4 of 4 items failed this step")
        return {"w": state["w"] + 1}, {"finite": True, "nonfinite_in_row": 0}

    state, step, reason, last = loop_lib.run_steps(
        step_fn,
        {"w": jnp.zeros((4,), jnp.float32)},
        start=0,
        n_steps=10,
        settings=loop_lib.LoopSettings(log_every=1, max_nonfinite=0),
        ckpt=ck,
        logger=logger,
        progress=log_lib.Progress(10, enabled=False),
        meta=lambda s: {"step": s},
    )
    logger.close()
    assert calls == [0, 1, 2] and step == 2 and reason == "judge_failures"
    assert last == {"stop_message": "judge x: 4 of 4 items failed this step"}
    restored = ck.restore_latest({"w": jnp.zeros((4,), jnp.float32)}, report=lambda line: None)
    assert restored.step == 2 and restored.meta == {"step": 2}
    np.testing.assert_array_equal(np.asarray(restored.state["w"]), np.full(4, 2.0, np.float32))
    ck.close()
