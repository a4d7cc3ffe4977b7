"""The paper's ablation in miniature, end to end in one process (the CPU reproduction).

    python -m experiments.ablation --workdir runs/ablation [--seeds N] [--budget quickstart] [--formulas]

Stages, all through the same code as the 7B pipeline (the stage trainers' `run(config, workdir)`):
  1. world + a tiny HF checkpoint (random init, Qwen3 architecture, tokenizer trained on the world's
     train corpus);
  2. evaluation of the base model;
  3. SFT on expert trajectories; RCTP-FT on expert + failure trajectories 1:1 (from the base, or from the
     SFT model with `budget.rctp_init="sft"`: the quickstart's, see experiments/budgets.py);
  4. GRPO and RC-GRPO from each stage-1 model, equal RL budgets, seeds 0..N-1 (with --formulas also
     RCTP-FT+GRPO with the dr_grpo and the rloo advantage: FORMULA_ROWS);
  5. greedy evaluation of every row on the test split with BFCL's official checker;
  6. workdir/report.md (table per category and overall, mean ± spread over seeds, an honest comment on
     whether RC-GRPO beat GRPO here), report.json, and PNG plots of the RL runs under workdir/plots.

One process, so jitted functions are shared across stages of equal shapes; a persistent XLA
compilation cache under the workdir shares the rest (and makes a rerun quick). A stage that has
finished (its `DONE` marker exists) is skipped on a rerun, so an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from typing import Any, Callable, Mapping, Sequence

import configs.awpo
import configs.dapo
import configs.dr_grpo
import configs.eval
import configs.grpo
import configs.rc_grpo
import configs.rctp_ft
import configs.sft
from experiments import budgets as budgets_lib
from experiments import cache
from experiments import summary as summary_lib
from rcgrpo_jax import sharding
from rcgrpo_jax.data import datasets, sources, splits, tiny_checkpoint, trajectories
from rcgrpo_jax.eval import report
from rcgrpo_jax.eval import run as eval_run
from rcgrpo_jax.train import exploration, rl_config, rl_trainer, sft
from rcgrpo_jax.worlds.generate import category_of

ROWS = ("base", "SFT+GRPO", "SFT+RC-GRPO", "RCTP-FT+GRPO", "RCTP-FT+RC-GRPO")  # the paper's five rows
# The stage-1 policies, in training order: name (its run directory under a seed's and its stage config file) -> its
# row's label in the report (`summary.STAGE1_ROWS`).
STAGE1_ROWS = dict(zip(("sft", "rctp_ft"), summary_lib.STAGE1_ROWS, strict=True))
RL_RUNS = {  # row -> (stage-1 init, RL config file)
    "SFT+GRPO": ("sft", "grpo"),
    "SFT+RC-GRPO": ("sft", "rc_grpo"),
    "RCTP-FT+GRPO": ("rctp_ft", "grpo"),
    "RCTP-FT+RC-GRPO": ("rctp_ft", "rc_grpo"),
}
# The controls (budget.controls, seed 0): name -> (row label, stage-1 init, RL config file, overrides on top of
# budget.rl). shuffled: the same updates with the advantages permuted across the batch (no reward signal); lr0:
# two steps at lr 0, which must reproduce the init's evaluation exactly.
CONTROL_ROWS = {
    "shuffled": ("RCTP-FT+RC-GRPO, shuffled advantages", "rctp_ft", "rc_grpo", {"rl.shuffle_advantages": True}),
    "lr0": (
        "RCTP-FT+RC-GRPO, lr 0",
        "rctp_ft",
        "rc_grpo",
        {"optim.lr": 0.0, "train.max_steps": 2, "rl.heldout.every": 0},
    ),
}
# The formula rows (`--formulas`, every seed): RCTP-FT+GRPO with another advantage estimator of
# rcgrpo_jax.rl.advantages and nothing else changed (budget.rl as every row): dr_grpo, r - mean_g (Dr.GRPO's formula;
# its loss aggregation, configs/dr_grpo.py, is left out, so the formula alone differs), and rloo, the leave-one-out
# baseline. name -> (row label, stage-1 init, RL config file, overrides on top of budget.rl); FORMULA_OF: the row each
# one varies (the report compares them with it and with their init).
FORMULA_ROWS = {
    "dr_grpo": ("RCTP-FT+GRPO, dr_grpo advantages", "rctp_ft", "grpo", {"rl.advantage.name": "dr_grpo"}),
    "rloo": ("RCTP-FT+GRPO, rloo advantages", "rctp_ft", "grpo", {"rl.advantage.name": "rloo"}),
}
FORMULA_OF = "RCTP-FT+GRPO"
STAGE_FILES = {  # configs/<name>.py by name: what stage_config and paper_config read
    m.__name__.rpartition(".")[2]: m
    for m in (
        configs.awpo,
        configs.dapo,
        configs.dr_grpo,
        configs.eval,
        configs.grpo,
        configs.rc_grpo,
        configs.rctp_ft,
        configs.sft,
    )
}
DONE = "DONE"


# ----------------------------------------------------------------------------------------------------
# Configs: the stage files' tiny presets with the budget's overrides.


def set_dotted(config, overrides: Mapping[str, Any]) -> None:
    """config.a.b = v for each 'a.b': v; a field the stage config lacks is an error that names it."""
    for dotted, value in overrides.items():
        *parents, leaf = dotted.split(".")
        node = config
        for p in parents:
            if p not in node:
                raise KeyError(f"config has no section {dotted!r}")
            node = node[p]
        if leaf not in node:
            raise KeyError(f"config has no field {dotted!r}")
        node[leaf] = value


def stage_config(stage_file: str, budget: budgets_lib.Budget, overrides: Mapping[str, Any], **fields):
    """configs/<stage_file>.py:tiny with the world of the budget, the overrides and the given fields."""
    config = STAGE_FILES[stage_file].get_config("tiny")
    config.data.source = "world"
    config.mesh.data = budget.devices
    set_dotted(config, {f"data.world.{k}": v for k, v in budget.world.items()})
    set_dotted(config, overrides)
    set_dotted(config, fields)
    return config


def paper_config(stage_file: str):
    """configs/<stage_file>.py at the paper's preset (summary.PAPER_PRESET): the settings a run is compared with."""
    return STAGE_FILES[stage_file].get_config(summary_lib.PAPER_PRESET)


