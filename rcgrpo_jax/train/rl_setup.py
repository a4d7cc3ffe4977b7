"""One RL run, set up once: the trainer, the dry run (`train.dry_run`) and the lowering proof
(`benchmarks.cuda_lower`) build it here and nowhere else.

Two steps, because the trainer needs the mesh before it can load the model:
  `plan(config, num_devices, dry=...)` -> `RunPlan`: the resolved config (`reference.path` defaulted, an
      automatic `train.grad_accum` resolved for the devices), the config checked once (`rl_config.checked`:
      a ConfigError naming the field), the mesh, the registries' choices, the micro-batch rows, the
      largest bucket, the rollouts' sampling and decode dtype, and the train and decode sharding rule sets (an
      unknown name fails here, before any model loads). `dry=True` checks it as a dry run does
      (`model_prep.dry_run_config`: no weights).
  `build(run, model_cfg, ...)` -> `RLSetup`: the programs at the model config the caller decides (the loaded
      checkpoint's, a dry run's fused-kernel stand-in, the proof's kernels): abstract parameters, the train and
      decode shardings, the optimizer and its schedule, the abstract train state and its shardings, the
      `rl_step.Updater`, the jitted policy and reference log-prob functions, and the rollout's shapes.
`at_model(setup, model_cfg)` -> the same set-up with its programs at another config of the same parameters (the
memory plan's attention stand-in, `train.dry_run.planned_model`), the rest kept.
`rollout_shapes(config, mesh)` -> `RolloutShapes`: the rollout phase's largest shapes, the KV capacity per row
as `rollout.policies.capacity` sizes it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import ml_collections
import optax
from jax.sharding import Mesh

from rcgrpo_jax import config_checks
from rcgrpo_jax import sharding as sharding_lib
from rcgrpo_jax.models.config import ModelConfig
from rcgrpo_jax.models.transformer import abstract_params as abstract_params_of
from rcgrpo_jax.rl import advantages
from rcgrpo_jax.rollout import policies
from rcgrpo_jax.sampling import SamplingParams, block_attention, buckets, packed, packed_append
from rcgrpo_jax.sampling.decode_loop import batch_multiple
from rcgrpo_jax.train import model_prep, optim, rl_batch, rl_config, rl_step
from rcgrpo_jax.train import state as state_lib

# The schedule length of programs that are only compiled (dry run, lowering proof): it shapes nothing.
COMPILE_ONLY_UPDATES = 1000


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """A checked RL config on its mesh (`plan`)."""

    config: ml_collections.ConfigDict  # resolved: read it, never the caller's
    mesh: Mesh
    choices: rl_config.RLChoices
    micro: int  # rows of one micro-batch: train.batch_size / train.grad_accum
    length: int  # the largest of data.buckets
    train_rules: sharding_lib.Rules  # sharding.train_rules' (FSDP): the policy, the reference, the update
    decode_rules: sharding_lib.Rules  # sharding.decode_rules': the sampler's weights
    sampling: SamplingParams  # the rollouts' (`rl_config.sampling`)
    decode_dtype: str  # the sampler's weights' (`rl_config.decode_dtype`)

    @property
    def sampled_tokens(self) -> bool:
        """The run draws a reward token per rollout (the policy's vocabulary holds both reward tokens)."""
        return self.config.rl.reward_conditioning == "sampled"

    def abstract_micro(self, rows: int | None = None, length: int | None = None) -> rl_batch.RolloutBatch:
        """The abstract micro-batch the update and the log-prob passes take (default `micro` rows at `length`),
        with the reference's log-probs when the run uses them and the estimator's per-rollout inputs."""
        c = self.choices
        per_rollout = advantages.per_rollout_shapes(c.estimator, c.advantage_options)
        rows, length = rows or self.micro, length or self.length
        return rl_batch.abstract_batch(self.mesh, rows, length, with_ref=c.use_ref, per_rollout=per_rollout)


def plan(config, num_devices: int, *, dry: bool = False) -> RunPlan:
    """The run's `RunPlan` on the first `num_devices` devices; checks the config (module docstring)."""
    config = config_checks.resolved(rl_config.resolve_config(config), num_devices)
    shape, chosen = rl_config.checked(model_prep.dry_run_config(config) if dry else config, num_devices)
    train_rules = model_prep.rules(config.sharding.train_rules, "sharding.train_rules")
    decode_rules = model_prep.rules(config.sharding.decode_rules, "sharding.decode_rules")
    micro = int(config.train.batch_size) // int(config.train.grad_accum)
    mesh = sharding_lib.make_mesh(shape)
    return RunPlan(
        config,
        mesh,
        chosen,
        micro,
        int(config.data.buckets[-1]),
        train_rules,
        decode_rules,
        sampling=rl_config.sampling(config.rl),
        decode_dtype=rl_config.decode_dtype(config),
    )


def abstract_model(run: RunPlan) -> ModelConfig:
    """The model a run without weights sizes (`model_prep.abstract_model_config`), with the two reward tokens
    when the run samples them."""
    return model_prep.abstract_model_config(run.config, extra_tokens=2 if run.sampled_tokens else 0)


@dataclasses.dataclass(frozen=True)
class RolloutShapes:
    """The rollout phase's largest shapes (`rollout_shapes`)."""

    rows: int  # the session's rows
    capacity: int  # KV slots per row (`rollout.policies.capacity`)
    prefill_width: int
    max_new_tokens: int  # one decode call's budget, bucketed
    sub_batch_rows: int  # the largest append sub-batch below the whole batch (0: none)
    copy_rows: int  # the largest sibling copy
    packed_tokens: int  # the largest token-packed prefill (`sampling.packed`): one fresh row of a whole context
    prefill_pairs: int  # its attention pairs per shard
    append_blocks: int  # the largest packed append's blocks on one shard (`sampling.packed_append`)
    append_pairs: int  # their pairs, each block seeing a whole-capacity row


def rollout_shapes(config, mesh: Mesh) -> RolloutShapes:
    """The session's rows (`rl.rollout_rows`, else one engine call's `rl.rollout_chunk`, rounded as the sampler
    rounds them), the KV capacity per row (as `rollout.policies.ModelPolicy` sizes it), the prefill block, the
    decode budget, the largest append sub-batch below the whole batch (`buckets.row_bucket`), the largest
    sibling copy and the largest token-packed prefill and append."""
    rl = config.rl
    episodes = int(config.train.batch_size)
    # Continuous batching streams every rollout through rl.rollout_rows rows; else one row per rollout of a chunk.
    chunk = int(rl.get("rollout_rows", 0) or 0) or int(rl.rollout_chunk) or episodes
    m = batch_multiple(mesh)
    rows = buckets.batch_bucket(min(chunk, episodes), m)
    sub = m  # the largest row_bucket below the whole batch: m x 2^k < rows
    while 2 * sub < rows:
        sub *= 2
    capacity = policies.capacity(int(rl.max_context), int(rl.max_step_tokens), int(rl.prefill_chunk))
    fresh = packed.PackedForward((0,), (int(rl.max_context),))  # one fresh row of a whole context
    blocks = buckets.row_bucket(-(-int(rl.max_context) // packed_append.BLOCK), 1 << 30, 1)
    return RolloutShapes(
        rows=rows,
        capacity=capacity,
        prefill_width=int(rl.prefill_chunk),
        max_new_tokens=buckets.length_bucket(int(rl.max_step_tokens)),
        sub_batch_rows=sub if sub < rows else 0,
        copy_rows=buckets.row_bucket(rows - rows // max(int(rl.group_size), 1), rows, m),
        packed_tokens=m * fresh.per_shard(m),
        prefill_pairs=fresh.pairs_per_shard(m),
        append_blocks=blocks,
        append_pairs=block_attention.pair_bucket(blocks * (capacity // packed_append.key_block(capacity))),
    )


@dataclasses.dataclass(frozen=True)
class RLSetup:
    """The programs of one RL run at one model config (`build`)."""

    run: RunPlan
    model_cfg: ModelConfig
    abstract_params: Any
    param_shardings: Any  # the train rules' (FSDP): the policy, the reference, the update
    decode_shardings: Any  # the decode rules': the sampler's weights
    logical: Any  # the train rules' logical-axis map (`sharding.axis_rules`)
    tx: optax.GradientTransformation
    lr_fn: optax.Schedule
    abstract_state: state_lib.TrainState
    state_shardings: Any
    updater: rl_step.Updater
    logprobs: Callable  # jitted (params, tokens, token_mask) -> log-probs at rl.temperature
    # The reference's, when the run uses one (`RLChoices.use_ref`): `logprobs` itself at the policy's config.
    ref_logprobs: Callable | None
    rollout: RolloutShapes


def build(
    run: RunPlan, model_cfg: ModelConfig, *, ref_cfg: ModelConfig | None = None, updates: int = COMPILE_ONLY_UPDATES
) -> RLSetup:
    """The run's programs at `model_cfg` (the reference's at `ref_cfg`, default the policy's), the optimizer's
    schedule over `updates` optimizer updates. Nothing is compiled or allocated."""
    config, mesh = run.config, run.mesh
    abstract = abstract_params_of(model_cfg)
    p_sh = run.train_rules.shardings(abstract, mesh)
    o = config.optim
    tx = optim.make_optimizer(o, updates)
    lr_fn = optim.schedule(o.lr, updates, o.warmup_ratio, o.end_lr_ratio)
    state = state_lib.abstract_state(abstract, tx)
    state_sh = state_lib.state_shardings(state, mesh, p_sh, tx)
    updater, logprobs, ref = _programs(run, model_cfg, ref_cfg, tx, p_sh, state_sh)
    return RLSetup(
        run=run,
        model_cfg=model_cfg,
        abstract_params=abstract,
        param_shardings=p_sh,
        decode_shardings=run.decode_rules.shardings(abstract, mesh),
        logical=run.train_rules.logical,
        tx=tx,
        lr_fn=lr_fn,
        abstract_state=state,
        state_shardings=state_sh,
        updater=updater,
        logprobs=logprobs,
        ref_logprobs=ref,
        rollout=rollout_shapes(config, mesh),
    )


def at_model(setup: RLSetup, model_cfg: ModelConfig) -> RLSetup:
    """`setup` with its programs at `model_cfg`, a config of the same parameters (another attention, say: the
    dry run's `planned_model`): the updater and the log-prob functions are made anew (the reference's is the
    policy's program); the shardings, the optimizer, the train state and the rollout's shapes are `setup`'s.
    A `model_cfg` whose abstract parameters differ from `setup`'s is a ValueError."""
    if abstract_params_of(model_cfg) != setup.abstract_params:
        raise ValueError("at_model: the model config's parameters differ from the set-up's")
    updater, logprobs, ref = _programs(
        setup.run, model_cfg, None, setup.tx, setup.param_shardings, setup.state_shardings
    )
    return dataclasses.replace(setup, model_cfg=model_cfg, updater=updater, logprobs=logprobs, ref_logprobs=ref)


def _programs(run: RunPlan, model_cfg: ModelConfig, ref_cfg: ModelConfig | None, tx, p_sh, state_sh):
    """(the updater, the jitted policy log-probs, the reference's or None) at `model_cfg` and `ref_cfg`."""
    config, mesh, c = run.config, run.mesh, run.choices
    chunk, temp = int(config.train.logprob_chunk), float(config.rl.temperature)
    logprobs = rl_step.jit_logprobs(rl_step.make_logprob_fn(model_cfg, chunk, temp), p_sh, mesh)
    ref = None
    if c.use_ref:  # the policy's own program when the reference has the policy's config (compiled once)
        same = ref_cfg is None or ref_cfg == model_cfg
        ref = logprobs if same else rl_step.jit_logprobs(rl_step.make_logprob_fn(ref_cfg, chunk, temp), p_sh, mesh)
    updater = rl_step.Updater(model_cfg, tx, c.loss, c.loss_options, chunk, state_sh, mesh, temp)
    return updater, logprobs, ref
