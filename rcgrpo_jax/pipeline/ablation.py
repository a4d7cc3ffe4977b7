"""The paper's ablation in miniature, end to end in one process (the CPU reproduction).

    python -m rcgrpo_jax.pipeline.ablation --workdir runs/ablation [--seeds N] [--budget quickstart]

Stages, all through the same code as the 7B pipeline (the stage trainers' `run(config, workdir)`):
  1. world + a tiny HF checkpoint (random init, Qwen3 architecture, tokenizer trained on the world's
     train corpus);
  2. evaluation of the base model;
  3. SFT on expert trajectories; RCTP-FT on expert + failure trajectories 1:1 (from the base, or from the
     SFT model with `budget.rctp_init="sft"`: the quickstart's, see pipeline/budgets.py);
  4. GRPO and RC-GRPO from each stage-1 model, equal RL budgets, seeds 0..N-1;
  5. greedy evaluation of every row on the test split with BFCL's official checker;
  6. workdir/report.md (table per category and overall, mean ± spread over seeds, an honest comment on
     whether RC-GRPO beat GRPO here), report.json, and PNG plots of the RL runs under workdir/plots.

One process, so jitted functions are shared across stages of equal shapes; a persistent XLA
compilation cache under the workdir shares the rest (and makes a rerun quick). A stage that has
finished (its `DONE` marker exists) is skipped on a rerun, so an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable, Mapping, Sequence

from rcgrpo_jax import sharding
from rcgrpo_jax.data import datasets, sources, splits, trajectories
from rcgrpo_jax.eval import report
from rcgrpo_jax.eval import run as eval_run
from rcgrpo_jax.pipeline import budgets as budgets_lib
from rcgrpo_jax.pipeline import cache
from rcgrpo_jax.pipeline import summary as summary_lib
from rcgrpo_jax.train import exploration, model_prep, rl, sft
from rcgrpo_jax.worlds.generate import category_of

ROWS = ("base", "SFT+GRPO", "SFT+RC-GRPO", "RCTP-FT+GRPO", "RCTP-FT+RC-GRPO")  # the paper's five rows
RL_RUNS = {  # row -> (stage-1 init, RL config file)
    "SFT+GRPO": ("sft", "grpo"),
    "SFT+RC-GRPO": ("sft", "rc_grpo"),
    "RCTP-FT+GRPO": ("rctp_ft", "grpo"),
    "RCTP-FT+RC-GRPO": ("rctp_ft", "rc_grpo"),
}
# The control pair (budget.control): RCTP-FT's two RL rows again, at the paper presets' RL settings, seed 0.
CONTROL_ROWS = {
    "RCTP-FT+GRPO (paper RL settings)": ("rctp_ft", "grpo"),
    "RCTP-FT+RC-GRPO (paper RL settings)": ("rctp_ft", "rc_grpo"),
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
    import importlib

    sys.path.insert(0, _repo_root())
    config = importlib.import_module(f"configs.{stage_file}").get_config("tiny")
    config.data.source = "world"
    config.mesh.data = budget.devices
    set_dotted(config, {f"data.world.{k}": v for k, v in budget.world.items()})
    set_dotted(config, overrides)
    set_dotted(config, fields)
    return config


def paper_config(stage_file: str):
    """configs/<stage_file>.py at the paper's preset (summary.PAPER_PRESET): the settings a run is compared with."""
    import importlib

    sys.path.insert(0, _repo_root())
    return importlib.import_module(f"configs.{stage_file}").get_config(summary_lib.PAPER_PRESET)


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


def rl_settings_report(budget: budgets_lib.Budget) -> dict[str, dict]:
    """Each group of RL rows against the paper preset of its config file (`summary.compare_settings`): the
    budget's rows, and the control pair when the budget has one."""
    groups = [
        ("SFT+GRPO, RCTP-FT+GRPO", "grpo", dict(budget.rl)),
        ("SFT+RC-GRPO, RCTP-FT+RC-GRPO", "rc_grpo", dict(budget.rl)),
    ]
    if budget.control:
        control = {**budget.rl, **budget.control}
        groups += [(row, rl_file, control) for row, (_, rl_file) in CONTROL_ROWS.items()]
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


def _repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


