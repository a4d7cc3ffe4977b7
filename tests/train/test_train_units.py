"""Unit tests of the trainer's pieces: schedule, guarded update, shardings, logging, tokenisation, data order."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from rcgrpo_jax.chat import NotAppendOnlyError, end_of_turn_ids
from rcgrpo_jax.train import logging as log_lib
from rcgrpo_jax.train import loop as loop_lib
from rcgrpo_jax.train import optim, runner, sft_data
from rcgrpo_jax.train import state as state_lib
from tests.helpers import train as train_helpers


def _optim_cfg(**kw):
    c = dict(lr=1.0, warmup_ratio=0.2, end_lr_ratio=0.1, weight_decay=0.0, b1=0.9, b2=0.999, eps=1e-8, clip_norm=1.0)
    c.update(kw)
    return ml_collections.ConfigDict(c)


def test_schedule_warmup_then_cosine():
    f = optim.schedule(1.0, total_steps=10, warmup_ratio=0.2, end_lr_ratio=0.1)
    # warmup over 2 steps: 0, 0.5, 1; then cosine over 8 steps from 1 to 0.1: halfway (step 6) = 0.55.
    np.testing.assert_allclose([f(0), f(1), f(2), f(6), f(10)], [0.0, 0.5, 1.0, 0.55, 0.1], atol=1e-6)


def test_weight_decay_skips_vectors():
    mask = optim.decay_mask({"w": jnp.ones((2, 3)), "scale": jnp.ones((3,))})
    assert mask == {"w": True, "scale": False}


class GuardedUpdateTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_finite_step_matches_optax_and_bad_steps_are_skipped(self):
        tx = optim.make_optimizer(_optim_cfg(lr=0.1, warmup_ratio=0.0, end_lr_ratio=1.0), 10)
        params = {"w": jnp.array([[1.0, -2.0]]), "b": jnp.array([0.5])}
        state = state_lib.create(params, tx, jax.random.PRNGKey(0))
        grads = {"w": jnp.array([[0.3, 0.4]]), "b": jnp.array([0.0])}
        step = self.variant(lambda s, g, l: state_lib.apply_gradients(s, g, tx, l))

        good, finite = step(state, grads, jnp.float32(1.0))
        updates, _ = tx.update(grads, tx.init(params), params)
        chex.assert_trees_all_close(good.params, optax.apply_updates(params, updates))
        assert bool(finite) and int(good.step) == 1 and int(good.nonfinite) == 0
        # Adam's first step moves each coordinate with a non-zero gradient by lr (sign of the gradient).
        np.testing.assert_allclose(good.params["w"], [[0.9, -2.1]], atol=1e-6)

        nan_grads = {"w": jnp.array([[jnp.nan, 0.4]]), "b": jnp.array([0.0])}
        bad1, f1 = step(good, nan_grads, jnp.float32(1.0))
        bad2, f2 = step(bad1, grads, jnp.float32(jnp.inf))  # a non-finite loss alone also skips
        assert not bool(f1) and not bool(f2)
        chex.assert_trees_all_equal(bad2.params, good.params)
        chex.assert_trees_all_equal(bad2.opt_state, good.opt_state)
        assert (int(bad1.nonfinite), int(bad2.nonfinite), int(bad2.step)) == (1, 2, 3)
        again, f3 = step(bad2, grads, jnp.float32(1.0))
        assert bool(f3) and int(again.nonfinite) == 0


def test_nonfinite_abort_after_limit():
    log_lib.check_nonfinite(step=7, in_a_row=2, limit=3)
    with pytest.raises(log_lib.NonFiniteError, match="3 non-finite steps in a row"):
        log_lib.check_nonfinite(step=8, in_a_row=3, limit=3)


def test_optimizer_moments_follow_param_sharding():
    mesh = jax.make_mesh((2, 4, 1), ("data", "fsdp", "tensor"))
    params = {"w": jnp.ones((8, 4)), "b": jnp.zeros((4,))}
    p_sh = {"w": NamedSharding(mesh, P("fsdp", None)), "b": NamedSharding(mesh, P())}
    tx = optim.make_optimizer(_optim_cfg(), 10)
    sh = state_lib.state_shardings(state_lib.abstract_state(jax.eval_shape(lambda: params), tx), mesh, p_sh, tx)
    adam = sh.opt_state[1][0]
    assert adam.mu["w"].spec == P("fsdp", None) and adam.nu["w"].spec == P("fsdp", None)
    assert adam.count.spec == P() and sh.step.spec == P() and sh.rng.spec == P()


def test_metrics_logger_truncates_on_resume(tmp_path):
    lg = log_lib.MetricsLogger(str(tmp_path), tensorboard=True)
    for s in (1, 2, 3):
        lg.write(s, {"loss": jnp.float32(s / 2), "finite": jnp.bool_(True), "time/step_s": 0.1 * s})
    lg.close()
    rows = log_lib.read_metrics(str(tmp_path / log_lib.METRICS_FILE))
    assert rows[2] == {"step": 3, "loss": 1.5, "finite": 1, "time/step_s": pytest.approx(0.3)}
    assert log_lib.deterministic(rows[2]) == {"step": 3, "loss": 1.5, "finite": 1}
    assert list((tmp_path / "tb").iterdir())  # TensorBoard events written
    lg = log_lib.MetricsLogger(str(tmp_path), tensorboard=False, resume_step=1)  # resumed from step 1
    lg.write(2, {"loss": 7.0})
    lg.close()
    assert [r["step"] for r in log_lib.read_metrics(str(tmp_path / log_lib.METRICS_FILE))] == [1, 2]
    assert log_lib.MetricsLogger(str(tmp_path), is_main=False).write(5, {"loss": 1.0})["loss"] == 1.0
    assert len(log_lib.read_metrics(str(tmp_path / log_lib.METRICS_FILE))) == 2  # non-main wrote nothing


def test_tokenize_masks_exactly_the_assistant_turns(tokenizer):
    ex = train_helpers.conversation(3, tools=True)
    tokens, mask = sft_data.tokenize_conversation(tokenizer, ex["messages"], ex["tools"], end_of_turn_ids(tokenizer))
    assert tokens.dtype == np.int32 and mask.shape == tokens.shape
    full = tokenizer.apply_chat_template(ex["messages"], tools=ex["tools"], tokenize=False)
    assert tokenizer.decode(tokens) == full
    spans, start = [], None
    for i, m in enumerate(list(mask) + [0]):
        if m and start is None:
            start = i
        if not m and start is not None:
            spans.append(tokenizer.decode(tokens[start:i]))
            start = None
    assert spans == [
        '<tool_call>\n{"name": "add", "arguments": {"a": 6, "b": 13}}\n</tool_call><|im_end|>',
        "The sum is 19.<|im_end|>",
    ]


def test_tokenize_refuses_templates_that_rewrite_history(tokenizer):
    ex = train_helpers.conversation(0)
    saved = tokenizer.chat_template
    try:  # a template that renders the message count up front changes every prefix
        tokenizer.chat_template = "{{ messages|length }}{% for m in messages %}{{ m.content }}<|im_end|>{% endfor %}"
        with pytest.raises(NotAppendOnlyError):
            sft_data.tokenize_conversation(tokenizer, ex["messages"], None, end_of_turn_ids(tokenizer))
    finally:
        tokenizer.chat_template = saved


def _toy_data(lengths, batch, accum, seed, buckets=(4, 8, 16)):
    toks = tuple(np.arange(1, n + 1, dtype=np.int32) for n in lengths)
    masks = tuple(np.ones(n, np.int32) for n in lengths)
    return sft_data.SFTData(toks, masks, buckets, batch, accum, seed, pad_id=0)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(4, 30), batch_pow=st.integers(0, 2), seed=st.integers(0, 2**16), epoch=st.integers(0, 3))
def test_data_order_is_a_pure_function_of_seed_and_step(n, batch_pow, seed, epoch):
    batch = 2**batch_pow
    rng = np.random.default_rng(seed)
    data = _toy_data(rng.integers(1, 17, n), batch, 1, seed)
    spe = data.steps_per_epoch
    seen = np.concatenate([data.indices(epoch * spe + i) for i in range(spe)])
    assert len(set(seen.tolist())) == spe * batch  # an epoch visits distinct examples, each once
    np.testing.assert_array_equal(
        data.indices(epoch * spe), _toy_data(data_lengths(data), batch, 1, seed).indices(epoch * spe)
    )


def data_lengths(data):
    return [len(t) for t in data.tokens]


def test_batches_are_bucketed_and_split_into_micro_batches():
    data = _toy_data([3, 5, 2, 7], batch=4, accum=2, seed=0)
    b = data.batch(0)
    assert b["tokens"].shape == (2, 2, 8)  # longest is 7 -> bucket 8; 4 rows -> 2 micro-batches of 2
    lengths = sorted(int(x) for x in b["token_mask"].sum(-1).ravel())
    assert lengths == [2, 3, 5, 7]
    np.testing.assert_array_equal(b["tokens"] * ~b["token_mask"], 0)  # padding is pad_id
    short = _toy_data([3, 2, 4, 1], batch=4, accum=1, seed=0).batch(0)
    assert short["tokens"].shape == (1, 4, 4)


def test_shuffled_advantages_permute_every_per_rollout_input_alike():
    """The shuffled-advantage control: one permutation of the step's rollouts, drawn from (seed, step), applied to
    the advantages and to each per-rollout loss input; the multiset of values is unchanged, the pairing is not."""
    from rcgrpo_jax.train import rl_trainer

    adv = np.arange(12, dtype=np.float32).reshape(3, 4)
    scale = adv * 10.0 + 1.0
    out, extras = rl_trainer.shuffled(adv, {"clip_scale": scale}, seed=0, step=5)
    assert out.shape == adv.shape and sorted(out.ravel().tolist()) == adv.ravel().tolist()
    np.testing.assert_array_equal(extras["clip_scale"], out * 10.0 + 1.0)  # rollouts keep their pairs
    assert not np.array_equal(out, adv)
    again, _ = rl_trainer.shuffled(adv, {}, seed=0, step=5)
    other, _ = rl_trainer.shuffled(adv, {}, seed=0, step=6)
    np.testing.assert_array_equal(again, out)  # a pure function of (seed, step)
    assert not np.array_equal(other, out)


def test_from_episodes_gathers_every_per_rollout_leaf_to_its_rows():
    """The batch builder carries the estimator's per-rollout pytree to the rows without knowing its names: each
    leaf [N, G, ...] -> [R, ...], row r taking its episode's value (padding rows take episode 0's)."""
    import types

    from rcgrpo_jax.train import rl_batch

    def episode(n_samples, length):
        s = types.SimpleNamespace(tokens=np.arange(length), loss_mask=np.ones(length), logprobs=np.zeros(length))
        return types.SimpleNamespace(samples=lambda: [s] * n_samples)

    episodes = [episode(1, 3), episode(2, 4), episode(1, 5), episode(1, 2)]  # N = 2 groups x G = 2
    per_rollout = {"clip_scale": np.array([[0.5, 0.6], [0.7, 0.8]], np.float32), "vec": np.arange(8).reshape(2, 2, 2)}
    live = np.array([True, True, False, True])
    batch = rl_batch.from_episodes(
        episodes, np.arange(4.0).reshape(2, 2), per_rollout, live, buckets=(8,), pad_id=0, row_multiple=3
    )
    np.testing.assert_array_equal(batch.episode, [0, 1, 1, 2, 3, -1])
    np.testing.assert_array_equal(batch.row_lengths, [3, 4, 4, 5, 2, 3])
    np.testing.assert_array_equal(batch.advantages, [0, 1, 1, 2, 3, 0])
    np.testing.assert_array_equal(batch.per_rollout["clip_scale"], np.float32([0.5, 0.6, 0.6, 0.7, 0.8, 0.5]))
    np.testing.assert_array_equal(batch.per_rollout["vec"], [[0, 1], [2, 3], [2, 3], [4, 5], [6, 7], [0, 1]])
    np.testing.assert_array_equal(batch.loss_mask.sum(1) > 0, [True, True, True, False, True, False])
    empty = rl_batch.from_episodes(episodes, np.zeros((2, 2)), {}, live, buckets=(8,), pad_id=0, row_multiple=1)
    assert empty.per_rollout == {}


def test_episode_stats_reduce_each_micro_batchs_rows_to_their_episodes():
    """Entropy sums and token counts per episode, from the rows of the micro-batches that hold them (an episode
    may span rows of several micro-batches; padding rows, episode -1, count nowhere). Hand-computed."""
    from rcgrpo_jax.train import rl_step

    row_episodes = [np.array([2, 0]), np.array([2, -1, 1])]
    rows = [(np.float32([1.5, 0.25]), np.float32([3, 1])), (np.float32([0.5, 9.0, 0.0]), np.float32([1, 4, 0]))]
    stats = rl_step.episode_stats(row_episodes, rows, num_episodes=4)
    np.testing.assert_array_equal(stats.entropy_sum, [0.25, 0.0, 2.0, 0.0])
    np.testing.assert_array_equal(stats.tokens, [1, 0, 4, 0])
    np.testing.assert_array_equal(stats.has_tokens, [True, False, True, False])
    np.testing.assert_array_equal(stats.entropy_per_token, [0.25, 0.0, 0.5, 0.0])
    assert stats.entropy_mean == 2.25 / 5  # a token mean, not the mean of the episodes' means
    with pytest.raises(ValueError):  # one (entropy, count) pair per micro-batch
        rl_step.episode_stats(row_episodes, rows[:1], num_episodes=4)


def test_a_zero_learning_rate_is_a_control_and_a_negative_one_an_error():
    from rcgrpo_jax import config_checks
    from rcgrpo_jax.config_fields import ConfigError
    from rcgrpo_jax.config_lib import common

    c = common.base("sft", "tiny", lr=0.0, trainer="supervised")
    config_checks.check(c, 1)  # lr 0: the pipeline's lr-0 control (no update moves the policy)
    c.optim.lr = -1e-4
    with pytest.raises(ConfigError, match=r"optim\.lr: must be positive \(or 0 for a control run\)"):
        config_checks.check(c, 1)


def test_the_runner_reads_its_settings_once():
    c = ml_collections.ConfigDict(
        {
            "checkpoint": {"every_steps": 3, "max_to_keep": 2, "async_save": False, "export_hf": True},
            "log": {"every_steps": 5, "tensorboard": False, "progress": True},
            "train": {"max_nonfinite": 4},
        }
    )
    s = runner.settings_of(c)
    assert (s.checkpoint_every, s.max_to_keep, s.async_save, s.export_hf) == (3, 2, False, True)
    assert (s.tensorboard, s.progress) == (False, True)
    assert s.loop == loop_lib.LoopSettings(log_every=5, max_nonfinite=4)
