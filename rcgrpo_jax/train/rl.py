"""The GRPO-family trainer (GRPO, RC-GRPO, Dr.GRPO, DAPO, AWPO): rollouts on the host's environments,
advantages by name, a PPO update with a KL penalty to the frozen stage-1 reference.

One step:
  1. draw N = batch_size / G tasks (a seeded permutation per epoch: the step is the data position);
  2. G rollouts per task with the current policy (temperature 1.0, no top-k/top-p by default, so the
     sampler's log-probs are those of the training forward); with reward conditioning each rollout's
     first user message carries `[Reward Goal: <token>]` exactly as the RCTP-FT data do, the token
     drawn by `rl.reward_tokens.sample` (RC-GRPO) or fixed to the high token;
  3. rewards from the environment (`rl.reward`), the optional DAPO group filter, the judge's reasoning
     scores (AWPO), advantages by `rl.estimator`;
  4. reference log-probs under the frozen reference (when a KL is used or logged), optionally
     recomputed behaviour log-probs (`rl.recompute_old_logprobs`; their gap to the sampler's is logged
     either way when recomputed);
  5. `rl.ppo_epochs` passes over `rl.num_minibatches` mini-batches, each one optimizer update of
     `rl.policy_loss` accumulated exactly over micro-batches (rl_step.py);
  6. diagnostics (zero-variance groups, advantage spread, entropy and its correlation with reward, KL,
     clip fractions, grad norm, reward per reward token), a timing split and tokens/s, to JSONL and
     TensorBoard; an orbax checkpoint on the cadence (the rng lives in the state, so resume is exact).

SFT + RC-GRPO (the paper's ablation): an SFT checkpoint has no reward tokens. They are added at the
start of RL with `models.add_reward_tokens` (new embedding rows = the mean of the known rows) to the
policy and to the reference alike, so the untrained tokens act as generic tokens until RL shapes them.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import time
from typing import Any

import jax
import numpy as np
from absl import logging as absl_logging

from rcgrpo_jax import config_checks, multihost
from rcgrpo_jax import sharding as sharding_lib
from rcgrpo_jax.config_checks import ConfigError
from rcgrpo_jax.data import datasets
from rcgrpo_jax.train import checkpoint as ckpt_lib
from rcgrpo_jax.train import logging as log_lib
from rcgrpo_jax.train import loop as loop_lib
from rcgrpo_jax.train import optim as optim_lib
from rcgrpo_jax.train import rl_step, sft
from rcgrpo_jax.train import state as state_lib

CONDITIONING = ("sampled", "high", "none", "auto")
GROUP_FILTERS = ("none", "dapo")


# ----------------------------------------------------------------------------------------------------
# Reward conditioning.


def has_reward_tokens(tokenizer) -> bool:
    vocab = tokenizer.get_vocab()
    return all(t in vocab for t in (datasets.HIGH_REWARD_TOKEN, datasets.LOW_REWARD_TOKEN))


def conditioning_mode(config, tokenizer) -> str:
    """'sampled' | 'high' | 'none' after resolving 'auto' (high when the checkpoint knows the tokens)."""
    mode = config.rl.reward_conditioning
    if mode == "auto":
        return "high" if has_reward_tokens(tokenizer) else "none"
    return mode


# ----------------------------------------------------------------------------------------------------
# Config.


def resolve_config(config):
    """A copy with `reference.path` defaulted to `model.path` (the stage-1 policy is the reference)."""
    config = copy.deepcopy(config)
    if not config.reference.path and config.model.path:
        config.reference.path = config.model.path
    return config


def check(config, num_devices: int) -> dict[str, int]:
    """config_checks.check plus the RL trainer's own fields; returns the mesh shape."""
    shape = config_checks.check(config, num_devices)
    rl = config.rl
    g, accum = int(rl.group_size), int(config.train.grad_accum)
    if rl.policy_loss is None:
        raise ConfigError("rl.policy_loss", "missing")
    if rl.reward_conditioning not in CONDITIONING:
        raise ConfigError(
            "rl.reward_conditioning", f"{rl.reward_conditioning!r} is not one of {', '.join(CONDITIONING)}"
        )
    if rl.reward_conditioning == "sampled" and not 0.0 <= float(rl.p_high) <= 1.0:
        raise ConfigError("rl.p_high", f"must be in [0, 1], got {rl.p_high}")
    from rcgrpo_jax.rl import reward_tokens

    if rl.reward_token_mode not in reward_tokens.MODES:
        raise ConfigError(
            "rl.reward_token_mode", f"{rl.reward_token_mode!r} is not one of {', '.join(reward_tokens.MODES)}"
        )
    if rl.group_filter not in GROUP_FILTERS:
        raise ConfigError("rl.group_filter", f"{rl.group_filter!r} is not one of {', '.join(GROUP_FILTERS)}")
    from rcgrpo_jax.envs import rewards

    if rl.reward not in rewards.names():
        raise ConfigError("rl.reward", f"unknown reward {rl.reward!r}; known: {', '.join(rewards.names())}")
    _check_sub(config, "rl.advantage", "rcgrpo_jax.rl.advantages", rl.estimator)
    _check_sub(config, "rl.loss", "rcgrpo_jax.rl.losses", rl.policy_loss)
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
    buckets = tuple(int(b) for b in config.data.buckets)
    if int(rl.max_context) > buckets[-1]:
        raise ConfigError("rl.max_context", f"{rl.max_context} exceeds the largest of data.buckets={buckets}")
    if int(rl.max_step_tokens) <= 0:
        raise ConfigError("rl.max_step_tokens", "must be positive")
    exact = float(rl.temperature) == 1.0 and not int(rl.top_k or 0) and float(rl.top_p or 1.0) >= 1.0
    if not exact and not rl.recompute_old_logprobs:
        raise ConfigError(
            "rl.recompute_old_logprobs",
            "sampling with temperature != 1 or top-k/top-p gives log-probs of "
            "another distribution than the training forward; set it True (or sample at 1.0)",
        )
    if float(rl.temperature) <= 0:
        raise ConfigError("rl.temperature", "RL needs sampling (temperature > 0)")
    if rl.estimator == "awpo":
        from rcgrpo_jax.train import judge

        if rl.judge.kind not in judge.JUDGES:
            raise ConfigError("rl.judge.kind", f"unknown judge {rl.judge.kind!r}; known: {', '.join(judge.JUDGES)}")
        if rl.judge.kind == "model":
            config_checks._check_path(config, "rl.judge.path", required=True, must_have="config.json")
    if config.data.get("source", "bfcl") not in ("bfcl", "world"):
        raise ConfigError("data.source", f"unknown task source {config.data.source!r}")
    return shape


