"""The evaluation stage: BFCL v4 with the official checkers, multi-turn episodes and single-turn entries.

    python -m rcgrpo_jax.main --config=configs/eval.py:<preset> --config.model.path=DIR \
        --config.eval.suite=single_turn|multi_turn|bfcl_v4[,api_bank][,mmlu_pro] --config.eval.split=test|train|all \
        --workdir=DIR

Suites (`eval.suite`):
- multi_turn: each task of `eval.split` of `data.source` is one episode through the same rollout engine
  and environment as training; it passes when BFCL's `multi_turn_checker` says so; we also keep our own
  reward and the kind of error (empty turn, state mismatch, response mismatch, force-terminated,
  truncated, ...). split=all is every task (BFCL: the 800).
- single_turn: BFCL's 13 single-turn categories (`single_turn`), one greedy assistant message per
  entry, scored by the package's `ast_checker` (irrelevance/relevance: whether a call decodes). Nothing
  trains on them, so split test and all both mean every entry.
- bfcl_v4: both; `overall` is BFCL's weighted overall over the offline groups (`aggregate`).
- api_bank: API-Bank levels 1-3 from the user's copy (`eval.api_bank.path`; `api_bank_run`).
- mmlu_pro: MMLU-Pro from the user's copy of its release (`eval.mmlu_pro.path`; `mmlu_pro_run`).
`eval.suite` may name several, comma-separated (at most one of the three BFCL suites); each other suite's
summary sits under its name in the printed summary and in eval.json (with its records), its table in eval.md.

A reward-conditioned checkpoint (its tokenizer holds `<|high_reward|>`) gets `[Reward Goal:
<|high_reward|>]` in the first user message (`eval.reward_token`: auto | high | low | none).

Policies (`eval.policy`: model, oracle, replay): `run`'s docstring. `evaluate(...)` is the in-process multi-turn core (the ablation pipeline calls it on parameters in
memory); `run(config, workdir)` loads a checkpoint, runs the suite, writes workdir/eval.json (one record
per episode: id, category, official_pass, error_kind, ...) and eval.md, and returns the summary
(`suite_summary`: categories, groups, overall, n, error_kinds) that main prints as its last line.
"""

from __future__ import annotations

import os
import time
from typing import Any, Mapping, Sequence

import jax

from rcgrpo_jax import chat, config_checks, models, sharding
from rcgrpo_jax.config_fields import ConfigError, InputError
from rcgrpo_jax.data import sources
from rcgrpo_jax.data.datasets import HIGH_REWARD_TOKEN, LOW_REWARD_TOKEN
from rcgrpo_jax.data.tiny_checkpoint import model_dir
from rcgrpo_jax.envs import official
from rcgrpo_jax.eval import aggregate, bfcl_results, report, single_turn, single_turn_oracle, single_turn_run, suites
from rcgrpo_jax.models import ModelConfig, reward_tokens
from rcgrpo_jax.rollout import EpisodeSpec, ModelPolicy, RolloutConfig, ScriptedPolicy, oracle_texts
from rcgrpo_jax.rollout.distributed import run_across_processes
from rcgrpo_jax.sampling import SamplingParams, decode_weights

REWARD_TOKEN_MODES = ("auto", "high", "low", "none")
POLICIES = ("model", "oracle")

TRUNCATED = "truncated"


def reward_token_for(mode: str, tokenizer) -> str | None:
    """The reward goal token of an evaluation: `auto` = high when the tokenizer holds the reward tokens
    (`models.reward_tokens.known_by`), else none."""
    if mode not in REWARD_TOKEN_MODES:
        raise ConfigError("eval.reward_token", f"{mode!r} is not one of {', '.join(REWARD_TOKEN_MODES)}")
    if mode == "auto":
        return HIGH_REWARD_TOKEN if reward_tokens.known_by(tokenizer) else None
    return {"high": HIGH_REWARD_TOKEN, "low": LOW_REWARD_TOKEN, "none": None}[mode]


