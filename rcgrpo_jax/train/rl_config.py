"""The RL stages' config: start-up validation of every field and selection, the resolved choices the
trainer runs with (`RLChoices`), the rollouts' sampling (`sampling`) and the sampler's weights' dtype
(`decode_dtype`). The data order is `train.rl_data`'s.

Every string option fails here, before a model is loaded, with a ConfigError naming the field: the
advantage estimator and its options, the policy loss and its options (aggregation mode, KL estimator,
ratio level), the group filter and the reward shaping and their options, the judge (for estimators that
need a reasoning signal), conditioning, the reward, the task source. Every registry name may be
"module:name" (a user's module, imported first, registers the entry).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import ml_collections

from rcgrpo_jax import chat, config_checks, config_fields, judges
from rcgrpo_jax.config_fields import ConfigError
from rcgrpo_jax.envs import rewards
from rcgrpo_jax.models import reward_tokens
from rcgrpo_jax.registry import OptionError, check_entry, selected
from rcgrpo_jax.rl import advantages, filters, losses, shaping
from rcgrpo_jax.sampling import SamplingParams

CONDITIONING = ("sampled", "high", "none", "auto")


@dataclasses.dataclass(frozen=True)
class RLChoices:
    """What the RL section selected, resolved against the registries."""

    estimator: str
    advantage_options: ml_collections.ConfigDict
    needs: tuple[str, ...]  # aux signals the estimator needs (rl.advantages.SIGNALS)
    loss: str
    loss_options: ml_collections.ConfigDict
    use_ref: bool  # a reference pass: a KL penalty, a ratio against pi_ref, or KL logging
    group_filter: str  # rcgrpo_jax.rl.filters
    group_filter_options: ml_collections.ConfigDict
    shaping: str  # rcgrpo_jax.rl.shaping
    shaping_options: ml_collections.ConfigDict

    @property
    def uses_judge(self) -> bool:
        return "reasoning" in self.needs


def _selected(config, dotted: str, registry) -> tuple[str, ml_collections.ConfigDict]:
    """(entry, resolved options) of a selection section, errors naming the field."""

    section = config_fields.require(config, dotted)
    name = section.get("name")
    try:
        return selected(registry, section)
    except KeyError as e:
        msg = e.args[0] if e.args else str(e)
        known = registry_name(name) in registry
        raise ConfigError(f"{dotted}.{registry_name(name)}" if known else f"{dotted}.name", str(msg)) from None
    except ModuleNotFoundError as e:
        raise ConfigError(f"{dotted}.name", f"cannot import the module of {name!r}: {e}") from None
    except OptionError as e:
        raise _option_error(f"{dotted}.{registry_name(name)}.{e.field}", e) from None


def _option_error(field: str, e: OptionError) -> ConfigError:
    """A ConfigError naming the option's dotted field, with the option's message."""
    return ConfigError(field, str(e).split(": ", 1)[-1])


def registry_name(name: str) -> str:
    """The entry of "module:entry" (the name itself otherwise)."""
    return str(name).split(":", 1)[-1]


def choices(config) -> RLChoices:
    """The estimator, loss, group filter and reward shaping the config selects, validated (ConfigError naming
    the field)."""

    estimator, adv_options = _selected(config, "rl.advantage", advantages.REGISTRY)
    loss, loss_options = _selected(config, "rl.loss", losses.REGISTRY)
    group_filter, filter_options = _selected(config, "rl.group_filter", filters.GROUP_FILTERS)
    shaping_name, shaping_options = _selected(config, "rl.shaping", shaping.REWARD_SHAPING)
    try:
        shaping.check_run(shaping_name, shaping_options, config.rl)
    except OptionError as e:
        raise _option_error(f"rl.shaping.{shaping_name}.{e.field}", e) from None
    needs = advantages.spec(estimator).needs
    use_ref = losses.needs_reference(loss_options) or bool(config.rl.log_kl)
    return RLChoices(
        estimator,
        adv_options,
        needs,
        loss,
        loss_options,
        use_ref,
        group_filter,
        filter_options,
        shaping_name,
        shaping_options,
    )


def resolve_config(config):
    """A copy with `reference.path` defaulted to `model.path` (the stage-1 policy is the reference)."""
    config = copy.deepcopy(config)
    if not config.reference.path and config.model.path:
        config.reference.path = config.model.path
    return config


def sampling(rl) -> SamplingParams:
    """The rollouts' sampling: `rl.temperature`, `rl.top_k` and `rl.top_p` (0 and 1.0 mean none)."""
    top_p = float(rl.top_p) if float(rl.top_p or 1.0) < 1.0 else None
    return SamplingParams(float(rl.temperature), int(rl.top_k or 0) or None, top_p)


