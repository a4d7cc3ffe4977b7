"""Multi-process correctness: the helpers of rcgrpo_jax.multihost; one RL update, one batched rollout, one
evaluation and one full `rl_trainer.run` step (with its checkpoint) run by 2 processes x 4 CPU devices
(jax.distributed on localhost, each process feeding only its own rows and stepping only its own
environments) equal to the same work by 1 process x 8 devices."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from rcgrpo_jax import multihost, sharding
from tests.helpers import multihost_launch as mh_launch
from tests.helpers import multihost_worker as mh_worker

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)

# ----------------------------------------------------------------------------------------------------
# Helpers, single process.


@given(st.integers(0, 50), st.integers(1, 7))
def test_process_slice_partitions_in_order(n, count):
    slices = [multihost.process_slice(n, i, count) for i in range(count)]
    assert [i for s in slices for i in range(n)[s]] == list(range(n))  # every item once, in order
    sizes = [s.stop - s.start for s in slices]
    assert max(sizes) - min(sizes) <= 1


def test_process_slice_example():
    assert [multihost.process_slice(10, i, 3) for i in range(3)] == [slice(0, 4), slice(4, 7), slice(7, 10)]
    assert multihost.process_slice(10) == slice(0, 10)  # one process here


def test_place_gather_and_local_value_single_process():
    mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    sh = sharding.batch_sharding(mesh, 2)
    assert sh == NamedSharding(mesh, P(("data", "fsdp"), None))
    x = np.arange(24, dtype=np.float32).reshape(8, 3)
    g = multihost.place({"x": x}, sh)["x"]
    assert g.sharding == sh and g.shape == (8, 3)
    out = multihost.gather({"x": g, "s": jnp.float32(2.5)})
    np.testing.assert_array_equal(out["x"], x)
    assert float(out["s"]) == 2.5
    np.testing.assert_array_equal(multihost.local_value(g), x)


# ----------------------------------------------------------------------------------------------------
# One RL update: 2 processes x 4 devices == 1 process x 8 devices.


def _inputs(ckpt: str) -> dict[str, np.ndarray]:
    """16 rows: 8 long ones (the 32 bucket) and 8 short ones (the 16 bucket) as two micro-batches; old
    log-probs = the model's own + noise so ratios spread across the clip range; a reference a little off."""
    from rcgrpo_jax.models.hf_io import load_hf
    from rcgrpo_jax.train import model_prep, rl_step

    rng = np.random.default_rng(0)
    model_cfg, params = model_prep.model_config(mh_worker._config(), ckpt), load_hf(ckpt, dtype="float32")[1]
    rows, length = 16, 32
    lens = np.array([32, 30, 29, 27, 24, 21, 19, 17, 16, 15, 14, 13, 12, 11, 10, 9])
    tokens = rng.integers(3, model_cfg.vocab_size, (rows, length)).astype(np.int32)
    token_mask = np.arange(length)[None] < lens[:, None]
    tokens = np.where(token_mask, tokens, 0).astype(np.int32)
    loss_mask = (token_mask[:, 1:] & (np.arange(1, length)[None] >= 4)).astype(np.float32)
    lp = np.asarray(
        jax.jit(lambda p, t, m: rl_step.sequence_logprobs(model_cfg, p, t, m, mh_worker.CHUNK)[0])(
            params, tokens, token_mask
        )
    )
    return {
        "tokens": tokens,
        "token_mask": token_mask,
        "loss_mask": loss_mask,
        "old_logp": (lp + rng.normal(0, 0.3, lp.shape) * loss_mask).astype(np.float32),
        "ref_logp": (lp + rng.normal(0, 0.2, lp.shape) * loss_mask).astype(np.float32),
        "advantages": rng.normal(0, 1, rows).astype(np.float32),
        "per_rollout/clip_scale": np.linspace(0.5, 1.0, rows).astype(np.float32),
        "micro/0": np.arange(8),
        "micro/1": np.arange(8, 16),
    }


@pytest.fixture(scope="module")
def update_runs(tiny_ckpt, tmp_path_factory):
    """(inputs, the 1 x 8 result in this process, the 2 x 4 results of both worker processes)."""
    d = tmp_path_factory.mktemp("update")
    inputs = _inputs(tiny_ckpt)
    np.savez(d / "inputs.npz", **inputs)
    batch = {k: v for k, v in inputs.items() if not k.startswith("micro/")}
    single = mh_worker.update(tiny_ckpt, batch, [inputs["micro/0"], inputs["micro/1"]])
    outs = mh_launch.run_workers(
        ["update", "--ckpt", tiny_ckpt, "--inputs", str(d / "inputs.npz")], timeout=150, log_dir=str(d)
    )
    return inputs, single, [dict(np.load(o)) for o in outs]