def build_base(workdir: str, budget: budgets_lib.Budget) -> str:
    """The tiny checkpoint (`budget.arch`, Qwen3 for the quickstart), tokenizer trained on the world's train
    corpus (test names reach the model as pieces of trained tokens)."""

    path = os.path.join(workdir, "base_model")
    request = {"arch": budget.arch, "model": dict(budget.model), "world": dict(budget.world)}
    if os.path.exists(os.path.join(path, "config.json")):
        cache.check(cache.read_request(path), request, f"the base checkpoint {path}")
    else:
        model_prep.build_tiny(
            stage_config("sft", budget, {"model.tiny_arch": budget.arch}), path, seed=0, **budget.model
        )
        cache.write_request(path, request)
    return path


def build_datasets(workdir: str, budget: budgets_lib.Budget, explored: list[dict] | None = None) -> dict[str, str]:
    """SFT (expert) and RCTP-FT (expert + failures, 1:1, reward goals) JSONL of the world's train split.
    Without `explored`: generated failures only, in workdir/data; with the exploration stage's records their
    failures join in, in workdir/data_explored (data/manifest.json records the mix either way)."""

    out = os.path.join(workdir, "data" if explored is None else "data_explored")
    files = {"sft": os.path.join(out, "sft.jsonl"), "rctp_ft": os.path.join(out, "rctp_ft.jsonl")}
    site = budget.rctp.get("data.failure_site", "any")
    kinds = budget.rctp.get("data.failure_kinds", "all")
    request = {
        "world": dict(budget.world),
        "failure_site": site,
        "failure_kinds": kinds,
        "explored": len(explored or ()),
    }
    if all(os.path.exists(f) for f in files.values()):
        cache.check(cache.read_request(out), request, f"the stage-1 data in {out}")
    else:
        data = stage_config("sft", budget, {}).data
        tasks = sources.tasks(data, "train")
        built = datasets.build_all(
            out, split="train", seed=0, ids=tasks, explored=explored or (), failure_site=site, failure_kinds=kinds
        )
        cache.write_request(out, request)
        files = {k: str(built[k]) for k in files}
    return files


def explore(workdir: str, budget: budgets_lib.Budget, model_path: str) -> list[dict]:
    """The exploration stage: `budget.explore` rollouts of the policy at `model_path` (cached in
    workdir/explore.jsonl)."""

    path = os.path.join(workdir, "explore.jsonl")
    if os.path.exists(path):
        return trajectories.read_jsonl(path)
    e = dict(budget.explore)
    tasks = sources.tasks(stage_config("sft", budget, {}).data, "train")[: int(e.pop("tasks"))]
    records = exploration.collect(model_path, tasks, keep="failures", source="world", mesh=stage_mesh(budget), **e)
    trajectories.write_jsonl(path, records)
    return records


def train_stage(run_fn: Callable, config, workdir: str) -> dict:
    """A trainer's run(config, workdir), skipped when its DONE marker exists and records the same config
    (`cache.config_request`; a different one raises cache.StaleCacheError); the exported model is workdir/hf."""
    marker = os.path.join(workdir, DONE)
    request = cache.config_request(config)
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
    if os.path.exists(out_path):
        with open(out_path) as f:
            cached = json.load(f)
        cache.check(cached.get("request"), request, f"the evaluation {out_path}")
        return cached["summary"]

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


def stage1_probe(stage1: Mapping[str, str], budget: budgets_lib.Budget, ev_dir: str) -> dict[str, dict]:
    """Greedy success of the stage-1 models on `budget.probe_per_type` TRAIN tasks per type: SFT as it is,
    RCTP-FT asked for a high and for a low reward (goal (a): the reward token must steer success)."""
    n = budget.probe_per_type
    runs = {
        "sft": ("sft", "none", "sft_train.json"),
        "rctp_ft_high": ("rctp_ft", "high", "rctp_ft_train_high.json"),
        "rctp_ft_low": ("rctp_ft", "low", "rctp_ft_train_low.json"),
    }
    out = {
        k: evaluate_row(stage1[init], os.path.join(ev_dir, f), budget, "train", reward_token=tok, per_type=n)
        for k, (init, tok, f) in runs.items()
    }
    if rl_pool(budget):  # where RL starts on its own tasks (RCTP-FT as its RL rows condition it: high)
        for k, init, tok in (("sft_rl_tasks", "sft", "none"), ("rctp_ft_rl_tasks", "rctp_ft", "high")):
            out[k] = evaluate_row(stage1[init], os.path.join(ev_dir, f"{k}.json"), budget, "rl", reward_token=tok)
    return out


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


def rl_pool(budget: budgets_lib.Budget) -> bool:
    """Whether RL trains on its own pool of fresh tasks (data.world.rl_per_type > 0)."""
    return int(budget.world.get("rl_per_type", 0) or 0) > 0


