"""`train.rl_setup`: an RL config checked once into a `RunPlan` (resolved, on its mesh), and the run's programs
built from it at a model config (nothing compiled), on 8 fake devices at the 7B preset's shapes (no weights)."""

from __future__ import annotations

import dataclasses

import jax
import pytest

from configs import rc_grpo
from rcgrpo_jax import sharding
from rcgrpo_jax.config_fields import ConfigError
from rcgrpo_jax.rollout import policies
from rcgrpo_jax.train import rl_config, rl_setup


def preset():
    c = rc_grpo.get_config("qwen2_5_7b")
    c.model.path = ""  # the preset's published architecture, checked as a dry run
    return c


def test_a_plan_is_the_resolved_config_checked_once_on_its_mesh(monkeypatch):
    checks = []
    checked = rl_config.checked
    monkeypatch.setattr(rl_config, "checked", lambda *a, **k: checks.append(1) or checked(*a, **k))
    c = preset()
    c.train.grad_accum, c.model.path, c.reference.path = -1, "", ""
    run = rl_setup.plan(c, 8, dry=True)
    assert len(checks) == 1
    assert c.train.grad_accum == -1  # the caller's config is left as it was
    shards = run.mesh.shape["data"] * run.mesh.shape["fsdp"]
    assert run.config.train.grad_accum == int(c.train.batch_size) // shards  # one row per shard per micro-batch
    assert run.micro == shards and run.length == int(c.data.buckets[-1])
    assert run.mesh.devices.size == 8 and run.choices == rl_config.choices(run.config)
    assert run.sampled_tokens  # RC-GRPO draws a reward token per rollout
    assert (
        rl_setup.abstract_model(run).vocab_size
        == rl_setup.abstract_model(rl_setup.plan(rc_grpo.get_config("qwen2_5_7b"), 8, dry=True)).vocab_size
    )


def test_a_bad_field_fails_the_plan_naming_it():
    c = preset()
    c.rl.num_minibatches = 3
    with pytest.raises(ConfigError, match="rl.num_minibatches"):
        rl_setup.plan(c, 8, dry=True)


def test_the_plan_resolves_the_sharding_rule_sets_naming_a_bad_one():
    run = rl_setup.plan(preset(), 8, dry=True)
    assert (run.train_rules, run.decode_rules) == (sharding.TRAIN_RULES, sharding.DECODE_RULES)
    c = preset()
    c.sharding.decode_rules = "fsdp"  # before any model loads, naming the field
    with pytest.raises(ConfigError, match="sharding.decode_rules"):
        rl_setup.plan(c, 8, dry=True)


def test_the_rollout_capacity_is_the_policys():
    run = rl_setup.plan(preset(), 8, dry=True)
    rl = run.config.rl
    shapes = rl_setup.rollout_shapes(run.config, run.mesh)
    assert shapes.capacity == policies.capacity(int(rl.max_context), int(rl.max_step_tokens), int(rl.prefill_chunk))
    assert shapes.rows % 8 == 0 and 0 < shapes.sub_batch_rows < shapes.rows
    assert shapes.copy_rows <= shapes.rows and shapes.prefill_width == int(rl.prefill_chunk)


def test_the_programs_are_built_at_the_model_the_caller_gives():
    run = rl_setup.plan(preset(), 8, dry=True)
    model = rl_setup.abstract_model(run)
    setup = rl_setup.build(run, model)
    assert setup.model_cfg is model and setup.rollout == rl_setup.rollout_shapes(run.config, run.mesh)
    leaves = jax.tree.leaves(setup.abstract_params)
    assert [x.shape for x in jax.tree.leaves(setup.abstract_state.params)] == [x.shape for x in leaves]
    assert jax.tree.structure(setup.param_shardings) == jax.tree.structure(setup.abstract_params)
    assert (setup.ref_logprobs is not None) == run.choices.use_ref
    if run.choices.use_ref:  # the reference at the policy's config runs the policy's program (compiled once)
        assert setup.ref_logprobs is setup.logprobs
        other = rl_setup.build(run, model, ref_cfg=dataclasses.replace(model, remat=not model.remat))
        assert other.ref_logprobs is not other.logprobs
    assert float(setup.lr_fn(rl_setup.COMPILE_ONLY_UPDATES)) == pytest.approx(
        float(run.config.optim.lr) * float(run.config.optim.end_lr_ratio), rel=1e-5
    )
    micro = run.abstract_micro()
    assert micro.tokens.shape == (run.micro, run.length)
    assert (micro.ref_logp is not None) == run.choices.use_ref


def test_the_programs_move_to_another_config_of_the_same_parameters():
    """`at_model` (the memory plan's attention stand-in): new programs at the other config, the rest of the
    set-up kept; a config of other parameters is refused."""
    run = rl_setup.plan(preset(), 8, dry=True)
    setup = rl_setup.build(run, rl_setup.abstract_model(run))
    other = dataclasses.replace(setup.model_cfg, remat=not setup.model_cfg.remat)
    moved = rl_setup.at_model(setup, other)
    assert moved.model_cfg is other and moved.updater is not setup.updater and moved.logprobs is not setup.logprobs
    kept = ("run", "abstract_params", "param_shardings", "decode_shardings", "tx", "state_shardings", "rollout")
    assert all(getattr(moved, k) is getattr(setup, k) for k in kept)
    assert (moved.ref_logprobs is moved.logprobs) == run.choices.use_ref
    with pytest.raises(ValueError, match="parameters differ"):
        rl_setup.at_model(setup, dataclasses.replace(setup.model_cfg, vocab_size=setup.model_cfg.vocab_size + 1))


def test_the_plan_carries_the_rollouts_sampling_and_decode_dtype():
    run = rl_setup.plan(preset(), 8, dry=True)
    assert run.sampling == rl_config.sampling(run.config.rl)
    assert run.decode_dtype == rl_config.decode_dtype(run.config) == "bfloat16"  # the GPU presets decode in bf16