def rl_pool_of(config) -> tuple[str, int]:
    """(a description, the task count) of the tasks an RL config trains on (data split "rl")."""

    data = config.data
    if data.source == "bfcl":  # the manifest's train ids: no need to load BFCL's files to count them
        return "BFCL v4 multi-turn train split", len(splits.split("train"))
    n = len(sources.tasks(data, "rl"))
    if data.source == "world" and int(data.world.rl_per_type or 0) > 0:
        w = data.world
        types = (w.rl_types or "all types").replace(",", ", ")
        return f"world RL pool: {w.rl_per_type} fresh tasks per type ({types}), {w.rl_vocab} vocabulary", n
    return f"{data.source} train split", n


def rl_runs(budget: budgets_lib.Budget, formulas: bool = False) -> dict[str, tuple[str, str, dict, str]]:
    """Every seed's RL rows: label -> (stage-1 init, RL config file, overrides, tag of its run directory
    sdir/rl/<init>_<file>_<tag>): the paper's four (RL_RUNS at budget.rl, tag "main"), then with `formulas` the
    FORMULA_ROWS (tag: the estimator's name)."""
    rows = {row: (init, rl_file, dict(budget.rl), "main") for row, (init, rl_file) in RL_RUNS.items()}
    if formulas:
        for name, (label, init, rl_file, extra) in FORMULA_ROWS.items():
            rows[label] = (init, rl_file, {**budget.rl, **extra}, name)
    return rows


def rl_settings_report(budget: budgets_lib.Budget, formulas: bool = False) -> dict[str, dict]:
    """Each group of RL rows against the paper preset of its config file (`summary.compare_settings`): the
    budget's rows, each control, and with `formulas` each formula row."""
    groups = [
        ("SFT+GRPO, RCTP-FT+GRPO", "grpo", dict(budget.rl)),
        ("SFT+RC-GRPO, RCTP-FT+RC-GRPO", "rc_grpo", dict(budget.rl)),
    ]
    for c in budget.controls:
        label, _, rl_file, extra = CONTROL_ROWS[c]
        groups.append((label, rl_file, {**budget.rl, **extra}))
    for name, (label, _, rl_file, extra) in FORMULA_ROWS.items() if formulas else ():
        groups.append((label, rl_file, {**budget.rl, **extra}))
    out, papers = {}, {}
    for label, rl_file, overrides in groups:
        run_cfg = stage_config(rl_file, budget, overrides)
        if rl_file not in papers:
            paper_cfg = paper_config(rl_file)
            papers[rl_file] = summary_lib.rl_settings(paper_cfg, *rl_pool_of(paper_cfg))
        out[label] = summary_lib.compare_settings(
            f"configs/{rl_file}.py", papers[rl_file], summary_lib.rl_settings(run_cfg, *rl_pool_of(run_cfg))
        )
    return out


# ----------------------------------------------------------------------------------------------------
# Console progress: stage, elapsed, ETA from the budget's plan rescaled by how fast the run is going.


class Console:
    def __init__(self, plan: Sequence[tuple[str, float]], enabled: bool = True):
        self.plan, self.enabled = list(plan), enabled
        self.t0 = time.perf_counter()
        self.done_planned = 0.0
        self.index = 0

    def start(self, name: str) -> float:
        self.index += 1
        elapsed = time.perf_counter() - self.t0
        remaining = sum(s for _, s in self.plan[self.index - 1 :])
        speed = elapsed / self.done_planned if self.done_planned > 0 else 1.0
        if self.enabled:
            print(
                f"\n=== [{self.index}/{len(self.plan)}] {name}  (elapsed {_fmt(elapsed)}, ETA ~{_fmt(remaining * speed)})",
                flush=True,
            )
        return time.perf_counter()

    def end(self, name: str, t_start: float, note: str = "") -> float:
        self.done_planned += self.plan[self.index - 1][1]
        dt = time.perf_counter() - t_start
        if self.enabled:
            print(f"--- {name} done in {_fmt(dt)}{': ' + note if note else ''}", flush=True)
        return dt


def _fmt(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s"


# ----------------------------------------------------------------------------------------------------
# Stages.


def build_base(workdir: str, budget: budgets_lib.Budget, seed: int = 0) -> str:
    """The tiny checkpoint (`budget.arch`, Qwen3 for the quickstart) initialised from `seed`, tokenizer trained
    on the world's train corpus (test names reach the model as pieces of trained tokens)."""

    path = os.path.join(workdir, "base_model")
    request = {"arch": budget.arch, "model": dict(budget.model), "world": dict(budget.world), "seed": seed}
    if os.path.exists(os.path.join(path, "config.json")):
        cache.check(cache.read_request(path), request, f"the base checkpoint {path}")
    else:
        tiny_checkpoint.build_tiny(
            stage_config("sft", budget, {"model.tiny_arch": budget.arch}), path, seed=seed, **budget.model
        )
        cache.write_request(path, request)
    return path


SHIPPED_BASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "base_models")
SHIPPED_RECORD = "record.json"  # beside a shipped base: {"request": base_request(budget), "command", "rebuild", ...}


def base_request(budget: budgets_lib.Budget) -> dict:
    """Every setting a pretrained base depends on (the key of its caches and of a shipped copy)."""
    return cache.plain(
        {
            "arch": budget.arch,
            "model": dict(budget.model),
            "world": dict(budget.world),
            "corpus": dict(budget.pretrain_corpus),
            "pretrain": dict(budget.pretrain),
        }
    )


