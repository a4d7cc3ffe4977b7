"""The RL stage configs: presets load with the paper's values and pass the start-up checks; a bad config
fails before anything loads, naming the field."""

from __future__ import annotations

import json
import os

import pytest

from configs import awpo, dapo, dr_grpo, grpo, rc_grpo
from rcgrpo_jax.config_fields import ConfigError
from rcgrpo_jax.config_lib import common
from rcgrpo_jax.train import rl_config as rl

STAGES = {"grpo": grpo, "rc_grpo": rc_grpo, "dr_grpo": dr_grpo, "dapo": dapo, "awpo": awpo}


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf")
    (d / "config.json").write_text(json.dumps(common.hf_architecture("qwen2_5_7b")))
    return str(d)


STEPS_FIXTURE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "fixtures", "steps_chats.jsonl")


def _check(c, n=8):
    if c.data.get("source") == "steps" and not c.data.steps.path:  # the AWPO GPU presets read the user's
        c.data.steps.path = STEPS_FIXTURE  # JSONL (tests/configs/test_awpo_preset.py: the error without it)
    return rl.check(rl.resolve_config(c), n)


@pytest.mark.parametrize("stage", sorted(STAGES))
@pytest.mark.parametrize("preset", common.PRESETS)
def test_presets_load_and_pass_checks(stage, preset, hf_dir):
    c = STAGES[stage].get_config(preset)
    assert c.stage == stage and c.preset == preset and c.trainer == "rl"
    assert c.rl.advantage.name in ("grpo", "rc_grpo", "dr_grpo", "awpo") and c.rl.loss.name == "ppo_clip"
    if preset != "tiny":
        c.model.path = hf_dir
        assert c.optim.lr == 1e-6 and c.rl.group_size == 5  # paper Tables 10 and 12
        assert c.train.batch_size == (64 if stage == "grpo" else 256) * 5  # tasks x G rollouts (Table 12 / 10)
        assert c.train.epochs == 400  # Table 10's "Epochs 400": passes over the training tasks
        assert c.rl.loss.ppo_clip.eps_low == 0.2
        assert c.rl.loss.ppo_clip.kl_beta == (0.0 if stage == "dapo" else 0.1)
    shape = _check(c)
    assert shape["data"] * shape["fsdp"] * shape["tensor"] == (1 if preset == "tiny" else 8)
    assert rl.resolve_config(c).reference.path == c.model.path  # the reference defaults to the policy's start


def test_stage_specifics():
    assert rc_grpo.get_config().rl.reward_conditioning == "sampled" and rc_grpo.get_config().rl.p_high == 0.5
    assert grpo.get_config().rl.reward_conditioning == "auto"
    d = dapo.get_config()
    assert (d.rl.group_filter.name, d.rl.loss.ppo_clip.eps_high, d.rl.shaping.name) == ("dapo", 0.28, "dapo_overlong")
    assert d.rl.shaping.dapo_overlong.cache_len == d.rl.max_context // 8 and d.rl.shaping.dapo_overlong.max_len == 0
    assert (grpo.get_config().rl.group_filter.name, grpo.get_config().rl.shaping.name) == ("none", "none")
    assert dr_grpo.get_config().rl.loss.ppo_clip.agg_mode == "seq-mean-token-sum-norm"
    assert awpo.get_config().rl.judge.name == "rule"


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
    c.rl.advantage.name = "grpoo"
    e = _err(c)
    assert e.field == "rl.advantage.name" and "'grpoo'" in str(e) and "rc_grpo" in str(e)
    c = grpo.get_config("tiny")
    c.rl.loss.name = "ppo"
    assert _err(c).field == "rl.loss.name"
    c = grpo.get_config("tiny")
    c.rl.advantage.name = "no_such_module:my_adv"
    e = _err(c)
    assert e.field == "rl.advantage.name" and "no_such_module" in str(e)


@pytest.mark.parametrize(
    "path, value, field",
    [
        ("advantage.grpo.std", "pop", "rl.advantage.grpo.std"),
        ("advantage.awpo.gate", "sometimes", "rl.advantage.awpo.gate"),
        ("loss.ppo_clip.agg_mode", "mean", "rl.loss.ppo_clip.agg_mode"),
        ("loss.ppo_clip.kl_estimator", "k9", "rl.loss.ppo_clip.kl_estimator"),
        ("loss.ppo_clip.kl_estimator", "k1", "rl.loss.ppo_clip.kl_estimator"),  # k1 as a penalty (kl_beta 0.1)
        ("loss.ppo_clip.ratio_level", "sentence", "rl.loss.ppo_clip.ratio_level"),
        ("group_filter.name", "dapo2", "rl.group_filter.name"),
        ("shaping.name", "overlong", "rl.shaping.name"),
        ("reward_token_mode", "paired", "rl.reward_token_mode"),
    ],
)
def test_every_string_option_fails_at_start_up(path, value, field):
    """A bad string option stops the run in the start-up check, naming the field (before any rollout)."""
    c = awpo.get_config("tiny") if "awpo" in path else grpo.get_config("tiny")
    if "awpo" in path:
        c.rl.advantage.name = "awpo"
    node = c.rl
    *parents, leaf = path.split(".")
    for p in parents:
        node = node[p]
    node[leaf] = value
    e = _err(c)
    assert e.field == field and (repr(value) in str(e) or value == "k1")