def _check_sub(config, dotted: str, module: str, name: str) -> None:
    """The estimator's / loss's options: unknown fields fail here, not in the first step."""
    import importlib

    from rcgrpo_jax.rl.registry import resolve

    reg = importlib.import_module(module)
    try:
        resolve(config_checks._get(config, dotted), reg.default_config(name))
    except (KeyError, AttributeError) as e:
        raise ConfigError(dotted, f"not an option of {name!r}: {e}") from None


# ----------------------------------------------------------------------------------------------------
# Task order (the data position is the step).


def task_indices(num_tasks: int, tasks_per_step: int, seed: int, step: int) -> np.ndarray:
    """Step `step`'s tasks: epoch e is a fresh permutation seeded by (seed, e)."""
    per_epoch = num_tasks // tasks_per_step
    epoch, i = divmod(int(step), per_epoch)
    perm = np.random.default_rng([seed, epoch, 7]).permutation(num_tasks)
    return perm[i * tasks_per_step : (i + 1) * tasks_per_step]


def fingerprint(task_ids, config) -> str:
    h = hashlib.sha256(
        json.dumps([list(task_ids), int(config.rl.group_size), int(config.train.batch_size), int(config.seed)]).encode()
    )
    return h.hexdigest()[:16]


# ----------------------------------------------------------------------------------------------------
# Model loading.


