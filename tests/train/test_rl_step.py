"""The RL update on the tiny checkpoint: one sharded step on a (2, 2, 2) mesh, split into length-cut
micro-batches, equals the unsharded single-micro-batch step; host-side packing and planning."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rcgrpo_jax import sharding
from rcgrpo_jax.models.hf_io import load_hf
from rcgrpo_jax.rl import losses
from rcgrpo_jax.train import model_prep, optim, rl_batch, rl_step
from rcgrpo_jax.train import state as state_lib
from rcgrpo_jax.train.rl_batch import RolloutBatch

pytestmark = pytest.mark.slow  # the fast lane skips it (pytest.ini)


def test_pack_shifts_targets():
    out = rl_batch.pack(
        [np.array([5, 6, 7, 8])],
        [np.array([0, 0, 1, 1])],
        [np.array([0.0, 0.0, -0.5, -0.25], np.float32)],
        np.array([1.5]),
        {"clip_scale": np.array([0.5], np.float32)},
        length=6,
        pad_id=0,
    )
    np.testing.assert_array_equal(out.tokens, [[5, 6, 7, 8, 0, 0]])
    np.testing.assert_array_equal(out.token_mask, [[1, 1, 1, 1, 0, 0]])
    # column t holds token t + 1: tokens 7 and 8 (columns 1 and 2) were sampled
    np.testing.assert_array_equal(out.loss_mask, [[0, 1, 1, 0, 0]])
    np.testing.assert_allclose(out.old_logp, [[0, -0.5, -0.25, 0, 0]])
    assert (out.advantages.tolist(), out.per_rollout["clip_scale"].tolist(), out.ref_logp) == ([1.5], [0.5], None)


def test_minibatch_plan_and_take():
    lengths = np.array([10, 50, 20, 40, 30, 60])
    perm = np.array([5, 0, 2, 1, 4, 3])
    plan = rl_batch.minibatch_plan(perm, lengths, num_minibatches=2, micro=2)
    # mini-batch 0 = rows {5, 0, 2} sorted by length (longest first), cut into micro-batches of 2
    assert [r.tolist() for r in plan[0]] == [[5, 2], [0]]
    assert [r.tolist() for r in plan[1]] == [[1, 3], [4]]  # lengths 50, 40 | 30
    n = len(lengths)
    batch = rl_batch.pack(
        [np.arange(k) for k in lengths],
        [np.ones(k) for k in lengths],
        [np.zeros(k) for k in lengths],
        np.arange(n, dtype=np.float32),
        {"clip_scale": np.ones(n), "vec": np.arange(2 * n).reshape(n, 2)},
        length=64,
        pad_id=0,
    )
    mb = batch.take(np.array([0, 2]), (16, 32, 64))
    assert mb.tokens.shape == (2, 32) and mb.loss_mask.shape == (2, 31) and mb.ref_logp is None
    np.testing.assert_array_equal(mb.advantages, [0, 2])
    np.testing.assert_array_equal(mb.per_rollout["vec"], [[0, 1], [4, 5]])  # every leaf, whatever its name
    assert jax.tree.structure(mb.per_rollout) == jax.tree.structure(batch.per_rollout)
    with pytest.raises(ValueError, match="exceeds the largest bucket"):
        rl_batch.bucket_for(65, (16, 32, 64))


def test_update_logprobs_are_the_samplers_at_its_temperature(tiny_ckpt):
    """The sampler draws from softmax(logits / T) and reports that distribution's log-probs; the update's,
    the reference's and the recompute's log-probs (rl_step.make_logprob_fn at rl.temperature) equal them,
    so the PPO ratio starts at exactly 1 at any temperature."""
    from rcgrpo_jax.sampling import generate

    model_cfg, params = model_prep.model_config(_config(), tiny_ckpt), load_hf(tiny_ckpt, dtype="float32")[1]
    prompt = [5, 9, 13, 17, 21]
    for temperature in (0.6, 1.4):
        res = generate(model_cfg, params, [prompt], max_new_tokens=8, temperature=temperature, rng=jax.random.key(3))
        seq = prompt + res.tokens[0]
        fn = rl_step.make_logprob_fn(model_cfg, 256, temperature)
        lp = np.asarray(fn(params, jnp.asarray([seq]), jnp.ones((1, len(seq)), bool)))[0, len(prompt) - 1 :]
        np.testing.assert_allclose(lp, res.logprobs[0], atol=2e-4)
        at_one = np.asarray(
            rl_step.make_logprob_fn(model_cfg, 256)(params, jnp.asarray([seq]), jnp.ones((1, len(seq)), bool))
        )
        assert np.max(np.abs(at_one[0, len(prompt) - 1 :] - res.logprobs[0])) > 1e-2  # T = 1 would be wrong


def _batch(logprobs, params, vocab, rng):
    """8 rows of different lengths; old log-probs = the model's own + noise, so ratios spread across the
    clip range; a reference a little off."""
    rows, length = 8, 48
    lens = np.array([48, 40, 33, 30, 24, 20, 18, 12])
    tokens = rng.integers(3, vocab, (rows, length)).astype(np.int32)
    token_mask = np.arange(length)[None] < lens[:, None]
    tokens = np.where(token_mask, tokens, 0)
    loss_mask = (token_mask[:, 1:] & (np.arange(1, length)[None] >= 6)).astype(np.float32)
    lp = np.asarray(logprobs(params, jnp.asarray(tokens), jnp.asarray(token_mask)))
    return RolloutBatch(
        tokens=tokens,
        token_mask=token_mask,
        loss_mask=loss_mask,
        old_logp=(lp + rng.normal(0, 0.3, lp.shape) * loss_mask).astype(np.float32),
        ref_logp=(lp + rng.normal(0, 0.2, lp.shape) * loss_mask).astype(np.float32),
        advantages=rng.normal(0, 1, rows).astype(np.float32),
        per_rollout={"clip_scale": np.linspace(0.5, 1.0, rows).astype(np.float32)},
    )


def _update(ckpt, mesh_axes, batch, micro_rows):
    mesh = sharding.make_mesh(mesh_axes)
    model_cfg = model_prep.model_config(_config(), ckpt)
    params = load_hf(ckpt, dtype="float32", mesh=mesh, rules=sharding.TRAIN_RULES)[1]
    abstract_params = jax.eval_shape(lambda: params)
    tx = optim.make_optimizer(_config().optim, 10)
    abstract = state_lib.abstract_state(abstract_params, tx)
    state_sh = state_lib.state_shardings(abstract, mesh, model_prep.param_shardings(abstract_params, mesh, "train"), tx)
    cfg = losses.default_config("ppo_clip")
    cfg.kl_beta = 0.1
    updater = rl_step.Updater(model_cfg, tx, "ppo_clip", cfg, 256, state_sh, mesh)
    with jax.set_mesh(mesh), sharding.axis_rules(sharding.TRAIN_RULES.logical):
        state = jax.device_put(state_lib.create(params, tx, jax.random.PRNGKey(0)), state_sh)
        micros = [batch.take(rows, (16, 32, 48)).put(mesh) for rows in micro_rows]
        state, metrics, rows = updater(state, micros)
    return jax.device_get(metrics), jax.device_get(state.params), jax.device_get(rows)


def _config():
    from configs import rc_grpo

    c = rc_grpo.get_config("tiny")
    # Parameters after one Adam step are compared to 2e-6 below. Adam's first step is lr * g / (|g| + eps):
    # with eps 1e-8 an element whose gradient is ~1e-9 (float32 rounding of the sharded vs unsharded sum)
    # moves by a different fraction of lr (one of 16384 elements by 5e-6). eps 1e-6 keeps every element's
    # update a well-conditioned function of its gradient, so the check compares the gradients' values.
    c.optim.eps = 1e-6
    return c


@pytest.fixture(scope="module")
def case(tiny_ckpt):
    """A batch, the unsharded update of it in two length-cut micro-batches, and the registry loss of the
    whole batch computed directly."""
    model_cfg, params = model_prep.model_config(_config(), tiny_ckpt), load_hf(tiny_ckpt, dtype="float32")[1]
    logprobs = jax.jit(lambda p, t, m: rl_step.sequence_logprobs(model_cfg, p, t, m, 256)[0])
    batch = _batch(logprobs, params, model_cfg.vocab_size, np.random.default_rng(0))
    cfg = losses.default_config("ppo_clip")
    cfg.kl_beta = 0.1
    logp = logprobs(params, jnp.asarray(batch.tokens), jnp.asarray(batch.token_mask))
    s, d, _ = losses.get("ppo_clip")(
        logp,
        batch.old_logp,
        batch.ref_logp,
        batch.advantages,
        batch.loss_mask,
        config=cfg,
        per_rollout=batch.per_rollout,
    )
    unsharded = _update(tiny_ckpt, {"data": 1, "fsdp": 1, "tensor": 1}, batch, [np.arange(4), np.arange(4, 8)])
    return batch, unsharded, float(s / d)


def test_loss_equals_the_registry_loss_on_the_whole_batch(case):
    """The accumulated (sum / denominator) loss is the policy loss of the full batch computed directly."""
    batch, (m, _, _), direct = case
    np.testing.assert_allclose(m["loss"], direct, rtol=1e-5)
    assert m["loss_tokens"] == batch.loss_mask.sum()


def test_sharded_update_equals_unsharded(tiny_ckpt, case):
    """(2, 2, 2) mesh, one micro-batch at the full length == one device, two micro-batches of 4 rows (the
    second cut to the 32-token bucket)."""
    batch, (m1, p1, r1), _ = case
    m8, p8, r8 = _update(tiny_ckpt, {"data": 2, "fsdp": 2, "tensor": 2}, batch, [np.arange(8)])
    assert m1["loss_tokens"] == m8["loss_tokens"] == batch.loss_mask.sum()
    assert bool(m1["finite"]) and bool(m8["finite"])
    for k in ("loss", "grad_norm", "kl", "pg_loss", "ratio_mean", "clip_frac_low", "clip_frac_high"):
        np.testing.assert_allclose(m8[k], m1[k], rtol=2e-5, atol=1e-6, err_msg=k)
    assert 0 < m1["clip_frac_low"] + m1["clip_frac_high"] < 1  # the noise put some tokens outside the clip range
    assert m1["kl"] > 0
    # One Adam step moves a parameter by at most ~lr: the difference is compared to that scale (1% of lr; a
    # tolerance relative to each leaf's own magnitude fails on leaves that start at 0, whose values are ~lr)
    lr = _config().optim.lr
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-2 * lr), p8, p1)
    # per-row entropy sums and target counts come back in row order
    np.testing.assert_allclose(np.concatenate([r1[0][0], r1[1][0]]), r8[0][0], rtol=1e-4)
    np.testing.assert_array_equal(r8[0][1], batch.loss_mask.sum(1))
