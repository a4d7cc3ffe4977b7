"""The work the multi-process tests compare: run in the test process (1 process x 8 devices, the
reference) and, unchanged, as each of 2 processes x 4 devices joined by `jax.distributed` on localhost.

  python tests/helpers/multihost_worker.py update --coordinator localhost:PORT --num_processes 2 --process_id I \
      --ckpt DIR --inputs in.npz --out out_I.npz

Every process holds the whole host batch, each device takes its rows (`RolloutBatch.put`, i.e.
`multihost.place`), and results are read back with `multihost.gather`, so the outputs of every process
are the global values.

  python tests/helpers/multihost_worker.py rl_run ... --ckpt MODEL --workdir DIR --out out_I.npz

runs one full `rl_trainer.run` step (rollouts on the world's tasks, advantages, reference, PPO update, a checkpoint)
in a workdir the processes share, then restores that checkpoint.

  python tests/helpers/multihost_worker.py eval_run ... --ckpt MODEL --out out_I.json

runs the evaluation stage's `eval.run.evaluate` (greedy model policy) on a few of the world's test tasks.

  python tests/helpers/multihost_worker.py sigterm_run ... --ckpt "" --workdir DIR --out out_I.json

runs `train.loop.run_steps` over a small state sharded across both processes (each step a global
reduction, as a real step's collectives) and sends SIGTERM to process 0 alone during step SIGTERM_AT.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

MESH = {"data": 2, "fsdp": 2, "tensor": 2}
BUCKETS = (16, 32)
CHUNK = 256


def _config():
    from configs import rc_grpo

    return rc_grpo.get_config("tiny")


def loss_config():
    from rcgrpo_jax.rl import losses

    cfg = losses.default_config("ppo_clip")
    cfg.kl_beta = 0.1
    return cfg


def update(ckpt: str, batch: dict, micro_rows: list) -> dict:
    """One PPO update (micro-batches accumulated) on the (2, 2, 2) mesh over all devices of all processes.
    Returns host arrays: loss metrics, the per-row entropy sums, and the updated params (flat by path)."""
    import jax
    import numpy as np

    from rcgrpo_jax import multihost, sharding
    from rcgrpo_jax.models.hf_io import load_hf
    from rcgrpo_jax.train import model_prep, optim, rl_step
    from rcgrpo_jax.train import state as state_lib
    from rcgrpo_jax.train.rl_batch import RolloutBatch

    per_rollout = {k.split("/", 1)[1]: v for k, v in batch.items() if k.startswith("per_rollout/")}
    batch = RolloutBatch(
        **{k: v for k, v in batch.items() if not k.startswith("per_rollout/")}, per_rollout=per_rollout
    )
    config = _config()
    mesh = sharding.make_mesh(MESH)
    model_cfg = model_prep.model_config(config, ckpt)
    params = load_hf(ckpt, dtype="float32", mesh=mesh, rules=sharding.TRAIN_RULES)[1]
    abstract_params = jax.eval_shape(lambda: params)
    tx = optim.make_optimizer(config.optim, 10)
    abstract = state_lib.abstract_state(abstract_params, tx)
    p_sh = model_prep.param_shardings(abstract_params, mesh, "train")
    state_sh = state_lib.state_shardings(abstract, mesh, p_sh, tx)
    updater = rl_step.Updater(model_cfg, tx, "ppo_clip", loss_config(), CHUNK, state_sh, mesh)
    with jax.set_mesh(mesh), sharding.axis_rules(sharding.TRAIN_RULES.logical):
        state = jax.jit(lambda p: state_lib.create(p, tx, jax.random.PRNGKey(0)), out_shardings=state_sh)(params)
        micros = [batch.take(np.asarray(rows), BUCKETS).put(mesh) for rows in micro_rows]
        state, metrics, row_stats = updater(state, micros)
        host = multihost.gather({"metrics": metrics, "rows": row_stats, "params": state.params})
    flat = {f"metrics/{k}": np.asarray(v) for k, v in host["metrics"].items()}
    flat["row_entropy"] = np.concatenate([np.asarray(e) for e, _ in host["rows"]])
    flat["row_count"] = np.concatenate([np.asarray(c) for _, c in host["rows"]])
    for path, leaf in jax.tree_util.tree_flatten_with_path(host["params"])[0]:
        flat["params/" + sharding.path_str(path)] = np.asarray(leaf)
    return flat


QUESTIONS = ("What is 2 plus 3?", "And 4 plus 5?", "Then 1 plus 1?")
TURNS = (3, 3, 2, 2, 1, 1, 1, 1)  # episodes of the second half end first, so that process drains


def rollout(ckpt: str, lockstep: bool = True) -> tuple[list[dict], dict]:
    """Greedy batched rollouts of 8 adder episodes (1-3 user turns) on the (2, 2, 2) mesh. Each process
    builds and steps only the environments of its own share of the episodes; the model runs over all of
    them at once. Returns every episode's record (tokens, log-probs, loss mask, end reason), in order, and
    the model policy's counters. lockstep=False: the plain single-process engine (the reference)."""
    import jax
    from transformers import AutoTokenizer

    from rcgrpo_jax import chat, models, multihost, sharding
    from rcgrpo_jax.rollout import EpisodeSpec, ModelPolicy, RolloutConfig, run_episodes
    from tests.helpers.fake_env import AdderEnv

    mesh = sharding.make_mesh(MESH)
    config, params = models.load_hf(ckpt, dtype="float32", mesh=mesh, rules=sharding.DECODE_RULES)
    tok = AutoTokenizer.from_pretrained(ckpt)
    parser = chat.get_parser(chat.family_for(config.model_type))
    share = multihost.process_slice(len(TURNS))
    specs = [
        EpisodeSpec(AdderEnv(QUESTIONS[:n], (5, 9, 2)[:n]), f"adder_{k}", group=k // 2, rollout_index=k % 2)
        for k, n in enumerate(TURNS)
    ][share]
    policy = ModelPolicy(
        config,
        params,
        stop_ids=chat.end_of_turn_ids(tok),
        max_step_tokens=12,
        max_context=512,
        prefill_chunk=64,
        mesh=mesh,
        rules=sharding.DECODE_RULES,
        rng=jax.random.key(0),
    )
    driver = multihost.LockstepPolicy(policy) if lockstep else policy
    episodes, _ = run_episodes(specs, driver, tok, parser, RolloutConfig(max_context=512, max_step_tokens=12))
    if lockstep:
        driver.drain()
    mine = [
        {
            "task_id": e.task_id,
            "tokens": [int(t) for t in e.tokens],
            "loss_mask": [int(m) for m in e.loss_mask],
            "logprobs": [float(x) for x in e.logprobs],
            "done_reason": e.done_reason,
            "turn": e.turn,
            "steps": e.steps,
            "reward": e.reward,
        }
        for e in episodes
    ]
    return (multihost.allgather_json(mine) if lockstep else mine), dict(policy.stats)


def rl_config(ckpt: str):
    """rc_grpo:tiny cut down: 4 world tasks x group 2 on the (2, 2, 2) mesh, one step, two rollout chunks
    (each split between the processes), a checkpoint at step 1."""
    from configs import rc_grpo

    c = rc_grpo.get_config("tiny")
    c.model.path = ckpt
    c.mesh.data, c.mesh.fsdp, c.mesh.tensor = MESH["data"], MESH["fsdp"], MESH["tensor"]
    c.rl.group_size = 2
    c.train.batch_size, c.train.grad_accum, c.rl.num_minibatches = 8, 2, 2  # micro-batch 4 = data x fsdp
    c.train.max_steps = 1
    c.rl.rollout_chunk = 4
    c.rl.max_step_tokens, c.rl.max_context = 12, 768
    c.data.buckets = (640, 768)
    c.checkpoint.every_steps = 1
    c.checkpoint.export_hf = False
    c.log.progress = c.log.tensorboard = False
    return c


def rl_run(ckpt: str, workdir: str) -> dict:
    """One RL step by `rl_trainer.run`, then the step-1 checkpoint restored. Returns the logged metrics, every
    episode's (task, reward, tokens, log-probs), the task ids of the environments this process built and
    stepped, and the restored params (flat by path; gathered, so global values)."""
    import jax
    import numpy as np

    from rcgrpo_jax import multihost, sharding
    from rcgrpo_jax.envs import bfcl
    from rcgrpo_jax.train import checkpoint as ckpt_lib
    from rcgrpo_jax.train import rl_setup, rl_trainer

    built, stepped, seen = [], [], []

    class CountingEnv(bfcl.BFCLEnv):
        """Records what this process's environments did. Its reward is a stand-in: a random model scores 0
        on every task, which would leave no advantage and no gradient. This one adds a quarter per environment
        call to a half for every second member of a group (members are built in order, all in one process
        with this config: the test checks it), so groups have spread."""

        def __init__(self, task, *a, **k):
            super().__init__(task, *a, **k)
            self.member = built.count(task.id)
            built.append(task.id)
            self.calls = 0

        def step(self, calls):
            stepped.append(self.task.id)
            self.calls += 1
            return super().step(calls)

        def end_turn(self):
            stepped.append(self.task.id)
            self.calls += 1
            return super().end_turn()

        def reward(self, name=None):
            return 0.5 * (self.member % 2) + min(0.5, 0.25 * self.calls)

    real_env, real_collect = bfcl.BFCLEnv, rl_trainer.rl_rollouts.collect

    def collect(*args, **kwargs):
        out = real_collect(*args, **kwargs)
        seen.extend(
            {
                "task_id": e.task_id,
                "group": e.group,
                "rollout_index": e.rollout_index,
                "reward": e.reward,
                "reward_token": e.reward_token,
                "tokens": list(e.tokens),
                "logprobs": list(e.logprobs),
                "done_reason": e.done_reason,
            }
            for e in out.episodes
        )
        return out

    bfcl.BFCLEnv, rl_trainer.rl_rollouts.collect = CountingEnv, collect
    try:
        out = rl_trainer.run(rl_config(ckpt), workdir)
    finally:
        bfcl.BFCLEnv, rl_trainer.rl_rollouts.collect = real_env, real_collect

    # Restore the checkpoint the run left (every process reads its own shards) and read the params back.
    trainer = rl_trainer.RLTrainer(rl_setup.plan(rl_config(ckpt), jax.device_count()), workdir)
    ckpt = ckpt_lib.Checkpointer(f"{workdir}/checkpoints", every_steps=1, max_to_keep=2)
    try:
        steps = ckpt.all_steps()
        state, meta = ckpt.restore(1, trainer.restore_target())
    finally:
        ckpt.close()
    params = multihost.gather(state.params)
    record = {
        "summary": {k: out[k] for k in ("step", "reason", "total_steps")},
        "metrics": out["metrics"],
        "episodes": seen,
        "built": built,
        "stepped": stepped,
        "ckpt_steps": steps,
        "ckpt_meta_ok": meta.get("data_fingerprint") == trainer.fingerprint(),
        "ckpt_step": int(multihost.local_value(state.step)),
        "process": jax.process_index(),
    }
    flat = {"record": np.asarray(json.dumps(record))}
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        flat["params/" + sharding.path_str(path)] = np.asarray(leaf)
    return flat


EVAL_TASKS = 5  # batches of 4 and 1: in the second, process 1 has no episode and only takes part


def eval_run(ckpt: str) -> dict:
    """Greedy `eval.run.evaluate` of EVAL_TASKS world test tasks (one per category, so episode lengths differ)
    on the (2, 2, 2) mesh. Returns the per-episode results and the task ids of the environments this process
    built."""
    from transformers import AutoTokenizer

    from configs import eval as eval_configs
    from rcgrpo_jax import models, sharding
    from rcgrpo_jax.data import sources
    from rcgrpo_jax.envs import bfcl
    from rcgrpo_jax.eval import run as eval_run_lib

    cfg = eval_configs.get_config("tiny")
    cfg.eval.batch_size, cfg.eval.max_step_tokens, cfg.eval.max_context = 4, 12, 512
    tasks = sources.tasks(cfg.data, "test")[::16][:EVAL_TASKS]
    mesh = sharding.make_mesh(MESH)
    model_cfg, params = models.load_hf(ckpt, dtype="float32", mesh=mesh, rules=sharding.DECODE_RULES)
    built = []

    class CountingEnv(bfcl.BFCLEnv):
        def __init__(self, task, *a, **k):
            super().__init__(task, *a, **k)
            built.append(task.id)

    real_env, bfcl.BFCLEnv = bfcl.BFCLEnv, CountingEnv
    try:
        results, _ = eval_run_lib.evaluate(
            model_cfg, params, AutoTokenizer.from_pretrained(ckpt), tasks, cfg.eval, mesh=mesh
        )
    finally:
        bfcl.BFCLEnv = real_env
    return {"results": results, "built": built, "tasks": [t.id for t in tasks]}


SIGTERM_AT = 3  # process 0 receives SIGTERM while running this step (1-based)
SIGTERM_STEPS = 8


def sigterm_run(workdir: str) -> dict:
    """`run_steps` from step 0 to SIGTERM_STEPS with checkpoints only when forced; process 0 alone gets a
    real SIGTERM (through `StopSignal`'s handler) during step SIGTERM_AT. Returns the loop's result, the
    steps this process ran, the checkpoint steps on disk and the restored state's value."""
    import signal

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from rcgrpo_jax import multihost, sharding
    from rcgrpo_jax.train import checkpoint as ckpt_lib
    from rcgrpo_jax.train import logging as log_lib
    from rcgrpo_jax.train import loop

    mesh = sharding.make_mesh(MESH)
    row_sh = NamedSharding(mesh, P(("data", "fsdp", "tensor")))
    rep = NamedSharding(mesh, P())
    state = {"w": jax.jit(lambda: jnp.arange(16, dtype=jnp.float32), out_shardings=row_sh)()}
    step_jit = jax.jit(lambda s: ({"w": s["w"] + 1.0}, jnp.sum(s["w"] + 1.0)), out_shardings=({"w": row_sh}, rep))
    ran = []

    def step_fn(state, step):
        state, total = step_jit(state)  # the sum reads rows of both processes: a cross-process collective
        ran.append(step + 1)
        if step + 1 == SIGTERM_AT and jax.process_index() == 0:
            os.kill(os.getpid(), signal.SIGTERM)
        return state, {"finite": True, "nonfinite_in_row": 0, "loss": float(multihost.local_value(total))}

    ckpt = ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints"), every_steps=1000, max_to_keep=3)
    logger = log_lib.MetricsLogger(workdir, is_main=jax.process_index() == 0, tensorboard=False)
    try:
        state, step, reason, last = loop.run_steps(
            step_fn,
            state,
            start=0,
            n_steps=SIGTERM_STEPS,
            settings=loop.LoopSettings(log_every=1, max_nonfinite=0),
            ckpt=ckpt,
            logger=logger,
            progress=log_lib.Progress(SIGTERM_STEPS, enabled=False),
            meta=lambda s: {"step": int(s)},
        )
        ckpt.wait()
        steps = ckpt.all_steps()
        target = {"w": jax.ShapeDtypeStruct((16,), jnp.float32, sharding=row_sh)}
        restored, meta = ckpt.restore(steps[-1], target)
    finally:
        ckpt.close()
        logger.close()
    return {
        "process": jax.process_index(),
        "reason": reason,
        "step": step,
        "ran": ran,
        "last_loss": last.get("loss"),
        "ckpt_steps": steps,
        "ckpt_meta": meta,
        "restored": np.asarray(multihost.gather(restored["w"])).tolist(),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("task", choices=("update", "rollout", "rl_run", "eval_run", "sigterm_run"))
    ap.add_argument("--coordinator", required=True)
    ap.add_argument("--num_processes", type=int, required=True)
    ap.add_argument("--process_id", type=int, required=True)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--inputs", default="")
    ap.add_argument("--workdir", default="")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    import jax
    import numpy as np

    jax.config.update("jax_default_matmul_precision", "highest")  # as tests/conftest.py
    jax.distributed.initialize(
        args.coordinator, num_processes=args.num_processes, process_id=args.process_id, initialization_timeout=60
    )
    assert jax.process_count() == args.num_processes and jax.device_count() == 8, jax.devices()
    if args.task == "update":
        inputs = dict(np.load(args.inputs))
        micro_rows = [inputs.pop(k) for k in sorted(k for k in inputs if k.startswith("micro/"))]
        np.savez(args.out, **update(args.ckpt, inputs, micro_rows))
    elif args.task == "rl_run":
        np.savez(args.out, **rl_run(args.ckpt, args.workdir))
    elif args.task == "sigterm_run":
        with open(args.out, "w") as f:
            json.dump(sigterm_run(args.workdir), f)
    elif args.task == "eval_run":
        with open(args.out, "w") as f:
            json.dump({**eval_run(args.ckpt), "process": jax.process_index()}, f)
    else:
        episodes, stats = rollout(args.ckpt)
        with open(args.out, "w") as f:
            json.dump({"episodes": episodes, "stats": stats}, f)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