def _load(config, path: str, mesh, rules_name: str):
    from transformers import AutoTokenizer

    from rcgrpo_jax.models.hf_io import load_hf

    model_cfg = sft.model_config(config, path)
    params = load_hf(path, dtype=model_cfg.param_dtype, mesh=mesh, rules=sft.rules(rules_name))[1]
    return model_cfg, params, AutoTokenizer.from_pretrained(path)


def _with_reward_tokens(model_cfg, params, tokenizer, mesh, rules_name):
    """Adds the reward tokens when missing (mean rows), re-placing the params on their shardings."""
    if has_reward_tokens(tokenizer) and model_cfg.vocab_size >= len(tokenizer):
        return model_cfg, params, tokenizer
    from rcgrpo_jax import models

    model_cfg, params, tokenizer, _ = models.add_reward_tokens(model_cfg, params, tokenizer)
    p_sh = sft.param_shardings(jax.eval_shape(lambda: params), mesh, rules_name)
    return model_cfg, jax.device_put(params, p_sh), tokenizer


# ----------------------------------------------------------------------------------------------------
# The trainer.


class Trainer:
    """Everything one RL step needs, built once; `step()` is the host loop's body."""

    def __init__(self, config, workdir: str):
        from rcgrpo_jax import chat
        from rcgrpo_jax.data import sources
        from rcgrpo_jax.models.transformer import abstract_params as abstract_params_of

        self.config = config
        rl = config.rl
        self.shape = check(config, jax.device_count())
        self.mesh = sharding_lib.make_mesh(self.shape)
        self.tasks = sources.tasks(config.data, "train")
        self.group = int(rl.group_size)
        self.batch = int(config.train.batch_size)
        self.tasks_per_step = self.batch // self.group
        if self.tasks_per_step > len(self.tasks):
            raise ConfigError(
                "train.batch_size",
                f"{self.batch} rollouts = {self.tasks_per_step} tasks per step, more than "
                f"the {len(self.tasks)} train tasks of data.source={config.data.source!r}",
            )
        self.steps_per_epoch = len(self.tasks) // self.tasks_per_step
        self.total_steps = sft.total_steps(config, self.steps_per_epoch)

        # Policy and reference (the frozen stage-1 policy), both on the FSDP train shardings.
        rules = config.sharding.train_rules
        path = sft.model_dir(config, workdir)
        ref_path = config.reference.path or path
        self.model_cfg, params, self.tokenizer = _load(config, path, self.mesh, rules)
        self.conditioning = conditioning_mode(config, self.tokenizer)
        self.use_ref = float(rl.loss.kl_beta) > 0 or bool(rl.log_kl)
        ref_cfg = ref_params = ref_tok = None
        if self.use_ref:
            ref_cfg, ref_params, ref_tok = _load(config, ref_path, self.mesh, rules)
        if self.conditioning != "none":
            self.model_cfg, params, self.tokenizer = _with_reward_tokens(
                self.model_cfg, params, self.tokenizer, self.mesh, rules
            )
            if self.use_ref:
                ref_cfg, ref_params, ref_tok = _with_reward_tokens(ref_cfg, ref_params, ref_tok, self.mesh, rules)
        if self.use_ref and ref_cfg.vocab_size != self.model_cfg.vocab_size:
            raise ConfigError(
                "reference.path",
                f"reference vocabulary {ref_cfg.vocab_size} differs from the policy's {self.model_cfg.vocab_size}",
            )
        self.ref_cfg, self.ref_params = ref_cfg, ref_params
        self.parser = chat.get_parser(chat.family_for(self.model_cfg.model_type))
        self.stop_ids = chat.end_of_turn_ids(self.tokenizer)
        self.pad_id = int(self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0)

        # Optimizer, state shardings, jitted functions (cached per length bucket by jit).
        abstract_params = abstract_params_of(self.model_cfg)
        p_sh = sft.param_shardings(abstract_params, self.mesh, rules)
        self.decode_sh = sft.param_shardings(abstract_params, self.mesh, config.sharding.decode_rules)
        updates = self.total_steps * int(rl.ppo_epochs) * int(rl.num_minibatches)
        self.tx = optim_lib.make_optimizer(config.optim, updates)
        self.lr_fn = optim_lib.schedule(config.optim.lr, updates, config.optim.warmup_ratio, config.optim.end_lr_ratio)
        self.abstract = state_lib.abstract_state(abstract_params, self.tx)
        self.state_sh = state_lib.state_shardings(self.abstract, self.mesh, p_sh, self.tx)
        self.logical = sft.rules(rules).logical
        chunk = int(config.train.logprob_chunk)
        self.keys = (
            *rl_step.TOKEN_KEYS,
            "loss_mask",
            "old_logp",
            *(("ref_logp",) if self.use_ref else ()),
            *rl_step.ROW_KEYS,
        )
        self.updater = rl_step.Updater(
            self.model_cfg, self.tx, rl.policy_loss, rl.loss, chunk, self.state_sh, self.mesh, self.keys
        )
        self.logprobs = rl_step.jit_logprobs(rl_step.make_logprob_fn(self.model_cfg, chunk), p_sh, self.mesh)
        self.ref_logprobs = (
            rl_step.jit_logprobs(rl_step.make_logprob_fn(ref_cfg, chunk), p_sh, self.mesh) if self.use_ref else None
        )
        self.judge = None
        if rl.estimator == "awpo":
            from rcgrpo_jax.train import judge

            self.judge = judge.make_judge(rl.judge)
        self._initial_params = params

    # -- state ------------------------------------------------------------------------------------------

    def init_state(self) -> state_lib.TrainState:
        params, self._initial_params = self._initial_params, None
        with jax.set_mesh(self.mesh):
            return jax.jit(
                lambda p: state_lib.create(p, self.tx, jax.random.PRNGKey(self.config.seed)),
                out_shardings=self.state_sh,
                donate_argnums=(0,),
            )(params)

    def restore_target(self):
        self._initial_params = None
        return state_lib.with_shardings(self.abstract, self.state_sh)

    def fingerprint(self) -> str:
        return fingerprint([t.id for t in self.tasks], self.config)

    # -- rollouts ---------------------------------------------------------------------------------------

    def step_tasks(self, step: int):
        return [self.tasks[i] for i in task_indices(len(self.tasks), self.tasks_per_step, int(self.config.seed), step)]

    def reward_token_draw(self, key) -> np.ndarray | None:
        """[N, G] int (1 = high) or None without conditioning."""
        from rcgrpo_jax.rl import reward_tokens

        n, g = self.tasks_per_step, self.group
        if self.conditioning == "none":
            return None
        if self.conditioning == "high":
            return np.ones((n, g), np.int32)
        rl = self.config.rl
        return np.asarray(reward_tokens.sample(key, n, g, float(rl.p_high), rl.reward_token_mode))

    def rollouts(self, params, tasks, tokens: np.ndarray | None, key):
        """Episodes (group-major: row = task * G + member) and the rollout engine's time split.

        Chunk by chunk through `rollout.distributed`: with several processes each one builds and steps only
        the environments of its share of the chunk while the sampler runs over all of the chunk's episodes on
        the global mesh, and every process ends with the same group-major list as a single-process run. The
        time split is this process's own."""
        from rcgrpo_jax.envs import bfcl
        from rcgrpo_jax.rollout import EpisodeSpec, ModelPolicy, RolloutConfig
        from rcgrpo_jax.rollout.distributed import run_across_processes
        from rcgrpo_jax.sampling import SamplingParams

        rl = self.config.rl
        env_cfg = bfcl.EnvConfig(reward=rl.reward)
        rows = [(k, j) for k in range(len(tasks)) for j in range(self.group)]

        def spec(row: int) -> EpisodeSpec:
            k, j = rows[row]
            token = (
                None if tokens is None else (datasets.HIGH_REWARD_TOKEN if tokens[k, j] else datasets.LOW_REWARD_TOKEN)
            )
            return EpisodeSpec(
                bfcl.BFCLEnv(tasks[k], env_cfg), tasks[k].id, group=k, rollout_index=j, reward_token=token
            )

        sampling = SamplingParams(
            float(rl.temperature), int(rl.top_k or 0) or None, float(rl.top_p) if float(rl.top_p or 1.0) < 1.0 else None
        )
        rc = RolloutConfig(
            max_context=int(rl.max_context),
            max_step_tokens=int(rl.max_step_tokens),
            max_steps_per_turn=rl.max_steps_per_turn,
        )
        chunk = int(rl.rollout_chunk) or len(rows)
        episodes, split = [], {"policy": 0.0, "env": 0.0, "chat": 0.0}
        decode_params = jax.device_put(params, self.decode_sh)
        # Every process walks the same chunks in the same order, so the collectives of each chunk line up.
        for c in range(0, len(rows), chunk):

            def policy(_rows, c=c):
                return ModelPolicy(
                    self.model_cfg,
                    decode_params,
                    stop_ids=self.stop_ids,
                    max_step_tokens=int(rl.max_step_tokens),
                    max_context=int(rl.max_context),
                    sampling=sampling,
                    prefill_chunk=int(rl.prefill_chunk),
                    mesh=self.mesh,
                    rules=sharding_lib.DECODE_RULES,
                    rng=jax.random.fold_in(key, c),
                    slot_mode=rl.slot_mode,
                )

            eps, s = run_across_processes(
                min(chunk, len(rows) - c),
                lambda i, c=c: spec(c + i),
                policy,
                self.tokenizer,
                self.parser,
                rc,
                with_messages=self.judge is not None,
            )  # the judge reads them
            episodes += eps
            split = {k: split[k] + s.get(k, 0.0) for k in split}
        return episodes, split

    def _logprob_pass(self, fn, params, batch, micros, buckets) -> np.ndarray:
        """log-probs [B, L - 1] of every row, one length-bucketed micro-batch at a time."""
        out = np.zeros_like(batch["old_logp"])
        for rows in micros:
            mb = rl_step.put(rl_step.take(batch, rows, buckets, rl_step.TOKEN_KEYS), self.mesh)
            lp = np.asarray(multihost.gather(fn(params, mb["tokens"], mb["token_mask"])))  # rows may span processes
            out[rows, : lp.shape[1]] = lp
        return out

    # -- one step -----------------------------------------------------------------------------------------

    def step(self, state: state_lib.TrainState, step: int):
        """Rollouts -> rewards -> advantages -> reference -> PPO updates. Returns (state, metrics)."""
        from rcgrpo_jax.rl import advantages as adv_lib
        from rcgrpo_jax.rl import diagnostics, filters

        rl = self.config.rl
        n, g = self.tasks_per_step, self.group
        t_start = time.perf_counter()
        base = jax.random.wrap_key_data(np.asarray(jax.device_get(state.rng), np.uint32))
        k_tokens, k_sample = jax.random.split(jax.random.fold_in(base, step))
        tasks = self.step_tasks(step)
        tokens = self.reward_token_draw(k_tokens)
        episodes, split = self.rollouts(state.params, tasks, tokens, k_sample)
        rewards = np.asarray([e.reward for e in episodes], np.float32).reshape(n, g)
        t_rollout = time.perf_counter()

        # Advantages (host-sized [N, G] math).
        metrics: dict[str, Any] = {}
        aux: dict[str, Any] = {}
        keep = np.ones((n,), bool)
        if rl.group_filter == "dapo":
            keep_j, fm = filters.dapo_group_filter(rewards, atol=float(rl.filter_atol))
            keep = np.asarray(keep_j)
            aux["group_mask"] = keep
            metrics.update(fm)
        if tokens is not None:
            aux["reward_tokens"] = tokens
        if self.judge is not None:
            from rcgrpo_jax.train import judge

            scores = self.judge([judge.from_episode(e) for e in episodes])
            aux["reasoning"] = np.asarray(scores, np.float32).reshape(n, g)
            metrics["judge_score_mean"] = float(np.mean(scores))
        adv, est_metrics = adv_lib.get(rl.estimator)(rewards, aux=aux, config=rl.advantage)
        est_scalars, est_arrays = adv_lib.split_metrics(est_metrics)
        metrics.update({f"estimator/{k}": v for k, v in est_scalars.items()})
        adv = np.asarray(adv, np.float32)
        clip_scale = np.asarray(est_arrays.get("clip_scale", np.ones((n, g))), np.float32)

        # Arrays: rows permuted (seeded by the step) so mini-batches mix groups, then sorted by length inside
        # each mini-batch into micro-batches at their own length bucket; dropped groups get no loss.
        arrays = [e.arrays() for e in episodes]
        lengths = np.asarray([len(a["tokens"]) for a in arrays])
        buckets = tuple(int(x) for x in self.config.data.buckets)
        batch = rl_step.pack_rows(
            [a["tokens"] for a in arrays],
            [a["loss_mask"] for a in arrays],
            [a["logprobs"] for a in arrays],
            rl_step.bucket_for(int(lengths.max()), buckets),
            self.pad_id,
        )
        batch["loss_mask"] *= np.repeat(keep, g)[:, None].astype(np.float32)
        batch["advantages"] = adv.reshape(-1)
        batch["clip_scale"] = clip_scale.reshape(-1)
        perm = np.random.default_rng([int(self.config.seed), int(step), 11]).permutation(n * g)
        micro = self.batch // int(self.config.train.grad_accum)
        plan = rl_step.minibatch_plan(perm, lengths, int(rl.num_minibatches), micro)
        all_micro = [rows for mb in plan for rows in mb]

        with jax.set_mesh(self.mesh), sharding_lib.axis_rules(self.logical):
            t0 = time.perf_counter()
            if self.use_ref:
                batch["ref_logp"] = self._logprob_pass(self.ref_logprobs, self.ref_params, batch, all_micro, buckets)
            t_ref = time.perf_counter() - t0
            if rl.recompute_old_logprobs:
                recomputed = self._logprob_pass(self.logprobs, state.params, batch, all_micro, buckets)
                m = batch["loss_mask"]
                metrics["old_logp_abs_diff"] = float(
                    np.sum(np.abs(recomputed - batch["old_logp"]) * m) / max(m.sum(), 1.0)
                )
                batch["old_logp"] = recomputed
            t_recompute = time.perf_counter() - t0 - t_ref

            # PPO: epochs x mini-batches, each one optimizer update.
            t0 = time.perf_counter()
            updates, row_stats = [], []
            for epoch in range(int(rl.ppo_epochs)):
                for mb in plan:
                    micros = [rl_step.put(rl_step.take(batch, rows, buckets, self.keys), self.mesh) for rows in mb]
                    state, um, rows_out = self.updater(state, micros)
                    updates.append(um)
                    if epoch == 0:
                        row_stats += rows_out
            updates, row_stats = multihost.gather((updates, row_stats))  # row stats may span processes
            t_update = time.perf_counter() - t0

        # Diagnostics.
        ent_sum, count = np.zeros((n * g,)), np.zeros((n * g,))
        for rows, (e_sum, c) in zip(all_micro, row_stats):
            ent_sum[rows], count[rows] = np.asarray(e_sum)[: len(rows)], np.asarray(c)[: len(rows)]
        per_seq = ent_sum / np.maximum(count, 1.0)  # group-major, as the rewards
        metrics.update({k: float(v) for k, v in diagnostics.group_metrics(rewards, adv).items()})
        em = diagnostics.entropy_metrics(per_seq[:, None], (count > 0)[:, None], rewards)
        metrics.update({k: float(v) for k, v in em.items()})
        metrics["entropy_mean"] = float(ent_sum.sum() / max(count.sum(), 1.0))  # token mean, not sequence mean
        if tokens is not None:
            metrics.update({k: float(v) for k, v in diagnostics.reward_token_metrics(rewards, tokens).items()})
        last = updates[-1]
        for k in ("loss", "grad_norm", "loss_tokens", *rl_step.LOSS_METRICS):
            metrics[k] = float(np.mean([u[k] for u in updates]))
        if not self.use_ref:
            metrics.pop("kl")
        metrics.update(
            {
                "finite": int(all(bool(u["finite"]) for u in updates)),
                "nonfinite_in_row": int(last["nonfinite_in_row"]),
                "updates": len(updates),
                "lr": float(self.lr_fn(jax.device_get(sft._applied_updates(state.opt_state)))),
                "seq_len": int(batch["tokens"].shape[1]),
            }
        )
        metrics.update(rollout_metrics(episodes))
        sampled = int(sum(int(np.sum(a["loss_mask"])) for a in arrays))
        total_tokens = int(sum(len(a["tokens"]) for a in arrays))
        dt = time.perf_counter() - t_start
        metrics.update(
            {
                "time/step_s": dt,
                "time/rollout_s": split["policy"],
                "time/env_s": split["env"] + split["chat"],
                "time/rollout_wall_s": t_rollout - t_start,
                "time/reference_s": t_ref,
                "time/recompute_s": t_recompute,
                "time/update_s": t_update,
                "time/tokens_per_s": total_tokens / max(dt, 1e-9),
                "time/sampled_tokens_per_s": sampled / max(split["policy"], 1e-9),
                "time/train_tokens_per_s": total_tokens
                * len(updates)
                / max(t_update, 1e-9)
                / max(int(rl.ppo_epochs), 1),
            }
        )
        return state, metrics, episodes


