"""The GRPO-family trainer (GRPO, RC-GRPO, Dr.GRPO, DAPO, AWPO): rollouts on the task source's
environments, advantages by name, a PPO update with a KL penalty to the frozen stage-1 reference.

One step, as named phases:
  1. rollouts (rl_rollouts.py): N = batch_size / G tasks (every epoch visits every task once:
     rl_data.task_indices), G rollouts each with the current policy; with reward conditioning each
     rollout's first user message carries `[Reward Goal: <token>]` exactly as the RCTP-FT data do, the
     token drawn by `models.reward_tokens.sample` (RC-GRPO) or fixed to the high token;
  2. advantage inputs: rewards (non-finite ones marked, logged, kept out of their group's mean and out of
     the loss), the reward shaping by `rl.shaping.name` and the group filter by `rl.group_filter.name`, the
     judge's reasoning scores for estimators that need them, advantages and per-rollout loss inputs by
     `rl.advantage.name` (`advantages.estimate`) -> `AdvantageInputs`;
  3. the batch (`rl_batch.RolloutBatch`, the estimator's per-rollout pytree gathered to rows), the reference
     log-probs (when a KL is used or logged) and the optional recompute of the behaviour log-probs, all at the
     sampling temperature -> `PreparedBatch`;
  4. the PPO update: `rl.ppo_epochs` passes over `rl.num_minibatches` mini-batches, each one optimizer
     update of `rl.loss.name` accumulated exactly over micro-batches (rl_step.py); the first epoch's entropy
     reduced per episode from the micro-batches' rows -> `UpdateResult`;
  5. metrics (`rl.diagnostics.step_diagnostics` and the episodes' shape), a timing split and tokens/s.

SFT + RC-GRPO (the paper's ablation): an SFT checkpoint has no reward tokens. They are added at the
start of RL with `models.add_reward_tokens` (new embedding rows = the mean of the known rows) to the
policy and to the reference alike, so the untrained tokens act as generic tokens until RL shapes them.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import ml_collections
import numpy as np
from absl import logging as absl_logging

from rcgrpo_jax import chat, judges, multihost, runtime
from rcgrpo_jax import sharding as sharding_lib
from rcgrpo_jax.config_fields import ConfigError
from rcgrpo_jax.data import sources, tiny_checkpoint
from rcgrpo_jax.eval import run as eval_run
from rcgrpo_jax.models import reward_tokens
from rcgrpo_jax.rl import advantages, diagnostics, filters, shaping
from rcgrpo_jax.train import dry_run, model_prep, rl_batch, rl_config, rl_data, rl_rollouts, rl_setup, rl_step, runner
from rcgrpo_jax.train import logging as log_lib
from rcgrpo_jax.train import loop as loop_lib
from rcgrpo_jax.train import state as state_lib


@dataclasses.dataclass
class AdvantageInputs:
    """Phase 2's output: [N, G] arrays (group-major) and the step's scalars so far."""

    rewards: np.ndarray  # finite: a non-finite reward is replaced by its group's finite mean
    valid: np.ndarray  # bool: the reward was finite (invalid rollouts get no loss)
    keep: np.ndarray  # [N] bool: groups the group filter keeps
    advantages: np.ndarray
    per_rollout: Any  # the estimator's per-rollout loss inputs (`advantages.Estimate.per_rollout`), [N, G, ...] leaves
    metrics: dict[str, Any]


@dataclasses.dataclass
class PreparedBatch:
    """Phase 3's output: the host batch (one row per training sample, `episode` set; reference and recomputed
    log-probs filled in when used), the PPO plan (row indices per micro-batch per mini-batch) and the phase's
    timings."""

    batch: rl_batch.RolloutBatch
    plan: list[list[np.ndarray]]
    timing: dict[str, Any]


@dataclasses.dataclass
class UpdateResult:
    """Phase 4's output (beside the new state): each optimizer update's metrics, the per-episode statistics of
    the first PPO epoch (under the pre-update policy, reduced from the micro-batches' rows), and its seconds."""

    updates: list[dict[str, Any]]
    episodes: rl_step.EpisodeStats
    seconds: float


def check_judge_budget(failed: int, items: int, budget: float, name: str) -> None:
    """Raises `loop.StopRun('judge_failures', ...)` when, on any process, more than `budget` of this step's
    `items` judge items failed (scored the judge's default): the run saves and stops rather than train on
    default scores. A collective: every process calls it every step the judge runs."""
    over = items > 0 and failed / items > budget
    if multihost.any_process(over):
        raise loop_lib.StopRun(
            "judge_failures",
            f"judge {name}: {failed} of {items} items failed this step (more than rl.judge.max_failed_frac="
            f"{budget:g}); checkpoint saved before the step; fix the judge and rerun to resume",
        )


def finite_rewards(rewards: np.ndarray, episodes, group: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(rewards with each non-finite value replaced by the mean of its group's finite ones (0 if none), the
    finite mask, a description of each bad episode). The replacement leaves the group's mean unchanged."""
    r = np.asarray(rewards, np.float64).reshape(-1, group)
    valid = np.isfinite(r)
    out = np.where(valid, r, 0.0)
    means = out.sum(axis=1, keepdims=True) / np.maximum(valid.sum(axis=1, keepdims=True), 1)
    out = np.where(valid, out, means)
    bad = [
        f"{e.task_id} (rollout {i % group}): reward {e.reward!r}, episode ended {e.done_reason!r}"
        for i, e in enumerate(episodes)
        if not valid.reshape(-1)[i]
    ]
    return out.astype(np.float32), valid, bad


def shape_and_filter(
    rewards: np.ndarray, episodes, choices: rl_config.RLChoices, rl
) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """(shaped rewards [N, G] float32, the groups kept [N] bool, their metrics): the selected reward shaping
    (`rl.shaping`, rcgrpo_jax.rl.shaping), then the selected group filter on the shaped rewards (`rl.group_filter`,
    rcgrpo_jax.rl.filters). `episodes` are the step's N * G episodes, group-major."""
    shaped, metrics = shaping.get(choices.shaping)(rewards, episodes, rl=rl, config=choices.shaping_options)
    keep, fm = filters.get(choices.group_filter)(shaped, config=choices.group_filter_options)
    metrics = {**metrics, **{k: float(v) for k, v in fm.items()}}
    return np.asarray(shaped, np.float32), np.asarray(keep, bool).reshape(-1), metrics


class RLTrainer:
    """Everything one RL step needs, built once; `step()` is the host loop's body (train/runner.py)."""

    progress_keys = ("reward_mean", "kl", "grad_norm")

    def __init__(self, run: rl_setup.RunPlan, workdir: str):
        config = run.config  # resolved and checked (`rl_setup.plan`)
        self.run, self.config, self.stage = run, config, config.stage
        self.workdir = workdir
        self.mesh, self.choices = run.mesh, run.choices
        rl = config.rl
        self.heldout_every = int(rl.heldout.every)
        self.tasks = sources.tasks(config.data, "rl")
        self.heldout_tasks = sources.tasks(config.data, str(rl.heldout.split)) if self.heldout_every > 0 else []
        self.group = int(rl.group_size)
        self.tasks_per_step = int(config.train.batch_size) // self.group
        if self.tasks_per_step > len(self.tasks):
            raise ConfigError(
                "train.batch_size",
                f"{config.train.batch_size} rollouts = {self.tasks_per_step} tasks per step, more than the "
                f"{len(self.tasks)} train tasks of data.source={config.data.source!r}",
            )
        train = config.train
        self.total_steps = rl_data.total_steps(train.epochs, train.max_steps, len(self.tasks), self.tasks_per_step)

        self._load_models(config, workdir)
        self.parser = chat.get_parser(chat.family_for(self.model_cfg.model_type))
        self.pad_id = int(self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0)

        # The programs (jit caches them per length bucket): one optimizer update per mini-batch per PPO epoch.
        updates = self.total_steps * int(rl.ppo_epochs) * int(rl.num_minibatches)
        self.setup = rl_setup.build(run, self.model_cfg, ref_cfg=self.ref_cfg, updates=updates)
        s = self.setup
        self.tx, self.lr_fn, self.abstract, self.state_sh = s.tx, s.lr_fn, s.abstract_state, s.state_shardings
        self.logical, self.updater, self.logprobs, self.ref_logprobs = s.logical, s.updater, s.logprobs, s.ref_logprobs
        self.judge = None
        if self.choices.uses_judge:
            self.judge = judges.make_judge(rl.judge)
            stand_in = " (a deterministic stand-in, not an LLM judge)" if self.judge.stand_in else ""
            absl_logging.info("reasoning judge: %s%s", self.judge.name, stand_in)
        self.rollout_setup = rl_rollouts.RolloutSetup(
            self.model_cfg,
            self.tokenizer,
            self.parser,
            chat.end_of_turn_ids(self.tokenizer),
            s.decode_shardings,
            self.mesh,
            run.sampling,
            run.decode_dtype,
            with_messages=self.judge is not None,
        )

    def _load_models(self, config, workdir: str) -> None:
        """Policy and reference (the frozen stage-1 policy), both on the FSDP train shardings; the reward
        tokens are added to both when the run conditions on them."""
        from transformers import AutoTokenizer

        rules = self.run.train_rules
        path = tiny_checkpoint.model_dir(config, workdir)
        self.conditioning = config.rl.reward_conditioning
        if self.conditioning == "auto":
            known = reward_tokens.known_by(AutoTokenizer.from_pretrained(path))
            self.conditioning = "high" if known else "none"
        conditioned = self.conditioning != "none"
        policy = model_prep.load(config, path, self.mesh, rules, reward_tokens=conditioned)
        self.model_cfg, self.tokenizer, self._initial_params = policy.config, policy.tokenizer, policy.params
        self.ref_cfg = self.ref_params = None
        if self.choices.use_ref:
            ref = model_prep.load(config, config.reference.path or path, self.mesh, rules, reward_tokens=conditioned)
            if ref.config.vocab_size != self.model_cfg.vocab_size:
                raise ConfigError(
                    "reference.path",
                    f"reference vocabulary {ref.config.vocab_size} differs from the policy's {self.model_cfg.vocab_size}",
                )
            self.ref_cfg, self.ref_params = ref.config, ref.params

    # -- the runner's protocol ----------------------------------------------------------------------------

    def init_state(self) -> state_lib.TrainState:
        params, self._initial_params = self._initial_params, None
        return jax.jit(
            lambda p: state_lib.create(p, self.tx, jax.random.PRNGKey(self.config.seed)),
            out_shardings=self.state_sh,
            donate_argnums=(0,),
        )(params)

    def restore_target(self):
        self._initial_params = None
        return state_lib.with_shardings(self.abstract, self.state_sh)

    def fingerprint(self) -> str:
        ids, c = [t.id for t in self.tasks], self.config
        return rl_data.fingerprint(ids, group_size=self.group, batch_size=c.train.batch_size, seed=c.seed)

    def export(self, state, path: str) -> None:
        model_prep.export_hf(self.model_cfg, state.params, self.tokenizer, path)

    def step(self, state: state_lib.TrainState, step: int):
        """Rollouts -> advantage inputs -> batch and reference -> PPO updates -> metrics."""
        heldout = {}  # the policy before this step's update (outside the step's timing)
        if self.heldout_every > 0 and step % self.heldout_every == 0:
            heldout["heldout/accuracy"] = self.heldout_accuracy(state.params)
        t0, (c0, c0_s) = time.perf_counter(), runtime.compile_totals()
        base = jax.random.wrap_key_data(np.asarray(jax.device_get(state.rng), np.uint32))
        k_tokens, k_sample = jax.random.split(jax.random.fold_in(base, step))
        ro = rl_rollouts.collect(
            self.rollout_setup,
            self.config,
            state.params,
            self.step_tasks(step),
            self.reward_token_draw(k_tokens),
            k_sample,
        )
        adv = self.advantage_inputs(ro, step)
        prepared = self.batch_and_reference(state, ro, adv, step)
        state, update = self.ppo_update(state, prepared, len(ro.episodes))
        metrics = self.step_metrics(state, rollouts=ro, advantages=adv, batch=prepared.batch, update=update)
        metrics.update(prepared.timing)
        metrics.update(self.across_steps(step, metrics))
        metrics.update(step_timing(ro, time.perf_counter() - t0, update, int(self.config.rl.ppo_epochs)))
        c1, c1_s = runtime.compile_totals()  # new shapes (rows, cache length, buckets) compile inside the step
        metrics.update({"time/compiles": c1 - c0, "time/compile_s": c1_s - c0_s})
        metrics.update(heldout)
        if self.heldout_every > 0 and step == self.total_steps - 1:  # the final policy, after the last update
            metrics["heldout/final_accuracy"] = self.heldout_accuracy(state.params)
        return state, metrics

    def heldout_accuracy(self, params) -> float:
        """Greedy accuracy (BFCL's checker) of `params` on the held-out tasks, prompted as the final evaluation
        is (the high reward goal when the run conditions on reward tokens), with the run's rollout limits."""
        rl = self.config.rl
        eval_cfg = ml_collections.ConfigDict(
            {
                "reward_token": "none" if self.conditioning == "none" else "high",
                "max_context": int(rl.max_context),
                "max_step_tokens": int(rl.max_step_tokens),
                "max_steps_per_turn": rl.max_steps_per_turn,
                "render_mode": rl.render_mode,
                "thinking": rl.thinking,
                "batch_size": len(self.heldout_tasks),
                "prefill_chunk": int(rl.prefill_chunk),
            }
        )
        with jax.set_mesh(self.mesh):
            _, summary = eval_run.evaluate(
                self.model_cfg,
                params,
                self.tokenizer,
                self.heldout_tasks,
                eval_cfg,
                mesh=self.mesh,
                source=self.config.data.source,
            )
        return float(summary["overall"])

    # -- phases ---------------------------------------------------------------------------------------------

    _trend = None  # rl.diagnostics.AcrossSteps, built at the run's first step (after a resume, from its log)

    def across_steps(self, step: int, metrics: dict[str, Any]) -> dict[str, float]:
        """The paper's entropy-reward correlation: per-step mean entropy against per-step mean reward over the
        steps so far (`rl.diagnostics.AcrossSteps`), beside the within-step `entropy_reward_pearson`."""
        import os

        if self._trend is None:
            path = os.path.join(self.workdir, log_lib.METRICS_FILE)
            resumed = step > 0 and os.path.exists(path)
            self._trend = diagnostics.AcrossSteps(
                [r for r in log_lib.read_metrics(path) if r["step"] <= step] if resumed else ()
            )
        return self._trend.update(metrics["entropy_mean"], metrics["reward_mean"])

    def step_tasks(self, step: int) -> list:
        idx = rl_data.task_indices(len(self.tasks), self.tasks_per_step, int(self.config.seed), step)
        return [self.tasks[i] for i in idx]

    def reward_token_draw(self, key) -> np.ndarray | None:
        """[N, G] int (1 = high) or None without conditioning."""

        n, g = self.tasks_per_step, self.group
        if self.conditioning == "none":
            return None
        if self.conditioning == "high":
            return np.ones((n, g), np.int32)
        rl = self.config.rl
        return np.asarray(reward_tokens.sample(key, n, g, float(rl.p_high), rl.reward_token_mode))

    def advantage_inputs(self, ro: rl_rollouts.Rollouts, step: int = 0) -> AdvantageInputs:
        """Rewards (finite), the shaping and the group filter (`shape_and_filter`), the judge, then the estimator
        and its per-rollout inputs."""

        rl, c = self.config.rl, self.choices
        n, g = self.tasks_per_step, self.group
        raw = np.asarray([e.reward for e in ro.episodes], np.float64)
        rewards, valid, bad = finite_rewards(raw, ro.episodes, g)
        metrics: dict[str, Any] = {"rollout/nonfinite_rewards": len(bad)}
        for line in bad:
            absl_logging.warning("non-finite reward, rollout kept out of the loss: %s", line)
        rewards, keep, fm = shape_and_filter(rewards, ro.episodes, c, rl)
        metrics.update(fm)
        aux: dict[str, Any] = {"group_mask": keep}
        if ro.reward_tokens is not None:
            aux["reward_tokens"] = ro.reward_tokens
        if self.judge is not None:
            failed_before = int(self.judge.stats().get("failures", 0))
            scores = np.asarray(self.judge([judges.from_episode(e) for e in ro.episodes]), np.float32).reshape(n, g)
            aux["reasoning"] = scores
            metrics["judge_score_mean"] = float(np.mean(scores))
            metrics.update({f"judge/{k}": v for k, v in self.judge.stats().items()})  # cumulative counters
            metrics["judge/stand_in"] = int(self.judge.stand_in)
            failed = int(self.judge.stats().get("failures", 0)) - failed_before
            metrics["judge/failed_frac"] = failed / max(len(ro.episodes), 1)
            check_judge_budget(failed, len(ro.episodes), judges.failure_budget(rl.judge), self.judge.name)
        missing = [s for s in c.needs if s not in aux]
        if missing:
            raise ConfigError("rl.advantage.name", f"{c.estimator!r} needs {missing}, which this run does not produce")
        est = advantages.estimate(c.estimator, rewards, aux=aux, config=c.advantage_options)
        metrics.update({f"estimator/{k}": float(v) for k, v in est.metrics.items()})
        per_rollout = jax.tree.map(np.asarray, est.per_rollout)
        adv = np.asarray(est.advantages, np.float32)
        if rl.shuffle_advantages:
            adv, per_rollout = shuffled(adv, per_rollout, int(self.config.seed), step)
        return AdvantageInputs(rewards, valid, keep, adv, per_rollout, metrics)

    def batch_and_reference(self, state, ro, adv: AdvantageInputs, step: int) -> PreparedBatch:
        """The host batch (one row per training sample, each row's episode in `batch.episode`; rows of dropped
        groups and invalid rollouts carry no loss), the PPO plan, and the reference / recomputed log-probs."""
        rl = self.config.rl
        micro = int(self.config.train.batch_size) // int(self.config.train.grad_accum)
        batch = rl_batch.from_episodes(
            ro.episodes,
            adv.advantages,
            adv.per_rollout,
            np.repeat(adv.keep, self.group) & adv.valid.reshape(-1),
            buckets=tuple(int(x) for x in self.config.data.buckets),
            pad_id=self.pad_id,
            row_multiple=int(rl.num_minibatches) * micro,
        )
        perm = np.random.default_rng([int(self.config.seed), int(step), 11]).permutation(batch.rows)
        plan = rl_batch.minibatch_plan(perm, batch.row_lengths, int(rl.num_minibatches), micro)
        all_micro = [rows for mb in plan for rows in mb]
        timing: dict[str, Any] = {"time/reference_s": 0.0, "time/recompute_s": 0.0}
        with jax.set_mesh(self.mesh), sharding_lib.axis_rules(self.logical):
            t0 = time.perf_counter()
            if self.choices.use_ref:
                batch = batch.replace(ref_logp=self._logprob_pass(self.ref_logprobs, self.ref_params, batch, all_micro))
            timing["time/reference_s"] = time.perf_counter() - t0
            if rl.recompute_old_logprobs:
                t0 = time.perf_counter()
                recomputed = self._logprob_pass(self.logprobs, state.params, batch, all_micro)
                m = batch.loss_mask
                gap = float(np.sum(np.abs(recomputed - batch.old_logp) * m) / max(m.sum(), 1.0))
                batch = batch.replace(old_logp=recomputed)
                timing.update({"old_logp_abs_diff": gap, "time/recompute_s": time.perf_counter() - t0})
        return PreparedBatch(batch, plan, timing)

    def _logprob_pass(self, fn, params, batch: rl_batch.RolloutBatch, micros) -> np.ndarray:
        """log-probs [B, L - 1] of every row, one length-bucketed micro-batch at a time."""
        buckets = tuple(int(x) for x in self.config.data.buckets)
        out = np.zeros_like(batch.old_logp)
        for rows in micros:
            mb = batch.take(rows, buckets)
            placed = multihost.place((mb.tokens, mb.token_mask), sharding_lib.batch_sharding(self.mesh, 2))
            lp = np.asarray(multihost.gather(fn(params, *placed)))  # rows may span processes
            out[rows, : lp.shape[1]] = lp
        return out

    def ppo_update(self, state, prepared: PreparedBatch, num_episodes: int) -> tuple[Any, UpdateResult]:
        """epochs x mini-batches, each one optimizer update; returns (state, `UpdateResult`). The first epoch's
        per-row entropy sums and token counts are reduced per episode from the micro-batches that hold the rows
        (`rl_step.episode_stats`)."""
        buckets = tuple(int(x) for x in self.config.data.buckets)
        t0 = time.perf_counter()
        updates, row_episodes, row_stats = [], [], []
        with jax.set_mesh(self.mesh), sharding_lib.axis_rules(self.logical):
            for epoch in range(int(self.config.rl.ppo_epochs)):
                for mb in prepared.plan:
                    micros = [prepared.batch.take(rows, buckets) for rows in mb]
                    state, um, rows_out = self.updater(state, [m.put(self.mesh) for m in micros])
                    updates.append(um)
                    if epoch == 0:
                        row_episodes += [m.episode for m in micros]
                        row_stats += rows_out
            updates, row_stats = multihost.gather((updates, row_stats))  # row stats may span processes
        episodes = rl_step.episode_stats(row_episodes, row_stats, num_episodes)
        return state, UpdateResult(updates, episodes, time.perf_counter() - t0)

    def step_metrics(
        self,
        state,
        *,
        rollouts: rl_rollouts.Rollouts,
        advantages: AdvantageInputs,
        batch: rl_batch.RolloutBatch,
        update: UpdateResult,
    ) -> dict[str, Any]:
        """The paper's variance diagnostics (over the episodes with loss tokens), the loss's metrics, the
        episodes' shape."""

        ro, adv, updates, ep = rollouts, advantages, update.updates, update.episodes
        loss_metrics = {k: float(np.mean([u[k] for u in updates])) for k in rl_step.LOSS_METRICS}
        metrics = dict(adv.metrics)
        diag = diagnostics.step_diagnostics(
            adv.rewards,
            adv.advantages,
            ep.entropy_per_token[:, None],
            ep.has_tokens[:, None],
            loss_metrics,
            ro.reward_tokens,
        )
        metrics.update({k: float(v) for k, v in diag.items()})
        metrics["entropy_mean"] = ep.entropy_mean  # token mean, not sequence mean
        for k in ("loss", "grad_norm", "loss_tokens", *rl_step.LOSS_METRICS):
            metrics[k] = float(np.mean([u[k] for u in updates]))
        if not self.choices.use_ref:
            metrics.pop("kl")
        metrics.update(
            {
                "finite": int(all(bool(u["finite"]) for u in updates)),
                "nonfinite_in_row": int(updates[-1]["nonfinite_in_row"]),
                "updates": len(updates),
                "lr": float(self.lr_fn(jax.device_get(state_lib.applied_updates(state.opt_state)))),
                "seq_len": batch.length,
                "rows": batch.rows,  # training samples (+ padding): one per episode unless the template re-renders
            }
        )
        metrics.update(diagnostics.rollout_metrics(ro.episodes))
        return metrics


def shuffled(adv: np.ndarray, per_rollout: Any, seed: int, step: int) -> tuple[np.ndarray, Any]:
    """The shuffled-advantage control: one permutation of all the step's rollouts (drawn from (seed, step)) applied
    to the advantages and to every per-rollout loss input alike, so each rollout trains on another's advantage.
    The multiset of values, and so the update's scale, is unchanged; its tie to each rollout's reward is gone."""
    perm = np.random.default_rng([seed, step, 23]).permutation(adv.size)
    out = jax.tree.map(lambda v: rl_batch.gather_rollouts(v, perm).reshape(np.shape(v)), per_rollout)
    return adv.reshape(-1)[perm].reshape(adv.shape), out


def step_timing(ro: rl_rollouts.Rollouts, step_s: float, update: UpdateResult, ppo_epochs: int) -> dict[str, float]:
    samples = [x for e in ro.episodes for x in e.samples()]  # one per episode unless the template re-renders
    sampled = int(sum(int(np.sum(x.loss_mask)) for x in samples))
    total = int(sum(len(x.tokens) for x in samples))
    return {
        "time/step_s": step_s,
        "time/rollout_s": ro.time_split["policy"],
        "time/env_s": ro.time_split["env"] + ro.time_split["chat"],
        "time/rollout_wall_s": ro.wall_s,
        "time/update_s": update.seconds,
        "time/tokens_per_s": total / max(step_s, 1e-9),
        "time/sampled_tokens_per_s": sampled / max(ro.time_split["policy"], 1e-9),
        "time/train_tokens_per_s": total * len(update.updates) / max(update.seconds, 1e-9) / max(ppo_epochs, 1),
    }


def make(config, workdir: str) -> RLTrainer:
    """The trainer of `config` on this process's devices: its `rl_setup.plan` (the config checked once), then
    `RLTrainer` over it; with `memory.check_fit`, as SFT, the dry run's memory plan of the trainer's own set-up
    (at the loaded model) checked before any state is made (`dry_run.check_rl_fit`: a MemoryFitError when it
    cannot fit)."""
    run = rl_setup.plan(config, jax.device_count())
    trainer = RLTrainer(run, workdir)
    if run.config.memory.check_fit:
        dry_run.check_rl_fit(trainer.setup)
    return trainer


def run(config, workdir: str, *, stop_after: int | None = None) -> dict[str, Any]:
    """Trains from the latest checkpoint in `workdir` (or from `model.path`); see train/runner.py."""
    trainer = make(config, workdir)
    settings = runner.settings_of(trainer.config)
    return runner.run(trainer, settings, workdir, stop_after=stop_after)