def shipped_base(budget: budgets_lib.Budget) -> str | None:
    """The copy of the budget's base the repository ships (experiments/base_models/*, whose record's request equals
    `base_request(budget)`), or None."""
    want = base_request(budget)
    if not os.path.isdir(SHIPPED_BASES):
        return None
    for name in sorted(os.listdir(SHIPPED_BASES)):
        record = os.path.join(SHIPPED_BASES, name, SHIPPED_RECORD)
        if os.path.exists(record):
            with open(record) as f:
                if json.load(f).get("request") == want:
                    return os.path.join(SHIPPED_BASES, name)
    return None


def pretrained_base(workdir: str, budget: budgets_lib.Budget, *, use_shipped: bool = True) -> str:
    """The world's base model (`budget.pretrain`), once for every seed and row: the copy the repository ships for
    these settings (`shipped_base`; `use_shipped=False` rebuilds), else built under workdir/base: the random
    checkpoint of `build_base` trained by the SFT stage on the corpus of `datasets.pretrain_records` over the
    world's 'pretrain' split, without reward tokens. Keyed by its settings: a cached base made with others raises
    cache.StaleCacheError. Returns the HF directory (the shipped one, or workdir/base/pretrain/hf)."""
    shipped = shipped_base(budget) if use_shipped else None
    if shipped is not None:
        return shipped
    corpus = dict(budget.pretrain_corpus)
    seed = int(corpus.get("seed", 0))
    root = os.path.join(workdir, "base")
    random_init = build_base(root, budget, seed)
    data_dir = os.path.join(root, "corpus")
    path = os.path.join(data_dir, "pretrain.jsonl")
    request = {"world": dict(budget.world), "corpus": corpus}
    if os.path.exists(path):
        cache.check(cache.read_request(data_dir), request, f"the pretraining corpus {path}")
    else:
        tasks = sources.tasks(stage_config("sft", budget, {}).data, "pretrain")
        experts = datasets.expert_records(tasks)
        failures = datasets.failure_records(
            tasks, seed=seed, site=corpus.get("failure_site", "any"), kinds=corpus.get("failure_kinds", "all")
        )
        records = datasets.pretrain_records(
            experts, failures, failure_share=float(corpus.get("failure_share", 0.0)), seed=seed
        )
        trajectories.write_jsonl(path, records)
        cache.write_request(data_dir, request)
    config = stage_config(
        "sft",
        budget,
        budget.pretrain,
        **{"model.path": random_init, "seed": seed, "data.path": path, "add_reward_tokens": False},
    )
    train_stage(sft.run, config, os.path.join(root, "pretrain"))
    return os.path.join(root, "pretrain", "hf")


def base_probe(base: str, budget: budgets_lib.Budget, workdir: str) -> dict[str, dict]:
    """What the base model can do before stage 1: greedy and pass@k at `budget.passk`'s temperature on 'dev' (all
    of it) and on the first `budget.passk["per_type"]` tasks of each type of the i.i.d. test, by type, and the share
    of its dev calls with a made-up argument (`episodes.episode_profile`). Cached in workdir/base/eval (a shipped
    base's in workdir/base/eval_shipped)."""
    from experiments import episodes

    shipped = os.path.abspath(base).startswith(SHIPPED_BASES + os.sep)
    ev = os.path.join(workdir, "base", "eval_shipped" if shipped else "eval")
    n = int(budget.passk["per_type"])
    dev_path = os.path.join(ev, "dev.json")
    out = {
        "dev_greedy": evaluate_row(base, dev_path, budget, "dev"),
        "dev_passk": pass_at_k(base, os.path.join(ev, "dev_passk.json"), budget, "dev", per_type=None),
        "iid_greedy": evaluate_row(base, os.path.join(ev, "iid.json"), budget, "iid", per_type=n),
        "iid_passk": pass_at_k(base, os.path.join(ev, "iid_passk.json"), budget, "iid", per_type=n),
    }
    profile = episodes.episode_profile([dev_path])
    out["dev_profile"] = dataclasses.asdict(profile) if profile is not None else {}
    return out


def build_datasets(
    workdir: str, budget: budgets_lib.Budget, explored: list[dict] | None = None, *, seed: int = 0
) -> dict[str, str]:
    """SFT (expert, with `budget.sft_reward_slot`) and RCTP-FT (expert + failures, 1:1, reward goals) JSONL of
    the world's train split, their draws from `seed`. Without `explored`: generated failures only, in
    workdir/data; with the exploration stage's records their failures join in, in workdir/data_explored
    (data/manifest.json records the mix either way)."""

    out = os.path.join(workdir, "data" if explored is None else "data_explored")
    files = {"sft": os.path.join(out, "sft.jsonl"), "rctp_ft": os.path.join(out, "rctp_ft.jsonl")}
    site = budget.rctp.get("data.failure_site", "any")
    kinds = budget.rctp.get("data.failure_kinds", "all")
    request = {
        "world": dict(budget.world),
        "failure_site": site,
        "failure_kinds": kinds,
        "explored": len(explored or ()),
        "sft_reward_slot": budget.sft_reward_slot,
        "seed": seed,
    }
    if all(os.path.exists(f) for f in files.values()):
        cache.check(cache.read_request(out), request, f"the stage-1 data in {out}")
    else:
        data = stage_config("sft", budget, {}).data
        tasks = sources.tasks(data, "train")
        built = datasets.build_all(
            out,
            split="train",
            seed=seed,
            ids=tasks,
            explored=explored or (),
            failure_site=site,
            failure_kinds=kinds,
            sft_reward_slot=budget.sft_reward_slot,
        )
        cache.write_request(out, request)
        files = {k: str(built[k]) for k in files}
    return files