def rollout_metrics(episodes) -> dict[str, float]:
    """Episode shape: lengths, steps, tool calls, parse errors, truncations, official validity, end reasons."""
    n = max(len(episodes), 1)
    out = {
        "rollout/tokens_mean": float(np.mean([len(e.tokens) for e in episodes])),
        "rollout/sampled_tokens_mean": float(np.mean([sum(e.loss_mask) for e in episodes])),
        "rollout/steps_mean": float(np.mean([e.steps for e in episodes])),
        "rollout/tool_calls_mean": float(np.mean([e.tool_calls for e in episodes])),
        "rollout/parse_errors_mean": float(np.mean([e.parse_errors for e in episodes])),
        "rollout/step_truncations_mean": float(np.mean([e.step_truncations for e in episodes])),
        "rollout/official_valid": float(np.mean([bool(e.verdict.get("valid")) for e in episodes])),
    }
    for reason in ("completed", "max_context", "step_limit", "env_done"):
        out[f"rollout/end_{reason}"] = sum(e.done_reason == reason for e in episodes) / n
    return out


# ----------------------------------------------------------------------------------------------------
# The run.


def run(config, workdir: str, *, stop_after: int | None = None) -> dict[str, Any]:
    """Trains from the latest checkpoint in `workdir` (or from `model.path`); writes workdir/metrics.jsonl,
    checkpoints, and the final policy as an HF directory (workdir/hf). `stop_after` ends this call after
    that many steps without a final save (tests: a crash). Returns {step, reason, metrics, total_steps}."""
    config = resolve_config(config)
    os.makedirs(workdir, exist_ok=True)
    is_main = jax.process_index() == 0
    trainer = Trainer(config, workdir)
    n_steps = trainer.total_steps
    ckpt = ckpt_lib.Checkpointer(
        os.path.join(workdir, "checkpoints"),
        every_steps=config.checkpoint.every_steps,
        max_to_keep=config.checkpoint.max_to_keep,
        async_save=config.checkpoint.async_save,
    )
    start = ckpt.latest_step()
    if start is None:
        state, start = trainer.init_state(), 0
    else:
        state, meta = ckpt.restore(start, trainer.restore_target())
        if meta.get("data_fingerprint") != trainer.fingerprint():
            raise ConfigError("data.source", "the tasks differ from those of the checkpoint being resumed")
        absl_logging.info("resumed from step %d", start)
    logger = log_lib.MetricsLogger(
        workdir, is_main=is_main, tensorboard=config.log.tensorboard, resume_step=start if start > 0 else None
    )
    progress = log_lib.Progress(n_steps, start, enabled=is_main and config.log.progress, desc=config.stage)
    meta = lambda s: {
        "step": int(s),
        "data_position": int(s),
        "data_fingerprint": trainer.fingerprint(),
        "total_steps": n_steps,
        "stage": config.stage,
    }

    def one_step(state, step):
        state, metrics, _ = trainer.step(state, step)
        return state, metrics

    try:
        state, step, reason, last = loop_lib.run_steps(
            one_step,
            state,
            start=start,
            n_steps=n_steps,
            config=config,
            ckpt=ckpt,
            logger=logger,
            progress=progress,
            meta=meta,
            stop_after=stop_after,
            progress_keys=("reward_mean", "kl", "grad_norm"),
        )
    finally:
        ckpt.close()
        logger.close()
        progress.close()
    if reason == "done" and config.checkpoint.export_hf:
        sft.export_hf(trainer.model_cfg, state.params, trainer.tokenizer, os.path.join(workdir, "hf"))
    return {"step": step, "reason": reason, "metrics": last, "total_steps": n_steps}