def _rl_module():
    try:
        pass
    except ImportError as e:  # the RL trainer or its configs are missing from this checkout
        raise RuntimeError("the RL trainer (rcgrpo_jax.train.rl) is not available: " + str(e)) from e
    return rl


def run(
    workdir: str, *, budget_name: str = "quickstart", seeds: int = 1, eval_split: str = "test", quiet: bool = False
) -> dict:
    """The whole ablation; returns the report's payload (also written to workdir/report.json)."""
    import jax

    budget = budgets_lib.get(budget_name)
    if jax.device_count() < budget.devices:
        raise RuntimeError(
            f"budget {budget.name} runs every stage on {budget.devices} XLA devices, but {jax.device_count()} exist: "
            f"start it with `python -m rcgrpo_jax.pipeline.ablation` (launch/quickstart.sh), or set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={budget.devices} before JAX starts"
        )
    rl = _rl_module()  # fail before any training when the RL stage cannot run
    for rl_file in sorted({f for _, f in RL_RUNS.values()}):
        stage_config(rl_file, budget, budget.rl)  # every override names an existing field
        if budget.control:
            stage_config(rl_file, budget, {**budget.rl, **budget.control})
    workdir = os.path.abspath(workdir)
    os.makedirs(workdir, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", os.path.join(workdir, ".xla_cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    p = budget.plan_s
    plan = (
        [
            ("world + tiny checkpoint", p["setup"]),
            ("evaluate base", p["eval"]),
            ("SFT", p["sft"]),
            *([("exploration", p.get("explore", 30))] if budget.explore else []),
            ("RCTP-FT", p["rctp_ft"]),
            ("evaluate stage-1 models", 2 * p["eval"]),
            ("stage-1 train-split probe", p.get("probe", p["eval"])),
        ]
        + [(f"{row} seed {s}", p["rl"] + p["eval"]) for s in range(seeds) for row in RL_RUNS]
        + ([(f"{row} seed 0", p["rl"] + p["eval"]) for row in CONTROL_ROWS] if budget.control else [])
        + [("report", 5)]
    )
    console = Console(plan, enabled=not quiet)
    timings: dict[str, float] = {}
    evals: dict[str, list[dict]] = {}
    eval_paths: dict[str, list[str]] = {}
    ev_dir = os.path.join(workdir, "eval")

    t = console.start("world + tiny checkpoint")
    base = build_base(workdir, budget)
    data_files = build_datasets(workdir, budget)
    timings["setup"] = console.end("world + tiny checkpoint", t, base)

    t = console.start("evaluate base")
    evals["base"] = [evaluate_row(base, os.path.join(ev_dir, "base.json"), budget, eval_split)]
    eval_paths["base"] = [os.path.join(ev_dir, "base.json")]
    timings["eval/base"] = console.end("evaluate base", t, summary_lib.one_line(evals["base"][0]))

    stage1 = {}
    for name, stage_file, overrides in (("sft", "sft", budget.sft), ("rctp_ft", "rctp_ft", budget.rctp)):
        label = {"sft": "SFT", "rctp_ft": "RCTP-FT"}[name]
        if name == "rctp_ft" and budget.explore:
            t = console.start("exploration")
            explored = explore(workdir, budget, stage1["sft"])
            data_files = build_datasets(workdir, budget, explored)
            timings["explore"] = console.end("exploration", t, f"{len(explored)} failed rollouts")
        t = console.start(label)
        init = stage1["sft"] if name == "rctp_ft" and budget.rctp_init == "sft" else base
        config = stage_config(
            stage_file, budget, overrides, **{"model.path": init, "seed": 0, "data.path": data_files[name]}
        )
        out = train_stage(sft.run, config, os.path.join(workdir, name))
        stage1[name] = os.path.join(workdir, name, "hf")
        timings[name] = console.end(
            label, t, f"{out.get('step')} steps, loss {out['last_metrics'].get('loss', float('nan')):.3f}"
        )

    t = console.start("evaluate stage-1 models")
    for name, label in (("sft", "SFT"), ("rctp_ft", "RCTP-FT")):
        evals[label] = [evaluate_row(stage1[name], os.path.join(ev_dir, f"{name}.json"), budget, eval_split)]
        eval_paths[label] = [os.path.join(ev_dir, f"{name}.json")]
    timings["eval/stage1"] = console.end(
        "evaluate stage-1 models", t, "; ".join(f"{k} {summary_lib.one_line(evals[k][0])}" for k in ("SFT", "RCTP-FT"))
    )
    t = console.start("stage-1 train-split probe")
    probe = stage1_probe(stage1, budget, ev_dir)
    timings["eval/probe"] = console.end(
        "stage-1 train-split probe", t, "; ".join(f"{k} {v['overall'] * 100:.1f}%" for k, v in probe.items())
    )

    rl_metrics: dict[str, str] = {}
    rl_task_evals: dict[str, list[dict]] = {}
    for seed in range(seeds):
        for row, (init, rl_file) in RL_RUNS.items():
            name = f"{row} seed {seed}"
            t = console.start(name)
            run_dir = os.path.join(workdir, "rl", f"{init}_{rl_file}_s{seed}")
            config = stage_config(rl_file, budget, budget.rl, **{"model.path": stage1[init], "seed": seed})
            if "reference" in config and "path" in config.reference:
                config.reference.path = stage1[init]  # the frozen stage-1 policy of the KL penalty
            train_stage(rl.run, config, run_dir)
            rl_metrics[f"{row} s{seed}"] = os.path.join(run_dir, "metrics.jsonl")
            ev_path = os.path.join(ev_dir, f"{init}_{rl_file}_s{seed}.json")
            s = evaluate_row(os.path.join(run_dir, "hf"), ev_path, budget, eval_split)
            evals.setdefault(row, []).append(s)
            eval_paths.setdefault(row, []).append(ev_path)
            if rl_pool(budget):  # the row on the tasks it trained on
                rl_ev = os.path.join(ev_dir, f"{init}_{rl_file}_s{seed}_rl_tasks.json")
                rl_task_evals.setdefault(row, []).append(evaluate_row(os.path.join(run_dir, "hf"), rl_ev, budget, "rl"))
            timings[f"rl/{init}_{rl_file}_s{seed}"] = console.end(name, t, summary_lib.one_line(s))

    control_evals: dict[str, list[dict]] = {}
    control_paths: dict[str, list[str]] = {}
    for row, (init, rl_file) in CONTROL_ROWS.items() if budget.control else ():
        name = f"{row} seed 0"
        t = console.start(name)
        run_dir = os.path.join(workdir, "rl", f"{init}_{rl_file}_control_s0")
        overrides = {**budget.rl, **budget.control}
        config = stage_config(rl_file, budget, overrides, **{"model.path": stage1[init], "seed": 0})
        if "reference" in config and "path" in config.reference:
            config.reference.path = stage1[init]
        train_stage(rl.run, config, run_dir)
        rl_metrics[f"{row} s0"] = os.path.join(run_dir, "metrics.jsonl")
        ev_path = os.path.join(ev_dir, f"{init}_{rl_file}_control_s0.json")
        control_evals[row] = [evaluate_row(os.path.join(run_dir, "hf"), ev_path, budget, eval_split)]
        control_paths[row] = [ev_path]
        timings[f"rl/{init}_{rl_file}_control_s0"] = console.end(name, t, summary_lib.one_line(control_evals[row][0]))

    t = console.start("report")
    process_s = time.perf_counter() - console.t0
    stages = stage_seconds(workdir, timings)
    payload = summary_lib.write(
        workdir,
        evals,
        rl_metrics,
        budget=budget,
        seeds=seeds,
        split=eval_split,
        timings=stages,
        total_s=max(process_s, sum(stages.values())),
        process_s=process_s,
        eval_paths=eval_paths,
        probe=probe,
        rl_task_evals=rl_task_evals,
        rl_settings=rl_settings_report(budget),
        control_evals=control_evals,
    )
    console.end("report", t, os.path.join(workdir, "report.md"))
    if not quiet:
        print("\n" + payload["table"], flush=True)
        print(payload["verdict"], flush=True)
    return payload


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="The paper's ablation in miniature on the CPU (see module doc).")
    ap.add_argument("--workdir", default="runs/ablation")
    ap.add_argument("--seeds", type=int, default=1, help="seeds of every RL row (mean ± spread in the report)")
    ap.add_argument("--budget", default="quickstart", choices=sorted(budgets_lib.BUDGETS))
    ap.add_argument(
        "--eval_split",
        default="test",
        choices=["test", "train"],
        help="train: tune budgets on the training split only, never on test",
    )
    args = ap.parse_args(argv)
    if args.seeds < 1:
        ap.error("--seeds must be at least 1")
    host_devices(budgets_lib.get(args.budget).devices)
    run(args.workdir, budget_name=args.budget, seeds=args.seeds, eval_split=args.eval_split)


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
