"""The rollout phase of an RL step: G rollouts of each of the step's tasks with the current policy, on the
task source's environments, chunk by chunk (or, with `rl.rollout_rows`, all at once streaming through that
many decode rows) through `rollout.distributed` (with several processes each
one builds and steps only the environments of its share while the sampler runs over all of a chunk's
episodes on the global mesh, and every process ends with the same group-major list).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Sequence

import jax
import numpy as np

from rcgrpo_jax import sharding as sharding_lib
from rcgrpo_jax.data import sources
from rcgrpo_jax.models import reward_tokens
from rcgrpo_jax.rollout import EpisodeSpec, ModelPolicy, RolloutConfig
from rcgrpo_jax.rollout.distributed import run_across_processes
from rcgrpo_jax.sampling import SamplingParams, decode_weights


@dataclasses.dataclass
class Rollouts:
    """One step's episodes, group-major (row = task * G + member), and where the time went."""

    tasks: list
    episodes: list  # rollout.Episode
    reward_tokens: np.ndarray | None  # [N, G] int (1 = high), None without conditioning
    time_split: dict[str, float]  # this process's policy / env / chat seconds
    wall_s: float


@dataclasses.dataclass(frozen=True)
class RolloutSetup:
    """What the rollout phase needs from the trainer, built once."""

    model_cfg: Any
    tokenizer: Any
    parser: Any
    stop_ids: Sequence[int]
    decode_shardings: Any
    mesh: Any
    sampling: SamplingParams  # the run's (`train.rl_config.sampling`)
    decode_dtype: str  # the sampler's weights' (`train.rl_config.decode_dtype`)
    with_messages: bool  # keep each episode's conversation (the judge reads it)


def collect(setup: RolloutSetup, config, params, tasks: list, tokens: np.ndarray | None, key) -> Rollouts:
    """G rollouts per task with `params` (cast and placed for decoding once per step)."""

    t0 = time.perf_counter()
    rl = config.rl
    group = int(rl.group_size)
    env_cfg = sources.rl_env_config(config.data, rl)
    rows = [(k, j) for k in range(len(tasks)) for j in range(group)]

    def spec(row: int) -> EpisodeSpec:
        k, j = rows[row]
        token = None
        if tokens is not None:
            token = reward_tokens.token_of(tokens[k, j])
        env = sources.make_env(config.data, tasks[k], env_cfg)
        return EpisodeSpec(env, tasks[k].id, group=k, rollout_index=j, reward_token=token)

    rc = RolloutConfig(
        max_context=int(rl.max_context),
        max_step_tokens=int(rl.max_step_tokens),
        max_steps_per_turn=rl.max_steps_per_turn,
        render_mode=rl.render_mode,
        thinking=rl.thinking,
    )
    # Continuous batching (rl.rollout_rows > 0): all of the step's rollouts in one engine call, streaming
    # through that many decode rows (rollout.policies.ModelPolicy(rows=...)); else chunks of rollout_chunk.
    stream_rows = int(rl.get("rollout_rows", 0) or 0)
    chunk = len(rows) if stream_rows else (int(rl.rollout_chunk) or len(rows))
    episodes, split = [], {"policy": 0.0, "env": 0.0, "chat": 0.0}
    # Cast once per step to model.decode_dtype (bf16 on the GPU presets) and placed by the decode rules.
    decode_params = decode_weights(params, setup.decode_dtype, setup.decode_shardings)
    # Every process walks the same chunks in the same order, so the collectives of each chunk line up.
    for c in range(0, len(rows), chunk):

        def policy(_rows, c=c):
            return ModelPolicy(
                setup.model_cfg,
                decode_params,
                stop_ids=setup.stop_ids,
                max_step_tokens=int(rl.max_step_tokens),
                max_context=int(rl.max_context),
                sampling=setup.sampling,
                prefill_chunk=int(rl.prefill_chunk),
                mesh=setup.mesh,
                rules=sharding_lib.DECODE_RULES,
                rng=jax.random.fold_in(key, c),
                slot_mode=rl.slot_mode,
                decode_attention=str(config.model.get("decode_attention", "auto")),
                rows=stream_rows or None,
                slice_tokens=int(rl.get("rollout_slice", 0) or 0),
            )

        eps, s = run_across_processes(
            min(chunk, len(rows) - c),
            lambda i, c=c: spec(c + i),
            policy,
            setup.tokenizer,
            setup.parser,
            rc,
            with_messages=setup.with_messages,
        )
        episodes += eps
        split = {k: split[k] + s.get(k, 0.0) for k in split}
    return Rollouts(tasks, episodes, tokens, split, time.perf_counter() - t0)
