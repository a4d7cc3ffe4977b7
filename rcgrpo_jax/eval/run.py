"""The evaluation stage: greedy multi-turn rollouts on a split, BFCL's official verdict per episode.

    python -m rcgrpo_jax.main --config=configs/eval.py:<preset> --config.model.path=DIR --workdir=DIR

Each test task is one episode through the same rollout engine and environment as training. A
reward-conditioned checkpoint (its tokenizer holds `<|high_reward|>`) gets `[Reward Goal:
<|high_reward|>]` in the first user message (`eval.reward_token`: auto | high | low | none). The
episode passes when BFCL's `multi_turn_checker` says so; we also keep our own reward and the kind of
error (empty turn, state mismatch, response mismatch, force-terminated, truncated, ...).

`eval.policy = oracle` plays the scripted ground truth through the same path: it must score 100%
in every category, which checks the environment, the chat rendering, the parser and the scoring.

`evaluate(...)` is the in-process core (the ablation pipeline calls it on parameters in memory);
`run(config, workdir)` loads a checkpoint, calls it and writes workdir/eval.json and eval.md.
"""

from __future__ import annotations

import os
import time
from typing import Any, Mapping, Sequence

from rcgrpo_jax.data.datasets import HIGH_REWARD_TOKEN, LOW_REWARD_TOKEN
from rcgrpo_jax.envs import official
from rcgrpo_jax.eval import report

REWARD_TOKEN_MODES = ("auto", "high", "low", "none")
POLICIES = ("model", "oracle")

# BFCL checker error types -> our short error kinds (anything else keeps the checker's own name).
_ERROR_KINDS = {
    "multi_turn:empty_turn_model_response": "empty_turn",
    "multi_turn:instance_state_mismatch": "state_mismatch",
    "multi_turn:execution_response_mismatch": "response_mismatch",
    official.FORCE_TERMINATED: "force_terminated",
}
TRUNCATED = "truncated"


def reward_token_for(mode: str, tokenizer) -> str | None:
    """The reward goal token of an evaluation: `auto` = high when the tokenizer knows it, else none."""
    if mode not in REWARD_TOKEN_MODES:
        from rcgrpo_jax.config_checks import ConfigError

        raise ConfigError("eval.reward_token", f"{mode!r} is not one of {', '.join(REWARD_TOKEN_MODES)}")
    if mode == "auto":
        return HIGH_REWARD_TOKEN if HIGH_REWARD_TOKEN in tokenizer.get_vocab() else None
    return {"high": HIGH_REWARD_TOKEN, "low": LOW_REWARD_TOKEN, "none": None}[mode]


def error_kind(episode) -> str | None:
    """None for a pass; else why the episode failed, context truncation first (its verdict would only
    say force-terminated)."""
    verdict = episode.verdict or {}
    if verdict.get("valid") is True:
        return None
    if episode.truncated:
        return TRUNCATED
    if "error" in verdict:  # the scorer itself raised (kept by the rollout engine)
        return "scorer_error"
    etype = verdict.get("error_type") or f"done:{episode.done_reason}"
    return _ERROR_KINDS.get(etype, etype)


def episode_result(episode, category: str) -> dict[str, Any]:
    return {
        "id": episode.task_id,
        "category": category,
        "official_pass": episode.verdict.get("valid") is True,
        "reward": float(episode.reward),
        "error_kind": error_kind(episode),
        "done_reason": episode.done_reason,
        "error_message": (episode.verdict.get("error_message") or episode.verdict.get("error") or "")[:300] or None,
        "reward_token": episode.reward_token,
        **episode.counts(),
        "tokens": len(episode.tokens),
        "messages": episode.messages,  # the conversation, to read what the model did
    }


def summarize(results: Sequence[Mapping[str, Any]], heldout: Sequence[str] = ()) -> report.Summary:
    """report.summarize over the trained categories (their unweighted mean is `overall`), with the
    held-out categories summarised apart under `heldout` (None when there are none)."""
    held = set(heldout)
    main = [r for r in results if r["category"] not in held]
    rest = [r for r in results if r["category"] in held]
    summary = report.summarize(main if main else results)
    summary["heldout"] = report.summarize(rest) if rest and main else None
    return summary