def test_two_process_update_equals_single_process(update_runs):
    inputs, single, multi = update_runs
    for out in multi:  # every process reads the same global values
        assert set(out) == set(single)
        assert out["metrics/loss_tokens"] == single["metrics/loss_tokens"] == inputs["loss_mask"].sum()
        assert bool(out["metrics/finite"])
        for k in ("loss", "grad_norm", "kl", "pg_loss", "ratio_mean", "clip_frac_low", "clip_frac_high"):
            np.testing.assert_allclose(out[f"metrics/{k}"], single[f"metrics/{k}"], rtol=1e-5, atol=1e-7, err_msg=k)
        np.testing.assert_allclose(out["row_entropy"], single["row_entropy"], rtol=1e-5)
        np.testing.assert_array_equal(out["row_count"], inputs["loss_mask"].sum(1))
        for k in (k for k in single if k.startswith("params/")):
            np.testing.assert_allclose(out[k], single[k], atol=1e-6, err_msg=k)
    # the update did something, and the noise put some tokens outside the clip range
    assert single["metrics/grad_norm"] > 0 and single["metrics/kl"] > 0
    assert 0 < single["metrics/clip_frac_low"] + single["metrics/clip_frac_high"] < 1


# ----------------------------------------------------------------------------------------------------
# One batched greedy rollout: each of 2 processes steps its own environments, the sampler runs on the
# global mesh; the gathered episodes equal the plain single-process engine's.


@pytest.fixture(scope="module")
def rollout_runs(tiny_ckpt, tmp_path_factory):
    import json

    d = tmp_path_factory.mktemp("rollout")
    single = mh_worker.rollout(tiny_ckpt, lockstep=False)
    outs = mh_launch.run_workers(["rollout", "--ckpt", tiny_ckpt], timeout=150, log_dir=str(d), suffix="json")
    multi = []
    for o in outs:
        with open(o) as f:
            got = json.load(f)
        multi.append((got["episodes"], got["stats"]))
    return single, multi


def test_two_process_rollout_equals_single_process(rollout_runs):
    (eps1, stats1), multi = rollout_runs
    assert [e["turn"] + 1 for e in eps1 if e["done_reason"] == "completed"] == [
        n for n, e in zip(mh_worker.TURNS, eps1) if e["done_reason"] == "completed"
    ]
    # uneven episode lengths: the second process's episodes end first, so it drains while the first steps on
    steps = [e["steps"] for e in eps1]
    assert max(steps[4:]) < max(steps[:4])
    for eps, stats in multi:  # every process holds every episode
        assert stats == stats1  # the model policy saw the same calls (rows computed, shrinks)
        assert [e["task_id"] for e in eps] == [e["task_id"] for e in eps1]
        for a, b in zip(eps, eps1):
            assert a["tokens"] == b["tokens"] and a["loss_mask"] == b["loss_mask"], a["task_id"]
            assert (a["done_reason"], a["steps"], a["turn"]) == (b["done_reason"], b["steps"], b["turn"])
            np.testing.assert_allclose(a["logprobs"], b["logprobs"], rtol=1e-5, atol=1e-5)
        assert sum(sum(e["loss_mask"]) for e in eps) > 0


# ----------------------------------------------------------------------------------------------------
# The episode record the processes exchange after their rollouts.


