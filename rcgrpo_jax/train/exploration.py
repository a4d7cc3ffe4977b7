"""Exploration rollouts as trajectory records: the paper's source of failures for RCTP-FT.

A trained (SFT) policy plays the train tasks at temperature > 0; each finished episode is labelled by
the environment's reward and written in the data module's record format
(`data.trajectories.rollout_record`), so failures (reward 0) drop into `datasets.rctp_records` next to
the generated ones.

    python -m rcgrpo_jax.train.exploration --preset qwen2_5_7b --model DIR --out failures.jsonl \
        [--source world] [--group 4] [--tasks 64] [--temperature 1.0] [--keep failures|all]

The policy plays as RL's rollouts do, by an RL stage config (`--preset`: the RL stages' sections at that
preset, `preset_config`; `collect(config=...)`): on the preset's mesh, loaded by `eval.run.load_policy_model`
(model.dtype, the decode rules), sampled in model.decode_dtype with the stage's prefill chunk, slot mode and
decode attention. No preset = the tiny one's (float32, on one device unless `collect` gets a mesh: the CPU
ablation). `dry_run.exploration` plans its memory (an RL config's `--dry_run` prints it).

Record conversion: the engine's assistant messages carry tool calls without ids; here call i of step s
in turn t gets id `call_{t}_{s}_{i}` and its tool message the matching `tool_call_id`. A step whose
text did not parse keeps its text as the assistant message; the engine's error feedback (a tool message
answering no call) is dropped, since the record format pairs every tool message with a call.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Sequence

import ml_collections

from rcgrpo_jax import chat, config_checks, sharding
from rcgrpo_jax.config_fields import ConfigError
from rcgrpo_jax.config_lib import common, rl_stage
from rcgrpo_jax.data import sources, trajectories
from rcgrpo_jax.envs import bfcl
from rcgrpo_jax.eval import run as eval_run
from rcgrpo_jax.rollout import EpisodeSpec, ModelPolicy, RolloutConfig
from rcgrpo_jax.rollout.distributed import run_across_processes
from rcgrpo_jax.sampling import decode_weights
from rcgrpo_jax.train import rl_config

EXPLORATION_FAILURE = "exploration"  # the `failure` field of a failed exploration rollout


@dataclasses.dataclass(frozen=True)
class Settings:
    """One exploration run's rollouts: `batch_tasks` tasks x `group_size` rollouts per engine call, one decode
    row each. The defaults are the command's (launch/pipeline.sh runs them) and what `dry_run.exploration` plans."""

    group_size: int = 4
    batch_tasks: int = 8
    max_step_tokens: int = 256
    max_context: int = 8192
    temperature: float = 1.0


DEFAULT = Settings()


def preset_config(preset: str | None = None) -> ml_collections.ConfigDict:
    """The RL stages' sections at `preset` (`rl_stage.base`; None: tiny): the mesh, model.dtype,
    model.decode_dtype, decode rules and rollout settings exploration plays by (`--preset`)."""
    return rl_stage.base("exploration", common.parse_preset(preset), estimator="grpo")


def stage_config(config=None, settings: Settings = DEFAULT) -> ml_collections.ConfigDict:
    """A copy of the RL stage config `config` (None: `preset_config()`, the tiny preset's: float32) whose rollout
    fields say what exploration runs at `settings`: rl.rollout_chunk = train.batch_size = one batch's rollouts,
    no continuous batching (rl.rollout_rows 0, rl.rollout_slice 0), rl.group_size, rl.max_context,
    rl.max_step_tokens, rl.temperature, no top-k or top-p. `collect` plays by it and `dry_run.exploration` plans
    it (`dry_run.rollout_programs`), both sampling by `rl_config.sampling` in `rl_config.decode_dtype`."""
    if config is None:
        config = preset_config()
    if "rl" not in config:
        raise ConfigError("rl", "exploration runs with an RL stage config (configs/rc_grpo.py:<preset>)")
    c = ml_collections.ConfigDict(config.to_dict())
    rows = settings.batch_tasks * settings.group_size
    c.train.batch_size = c.rl.rollout_chunk = rows
    c.rl.rollout_rows = c.rl.rollout_slice = 0
    c.rl.group_size = settings.group_size
    c.rl.max_context, c.rl.max_step_tokens = settings.max_context, settings.max_step_tokens
    c.rl.temperature, c.rl.top_k, c.rl.top_p = float(settings.temperature), 0, 1.0
    return c