def explore(workdir: str, budget: budgets_lib.Budget, model_path: str, seed: int = 0) -> list[dict]:
    """The exploration stage: `budget.explore` rollouts of the policy at `model_path` (`budget.explore_with`'s;
    cached in workdir/explore.jsonl), conditioned on the high reward goal when the policy is SFT's and its examples
    carried the reward-goal slot (a base model knows no reward token)."""

    path = os.path.join(workdir, "explore.jsonl")
    if os.path.exists(path):
        return trajectories.read_jsonl(path)
    e = dict(budget.explore)
    tasks = sources.tasks(stage_config("sft", budget, {}).data, "train")[: int(e.pop("tasks"))]
    slot = budget.explore_with == "sft" and budget.sft_reward_slot != "none"
    token = datasets.HIGH_REWARD_TOKEN if slot else None
    records = exploration.collect(
        model_path, tasks, keep="failures", source="world", mesh=stage_mesh(budget), seed=seed, reward_token=token, **e
    )
    trajectories.write_jsonl(path, records)
    return records


def train_stage(run_fn: Callable, config, workdir: str, *, inputs: Mapping[str, Any] | None = None) -> dict:
    """A trainer's run(config, workdir), skipped when its DONE marker exists and records the same config
    (`cache.config_request`; a different one raises cache.StaleCacheError); the exported model is workdir/hf.
    inputs: what the stage starts from that its config names only by location (a request leaves locations out),
    e.g. the settings of the base model at `model.path`; recorded and checked with the config under "inputs"."""
    marker = os.path.join(workdir, DONE)
    request = cache.config_request(config)
    if inputs is not None:
        request["inputs"] = cache.plain(dict(inputs))
    if os.path.exists(marker):
        with open(marker) as f:
            summary = json.load(f)
        cache.check(summary.get("request"), request, f"the stage in {workdir}")
        return summary
    out = run_fn(config, workdir)
    if out.get("reason", "done") != "done":
        raise RuntimeError(f"{workdir}: training stopped early ({out.get('reason')})")
    summary = {k: v for k, v in out.items() if k != "metrics"}
    summary["last_metrics"] = {k: v for k, v in (out.get("metrics") or {}).items() if isinstance(v, (int, float))}
    summary["request"] = request
    with open(marker, "w") as f:
        json.dump(summary, f)
    return summary


def probe_tasks(tasks: Sequence, per_type: int) -> list:
    """The first `per_type` tasks of each category, in the split's order (a stratified train-split probe)."""

    seen: dict[str, int] = {}
    out = []
    for t in tasks:
        c = category_of(t.id)
        if seen.get(c, 0) < per_type:
            seen[c] = seen.get(c, 0) + 1
            out.append(t)
    return out


def cached_summary(out_path: str, request: Mapping[str, Any], what: str) -> dict | None:
    """The summary a finished evaluation wrote to `out_path` (None when there is none), after checking that it was
    made for `request` (cache.StaleCacheError otherwise, naming `what`)."""
    if not os.path.exists(out_path):
        return None
    with open(out_path) as f:
        cached = json.load(f)
    cache.check(cached.get("request"), request, f"{what} {out_path}")
    return cached["summary"]


def evaluate_row(
    model_path: str,
    out_path: str,
    budget: budgets_lib.Budget,
    split: str,
    *,
    reward_token: str = "auto",
    per_type: int | None = None,
) -> dict:
    """Greedy evaluation of an HF checkpoint on the world's split; cached in out_path (JSON).
    reward_token: eval.reward_token (auto | high | low | none); per_type: only the first N tasks of each type.
    A cached file made with another world, split, token, subset or eval section raises cache.StaleCacheError."""
    request = {
        "split": split,
        "reward_token": reward_token,
        "per_type": per_type,
        "eval": dict(budget.eval),
        "world": dict(budget.world),
    }
    cached = cached_summary(out_path, request, "the evaluation")
    if cached is not None:
        return cached

    config = stage_config("eval", budget, {}, **{f"eval.{k}": v for k, v in budget.eval.items()})
    config.eval.split = split
    config.eval.reward_token = reward_token
    mesh = stage_mesh(budget)
    model_cfg, params, tokenizer = eval_run.load_policy_model(config, model_path, mesh)
    tasks = sources.tasks(config.data, split)
    if per_type is not None:
        tasks = probe_tasks(tasks, per_type)
    t0 = time.perf_counter()
    results, summary = eval_run.evaluate(model_cfg, params, tokenizer, tasks, config.eval, mesh=mesh)
    report.write_json(
        out_path,
        {
            "model": model_path,
            "request": cache.plain(request),
            "split": split,
            "seconds": time.perf_counter() - t0,
            "reward_token": eval_run.reward_token_for(config.eval.reward_token, tokenizer),
            "summary": summary,
            "episodes": results,
        },
    )
    return summary


def dev_gap(model_path: str, out_prefix: str, budget: budgets_lib.Budget, seed: int = 0) -> dict:
    """What sampling finds on 'dev' that greedy decoding misses (a prerequisite of RL): {greedy, pass_at_k, k} of the
    checkpoint on every 'dev' task, greedy (`evaluate_row`) and pass@k (`pass_at_k`), cached as
    <out_prefix>.json and <out_prefix>_passk.json."""
    greedy = evaluate_row(model_path, f"{out_prefix}.json", budget, "dev")
    k = pass_at_k(model_path, f"{out_prefix}_passk.json", budget, "dev", per_type=None, seed=seed)
    return {"greedy": greedy["overall"], "pass_at_k": k["pass_at_k"], "k": k["k"]}