def error_kind(episode) -> str | None:
    """None for a pass; else why the episode failed, context truncation first (its verdict would only
    say force-terminated)."""
    verdict = episode.verdict or {}
    if verdict.get("valid") is True:
        return None
    if episode.truncated:
        return TRUNCATED
    if episode.done_reason == "render_error":  # the chat template refused the conversation: not a model failure
        return "render_error"
    if "error" in verdict:  # the scorer itself raised (kept by the rollout engine)
        return "scorer_error"
    etype = verdict.get("error_type") or f"done:{episode.done_reason}"
    return official.ERROR_KINDS.get(etype, etype)


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
    model_cfg,
    params,
    tokenizer,
    tasks: Sequence,
    eval_cfg,
    *,
    policy: str = "model",
    mesh=None,
    progress: bool = False,
    source: str = "bfcl",
    temperature: float = 0.0,
    seed: int = 0,
) -> tuple[list[dict], report.Summary]:
    """Greedy (or oracle) episodes of `tasks` in batches of `eval_cfg.batch_size`; returns per-episode
    results and their summary, the same on every process (each process steps only its share of each
    batch's environments: `rollout.distributed`). `params` may be None for the oracle. Environments and
    the oracle's scripts come from the task source `source` (rcgrpo_jax.data.sources). temperature > 0
    samples instead of decoding greedily (pass@k: a task listed k times), each batch's draws from (seed, batch)."""

    if policy not in POLICIES:
        raise ConfigError("eval.policy", f"{policy!r} is not one of {', '.join(POLICIES)}")
    task_source = sources.get(source)
    parser = chat.get_parser(chat.family_for(model_cfg.model_type))
    stop_ids = chat.end_of_turn_ids(tokenizer)
    token = reward_token_for(eval_cfg.reward_token, tokenizer)
    rollout_cfg = RolloutConfig(
        max_context=int(eval_cfg.max_context),
        max_step_tokens=int(eval_cfg.max_step_tokens),
        max_steps_per_turn=eval_cfg.get("max_steps_per_turn"),
        render_mode=eval_cfg.get("render_mode", "auto"),
        thinking=eval_cfg.get("thinking"),
    )
    if policy == "model" and params is not None:  # split per layer once, not in every prefill/decode call
        params = decode_weights(params, model_cfg.dtype)
    results: list[dict] = []
    batch = max(int(eval_cfg.batch_size), 1)
    t0 = time.perf_counter()
    for start in range(0, len(tasks), batch):
        chunk = list(tasks[start : start + batch])

        def spec(i, chunk=chunk):
            return EpisodeSpec(task_source.make_env(chunk[i], None), chunk[i].id, group=i, reward_token=token)

        def make_policy(rows, chunk=chunk, start=start):
            if policy == "oracle":  # scripts only for the rows this process plays
                return ScriptedPolicy(
                    tokenizer, [oracle_texts(task_source.expert(chunk[i]), parser) for i in rows], stop_ids[0]
                )
            return ModelPolicy(
                model_cfg,
                params,
                stop_ids=stop_ids,
                max_step_tokens=rollout_cfg.max_step_tokens,
                max_context=rollout_cfg.max_context,
                sampling=SamplingParams(temperature=float(temperature)),
                prefill_chunk=int(eval_cfg.prefill_chunk),
                mesh=mesh,
                rules=sharding.DECODE_RULES,
                rng=jax.random.fold_in(jax.random.key(seed), start) if temperature > 0 else None,
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

    model_cfg, params = models.load_hf(path, dtype=config.model.dtype, mesh=mesh, rules=sharding.DECODE_RULES)
    return model_cfg, params, AutoTokenizer.from_pretrained(path)


BFCL_SUITES = ("multi_turn", "single_turn", "bfcl_v4")  # the suites of other benchmarks: `eval.suites`
RUN_POLICIES = (*POLICIES, "replay")  # replay: outputs made elsewhere (bfcl_results)


def suites_of(value: str) -> list[str]:
    """eval.suite as its suites: one name or several, comma-separated (at most one of BFCL_SUITES)."""
    known = (*BFCL_SUITES, *suites.names())
    names = [s.strip() for s in str(value or "").split(",") if s.strip()]
    if not names:
        raise ConfigError("eval.suite", f"names no suite; one or several (comma-separated) of {', '.join(known)}")
    for s in names:
        if s not in known:
            raise ConfigError("eval.suite", f"{s!r} is not one of {', '.join(known)}")
    if len(set(names)) != len(names):
        raise ConfigError("eval.suite", f"names a suite twice: {value!r}")
    bfcl = [s for s in names if s in BFCL_SUITES]
    if len(bfcl) > 1:
        raise ConfigError(
            "eval.suite", f"at most one of {', '.join(BFCL_SUITES)} (bfcl_v4 is both), got {', '.join(bfcl)}"
        )
    return names


def check_eval_config(config) -> None:
    """Start-up checks of the eval section (the error names the field)."""

    e = config.eval
    names, policy = suites_of(e.get("suite", "multi_turn")), e.policy
    suite = next((s for s in names if s in BFCL_SUITES), names[0])
    if policy not in RUN_POLICIES:
        raise ConfigError("eval.policy", f"{policy!r} is not one of {', '.join(RUN_POLICIES)}")
    if policy == "replay":
        if not e.get("replay_path"):
            raise ConfigError(
                "eval.replay_path", "eval.policy=replay needs a BFCL result folder or file, or a JSONL of outputs"
            )
        if not os.path.exists(e.replay_path):
            raise ConfigError("eval.replay_path", f"no such file or folder: {e.replay_path}")
        others = [s for s in names if s not in BFCL_SUITES]
        if others:
            raise ConfigError(
                "eval.policy", f"replay reads BFCL result files; suite(s) {', '.join(others)} need model or oracle"
            )
        if suite != "single_turn" and config.data.get("source", "bfcl") != "bfcl":
            raise ConfigError("eval.policy", "multi-turn replay reads BFCL result files: data.source must be bfcl")
    if e.split not in sources.SPLITS:
        raise ConfigError("eval.split", f"{e.split!r} is not one of {', '.join(sources.SPLITS)}")
    if any(s != "multi_turn" for s in names) and e.split not in ("test", "all"):
        raise ConfigError(
            "eval.split",
            "the single-turn categories, API-Bank and MMLU-Pro have no training, RL or i.i.d. split (nothing here trains on "
            "them): use eval.split=test or all (both mean every entry)",
        )
    if policy == "model" and not config.model.path:
        raise ConfigError(
            "model.path",
            "evaluation of a model needs its HF checkpoint directory "
            "(--config.model.path=DIR); eval.policy=oracle needs none on tiny",
        )
    for name in names:  # read and check the other benchmarks' data now, before any model loads
        if name not in BFCL_SUITES:
            suites.get(name).load_checked(e)


def bfcl_category(category: str, source: str) -> str:
    """BFCL's name of a multi-turn category of the `bfcl` source (`base` -> `multi_turn_base`); other
    sources' categories are their own."""
    return f"multi_turn_{category}" if source == "bfcl" else category


def suite_summary(records: Sequence[Mapping[str, Any]], suite: str, heldout: Sequence[str] = ()) -> dict[str, Any]:
    """The printed summary of a run: accuracy per category, BFCL's groups, `overall` and counts.

    Groups follow `aggregate` (BFCL's leaderboard code); a single-turn group is reported only when all
    its categories ran. The multi_turn group is the unweighted mean of the multi-turn categories that
    ran (BFCL's, when the four ran; the world source's own categories otherwise). `overall`: for the
    multi_turn suite that mean; for single_turn and bfcl_v4 BFCL's weighted overall over the offline
    groups that ran (`overall_covers`, weights renormalised: `aggregate.overall_offline`), None when no
    group is complete."""

    held = set(heldout)
    main = [r for r in records if r["category"] not in held]
    rest = [r for r in records if r["category"] in held]
    rep = report.summarize(main if main else records)
    table = {c: aggregate.Score(s["accuracy"], s["n"]) for c, s in rep["categories"].items()}
    gs = aggregate.groups(table)
    mt = [c for c in table if c not in single_turn.CATEGORIES]
    if mt and "multi_turn" not in gs:
        gs["multi_turn"] = aggregate.unweighted([table[c] for c in mt])
    covers = [g for g in aggregate.OFFLINE_GROUPS if g in gs]
    if suite == "multi_turn":
        overall, covers = gs["multi_turn"].accuracy, ["multi_turn"]
    else:
        off = aggregate.overall_offline(gs)
        overall = None if off is None else off.accuracy
    out = {
        "suite": suite,
        "categories": {c: s.accuracy for c, s in table.items()},
        "groups": {g: s.accuracy for g, s in gs.items()},
        "overall": overall,
        "overall_covers": covers,
        "n": rep["n"],
        "error_kinds": rep["error_kinds"],
    }
    if suite != "multi_turn":
        share = sum(aggregate.WEIGHTS[g] for g in covers) / sum(aggregate.WEIGHTS.values())
        out["overall_weights"] = aggregate.offline_weights(covers)
        out["overall_note"] = (
            "BFCL's weights (non_live 10, live 10, irrelevance 10, multi_turn 30, agentic 40) renormalised over "
            f"{', '.join(covers) or 'no group'}; the agentic group (web search, memory) needs the internet and "
            "is not run, so this is not the leaderboard's overall"
        )
        out["overall_with_agentic_zero"] = None if overall is None else overall * share
    mt_records = [r for r in main if r["category"] not in single_turn.CATEGORIES]
    out["reward_mean"] = report.summarize(mt_records)["reward_mean"] if mt_records else None
    out["heldout"] = report.summarize(rest)["overall"] if rest and main else None
    return out


def suite_markdown(summary: Mapping[str, Any], label: str) -> str:
    """Tables of a suite summary: accuracy (%) per category (with, for a replay, the entries missing from
    the result files beside each: scored as failures), then the groups and overall."""
    missing = summary.get("missing_by_category")
    if missing is None:
        lines = [f"| Category | {label} |", "|---|---:|"]
        lines += [f"| {c} | {100 * a:.2f} |" for c, a in summary["categories"].items()]
    else:
        lines = [f"| Category | {label} | missing |", "|---|---:|---:|"]
        lines += [f"| {c} | {100 * a:.2f} | {missing.get(c, 0)} |" for c, a in summary["categories"].items()]
    lines += ["", f"| Group | {label} |", "|---|---:|"]
    lines += [f"| {g} | {100 * a:.2f} |" for g, a in summary["groups"].items()]
    overall = summary["overall"]
    lines.append(
        f"| overall ({' + '.join(summary['overall_covers'])}) | {'-' if overall is None else f'{100 * overall:.2f}'} |"
    )
    return "\n".join(lines) + "\n"


def _single_turn_records(
    config, tokenizer, model_cfg, params, parser, mesh, policy: str, progress: bool, replay_set=None
):
    """(records, extras) of the single-turn categories under `policy` (replay: from `replay_set`)."""

    entries = single_turn.load_entries()
    limit = int(config.eval.max_tasks)
    if limit > 0:
        entries = [e for c in single_turn.CATEGORIES for e in [x for x in entries if x.category == c][:limit]]
    token = reward_token_for(config.eval.reward_token, tokenizer)
    extras: dict[str, Any] = {}
    if policy == "replay":
        outputs, failures = replay_set.single, {}
        missing = [e.id for e in entries if e.id not in outputs]
        extras["missing"] = len(missing)
        extras["missing_ids"] = missing
    else:
        prompts, failures = single_turn_run.render_prompts(entries, tokenizer, token)
        if policy == "oracle":
            outputs = single_turn_run.oracle_outputs(entries, tokenizer, parser)
            extras["unanswerable"] = {e.id: r for e in entries if (r := single_turn_oracle.unanswerable(e))}
        else:
            outputs, cut = single_turn_run.generate_outputs(
                entries, prompts, tokenizer, model_cfg, params, config.eval, mesh=mesh, progress=progress
            )
            failures = {**failures, **cut}
    results = single_turn_run.score_all(entries, outputs, parser, failures)
    records = [{**r.record(), "reward": float(r.official_pass)} for r in results]
    return records, extras


def run(config, workdir: str) -> dict[str, Any]:
    """The `eval` stage of rcgrpo_jax.main: `eval.suite` on `eval.split`, scored by BFCL's official checkers.
    Returns the summary (`suite_summary`) that main prints as its last line.

    Policies (`eval.policy`): model (greedy decoding); oracle (the ground truth written in the checkpoint
    family's format and parsed back through the same path: 100% on every multi-turn category, and on every
    single-turn entry but the six whose shipped answers no output can satisfy, `single_turn_oracle.unanswerable`);
    replay (raw assistant texts made elsewhere, at `eval.replay_path`: the folder `bfcl generate` writes,
    one of its result files, or our JSONL `{"id", "output"}`; see `bfcl_results`. Each step's text is parsed
    by the family's parser; multi-turn steps are executed in the environment in order and scored by the
    official checker; the model is never called. A missing id, a malformed line or an undecodable step is
    counted and listed, never a crash). `eval.bfcl_results_dir` also writes the run's outputs as `bfcl
    generate` does (`bfcl_results.write_results`), for `bfcl evaluate` and `python -m rcgrpo_jax.eval.agree`.
    """
    import jax

    shape = config_checks.check(config, jax.device_count())
    check_eval_config(config)
    names, policy = suites_of(config.eval.get("suite", "multi_turn")), config.eval.policy
    suite = next((s for s in names if s in BFCL_SUITES), None)  # the BFCL part, None when not run
    os.makedirs(workdir, exist_ok=True)
    mesh = sharding.make_mesh(shape)
    path, model_cfg, params, tokenizer = _policy_model(config, workdir, mesh, policy)
    parser = chat.get_parser(chat.family_for(model_cfg.model_type))
    progress = bool(config.log.progress) and jax.process_index() == 0
    t0 = time.perf_counter()
    records: list[dict] = []
    extras: dict[str, Any] = {}
    mt_table = ""
    replay_set = bfcl_results.read_replay(config.eval.replay_path) if policy == "replay" else None
    if suite in ("multi_turn", "bfcl_v4"):
        records, mt_table = _multi_turn_records(
            config, model_cfg, params, tokenizer, parser, mesh, policy, progress, replay_set, path
        )
    if suite in ("single_turn", "bfcl_v4"):
        st_records, extras = _single_turn_records(
            config, tokenizer, model_cfg, params, parser, mesh, policy, progress, replay_set
        )
        records += st_records
    if replay_set is not None:
        extras.update(_replay_extras(replay_set, records))
    if config.eval.get("bfcl_results_dir") and suite is not None and jax.process_index() == 0:
        bfcl_model, files = bfcl_results.write_results(
            config.eval.bfcl_results_dir, records, parser, config.eval.get("bfcl_model") or None
        )
        extras["bfcl_results"] = {"dir": config.eval.bfcl_results_dir, "model": bfcl_model, "files": len(files)}
    other: dict[str, tuple[list, dict]] = {}  # suite -> (records, summary)
    for name in names:
        if name not in BFCL_SUITES:
            other[name] = suites.get(name).records(
                config.eval, tokenizer, model_cfg, params, policy, mesh=mesh, progress=progress
            )
    seconds = time.perf_counter() - t0
    summary, incomplete = _summary(config, records, suite, names, seconds, other, extras, replay_set)
    label = {"oracle": "oracle", "replay": "replay"}.get(policy) or os.path.basename(os.path.normpath(path))
    if jax.process_index() == 0:
        reward_token = reward_token_for(config.eval.reward_token, tokenizer)
        eval_json = _eval_json(config, path, names, reward_token, seconds, summary, extras, records, other)
        report.write_json(os.path.join(workdir, "eval.json"), eval_json)
        table = suite_markdown(summary, label) if suite is not None else ""
        others = "".join(f"\n{suites.get(n).markdown(s, label)}" for n, (_, s) in other.items())
        with open(os.path.join(workdir, "eval.md"), "w") as f:
            f.write(_eval_md(config, path, names, summary, suite, table, mt_table, others))
        if incomplete is None:
            print(table + others, flush=True)
    if incomplete is not None:
        raise InputError(incomplete)
    return summary


def _policy_model(config, workdir: str, mesh, policy: str):
    """(path, model config, params, tokenizer) of the evaluated policy: the checkpoint at model.path for the
    model policy; for oracle and replay only the checkpoint's config and tokenizer (params None; tiny:
    `model_dir` builds a checkpoint for its tokenizer and template)."""
    if policy in ("oracle", "replay"):
        from transformers import AutoTokenizer

        path = model_dir(config, workdir)
        return path, ModelConfig.from_hf(path), None, AutoTokenizer.from_pretrained(path)
    path = config.model.path
    return (path, *load_policy_model(config, path, mesh))


def _multi_turn_records(
    config, model_cfg, params, tokenizer, parser, mesh, policy: str, progress: bool, replay_set, path: str
) -> tuple[list[dict], str]:
    """(records, table) of the multi-turn tasks of eval.split under `policy` (replay: each task's steps from
    `replay_set`, its problems added there); the table is the episodes' own summary (`summary_table`)."""
    tasks = sources.tasks(config.data, config.eval.split)
    if int(config.eval.max_tasks) > 0:
        tasks = tasks[: int(config.eval.max_tasks)]
    source = config.data.get("source", "bfcl")
    if policy == "replay":
        results, replay_problems = [], []
        for task in tasks:
            rec, probs = bfcl_results.replay_multi_turn(task, replay_set.multi.get(task.id), parser)
            results.append(rec)
            replay_problems += probs
        replay_set.problems.extend(replay_problems)
        mt_summary = summarize(results, tuple(config.eval.get("heldout_categories", ()) or ()))
    else:
        results, mt_summary = evaluate(
            model_cfg, params, tokenizer, tasks, config.eval, policy=policy, mesh=mesh, progress=progress, source=source
        )
    records = [{**r, "category": bfcl_category(r["category"], source)} for r in results]
    name = "oracle" if policy == "oracle" else os.path.basename(os.path.normpath(path))
    return records, summary_table({name: mt_summary})


def _replay_extras(replay_set, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What a replay adds to the run's extras: the ids with no output (missing), the replay's ids no record
    has (unknown, also added to its problems), and every problem of the replay."""
    known = {r["id"] for r in records}
    replay_set.problems.extend(
        bfcl_results.Problem(bfcl_results.UNKNOWN_ID, i, i, "no entry or task of this run has this id")
        for i in sorted(replay_set.ids() - known)
    )
    missing = [r["id"] for r in records if r.get("error_kind") in ("missing_output", "missing_id")]
    return {
        "missing": len(missing),
        "missing_ids": missing,
        "unknown_ids": sorted(replay_set.ids() - known),
        "replay_problems": [p.to_json() for p in replay_set.problems],
    }


def _summary(config, records, suite, names, seconds: float, other, extras, replay_set) -> tuple[dict, str | None]:
    """(the run's summary, the reason a replay is refused as incomplete or None): the BFCL suite's figures
    (`suite_summary`), the run's settings, the other suites' figures and counts, and what the extras add."""
    heldout = tuple(config.eval.get("heldout_categories", ()) or ())
    summary = {
        **(suite_summary(records, suite, heldout) if suite is not None else {}),
        "suite": ",".join(names),
        "policy": config.eval.policy,
        "split": config.eval.split,
        "seconds": round(seconds, 2),
    }
    for name, (_, s) in other.items():  # the printed line: figures and counts; ids stay in eval.json
        summary[name] = {k: v for k, v in s.items() if not k.endswith("_ids")}
    if "missing_ids" in extras:
        summary["missing"] = extras["missing"]
        summary["missing_ids"] = extras["missing_ids"][:50]  # all of them in eval.json
        summary["unknown_ids"] = len(extras.get("unknown_ids", ()))
    if "replay_problems" in extras:  # every problem (kind, where, id, message) in eval.json
        counts: dict[str, int] = {}
        for p in extras["replay_problems"]:
            counts[p["kind"]] = counts.get(p["kind"], 0) + 1
        summary["replay_problems"] = counts
    incomplete = None
    if replay_set is not None:
        incomplete = _replay_verdict(config, records, extras, replay_set, summary)
    if "bfcl_results" in extras:
        summary["bfcl_results"] = extras["bfcl_results"]
    if "unanswerable" in extras:
        # Entries no output can pass (data errors of the shipped answers, see single_turn_oracle.unanswerable).
        summary["oracle_unanswerable"] = sorted(extras["unanswerable"])
    return summary, incomplete


def _replay_verdict(config, records, extras, replay_set, summary: dict) -> str | None:
    """Adds a replay's missing results per category and its undecodable steps to `summary` (and names the
    undecodable ones on process 0); returns why no score is reported (results missing or undecodable,
    without eval.allow_missing), or None."""
    by_cat: dict[str, int] = {}
    for r in records:
        if r.get("error_kind") in ("missing_output", "missing_id"):
            by_cat[r["category"]] = by_cat.get(r["category"], 0) + 1
    summary["missing_by_category"] = {c: by_cat.get(c, 0) for c in summary["categories"]}
    bad = bfcl_results.undecodable(replay_set.problems)
    summary["undecodable"] = len(bad)
    if jax.process_index() == 0:
        bfcl_results.report_undecodable(replay_set.problems, prefix="replay")
    if (extras["missing"] or bad) and not config.eval.get("allow_missing", False):
        summary["incomplete"] = True
        return (
            f"replay: {extras['missing']} of {len(records)} entries have no result ({len(bad)} undecodable in "
            "the files, named above; all in eval.json); no score is reported. "
            "--config.eval.allow_missing=True scores them as failures"
        )
    return None


def _eval_json(config, path, names, reward_token, seconds: float, summary, extras, records, other) -> dict:
    """workdir/eval.json: the run's settings, summary, the extras' full lists, every record and the other
    suites' summaries and records."""
    return {
        "model": path,
        "policy": config.eval.policy,
        "suite": ",".join(names),
        "split": config.eval.split,
        "source": config.data.get("source", "bfcl"),
        "replay_path": config.eval.get("replay_path") or None,
        "reward_token": reward_token,
        "seconds": seconds,
        "summary": summary,
        **{k: v for k, v in extras.items() if k in ("missing_ids", "unknown_ids", "unanswerable", "replay_problems")},
        "episodes": records,
        **{name: {"summary": s, "records": recs} for name, (recs, s) in other.items()},
    }


def _eval_md(config, path, names, summary, suite, table: str, mt_table: str, others: str) -> str:
    """workdir/eval.md: a title; when a BFCL suite ran, the note on its figures, its `table` and the multi-turn
    episodes' `mt_table`; then the other suites' tables (`others`)."""
    text = f"# Evaluation of {path} ({config.eval.policy}, suite {','.join(names)}, split {config.eval.split})\n\n"
    if suite is not None:
        text += (
            "Accuracy (%) by BFCL's official checkers (multi-turn: multi_turn_checker; single-turn: "
            "ast_checker, irrelevance/relevance by whether a call decodes). Groups as BFCL's leaderboard code "
            "computes them; overall: "
            f"{summary.get('overall_note') or 'the unweighted mean of the multi-turn categories'}.\n\n"
            + table
            + (f"\nMulti-turn episodes (held-out categories apart):\n\n{mt_table}" if mt_table else "")
        )
    return text + others