def decode_dtype(config) -> str:
    """The dtype of the sampler's weights: `model.decode_dtype`, defaulting to the compute dtype `model.dtype`."""
    return str(config.model.get("decode_dtype", None) or config.model.dtype)


def check(config, num_devices: int) -> dict[str, int]:
    """config_checks.check plus every RL field; returns the mesh shape."""
    return checked(config_checks.resolved(config, num_devices), num_devices)[0]


def checked(config, num_devices: int) -> tuple[dict[str, int], RLChoices]:
    """`check` of a config already resolved for `num_devices` (`config_checks.resolved`), returning the mesh
    shape and the choices it validated (`train.rl_setup.plan` resolves the config and runs it once)."""

    shape = config_checks.check(config, num_devices)
    rl = config.rl
    chosen = choices(config)
    g, accum = int(rl.group_size), int(config.train.grad_accum)
    _choice(rl.reward_conditioning, CONDITIONING, "rl.reward_conditioning")
    if rl.reward_conditioning == "sampled" and not 0.0 <= float(rl.p_high) <= 1.0:
        raise ConfigError("rl.p_high", f"must be in [0, 1], got {rl.p_high}")
    _choice(rl.reward_token_mode, reward_tokens.MODES, "rl.reward_token_mode")
    try:
        check_entry(rl, "reward", rewards.REWARDS)  # a registered reward, or "module:name"
    except OptionError as e:
        raise _option_error("rl.reward", e) from None
    _choice(rl.slot_mode, ("shrink", "keep"), "rl.slot_mode")
    _choice(rl.render_mode, chat.RENDER_MODES, "rl.render_mode")
    m = int(rl.num_minibatches)
    if m <= 0 or accum % m:
        raise ConfigError(
            "rl.num_minibatches",
            f"{m} must be positive and divide train.grad_accum={accum} "
            "(a mini-batch is grad_accum / num_minibatches micro-batches)",
        )
    if int(rl.ppo_epochs) <= 0:
        raise ConfigError("rl.ppo_epochs", f"must be positive, got {rl.ppo_epochs}")
    if int(rl.rollout_chunk) < 0 or (int(rl.rollout_chunk) and int(rl.rollout_chunk) % g):
        raise ConfigError("rl.rollout_chunk", f"{rl.rollout_chunk} must be 0 (all) or a multiple of rl.group_size={g}")
    rows, slice_ = int(rl.get("rollout_rows", 0) or 0), int(rl.get("rollout_slice", 0) or 0)
    if rows < 0 or (rows and rows < g):
        raise ConfigError(
            "rl.rollout_rows", f"{rows} must be 0 (no refill) or at least rl.group_size={g}: a group is admitted whole"
        )
    if slice_ < 0:
        raise ConfigError("rl.rollout_slice", f"must be 0 (whole steps) or positive, got {slice_}")
    buckets = tuple(int(b) for b in config.data.buckets)
    if int(rl.max_context) > buckets[-1]:
        raise ConfigError("rl.max_context", f"{rl.max_context} exceeds the largest of data.buckets={buckets}")
    if int(rl.max_step_tokens) <= 0:
        raise ConfigError("rl.max_step_tokens", "must be positive")
    if float(rl.temperature) <= 0:
        raise ConfigError("rl.temperature", "RL needs sampling (temperature > 0)")
    filtered = int(rl.top_k or 0) > 0 or float(rl.top_p or 1.0) < 1.0
    if filtered and not rl.recompute_old_logprobs:
        raise ConfigError(
            "rl.recompute_old_logprobs",
            "top-k/top-p sampling gives log-probs of a truncated distribution, not the policy's; set it True "
            "(the update then uses a recomputed forward at rl.temperature)",
        )
    if chosen.uses_judge:
        _check_judge(config)
    if "reward_tokens" in chosen.needs and rl.reward_conditioning != "sampled":
        raise ConfigError(
            "rl.advantage.name",
            f"{chosen.estimator!r} needs reward tokens drawn per rollout: set rl.reward_conditioning='sampled' "
            f"(configs/rc_grpo.py), got {rl.reward_conditioning!r}",
        )
    return shape, chosen


def _choice(value: Any, options, field: str) -> None:
    if value not in options:
        raise ConfigError(field, f"{value!r} is not one of {', '.join(map(str, options))}")


def _check_judge(config) -> None:

    judges.check_config(config.rl.judge)  # ConfigError naming rl.judge.name / rl.judge.<judge>.<field>
    if config.rl.judge.name == "model":
        config_checks.check_path(config, "rl.judge.model.path", required=True, must_have="config.json")


# ---------------------------------------------------------------- the data order