def episode_record(episode, task: bfcl.Task) -> dict:
    """The trajectory record of a finished `rollout.Episode` (kind 'failure' when its reward is 0,
    else 'rollout')."""
    messages: list[dict] = []
    pending: list[str] = []
    turn = step = 0
    for m in episode.messages:
        role = m.get("role")
        if role == "assistant":
            calls = m.get("tool_calls") or []
            ids = [f"call_{turn}_{step}_{i}" for i in range(len(calls))]
            out = {"role": "assistant", "content": m.get("content") or ""}
            if calls:
                out["tool_calls"] = [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": c["function"]["name"], "arguments": c["function"]["arguments"]},
                    }
                    for cid, c in zip(ids, calls)
                ]
                step += 1
            messages.append(out)
            pending = ids
        elif role == "tool":
            if pending:  # results answer the calls in order; error feedback (no call) is dropped
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": pending.pop(0),
                        "name": m.get("name"),
                        "content": str(m.get("content")),
                    }
                )
        elif role == "user":
            if messages and any(x.get("role") == "assistant" for x in messages):
                turn, step = turn + 1, 0
            pending = []
            messages.append({"role": "user", "content": str(m.get("content") or "")})
    released = {}
    first = {t["function"]["name"] for t in episode.tools}
    known = set(first)
    for t in range(1, len(episode.turn_starts)):
        added = [x for x in bfcl.tools_for(task, t) if x["function"]["name"] not in known]
        if added:
            released[str(t)] = added
            known.update(x["function"]["name"] for x in added)
    failed = float(episode.reward) == 0.0
    return trajectories.rollout_record(
        task.id,
        messages,
        list(episode.tools),
        float(episode.reward),
        released_tools=released,
        official_valid=episode.verdict.get("valid"),
        kind="failure" if failed else "rollout",
        failure=EXPLORATION_FAILURE if failed else None,
    )