def evaluate(
    model_cfg, params, tokenizer, tasks: Sequence, eval_cfg, *, policy: str = "model", mesh=None, progress: bool = False
) -> tuple[list[dict], report.Summary]:
    """Greedy (or oracle) episodes of `tasks` in batches of `eval_cfg.batch_size`; returns per-episode
    results and their summary, the same on every process (each process steps only its share of each
    batch's environments: `rollout.distributed`). `params` may be None for the oracle."""
    from rcgrpo_jax import chat, sharding
    from rcgrpo_jax.envs import bfcl
    from rcgrpo_jax.rollout import EpisodeSpec, ModelPolicy, RolloutConfig, ScriptedPolicy, oracle_texts
    from rcgrpo_jax.rollout.distributed import run_across_processes
    from rcgrpo_jax.sampling import SamplingParams

    if policy not in POLICIES:
        from rcgrpo_jax.config_checks import ConfigError

        raise ConfigError("eval.policy", f"{policy!r} is not one of {', '.join(POLICIES)}")
    parser = chat.get_parser(chat.family_for(model_cfg.model_type))
    stop_ids = chat.end_of_turn_ids(tokenizer)
    token = reward_token_for(eval_cfg.reward_token, tokenizer)
    rollout_cfg = RolloutConfig(
        max_context=int(eval_cfg.max_context),
        max_step_tokens=int(eval_cfg.max_step_tokens),
        max_steps_per_turn=eval_cfg.get("max_steps_per_turn"),
    )
    results: list[dict] = []
    batch = max(int(eval_cfg.batch_size), 1)
    t0 = time.perf_counter()
    for start in range(0, len(tasks), batch):
        chunk = list(tasks[start : start + batch])

        def spec(i, chunk=chunk):
            return EpisodeSpec(bfcl.BFCLEnv(chunk[i]), chunk[i].id, group=i, reward_token=token)

        def make_policy(rows, chunk=chunk):
            if policy == "oracle":  # scripts only for the rows this process plays
                return ScriptedPolicy(
                    tokenizer, [oracle_texts(bfcl.ground_truth_script(chunk[i]), parser) for i in rows], stop_ids[0]
                )
            return ModelPolicy(
                model_cfg,
                params,
                stop_ids=stop_ids,
                max_step_tokens=rollout_cfg.max_step_tokens,
                max_context=rollout_cfg.max_context,
                sampling=SamplingParams(temperature=0.0),
                prefill_chunk=int(eval_cfg.prefill_chunk),
                mesh=mesh,
                rules=sharding.DECODE_RULES,
            )

        # The oracle makes no device calls: each process plays its own rows without lockstep. Results keep
        # the conversation, so it travels.
        episodes, _ = run_across_processes(
            len(chunk),
            spec,
            make_policy,
            tokenizer,
            parser,
            rollout_cfg,
            lockstep=policy == "model",
            with_messages=True,
        )
        results += [episode_result(e, t.category) for e, t in zip(episodes, chunk)]
        if progress:
            done = len(results)
            eta = (time.perf_counter() - t0) / done * (len(tasks) - done)
            print(f"[eval] {done}/{len(tasks)} episodes, ETA {eta:.0f}s", flush=True)
    return results, summarize(results, tuple(eval_cfg.get("heldout_categories", ()) or ()))


def summary_table(rows: Mapping[str, report.Summary | Sequence[report.Summary]]) -> str:
    """A Markdown table of evaluation summaries: trained categories, Overall, Reward, then held-out
    categories (reported apart, as a generalisation line) when any row has them."""
    flat = lambda v: list(v) if isinstance(v, (list, tuple)) else [v]
    cats = sorted({c for v in rows.values() for s in flat(v) for c in s["categories"]})
    held = sorted({c for v in rows.values() for s in flat(v) if s.get("heldout") for c in s["heldout"]["categories"]})
    return report.markdown_table(
        {name: [_merge_heldout(s) for s in flat(v)] for name, v in rows.items()}, cats, after=held
    )