def test_episode_record_round_trips_through_json():
    import json

    from rcgrpo_jax.rl import diagnostics
    from rcgrpo_jax.rollout import distributed
    from rcgrpo_jax.rollout.episode import Episode

    e = Episode("t1", group=3, rollout_index=1, reward_token="<|low_reward|>")
    e.add_context([5, 6, 7])
    e.add_sampled([8, 9], np.asarray([-0.1, -2.5], np.float32))
    call = {"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
    e.messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x", "tool_calls": [call]}]
    e.tools = [{"type": "function", "function": {"name": "f"}}]
    e.steps, e.parse_errors, e.reward = 1, 2, 0.75
    e.finish("max_context")
    e.verdict = {"valid": False, "error_type": "x", "odd": {1, 2}}  # a set is not JSON: sent as its str
    back = distributed.from_record(json.loads(json.dumps(distributed.to_record(e))))
    assert (back.task_id, back.group, back.rollout_index, back.reward_token) == ("t1", 3, 1, "<|low_reward|>")
    assert back.tokens == e.tokens and back.loss_mask == [0, 0, 0, 1, 1] and back.step_spans == [(0, 3, 5)]
    np.testing.assert_array_equal(back.arrays()["logprobs"], e.arrays()["logprobs"])  # float32 exact
    assert (back.steps, back.parse_errors, back.reward) == (1, 2, 0.75)
    assert (back.done_reason, back.truncated) == ("max_context", True)
    assert back.verdict == {"valid": False, "error_type": "x", "odd": "{1, 2}"}
    assert back.messages == [] and back.tools == []  # the conversation only travels when a caller reads it
    with_msgs = distributed.from_record(json.loads(json.dumps(distributed.to_record(e, messages=True))))
    assert with_msgs.messages == e.messages and with_msgs.tools == e.tools
    assert diagnostics.rollout_metrics([with_msgs]) == diagnostics.rollout_metrics([e])


# ----------------------------------------------------------------------------------------------------
# The evaluation stage's `evaluate` (greedy, two rollout batches): each process builds only its share of
# each batch's environments (`rollout.distributed`), and both return the single process's results.


def test_two_process_evaluate_equals_single_process(world_ckpt, tmp_path):
    import json

    single = json.loads(json.dumps(mh_worker.eval_run(world_ckpt)))  # as the workers' results travel: JSON
    outs = mh_launch.run_workers(["eval_run", "--ckpt", world_ckpt], timeout=150, log_dir=str(tmp_path), suffix="json")
    multi = []
    for o in outs:
        with open(o) as f:
            multi.append(json.load(f))
    ids = single["tasks"]
    assert len(ids) == mh_worker.EVAL_TASKS and len({i.rsplit("_", 1)[0] for i in ids}) == len(ids)
    assert single["built"] == ids and [r["id"] for r in single["results"]] == ids
    assert all(r["steps"] >= 1 and r["messages"] for r in single["results"])
    for p, out in enumerate(sorted(multi, key=lambda o: o["process"])):
        assert out["results"] == single["results"]  # every process holds every episode's result
        # batches [0, 4) and [4, 5), each split between the processes in order (process 1 gets none of the 2nd)
        rows = [b + r for b, size in ((0, 4), (4, 1)) for r in range(size)[multihost.process_slice(size, p, 2)]]
        assert out["built"] == [ids[r] for r in rows]


# ----------------------------------------------------------------------------------------------------
# One full RL step by `rl_trainer.run` (rollouts on the world's tasks, rewards, advantages, reference, PPO update,
# checkpoint at step 1): 2 processes x 4 devices, each stepping only its own environments, equal to
# 1 process x 8 devices; the 2-process checkpoint restores to the 1-process run's params.


def _record(out: dict) -> dict:
    import json

    return json.loads(str(out["record"]))


@pytest.fixture(scope="module")
def rl_runs(world_ckpt, tmp_path_factory):
    d = tmp_path_factory.mktemp("rl_run")
    single = mh_worker.rl_run(world_ckpt, str(d / "single"))
    outs = mh_launch.run_workers(
        ["rl_run", "--ckpt", world_ckpt, "--workdir", str(d / "multi")], timeout=500, log_dir=str(d)
    )
    return single, [dict(np.load(o)) for o in outs], str(d / "multi")


def test_two_process_rl_step_equals_single_process(rl_runs):
    from rcgrpo_jax.train import logging as log_lib

    single, multi, _ = rl_runs
    one = _record(single)
    assert one["summary"] == {"step": 1, "reason": "done", "total_steps": 1}
    eps1 = one["episodes"]
    assert [(e["group"], e["rollout_index"]) for e in eps1] == [(k, j) for k in range(4) for j in range(2)]
    assert one["metrics"]["grad_norm"] > 0 and one["metrics"]["loss_tokens"] > 0  # the step trained on something
    assert one["metrics"]["adv_abs_mean"] > 0 and one["metrics"]["kl"] > 0
    want = log_lib.deterministic(one["metrics"])
    for out in multi:
        rec = _record(out)
        assert rec["summary"] == one["summary"]
        eps = rec["episodes"]  # every process holds every episode, group-major, as the single process
        assert [(e["task_id"], e["group"], e["rollout_index"], e["reward_token"]) for e in eps] == [
            (e["task_id"], e["group"], e["rollout_index"], e["reward_token"]) for e in eps1
        ]
        for a, b in zip(eps, eps1):
            assert a["tokens"] == b["tokens"] and a["done_reason"] == b["done_reason"], a["task_id"]
            assert a["reward"] == b["reward"], a["task_id"]
            np.testing.assert_allclose(a["logprobs"], b["logprobs"], rtol=1e-5, atol=1e-5)
        got = log_lib.deterministic(rec["metrics"])
        assert set(got) == set(want)
        for k, v in want.items():
            np.testing.assert_allclose(got[k], v, rtol=1e-5, atol=1e-6, err_msg=k)


def test_each_process_runs_only_its_own_environments(rl_runs):
    from collections import Counter

    single, multi, _ = rl_runs
    one = _record(single)
    tasks = [e["task_id"] for e in one["episodes"]]
    assert one["built"] == tasks  # one process builds all 8
    recs = sorted((_record(o) for o in multi), key=lambda r: r["process"])
    for p, rec in enumerate(recs):
        # rollout_chunk 4: chunks [0, 4) and [4, 8), each split in half between the processes, in order
        rows = [c + r for c in (0, 4) for r in range(4)[multihost.process_slice(4, p, 2)]]
        assert rec["built"] == [tasks[r] for r in rows]
        assert set(rec["stepped"]) <= set(rec["built"])
    assert not set(recs[0]["built"]) & set(recs[1]["built"])  # groups (tasks) of a chunk do not straddle here
    # together the two processes made exactly the environment calls of the single-process run
    assert Counter(recs[0]["stepped"]) + Counter(recs[1]["stepped"]) == Counter(one["stepped"])
    assert len(one["stepped"]) >= len(tasks)


def test_two_process_checkpoint_restores_to_the_single_process_params(rl_runs, world_ckpt):
    import json
    import os

    from rcgrpo_jax.models.hf_io import load_hf
    from rcgrpo_jax.train import logging as log_lib

    single, multi, workdir = rl_runs
    one = _record(single)
    assert one["ckpt_steps"] == [1] and one["ckpt_meta_ok"]
    keys = [k for k in single if k.startswith("params/")]
    assert keys
    for out in multi:
        rec = _record(out)
        assert rec["ckpt_steps"] == [1] and rec["ckpt_meta_ok"] and rec["ckpt_step"] == one["ckpt_step"]
        assert sorted(k for k in out if k.startswith("params/")) == sorted(keys)
        for k in keys:
            np.testing.assert_allclose(out[k], single[k], atol=1e-6, err_msg=k)
    # the checkpoint holds the trained params, not the initial ones
    _, initial = load_hf(world_ckpt)
    flat = {
        "params/" + sharding.path_str(p): np.asarray(v) for p, v in jax.tree_util.tree_flatten_with_path(initial)[0]
    }
    same_shape = [k for k in keys if k in flat and flat[k].shape == single[k].shape]
    assert same_shape and max(float(np.abs(single[k] - flat[k]).max()) for k in same_shape) > 1e-6
    # only process 0 wrote metrics: one row, its own
    rows = log_lib.read_metrics(os.path.join(workdir, log_lib.METRICS_FILE))
    p0 = next(_record(o) for o in multi if _record(o)["process"] == 0)
    assert [json.dumps(r, sort_keys=True) for r in rows] == [json.dumps(p0["metrics"], sort_keys=True)]


# ----------------------------------------------------------------------------------------------------
# SIGTERM to one process: every process stops after the same step, with one checkpoint of that step.


def test_any_process_single_process_is_identity():
    assert multihost.any_process(True) is True
    assert multihost.any_process(False) is False
    assert multihost.any_process(np.bool_(True)) is True


def test_sigterm_to_one_process_stops_every_process_at_the_same_step(tmp_path):
    import json

    outs = mh_launch.run_workers(
        ["sigterm_run", "--ckpt", "", "--workdir", str(tmp_path / "run")],
        timeout=90,
        log_dir=str(tmp_path),
        suffix="json",
    )
    recs = sorted((json.load(open(o)) for o in outs), key=lambda r: r["process"])
    assert [r["process"] for r in recs] == [0, 1]
    at = mh_worker.SIGTERM_AT
    assert at < mh_worker.SIGTERM_STEPS  # the run would have gone on without the signal
    want_w = (np.arange(16) + at).tolist()
    for rec in recs:  # process 1 never got the signal and still stops with process 0
        assert rec["reason"] == "sigterm", rec
        assert rec["step"] == at and rec["ran"] == list(range(1, at + 1)), rec
        assert rec["ckpt_steps"] == [at] and rec["ckpt_meta"] == {"step": at}
        assert rec["restored"] == want_w  # the checkpoint holds the state after step `at`
        assert rec["last_loss"] == float(sum(want_w))
