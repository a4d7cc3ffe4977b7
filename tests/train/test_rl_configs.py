"""The RL stage configs: presets load with the paper's values and pass the start-up checks; a bad config
fails before anything loads, naming the field."""

from __future__ import annotations

import json

import pytest

from configs import awpo, common, dapo, dr_grpo, grpo, rc_grpo
from rcgrpo_jax.config_checks import ConfigError
from rcgrpo_jax.train import rl

STAGES = {"grpo": grpo, "rc_grpo": rc_grpo, "dr_grpo": dr_grpo, "dapo": dapo, "awpo": awpo}


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf")
    (d / "config.json").write_text(json.dumps(common.hf_architecture("qwen2_5_7b")))
    return str(d)


def _check(c, n=8):
    return rl.check(rl.resolve_config(c), n)


@pytest.mark.parametrize("stage", sorted(STAGES))
@pytest.mark.parametrize("preset", common.PRESETS)
def test_presets_load_and_pass_checks(stage, preset, hf_dir):
    c = STAGES[stage].get_config(preset)
    assert c.stage == stage and c.preset == preset and c.rl.estimator in ("grpo", "rc_grpo", "dr_grpo", "awpo")
    if preset != "tiny":
        c.model.path = hf_dir
        assert c.optim.lr == 1e-6 and c.rl.group_size == 5  # paper Table 12
        assert c.train.batch_size == 256 * 5  # 256 tasks x G rollouts
        assert c.rl.loss.eps_low == 0.2
        assert c.rl.loss.kl_beta == (0.0 if stage == "dapo" else 0.1)
    shape = _check(c)
    assert shape["data"] * shape["fsdp"] * shape["tensor"] == (1 if preset == "tiny" else 8)
    assert rl.resolve_config(c).reference.path == c.model.path  # the reference defaults to the policy's start


def test_stage_specifics():
    assert rc_grpo.get_config().rl.reward_conditioning == "sampled" and rc_grpo.get_config().rl.p_high == 0.5
    assert grpo.get_config().rl.reward_conditioning == "auto"
    d = dapo.get_config()
    assert (d.rl.group_filter, d.rl.loss.eps_high) == ("dapo", 0.28)
    assert dr_grpo.get_config().rl.loss.agg_mode == "seq-mean-token-sum-norm"
    assert awpo.get_config().rl.judge.kind == "rule"


def _err(c, n=8) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        _check(c, n)
    return e.value


def test_batch_not_divisible_by_group_size():
    c = rc_grpo.get_config("tiny")
    c.train.batch_size, c.train.grad_accum = 18, 1  # group 4
    e = _err(c)
    assert e.field == "train.batch_size" and "rl.group_size=4" in str(e)


def test_batch_not_divisible_by_data_axis():
    c = rc_grpo.get_config("tiny")
    c.mesh.data = 8
    c.train.batch_size, c.train.grad_accum = 12, 1
    e = _err(c)
    assert e.field == "train.batch_size" and "data axis" in str(e)


def test_unknown_estimator_and_loss_names():
    c = grpo.get_config("tiny")
    c.rl.estimator = "grpoo"
    e = _err(c)
    assert e.field == "rl.estimator" and "'grpoo'" in str(e) and "rc_grpo" in str(e)
    c = grpo.get_config("tiny")
    c.rl.policy_loss = "ppo"
    assert _err(c).field == "rl.policy_loss"


def test_missing_checkpoint_path():
    e = _err(rc_grpo.get_config("qwen2_5_7b"))
    assert e.field == "model.path" and "missing checkpoint path" in str(e)


def test_missing_reference_path(hf_dir, tmp_path):
    c = rc_grpo.get_config("llama3_1_8b")
    c.model.path = hf_dir
    c.reference.path = str(tmp_path / "nope")
    assert _err(c).field == "reference.path"


def test_rl_fields():
    c = grpo.get_config("tiny")
    c.rl.num_minibatches = 3  # grad_accum 4
    assert _err(c).field == "rl.num_minibatches"
    c = grpo.get_config("tiny")
    c.rl.temperature = 0.7
    e = _err(c)
    assert e.field == "rl.recompute_old_logprobs" and "temperature" in str(e)
    c.rl.recompute_old_logprobs = True
    _check(c)
    c = grpo.get_config("tiny")
    c.rl.max_context = 4096
    assert _err(c).field == "rl.max_context"
    c = grpo.get_config("tiny")
    c.rl.reward_conditioning = "sometimes"
    assert _err(c).field == "rl.reward_conditioning"
    c = grpo.get_config("tiny")
    c.rl.reward = "accuracy"
    assert _err(c).field == "rl.reward"
    c = grpo.get_config("tiny")
    c.rl.loss.unlock()
    c.rl.loss.eps = 0.1  # not an option of ppo_clip
    assert _err(c).field == "rl.loss"
    c = awpo.get_config("tiny")
    c.rl.judge.kind = "model"
    assert _err(c).field == "rl.judge.path"
    c = grpo.get_config("qwen2_5_7b")
    c.rl.rollout_chunk = 12  # not whole groups of 5
    c.model.build_tiny = True
    assert _err(c).field == "rl.rollout_chunk"