def pass_at_k(
    model_path: str, out_path: str, budget: budgets_lib.Budget, split: str, *, per_type: int | None, seed: int = 0
) -> dict:
    """pass@k of the checkpoint on the split's first `per_type` tasks of each type (all with None): each task
    sampled `budget.passk["k"]` times at `budget.passk["temperature"]` under the evaluation's prompt (the high
    reward goal when the tokenizer knows it) and limits, scored by BFCL's checker. Returns {k, temperature,
    tasks, pass_at_k (a task passes when any sample does), pass_at_1 (the samples' mean), per_category};
    cached in out_path as `evaluate_row` caches."""
    k, temperature = int(budget.passk["k"]), float(budget.passk["temperature"])
    request = {"split": split, "per_type": per_type, "k": k, "temperature": temperature, "seed": seed,
               "eval": dict(budget.eval), "world": dict(budget.world)}  # fmt: skip
    cached = cached_summary(out_path, request, "the pass@k probe")
    if cached is not None:
        return cached
    config = stage_config("eval", budget, {}, **{f"eval.{k_}": v for k_, v in budget.eval.items()})
    mesh = stage_mesh(budget)
    model_cfg, params, tokenizer = eval_run.load_policy_model(config, model_path, mesh)
    tasks = sources.tasks(config.data, split)
    if per_type is not None:
        tasks = probe_tasks(tasks, per_type)
    repeated = [t for t in tasks for _ in range(k)]
    results, _ = eval_run.evaluate(
        model_cfg, params, tokenizer, repeated, config.eval, mesh=mesh, temperature=temperature, seed=seed
    )
    passed: dict[str, list[bool]] = {}
    for r in results:
        passed.setdefault(r["id"], []).append(bool(r["official_pass"]))
    by_cat: dict[str, list[float]] = {}
    for t in tasks:
        by_cat.setdefault(category_of(t.id), []).append(float(any(passed[t.id])))
    summary = {
        "k": k,
        "temperature": temperature,
        "tasks": len(tasks),
        "pass_at_k": sum(float(any(v)) for v in passed.values()) / len(passed),
        "pass_at_1": sum(sum(v) for v in passed.values()) / sum(len(v) for v in passed.values()),
        "per_category": {c: sum(v) / len(v) for c, v in sorted(by_cat.items())},
    }
    report.write_json(out_path, {"model": model_path, "request": cache.plain(request), "summary": summary})
    return summary


def stage1_probe(stage1: Mapping[str, str], budget: budgets_lib.Budget, ev_dir: str) -> dict[str, dict]:
    """Greedy success of the stage-1 models on `budget.probe_per_type` TRAIN tasks per type: SFT as it is
    evaluated, RCTP-FT asked for a high and for a low reward (goal (a): the reward token must steer success)."""
    n = budget.probe_per_type
    runs = {
        "sft": ("sft", "auto", "sft_train.json"),
        "rctp_ft_high": ("rctp_ft", "high", "rctp_ft_train_high.json"),
        "rctp_ft_low": ("rctp_ft", "low", "rctp_ft_train_low.json"),
    }
    return {
        k: evaluate_row(stage1[init], os.path.join(ev_dir, f), budget, "train", reward_token=tok, per_type=n)
        for k, (init, tok, f) in runs.items()
    }


def stage_seconds(workdir: str, timings: Mapping[str, float]) -> dict[str, float]:
    """Each stage's wall seconds over every process that worked on this workdir (workdir/timings.json): a
    stage that a resumed run skips keeps the seconds of the run that did it. Only this run's stages count."""
    path = os.path.join(workdir, "timings.json")
    prior: dict[str, float] = {}
    if os.path.exists(path):
        with open(path) as f:
            prior = json.load(f)
    merged = {k: max(float(v), float(prior.get(k, 0.0))) for k, v in timings.items()}
    with open(path, "w") as f:
        json.dump({**prior, **merged}, f, indent=1)
    return merged


@dataclasses.dataclass
class Rows:
    """What the seeds produced, row by row (lists over seeds): headline-split summaries and their eval files,
    the out-of-distribution column, RL metrics files, stage-1 probes, pass@k and the controls (seed 0's)."""

    evals: dict[str, list[dict]] = dataclasses.field(default_factory=dict)
    paths: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    ood: dict[str, list[dict]] = dataclasses.field(default_factory=dict)
    rl_metrics: dict[str, str] = dataclasses.field(default_factory=dict)  # "<row> s<seed>" -> metrics.jsonl
    probes: list[dict] = dataclasses.field(default_factory=list)
    passk: dict[str, list[dict]] = dataclasses.field(default_factory=dict)
    dev_gap: dict[str, list[dict]] = dataclasses.field(default_factory=dict)  # stage-1 row -> `dev_gap`s
    control_evals: dict[str, list[dict]] = dataclasses.field(default_factory=dict)  # seed 0 only
    control_paths: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def add(self, row: str, summary: dict, path: str, ood: dict | None) -> None:
        self.evals.setdefault(row, []).append(summary)
        self.paths.setdefault(row, []).append(path)
        if ood is not None:
            self.ood.setdefault(row, []).append(ood)


def plan_of(
    budget: budgets_lib.Budget, seeds: int, only_seed: int | None = None, formulas: bool = False
) -> list[tuple[str, float]]:
    """The console's stages with the budget's planned seconds."""
    p = budget.plan_s
    plan: list[tuple[str, float]] = [("base model (pretraining)", p.get("pretrain", 60))] if budget.pretrain else []
    for s in range(seeds) if only_seed is None else (only_seed,):
        plan += [
            (f"seed {s}: world + tiny checkpoint", p["setup"]),
            *([(f"seed {s}: evaluate base", p["eval"])] if s == 0 else []),
            (f"seed {s}: SFT", p["sft"]),
            *([(f"seed {s}: exploration", p.get("explore", 30))] if budget.explore else []),
            (f"seed {s}: RCTP-FT", p["rctp_ft"]),
            (f"seed {s}: evaluate stage-1 models", 2 * p["eval"] + (2 * p.get("passk", 0) if budget.passk else 0)),
            (f"seed {s}: stage-1 train-split probe", p.get("probe", p["eval"])),
        ]
        plan += [(f"{row} seed {s}", p["rl"] + p["eval"]) for row in rl_runs(budget, formulas)]
        if s == 0:
            plan += [(f"{CONTROL_ROWS[c][0]} seed 0", p["rl"] + p["eval"]) for c in budget.controls]
    return plan + [("report", 5)]


