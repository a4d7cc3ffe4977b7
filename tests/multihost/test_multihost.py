"""Multi-process correctness: the helpers of rcgrpo_jax.multihost, and one RL update run by 2 processes x 4
CPU devices (jax.distributed on localhost, each process feeding only its own rows) equal to the same update
by 1 process x 8 devices."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st
from jax.sharding import NamedSharding, PartitionSpec as P

from rcgrpo_jax import multihost, sharding
import mh_launch
import mh_worker


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


def test_local_rows_gather_and_local_value_single_process():
  mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  sh = NamedSharding(mesh, P(("data", "fsdp"), None))
  assert multihost.local_rows(sh, 8) == slice(0, 8)
  x = np.arange(24, dtype=np.float32).reshape(8, 3)
  g = multihost.global_rows({"x": x}, {"x": sh}, 8)["x"]
  assert g.sharding == sh and g.shape == (8, 3)
  rows, block = multihost.local_row_block(g)
  assert rows == slice(0, 8)
  np.testing.assert_array_equal(block, x)
  out = multihost.gather({"x": g, "s": jnp.float32(2.5)})
  np.testing.assert_array_equal(out["x"], x)
  assert float(out["s"]) == 2.5
  np.testing.assert_array_equal(multihost.local_value(g), x)


def test_local_rows_rejects_non_contiguous_blocks():
  class Fake:  # two blocks with a gap, as a process would hold under an interleaved device order
    def addressable_devices_indices_map(self, shape):
      return {0: (slice(0, 2),), 1: (slice(4, 6),)}
  with pytest.raises(ValueError, match="non-contiguous"):
    multihost.local_rows(Fake(), 8)


# ----------------------------------------------------------------------------------------------------
# One RL update: 2 processes x 4 devices == 1 process x 8 devices.


def _inputs(ckpt: str) -> dict[str, np.ndarray]:
  """16 rows: 8 long ones (the 32 bucket) and 8 short ones (the 16 bucket) as two micro-batches; old
  log-probs = the model's own + noise so ratios spread across the clip range; a reference a little off."""
  from rcgrpo_jax.models.hf_io import load_hf
  from rcgrpo_jax.train import rl_step, sft

  rng = np.random.default_rng(0)
  model_cfg, params = sft.model_config(mh_worker._config(), ckpt), load_hf(ckpt, dtype="float32")[1]
  rows, length = 16, 32
  lens = np.array([32, 30, 29, 27, 24, 21, 19, 17, 16, 15, 14, 13, 12, 11, 10, 9])
  tokens = rng.integers(3, model_cfg.vocab_size, (rows, length)).astype(np.int32)
  token_mask = np.arange(length)[None] < lens[:, None]
  tokens = np.where(token_mask, tokens, 0).astype(np.int32)
  loss_mask = (token_mask[:, 1:] & (np.arange(1, length)[None] >= 4)).astype(np.float32)
  lp = np.asarray(jax.jit(lambda p, t, m: rl_step.sequence_logprobs(model_cfg, p, t, m, mh_worker.CHUNK)[0])(
      params, tokens, token_mask))
  return {"tokens": tokens, "token_mask": token_mask, "loss_mask": loss_mask,
          "old_logp": (lp + rng.normal(0, 0.3, lp.shape) * loss_mask).astype(np.float32),
          "ref_logp": (lp + rng.normal(0, 0.2, lp.shape) * loss_mask).astype(np.float32),
          "advantages": rng.normal(0, 1, rows).astype(np.float32),
          "clip_scale": np.linspace(0.5, 1.0, rows).astype(np.float32),
          "micro/0": np.arange(8), "micro/1": np.arange(8, 16)}


@pytest.fixture(scope="module")
def update_runs(tiny_ckpt, tmp_path_factory):
  """(inputs, the 1 x 8 result in this process, the 2 x 4 results of both worker processes)."""
  d = tmp_path_factory.mktemp("update")
  inputs = _inputs(tiny_ckpt)
  np.savez(d / "inputs.npz", **inputs)
  batch = {k: v for k, v in inputs.items() if not k.startswith("micro/")}
  single = mh_worker.update(tiny_ckpt, batch, [inputs["micro/0"], inputs["micro/1"]])
  outs = mh_launch.run_workers(["update", "--ckpt", tiny_ckpt, "--inputs", str(d / "inputs.npz")],
                            timeout=150, log_dir=str(d))
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
      n for n, e in zip(mh_worker.TURNS, eps1) if e["done_reason"] == "completed"]
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