# ----------------------------------------------------------------------------------------------------
# Will it fit? The update step on abstract parameters at the largest bucket.


def jnp_itemsize(dtype: str) -> int:
    import jax.numpy as jnp

    return jnp.dtype(dtype).itemsize


def dry_run(config) -> dict[str, float]:
    """Per-device memory of one PPO mini-batch update at the largest bucket, without weights."""
    import dataclasses

    import ml_collections

    from rcgrpo_jax.models.transformer import abstract_params as abstract_params_of

    config = resolve_config(config)
    if not config.model.path:  # size the published architecture as if its weights were given
        config = ml_collections.ConfigDict(config.to_dict())
        config.model.build_tiny = True
    shape = check(config, jax.device_count())
    mesh = sharding_lib.make_mesh(shape)
    if config.model.path:
        hf = config.model.path
    else:
        from configs import common

        hf = common.hf_architecture(config.preset)
    model_cfg = sft.model_config(config, hf)
    if config.rl.reward_conditioning == "sampled":
        model_cfg = dataclasses.replace(model_cfg, vocab_size=model_cfg.vocab_size + 2)
    abstract_params = abstract_params_of(model_cfg)
    p_sh = sft.param_shardings(abstract_params, mesh, config.sharding.train_rules)
    tx = optim_lib.make_optimizer(config.optim, 1000)
    abstract = state_lib.abstract_state(abstract_params, tx)
    state_sh = state_lib.state_shardings(abstract, mesh, p_sh, tx)
    use_ref = float(config.rl.loss.kl_beta) > 0 or bool(config.rl.log_kl)
    keys = (*rl_step.TOKEN_KEYS, "loss_mask", "old_logp", *(("ref_logp",) if use_ref else ()), *rl_step.ROW_KEYS)
    updater = rl_step.Updater(
        model_cfg, tx, config.rl.policy_loss, config.rl.loss, int(config.train.logprob_chunk), state_sh, mesh, keys
    )
    micro = int(config.train.batch_size) // int(config.train.grad_accum)
    length = int(config.data.buckets[-1])
    with jax.set_mesh(mesh), sharding_lib.axis_rules(sft.rules(config.sharding.train_rules).logical):
        grads_c, apply_c = updater.lower(
            state_lib.with_shardings(abstract, state_sh), rl_step.abstract_micro(mesh, keys, micro, length)
        )
    # Peak: the micro-batch gradient step (params + activations + its float32 gradient output) while the
    # optimizer moments, the gradient accumulator and the frozen reference are resident too.
    report = sft.memory_report(grads_c, abstract, state_sh)
    apply_peak = sft.memory_report(apply_c, abstract, state_sh)["peak_gb"]
    accum_gb = report["params_gb"] * 4 / jnp_itemsize(model_cfg.param_dtype)
    ref_gb = report["params_gb"] if use_ref else 0.0
    report["peak_gb"] = max(report["peak_gb"] + report["opt_state_gb"] + accum_gb + ref_gb, apply_peak + ref_gb)
    report.update(
        {
            "devices": jax.device_count(),
            "seq_len": length,
            "micro_batch": micro,
            "budget_gb": sft.device_budget(config) / 1e9,
        }
    )
    return report