def run(
    workdir: str,
    *,
    budget_name: str = "quickstart",
    world_seed: int | None = None,
    seeds: int = 1,
    eval_split: str = "iid",
    quiet: bool = False,
    only_seed: int | None = None,
    formulas: bool = False,
) -> dict:
    """The whole ablation, every seed from the base checkpoint on (stage 1 included); returns the report's
    payload (also written to workdir/report.json). `only_seed`: run that seed's stages alone and write no
    report (launch/reproduce.sh runs seeds side by side, then one run over all of them, cached, reports).
    `formulas`: every seed also runs the FORMULA_ROWS (the report's run must be asked for them too)."""
    budget = budgets_lib.get(budget_name, world_seed=world_seed)
    check_budget(budget, formulas)
    workdir = os.path.abspath(workdir)
    os.makedirs(workdir, exist_ok=True)
    compile_cache(workdir)
    if only_seed is not None and not 0 <= only_seed < seeds:
        raise ValueError(f"only_seed must be in [0, {seeds}), got {only_seed}")
    console = Console(plan_of(budget, seeds, only_seed, formulas), enabled=not quiet)
    timings: dict[str, float] = {}
    rows = Rows()
    base, base_figures = base_stage(workdir, budget, console, timings, quiet) if budget.pretrain else (None, {})
    for seed in range(seeds) if only_seed is None else (only_seed,):
        sdir = os.path.join(workdir, f"s{seed}")
        seed_timings: dict[str, float] = {}
        run_seed(sdir, budget, seed, eval_split, console, seed_timings, rows, base, formulas)
        if seed == 0:
            control_rows(sdir, budget, eval_split, console, seed_timings, rows)
        timings.update(stage_seconds(sdir, seed_timings))  # the seconds of whichever process ran each stage
    if only_seed is not None:
        return {}

    t = console.start("report")
    process_s = time.perf_counter() - console.t0
    stages = dict(timings)
    payload = summary_lib.write(
        workdir,
        rows.evals,
        rows.rl_metrics,
        budget=budget,
        seeds=seeds,
        split=eval_split,
        timings=stages,
        total_s=max(process_s, sum(stages.values())),
        process_s=process_s,
        eval_paths=rows.paths,
        probe=mean_probe(rows.probes),
        rl_settings=rl_settings_report(budget, formulas),
        control_evals=rows.control_evals,
        control_paths=rows.control_paths,
        ood_evals=rows.ood,
        passk=rows.passk,
        dev_gaps=rows.dev_gap,
        base_probe=base_figures,
        formulas={label: FORMULA_OF for label, *_ in FORMULA_ROWS.values()} if formulas else None,
    )
    console.end("report", t, os.path.join(workdir, "report.md"))
    if not quiet:
        print("\n" + payload["table"], flush=True)
        print(payload["verdict"], flush=True)
    return payload


def check_budget(budget: budgets_lib.Budget, formulas: bool) -> None:
    """Before any stage runs: the budget's devices exist, every RL and control override names an existing field,
    and every estimator a registered one."""
    import jax

    if jax.device_count() < budget.devices:
        raise RuntimeError(
            f"budget {budget.name} runs every stage on {budget.devices} XLA devices, but {jax.device_count()} exist: "
            f"start it with `python -m experiments.ablation` (launch/quickstart.sh), or set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={budget.devices} before JAX starts"
        )
    for _, rl_file, overrides, _ in rl_runs(budget, formulas).values():
        rl_config.choices(stage_config(rl_file, budget, overrides))
    for c in budget.controls:
        _, _, rl_file, extra = CONTROL_ROWS[c]
        stage_config(rl_file, budget, {**budget.rl, **extra})


def base_stage(
    workdir: str, budget: budgets_lib.Budget, console: Console, timings: dict[str, float], quiet: bool
) -> tuple[str, dict]:
    """The world's pretrained base (`pretrained_base`) and its probe (`base_probe`, with the budget's pass@k),
    printed unless quiet; adds its seconds to `timings`."""
    t = console.start("base model (pretraining)")
    base = pretrained_base(workdir, budget)
    figures = base_probe(base, budget, workdir) if budget.passk else {}
    timings.update(stage_seconds(workdir, {"pretrain": console.end("base model (pretraining)", t, base)}))
    if figures and not quiet:
        print(summary_lib.base_probe_table(figures), flush=True)
    return base, figures


def control_rows(
    sdir: str, budget: budgets_lib.Budget, eval_split: str, console: Console, timings: dict[str, float], rows: Rows
) -> None:
    """Seed 0's control rows (the budget's `controls`, `CONTROL_ROWS`), each through `rl_row`; adds to `rows`
    and `timings`."""
    for c in budget.controls:
        name, init, rl_file, extra = CONTROL_ROWS[c]
        t = console.start(f"{name} seed 0")
        summary, path, _ = rl_row(sdir, budget, 0, init, rl_file, {**budget.rl, **extra}, eval_split, c)
        rows.control_evals[name], rows.control_paths[name] = [summary], [path]
        rows.rl_metrics[f"{name} s0"] = os.path.join(sdir, "rl", f"{init}_{rl_file}_{c}", "metrics.jsonl")
        timings[f"rl/{c}_s0"] = console.end(f"{name} seed 0", t, summary_lib.one_line(summary))