def collect(
    model_path: str,
    tasks: Sequence[bfcl.Task],
    *,
    group_size: int = DEFAULT.group_size,
    temperature: float = DEFAULT.temperature,
    max_step_tokens: int = DEFAULT.max_step_tokens,
    max_context: int = DEFAULT.max_context,
    seed: int = 0,
    keep: str = "failures",
    batch_tasks: int = DEFAULT.batch_tasks,
    reward_token: str | None = None,
    mesh=None,
    source: str = "bfcl",
    config=None,
) -> list[dict]:
    """Exploration records of the policy at `model_path` on `tasks` (G rollouts each), in task order, the
    same on every process (each process steps only its share of each batch's environments).

    keep: 'failures' (reward 0 only, the RCTP-FT input) or 'all'. reward_token: condition every rollout
    on it (an RCTP checkpoint), None for an unconditioned policy. Environments come from the task source
    `source` (rcgrpo_jax.data.sources). config: the RL stage config the policy plays by (`stage_config`);
    None = the tiny preset's. mesh: where the policy decodes (with several processes it must span them all);
    None = the config's mesh (`mesh.*` over every device), or one device without a config."""
    import jax

    if keep not in ("failures", "all"):
        raise ValueError(f"keep must be 'failures' or 'all', got {keep!r}")
    task_source = sources.get(source)
    rc = stage_config(config, Settings(group_size, batch_tasks, max_step_tokens, max_context, temperature))
    if mesh is None and config is not None:
        mesh = sharding.make_mesh(config_checks.mesh_shape(rc.mesh, jax.device_count()))
    # As RL's rollouts: the weights on the decode shardings, in model.decode_dtype, split per layer once.
    model_cfg, params, tok = eval_run.load_policy_model(rc, model_path, mesh)
    params = decode_weights(params, rl_config.decode_dtype(rc))
    parser = chat.get_parser(chat.family_for(model_cfg.model_type))
    rc_rollout = RolloutConfig(max_context=int(rc.rl.max_context), max_step_tokens=int(rc.rl.max_step_tokens))
    records: list[dict] = []
    for b in range(0, len(tasks), batch_tasks):
        chunk = tasks[b : b + batch_tasks]

        def spec(i, chunk=chunk):  # row i = task k's rollout j
            k, j = divmod(i, group_size)
            env = task_source.make_env(chunk[k], None)
            return EpisodeSpec(env, chunk[k].id, group=k, rollout_index=j, reward_token=reward_token)

        def policy(_rows, b=b):
            return ModelPolicy(
                model_cfg,
                params,
                stop_ids=chat.end_of_turn_ids(tok),
                max_step_tokens=int(rc.rl.max_step_tokens),
                max_context=int(rc.rl.max_context),
                sampling=rl_config.sampling(rc.rl),
                prefill_chunk=int(rc.rl.prefill_chunk),
                mesh=mesh,
                rules=sharding.DECODE_RULES,
                rng=jax.random.fold_in(jax.random.key(seed), b),
                slot_mode=rc.rl.slot_mode,
                decode_attention=str(rc.model.get("decode_attention", "auto")),
            )

        # Each process steps its own share of the batch; records need the conversation, so it travels.
        episodes, _ = run_across_processes(
            len(chunk) * group_size, spec, policy, tok, parser, rc_rollout, with_messages=True
        )
        for e in episodes:
            if keep == "all" or e.reward == 0.0:
                records.append(episode_record(e, chunk[e.group]))
    return records


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--preset",
        default=None,
        choices=common.PRESETS,
        help=f"one of {', '.join(common.PRESETS)}: the RL stages' mesh, dtypes and decode settings at that preset "
        "(configs/rc_grpo.py:<preset>'s); default: the tiny preset's on one device",
    )
    ap.add_argument("--model", required=True, help="HF checkpoint directory of the policy")
    ap.add_argument("--out", required=True, help="JSONL file to write")
    ap.add_argument("--source", default="bfcl", choices=["bfcl", "world"])
    ap.add_argument("--tasks", type=int, default=-1, help="first N train tasks (-1 = all)")
    ap.add_argument("--group", type=int, default=DEFAULT.group_size)
    ap.add_argument("--temperature", type=float, default=DEFAULT.temperature)
    ap.add_argument("--max-step-tokens", type=int, default=DEFAULT.max_step_tokens)
    ap.add_argument("--max-context", type=int, default=DEFAULT.max_context)
    ap.add_argument("--keep", default="failures", choices=["failures", "all"])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    config = None if args.preset is None else preset_config(args.preset)

    data = ml_collections.ConfigDict(
        {
            "source": args.source,
            "max_examples": args.tasks,
            "world": {"seed": 0, "train_per_type": 64, "test_per_type": 16},
        }
    )
    records = collect(
        args.model,
        sources.tasks(data, "train"),
        group_size=args.group,
        temperature=args.temperature,
        max_step_tokens=args.max_step_tokens,
        max_context=args.max_context,
        seed=args.seed,
        keep=args.keep,
        source=args.source,
        config=config,
    )
    trajectories.write_jsonl(args.out, records)
    print(
        json.dumps({"out": args.out, "records": len(records), "failures": sum(r["kind"] == "failure" for r in records)})
    )


if __name__ == "__main__":
    from rcgrpo_jax import runtime

    runtime.apply_backend_env()  # the presets' XLA, NCCL and allocator settings, before JAX starts a backend
    main()