def _merge_heldout(summary: report.Summary) -> report.Summary:
    """The summary with held-out categories added to `categories` (overall unchanged) for the table."""
    if not summary.get("heldout"):
        return summary
    out = dict(summary)
    out["categories"] = {**summary["categories"], **summary["heldout"]["categories"]}
    return out


def load_policy_model(config, path: str, mesh):
    """(model_cfg, params, tokenizer) of an HF checkpoint, params placed by the decode rules."""
    from transformers import AutoTokenizer

    from rcgrpo_jax import models, sharding

    model_cfg, params = models.load_hf(path, dtype=config.model.dtype, mesh=mesh, rules=sharding.DECODE_RULES)
    return model_cfg, params, AutoTokenizer.from_pretrained(path)


def run(config, workdir: str) -> dict[str, Any]:
    """The `eval` stage of rcgrpo_jax.main: evaluate `model.path` on `eval.split` of `data.source`."""
    import jax

    from rcgrpo_jax import config_checks, sharding
    from rcgrpo_jax.data import sources

    shape = config_checks.check(config, jax.device_count())
    policy = config.eval.policy
    if policy == "model" and not config.model.path:
        raise config_checks.ConfigError(
            "model.path",
            "evaluation of a model needs its HF checkpoint directory "
            "(--config.model.path=DIR); eval.policy=oracle needs none on tiny",
        )
    os.makedirs(workdir, exist_ok=True)
    mesh = sharding.make_mesh(shape)
    tasks = sources.tasks(config.data, config.eval.split)
    if int(config.eval.max_tasks) > 0:
        tasks = tasks[: int(config.eval.max_tasks)]
    if policy == "oracle":
        from transformers import AutoTokenizer

        from rcgrpo_jax.models import ModelConfig
        from rcgrpo_jax.train.sft import model_dir

        path = model_dir(config, workdir)  # tiny: builds a checkpoint only for its tokenizer and template
        model_cfg, params, tokenizer = ModelConfig.from_hf(path), None, AutoTokenizer.from_pretrained(path)
    else:
        path = config.model.path
        model_cfg, params, tokenizer = load_policy_model(config, path, mesh)
    t0 = time.perf_counter()
    results, summary = evaluate(
        model_cfg,
        params,
        tokenizer,
        tasks,
        config.eval,
        policy=policy,
        mesh=mesh,
        progress=bool(config.log.progress) and jax.process_index() == 0,
    )
    seconds = time.perf_counter() - t0
    label = "oracle" if policy == "oracle" else os.path.basename(os.path.normpath(path))
    table = summary_table({label: summary})
    if jax.process_index() == 0:
        report.write_json(
            os.path.join(workdir, "eval.json"),
            {
                "model": path,
                "policy": policy,
                "split": config.eval.split,
                "source": config.data.source,
                "reward_token": reward_token_for(config.eval.reward_token, tokenizer),
                "seconds": seconds,
                "summary": summary,
                "episodes": results,
            },
        )
        with open(os.path.join(workdir, "eval.md"), "w") as f:
            f.write(
                f"# Evaluation of {path} ({policy}, {config.data.source}/{config.eval.split})\n\n"
                "Accuracy (%) by BFCL's official multi-turn checker; overall = unweighted mean over the trained "
                "categories; held-out categories are reported apart.\n\n" + table
            )
        print(table, flush=True)
    return {
        "overall": summary["overall"],
        "reward_mean": summary["reward_mean"],
        "n": summary["n"],
        "categories": {c: s["accuracy"] for c, s in summary["categories"].items()},
        "heldout": summary["heldout"]["overall"] if summary.get("heldout") else None,
        "error_kinds": summary["error_kinds"],
        "seconds": round(seconds, 2),
    }