def run_seed(
    sdir: str,
    budget: budgets_lib.Budget,
    seed: int,
    eval_split: str,
    console: Console,
    timings: dict[str, float],
    rows: Rows,
    base: str | None = None,
    formulas: bool = False,
) -> None:
    """One seed of the whole pipeline under `sdir`: base checkpoint (the world's pretrained `base` when given, else
    this seed's random one), SFT, exploration, RCTP-FT, their evaluations and pass@k, then every RL row
    (`rl_runs(budget, formulas)`); adds to `rows` and `timings`."""
    label = f"seed {seed}: world + tiny checkpoint"
    t = console.start(label)
    base = base or build_base(sdir, budget, seed)
    data_files = build_datasets(sdir, budget, seed=seed)
    timings[f"setup_s{seed}"] = console.end(label, t, base)
    if seed == 0:  # the base, once: it sets no claim (a random one's episodes run to every limit)
        label = f"seed {seed}: evaluate base"
        t = console.start(label)
        summary = evaluate_both(base, "base", sdir, budget, eval_split, rows)
        timings[f"eval/base_s{seed}"] = console.end(label, t, summary_lib.one_line(summary))
    stage1 = train_stage1(sdir, budget, seed, base, data_files, console, timings)
    evaluate_stage1(sdir, budget, seed, stage1, eval_split, console, timings, rows)
    for row, (init, rl_file, overrides, tag) in rl_runs(budget, formulas).items():
        name = f"{row} seed {seed}"
        t = console.start(name)
        summary, path, ood = rl_row(sdir, budget, seed, init, rl_file, overrides, eval_split, tag, stage1)
        rows.add(row, summary, path, ood)
        rows.rl_metrics[f"{row} s{seed}"] = os.path.join(sdir, "rl", f"{init}_{rl_file}_{tag}", "metrics.jsonl")
        key = f"rl/{init}_{rl_file}" + ("" if tag == "main" else f"_{tag}")
        timings[f"{key}_s{seed}"] = console.end(name, t, summary_lib.one_line(summary))


def evaluate_both(model: str, name: str, sdir: str, budget: budgets_lib.Budget, eval_split: str, rows: Rows) -> dict:
    """`model` on the headline split and, when that is the i.i.d. test, on the out-of-distribution 'test' (names
    no stage sees), under sdir/eval/NAME.json and NAME_ood.json; added to `rows` as NAME's row
    (`STAGE1_ROWS`' label for a stage-1 policy). Returns the headline summary."""
    ev_dir = os.path.join(sdir, "eval")
    path = os.path.join(ev_dir, f"{name}.json")
    summary = evaluate_row(model, path, budget, eval_split)
    ood = None
    if eval_split == "iid":
        ood = evaluate_row(model, os.path.join(ev_dir, f"{name}_ood.json"), budget, "test")
    rows.add(STAGE1_ROWS.get(name, name), summary, path, ood)
    return summary


def train_stage1(
    sdir: str,
    budget: budgets_lib.Budget,
    seed: int,
    base: str,
    data_files: Mapping[str, str],
    console: Console,
    timings: dict[str, float],
) -> dict[str, str]:
    """SFT from the base; then exploration (with the base or SFT, `budget.explore_with`) when the budget explores,
    its failed rollouts added to RCTP-FT's data; then RCTP-FT (from the base or SFT, `budget.rctp_init`). Returns
    each stage-1 policy's HF directory by name ("sft", "rctp_ft")."""
    stage1: dict[str, str] = {}
    for name, overrides in (("sft", budget.sft), ("rctp_ft", budget.rctp)):
        label = STAGE1_ROWS[name]
        if name == "rctp_ft" and budget.explore:
            t = console.start(f"seed {seed}: exploration")
            explored = explore(sdir, budget, base if budget.explore_with == "base" else stage1["sft"], seed)
            data_files = build_datasets(sdir, budget, explored, seed=seed)
            timings[f"explore_s{seed}"] = console.end(
                f"seed {seed}: exploration", t, f"{len(explored)} failed rollouts"
            )
        t = console.start(f"seed {seed}: {label}")
        init = stage1["sft"] if name == "rctp_ft" and budget.rctp_init == "sft" else base
        config = stage_config(
            name, budget, overrides, **{"model.path": init, "seed": seed, "data.path": data_files[name]}
        )
        out = train_stage(sft.run, config, os.path.join(sdir, name))
        stage1[name] = os.path.join(sdir, name, "hf")
        timings[f"{name}_s{seed}"] = console.end(
            f"seed {seed}: {label}",
            t,
            f"{out.get('step')} steps, loss {out['last_metrics'].get('loss', float('nan')):.3f}",
        )
    return stage1


def evaluate_stage1(
    sdir: str,
    budget: budgets_lib.Budget,
    seed: int,
    stage1: Mapping[str, str],
    eval_split: str,
    console: Console,
    timings: dict[str, float],
    rows: Rows,
) -> None:
    """Each stage-1 policy on the headline split (and out of distribution), with the budget's pass@k and its dev
    greedy and pass@k (`dev_gap`); then the train-split probe (`stage1_probe`). Adds to `rows` and `timings`."""
    ev_dir = os.path.join(sdir, "eval")
    label = f"seed {seed}: evaluate stage-1 models"
    t = console.start(label)
    notes = []
    for name, row in STAGE1_ROWS.items():
        summary = evaluate_both(stage1[name], name, sdir, budget, eval_split, rows)
        notes.append(f"{row} {summary_lib.one_line(summary)}")
        if budget.passk:
            k = pass_at_k(
                stage1[name], os.path.join(ev_dir, f"{name}_passk.json"), budget, eval_split,
                per_type=int(budget.passk["per_type"]), seed=seed,
            )  # fmt: skip
            rows.passk.setdefault(row, []).append(k)
            notes.append(f"pass@{k['k']} {k['pass_at_k'] * 100:.1f}%")
            gap = dev_gap(stage1[name], os.path.join(ev_dir, f"{name}_dev"), budget, seed)
            rows.dev_gap.setdefault(row, []).append(gap)
            notes.append(f"dev greedy {gap['greedy'] * 100:.1f}%, pass@{gap['k']} {gap['pass_at_k'] * 100:.1f}%")
    timings[f"eval/stage1_s{seed}"] = console.end(label, t, "; ".join(notes))
    label = f"seed {seed}: stage-1 train-split probe"
    t = console.start(label)
    probe = stage1_probe(stage1, budget, ev_dir)
    rows.probes.append(probe)
    timings[f"eval/probe_s{seed}"] = console.end(
        label, t, "; ".join(f"{k} {v['overall'] * 100:.1f}%" for k, v in probe.items())
    )