@pytest.mark.parametrize(
    "path, value, field",
    [
        ("group_filter.dapo.atol", -0.1, "rl.group_filter.dapo.atol"),
        ("shaping.dapo_overlong.penalty", -1.0, "rl.shaping.dapo_overlong.penalty"),
        ("shaping.dapo_overlong.cache_len", 4096, "rl.shaping.dapo_overlong.cache_len"),  # > rl.max_context 1536
        ("shaping.dapo_overlong.max_len", -1, "rl.shaping.dapo_overlong.max_len"),
    ],
)
def test_the_selected_filter_and_shaping_options_are_checked_at_start_up(path, value, field):
    c = dapo.get_config("tiny")
    _check(c)
    node = c.rl
    *parents, leaf = path.split(".")
    for p in parents:
        node = node[p]
    node[leaf] = value
    assert _err(c).field == field


def test_options_follow_the_selected_entry():
    """Swapping the estimator swaps its options; an option set for the selected entry is checked against it."""
    c = grpo.get_config("tiny")
    c.rl.advantage.name = "reinforce_baseline"
    c.rl.advantage.reinforce_baseline.eps = 1e-3
    chosen = rl.choices(c)
    assert chosen.estimator == "reinforce_baseline" and chosen.advantage_options.eps == 1e-3
    c.rl.advantage.name = "rloo"  # no options: its registry defaults (none)
    assert rl.choices(c).advantage_options.to_dict() == {}
    c.rl.advantage.name = "awpo"
    assert rl.choices(c).needs == ("reasoning",) and rl.choices(c).uses_judge


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
    c.rl.temperature = 0.7  # exact: every log-prob pass is taken at the sampling temperature
    _check(c)
    c.rl.top_k = 20
    e = _err(c)
    assert e.field == "rl.recompute_old_logprobs" and "top-k" in str(e)
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
    c.rl.loss.ppo_clip.unlock()
    c.rl.loss.ppo_clip.eps = 0.1  # not an option of ppo_clip
    assert _err(c).field == "rl.loss.ppo_clip"
    c = awpo.get_config("tiny")
    c.rl.judge.name = "model"
    assert _err(c).field == "rl.judge.model.path"
    c = grpo.get_config("qwen2_5_7b")
    c.rl.rollout_chunk = 12  # not whole groups of 5
    c.model.build_tiny = True
    assert _err(c).field == "rl.rollout_chunk"


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_the_micro_batch_follows_the_number_of_hosts(stage, hf_dir):
    """train.grad_accum = -1: one row per batch shard per micro-batch, so the documented 4-node run
    (32 devices: data x fsdp = 16) passes the check as the 1-node one (8 devices: 4) does."""
    from rcgrpo_jax import config_checks

    c = STAGES[stage].get_config("qwen2_5_7b")
    c.model.path = hf_dir
    assert c.train.grad_accum == -1
    for devices, shards in ((8, 4), (32, 16)):
        shape = _check(c, devices)
        assert shape["data"] * shape["fsdp"] == shards
        r = config_checks.resolved(c, devices)
        assert r.train.batch_size // r.train.grad_accum == shards and r.train.grad_accum % c.rl.num_minibatches == 0
    from configs import sft

    s = sft.get_config("llama3_1_8b")
    s.model.path = hf_dir
    assert config_checks.resolved(s, 32).train.grad_accum == 1 and config_checks.check(s, 32)["fsdp"] == 16
    c.train.batch_size = 1290  # not whole rows per shard
    assert _err(c, 32).field == "train.batch_size"


def test_the_rollouts_sampling_and_decode_dtype_are_read_in_one_place():
    """`rl_config.sampling` and `rl_config.decode_dtype`: what the trainer's rollouts, the dry run and the
    exploration stage sample by (0 and 1.0 mean no top-k / top-p; the decode dtype defaults to model.dtype)."""
    from rcgrpo_jax.sampling import SamplingParams

    c = grpo.get_config("tiny")
    c.rl.temperature, c.rl.top_k, c.rl.top_p = 0.7, 0, 1.0
    assert rl.sampling(c.rl) == SamplingParams(0.7)
    c.rl.top_k, c.rl.top_p = 20, 0.9
    assert rl.sampling(c.rl) == SamplingParams(0.7, 20, 0.9)
    c.model.dtype, c.model.decode_dtype = "bfloat16", ""
    assert rl.decode_dtype(c) == "bfloat16"
    c.model.decode_dtype = "float32"
    assert rl.decode_dtype(c) == "float32"