def rl_row(
    sdir: str,
    budget: budgets_lib.Budget,
    seed: int,
    init: str,
    rl_file: str,
    overrides: Mapping[str, Any],
    eval_split: str,
    tag: str,
    stage1: Mapping[str, str] | None = None,
) -> tuple[dict, str, dict | None]:
    """One RL row from the seed's stage-1 model `init` (sdir/<init>/hf) with `overrides`, in
    sdir/rl/<init>_<rl_file>_<tag>; returns its (headline summary, eval file, out-of-distribution summary)."""
    model = (stage1 or {}).get(init) or os.path.join(sdir, init, "hf")
    run_dir = os.path.join(sdir, "rl", f"{init}_{rl_file}_{tag}")
    config = stage_config(rl_file, budget, overrides, **{"model.path": model, "seed": seed})
    if "reference" in config and "path" in config.reference:
        config.reference.path = model  # the frozen stage-1 policy of the KL penalty
    train_stage(rl_trainer.run, config, run_dir)
    ev_dir = os.path.join(sdir, "eval")
    path = os.path.join(ev_dir, f"{init}_{rl_file}_{tag}.json")
    summary = evaluate_row(os.path.join(run_dir, "hf"), path, budget, eval_split)
    ood = None
    if eval_split == "iid":
        ood_path = os.path.join(ev_dir, f"{init}_{rl_file}_{tag}_ood.json")
        ood = evaluate_row(os.path.join(run_dir, "hf"), ood_path, budget, "test")
    return summary, path, ood


def mean_probe(probes: Sequence[Mapping[str, Mapping[str, Any]]]) -> dict[str, dict]:
    """The seeds' stage-1 train-split probes averaged: {key: {overall (mean over seeds), n, per_seed}}."""
    if not probes:
        return {}
    return {
        k: {
            "overall": sum(p[k]["overall"] for p in probes) / len(probes),
            "n": probes[0][k]["n"],
            "per_seed": [p[k]["overall"] for p in probes],
        }
        for k in probes[0]
    }


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="The paper's ablation in miniature on the CPU (see module doc).")
    ap.add_argument("--workdir", default="runs/ablation")
    ap.add_argument("--seeds", type=int, default=1, help="seeds of every RL row (mean ± spread in the report)")
    ap.add_argument("--budget", default="quickstart", choices=sorted(budgets_lib.BUDGETS))
    ap.add_argument(
        "--eval_split",
        default="iid",
        choices=["iid", "test", "train", "dev"],
        help="the headline split (iid: fresh tasks of the train distribution; the out-of-distribution 'test' "
        "is a second column); train or dev: tune budgets on the training side only, never on a test split",
    )
    ap.add_argument(
        "--only_seed", type=int, default=None, help="run this seed's stages alone, no report (seeds side by side)"
    )
    ap.add_argument(
        "--formulas",
        action="store_true",
        help="also run RCTP-FT+GRPO with the dr_grpo and with the rloo advantage (FORMULA_ROWS), every seed, "
        "reported beside RCTP-FT+GRPO with paired intervals",
    )
    ap.add_argument(
        "--world_seed",
        type=int,
        default=None,
        help="the budget on another draw of its world (data.world.seed): its own tasks, corpus and base model",
    )
    ap.add_argument(
        "--base_only", action="store_true", help="build (or read) the world's pretrained base and its probe, then stop"
    )
    ap.add_argument(
        "--rebuild_base",
        action="store_true",
        help="with --base_only: build the base even where the repository ships one",
    )
    args = ap.parse_args(argv)
    if args.rebuild_base and not args.base_only:
        ap.error("--rebuild_base goes with --base_only")
    if args.formulas and args.base_only:
        ap.error("--formulas adds RL rows; --base_only stops before RL")
    if args.seeds < 1:
        ap.error("--seeds must be at least 1")
    if args.only_seed is not None and not 0 <= args.only_seed < args.seeds:
        ap.error(f"--only_seed must be in [0, {args.seeds})")
    host_devices(budgets_lib.get(args.budget).devices)
    if args.base_only:
        base_only(args.workdir, args.budget, rebuild=args.rebuild_base, world_seed=args.world_seed)
        return
    run(
        args.workdir,
        budget_name=args.budget,
        world_seed=args.world_seed,
        seeds=args.seeds,
        eval_split=args.eval_split,
        only_seed=args.only_seed,
        formulas=args.formulas,
    )


def base_only(workdir: str, budget_name: str, *, rebuild: bool = False, world_seed: int | None = None) -> dict:
    """The world's pretrained base and its probe (`base_probe`), printed as a table; the budget must pretrain.
    rebuild: build it under workdir/base even where the repository ships a copy (the command that made the copy)."""
    budget = budgets_lib.get(budget_name, world_seed=world_seed)
    if not budget.pretrain:
        raise ValueError(f"budget {budget.name} has no pretraining stage (budget.pretrain is empty)")
    workdir = os.path.abspath(workdir)
    compile_cache(workdir)
    base = pretrained_base(workdir, budget, use_shipped=not rebuild)
    print(f"base model: {base}", flush=True)
    probe = base_probe(base, budget, workdir) if budget.passk else {}
    if probe:
        print(summary_lib.base_probe_table(probe), flush=True)
    return probe


def compile_cache(workdir: str) -> None:
    """The persistent XLA compilation cache under workdir/.xla_cache (a rerun compiles little)."""
    import jax

    jax.config.update("jax_compilation_cache_dir", os.path.join(workdir, ".xla_cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)


def host_devices(n: int) -> None:
    """Ask XLA for `n` host (CPU) devices: the device count in XLA_FLAGS set to `n` (one there is replaced).
    Only before JAX starts its backends; `run` checks that enough devices exist."""
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "force_host_platform_device_count" not in f]
    if n > 1:
        flags.append(f"--xla_force_host_platform_device_count={n}")
    os.environ["XLA_FLAGS"] = " ".join(flags)


def stage_mesh(budget: budgets_lib.Budget):
    """The data mesh of the stages that take one explicitly (evaluation, exploration); None on one device."""
    if budget.devices == 1:
        return None

    return sharding.make_mesh({"data": budget.devices})


if __name__ == "__main__":
    main()
