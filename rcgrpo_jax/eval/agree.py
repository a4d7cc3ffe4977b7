"""Agreement of our scorer with BFCL's own `bfcl evaluate` on the same result files.

    python -m rcgrpo_jax.eval.agree --results DIR --model NAME [--family hermes] [--make oracle|perturbed]

`DIR` is a folder in `bfcl generate`'s layout (`DIR/<model>/<group>/BFCL_v4_<category>_result.json`; the
model's own folder is accepted too). The check
1. runs `bfcl evaluate --model NAME --result-dir DIR --score-dir TMP/score --partial-eval` in the bfcl side
   environment (`bash launch/bench_env.sh bfcl`; `--bfcl-python` overrides), with BFCL_PROJECT_ROOT set
   to a temporary folder (bfcl-eval writes its result/score/lock folders under its project root), and reads
   the failed ids of each category from its score files;
2. scores the same files here: single-turn texts with the family's parser and the package's `ast_checker`
   (`single_turn.score`), multi-turn results replayed through our environment and `multi_turn_checker`
   (`bfcl_results.replay_multi_turn`);
3. prints per category BFCL's accuracy, ours and the ids where the two verdicts differ; the last line is
   JSON: {"categories": {name: {"bfcl": x, "ours": y, "n": n}}, "disagree": k, ...}.

`--make oracle` first writes the oracle's result set into DIR: every single-turn entry's
`single_turn_oracle.oracle_text` and, per multi-turn task, each ground-truth turn as one step of calls followed
by a plain answer (the raw responses an ideal model of the family gives, as generate records them).
`--make perturbed` writes the oracle with one perturbation per entry, cycling through `PERTURBATIONS`
(dropped, duplicated and reordered calls, wrong argument values and types, extra text around the calls,
an empty response for a turn; an irrelevance entry gets a call where none is due or plain text). `--make format` writes the oracle with its call blocks in forms our
hermes parser accepts and BFCL's Qwen handler does not (`FORMAT_VARIANTS`: no newline inside the tags,
extra spaces inside them, a "parameters" key): the known disagreements of the two decoders, so that a
model writing those forms is flagged. `--sample N` keeps the first N entries of each category.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from rcgrpo_jax import chat, jsonl
from rcgrpo_jax.config_fields import InputError
from rcgrpo_jax.envs import bfcl
from rcgrpo_jax.eval import bfcl_results, single_turn, single_turn_oracle

ROOT = Path(__file__).resolve().parents[2]
PERTURBATIONS = ("drop_call", "duplicate_call", "reorder_calls", "wrong_value", "wrong_type", "extra_text", "empty")
# Call blocks written in ways our hermes parser reads and BFCL's Qwen handler (regex
# `<tool_call>\n(.*?)\n</tool_call>`, then `item["arguments"]`) does not: known disagreements, for
# `--make format` (see the module docstring).
FORMAT_VARIANTS = ("tight_tags", "parameters_key", "spaced_tags")
FINAL_ANSWER = "Done."


def side_python() -> str | None:
    """The bfcl side environment's interpreter if it is built and current, else None (never builds)."""
    proc = subprocess.run(
        ["bash", str(ROOT / "launch" / "bench_env.sh"), "bfcl", "--check"], capture_output=True, text=True
    )
    return proc.stdout.strip() or None if proc.returncode == 0 else None


# ------------------------------------------------------------------------------------- result sets


def _perturb_value(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 7
    if isinstance(value, float):
        return value * 2 + 1.5
    if isinstance(value, str):
        return value + "_x"
    if isinstance(value, list):
        return [*value, value[0]] if value else ["x"]
    if isinstance(value, dict):
        return {**value, "extra_key": 1}
    return "x"


def _perturb_type(value: Any) -> Any:
    if isinstance(value, (bool, int, float)):
        return str(value)
    if isinstance(value, str):
        return [value]
    return json.dumps(value)


def perturb_calls(calls: list[dict], kind: str) -> list[dict]:
    """One step's calls with perturbation `kind` (drop/duplicate/reorder/wrong_value/wrong_type)."""
    calls = copy.deepcopy(calls)
    if not calls:
        return calls
    if kind == "drop_call":
        return calls[:-1]
    if kind == "duplicate_call":
        return [*calls, copy.deepcopy(calls[-1])]
    if kind == "reorder_calls":
        return calls[::-1] if len(calls) > 1 else calls
    if kind in ("wrong_value", "wrong_type"):
        for c in calls:
            if c["arguments"]:
                key = sorted(c["arguments"])[0]
                change = _perturb_value if kind == "wrong_value" else _perturb_type
                c["arguments"][key] = change(c["arguments"][key])
                break
        return calls
    raise ValueError(f"unknown perturbation {kind!r}")


def _text(calls: list[dict], parser, kind: str | None, answer: str = "") -> str:
    if kind == "empty":
        return ""
    if kind in (None, "extra_text"):
        body = parser.format(calls, content=answer) if (calls or answer) else ""
    else:
        body = parser.format(perturb_calls(calls, kind), content=answer)
    if kind == "extra_text":
        return f"Let me take care of that.\n{body}\nThat should do it."
    return body


def oracle_single(entries, parser, perturb: bool = False) -> list[dict]:

    rows = []
    for i, e in enumerate(entries):
        kind = PERTURBATIONS[i % len(PERTURBATIONS)] if perturb else None
        calls = single_turn_oracle.oracle_calls(e)
        if not calls:
            text = "" if kind == "empty" else parser.format([], content=single_turn.NO_CALL_ANSWER)
            if kind == "extra_text":
                text = f"Let me think.\n{text}"
            if kind in ("duplicate_call", "wrong_value"):  # a call where none is due: irrelevance fails
                doc = e.functions[0] if e.functions else {"name": "lookup"}  # (some entries list no functions)
                required = doc.get("parameters", {}).get("required", [])
                text = parser.format([{"name": doc["name"], "arguments": {k: "x" for k in required}}])
            elif kind in ("wrong_type", "reorder_calls", "drop_call"):
                text = parser.format([], content=single_turn.NO_CALL_ANSWER)
        else:
            text = _text(calls, parser, kind)
        rows.append({"id": e.id, "result": text, "input_token_count": 0, "output_token_count": 0, "latency": 0})
    return rows


def oracle_multi(tasks, parser, perturb: bool = False) -> list[dict]:
    """Per task: each ground-truth turn as one step of its calls, then a plain answer ending the turn
    (a turn without ground truth: the answer only). Perturbed: one turn (the first with calls) changed."""

    rows = []
    for i, task in enumerate(tasks):
        kind = PERTURBATIONS[i % len(PERTURBATIONS)] if perturb else None
        script = bfcl.ground_truth_script(task)
        target = next((t for t, steps in enumerate(script) if steps), None)
        turns = []
        for t, steps in enumerate(script):
            k = kind if t == target else None
            if k == "empty":
                turns.append([""])
                continue
            texts = [_text(list(calls), parser, k) for calls in steps]
            turns.append([*texts, parser.format([], content=FINAL_ANSWER)])
        zeros = [[0 for _ in turn] for turn in turns]
        rows.append(
            {
                "id": task.id,
                "result": turns,
                "input_token_count": zeros,
                "output_token_count": zeros,
                "latency": zeros,
            }
        )
    return rows


def _variant(text: str, variant: str) -> str:
    """A hermes text with its call blocks rewritten as `variant` (FORMAT_VARIANTS)."""
    if variant == "tight_tags":
        return text.replace("<tool_call>\n", "<tool_call>").replace("\n</tool_call>", "</tool_call>")
    if variant == "spaced_tags":
        return text.replace("<tool_call>\n", "<tool_call>\n  ").replace("\n</tool_call>", "  \n</tool_call>")
    if variant == "parameters_key":
        return text.replace('"arguments": ', '"parameters": ')
    raise ValueError(f"unknown format variant {variant!r}")


def format_rows(rows: list[dict], offset: int = 0) -> list[dict]:
    """The oracle rows with their call blocks rewritten, cycling through FORMAT_VARIANTS."""
    out = []
    for i, r in enumerate(rows):
        v = FORMAT_VARIANTS[(i + offset) % len(FORMAT_VARIANTS)]
        res = r["result"]
        res = _variant(res, v) if isinstance(res, str) else [[_variant(t, v) for t in turn] for turn in res]
        out.append({**r, "result": res})
    return out


def make_set(out_dir: str, model: str, parser, kind: str, sample: int = 0) -> list[Path]:
    """Write the oracle (`kind` = oracle), perturbed or format result set for `model` under `out_dir`."""
    return bfcl_results.write_entries(out_dir, model, set_rows(parser, kind, sample))


def set_rows(parser, kind: str, sample: int = 0) -> list[dict]:
    """The result lines of the oracle, perturbed or format set (`make_set`)."""

    entries = single_turn.load_entries()
    tasks = bfcl.load_tasks()
    if sample > 0:
        entries = [e for c in single_turn.CATEGORIES for e in [x for x in entries if x.category == c][:sample]]
        tasks = [t for c in bfcl.CATEGORIES for t in [x for x in tasks if x.category == c][:sample]]
    perturb = kind == "perturbed"
    rows = oracle_single(entries, parser, perturb) + oracle_multi(tasks, parser, perturb)
    if kind == "format":
        if parser.family != "hermes":
            raise ValueError("--make format rewrites hermes <tool_call> blocks: use --family hermes")
        rows = format_rows(rows)
    return rows


# --------------------------------------------------------------------------------------- scoring


def result_root(results: str, model: str) -> Path:
    """The folder holding `<model>/` (what evaluate's --result-dir wants), from DIR or DIR/<model>."""
    p = Path(results).resolve()
    name = bfcl_results.model_dir_name(model)
    if (p / name).is_dir():
        return p
    if p.name == name and p.is_dir():
        return p.parent
    raise FileNotFoundError(f"--results: no folder {name}/ in {results} (nor is it that folder)")


def ours(root: Path, model: str, parser) -> tuple[dict[str, dict[str, bool]], bfcl_results.ReplaySet]:
    """Our verdicts on the result files of `model`: category -> id -> pass."""

    rs = bfcl_results.read_replay(root / bfcl_results.model_dir_name(model))
    entries = {e.id: e for e in single_turn.load_entries()}
    verdicts: dict[str, dict[str, bool]] = {}
    for eid, text in rs.single.items():
        entry = entries.get(eid)
        if entry is None:
            rs.problems.append(bfcl_results.Problem(bfcl_results.UNKNOWN_ID, eid, eid, "no such single-turn entry"))
            continue
        verdicts.setdefault(entry.category, {})[eid] = single_turn.score(entry, text, parser).official_pass
    for eid, result in rs.multi.items():
        try:
            task = bfcl.get_task(eid)
        except (KeyError, ValueError):
            rs.problems.append(bfcl_results.Problem(bfcl_results.UNKNOWN_ID, eid, eid, "no such multi-turn task"))
            continue
        record, problems = bfcl_results.replay_multi_turn(task, result, parser)
        rs.problems.extend(problems)
        verdicts.setdefault(f"multi_turn_{task.category}", {})[eid] = record["official_pass"]
    return verdicts, rs


def run_bfcl(
    python: str, root: Path, models: Sequence[str], categories: Sequence[str]
) -> tuple[dict[str, dict[str, dict]], str]:
    """One `bfcl evaluate` of `models`' files under `root`: model -> category -> {accuracy, total, failed
    (ids)}, and its log."""
    with tempfile.TemporaryDirectory(prefix="bfcl_project_") as project:
        env = {**os.environ, "BFCL_PROJECT_ROOT": project, "PYTHONUNBUFFERED": "1"}
        env.pop("PYTHONPATH", None)
        score = Path(project) / "score"
        cmd = [
            python,
            "-m",
            "bfcl_eval",
            "evaluate",
            "--model",
            ",".join(models),
            "--test-category",
            ",".join(categories),
            "--result-dir",
            str(root),
            "--score-dir",
            str(score),
            "--partial-eval",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=project)
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise RuntimeError(f"bfcl evaluate failed (exit {proc.returncode}):\n{log[-4000:]}")
        out: dict[str, dict[str, dict]] = {}
        for model in models:
            out[model] = {}
            for path in sorted((score / bfcl_results.model_dir_name(model)).rglob("BFCL_v4_*_score.json")):
                cat = path.name[len("BFCL_v4_") : -len("_score.json")]
                lines = jsonl.read(path, what="score lines", check=jsonl.json_object())
                header, failures = lines[0], lines[1:]
                out[model][cat] = {
                    "accuracy": header["accuracy"],
                    "total": header["total_count"],
                    "failed": {f["id"] for f in failures},
                }
    return out, log


def compare(bfcl: Mapping[str, Mapping], verdicts: Mapping[str, Mapping[str, bool]]) -> dict[str, Any]:
    """Per category: BFCL's accuracy, ours, n and the ids whose verdicts differ."""
    cats: dict[str, Any] = {}
    total = 0
    for cat in sorted(set(bfcl) | set(verdicts)):
        ids = verdicts.get(cat, {})
        b = bfcl.get(cat)
        n = len(ids)
        ours_acc = sum(ids.values()) / n if n else None
        if b is None:
            diff = sorted(ids)  # BFCL did not score this category at all
        else:
            diff = sorted(i for i, ok in ids.items() if ok == (i in b["failed"]))
            if b["total"] != n:
                diff = sorted(set(diff) | {f"<count: bfcl {b['total']} vs ours {n}>"})
        total += len(diff)
        cats[cat] = {"bfcl": None if b is None else b["accuracy"], "ours": ours_acc, "n": n, "disagree_ids": diff}
    return {"categories": cats, "disagree": total}


def check(
    results: str, model: str | Sequence[str], family: str, python: str, *, allow_missing: bool = False
) -> dict[str, Any]:
    """The agreement of `model`'s files (several models: one evaluate run for all, a report per model
    under "models"). An entry of the files that cannot be decoded (`bfcl_results.UNDECODABLE_KINDS`) is
    named on stderr; any raises `InputError` before `bfcl evaluate` runs, unless `allow_missing`: then the
    report counts them per category ("missing")."""

    models = [model] if isinstance(model, str) else list(model)
    parser = chat.get_parser(family)
    root = result_root(results, models[0])
    t0 = time.perf_counter()
    mine = {m: ours(root, m, parser) for m in models}
    bad = [p for _, rs in mine.values() for p in bfcl_results.undecodable(rs.problems)]
    bfcl_results.report_undecodable(bad, prefix="agree")
    if bad and not allow_missing:
        raise InputError(
            f"agree: {len(bad)} entries of the result files could not be decoded (named above); no agreement "
            "is reported. --allow-missing compares the rest and counts them per category"
        )
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    cats = sorted({c for verdicts, _ in mine.values() for c in verdicts})
    bfcl, _ = run_bfcl(python, root, models, cats)
    t_bfcl = time.perf_counter() - t0
    reports = {}
    for m, (verdicts, rs) in mine.items():
        reports[m] = compare(bfcl[m], verdicts)
        reports[m]["seconds"] = {"ours": round(t_ours, 1), "bfcl_evaluate": round(t_bfcl, 1)}
        reports[m]["problems"] = rs.problem_counts()
        for p in bfcl_results.undecodable(rs.problems):
            cat = _category_of_file(p.where)
            c = reports[m]["categories"].setdefault(cat, {"bfcl": None, "ours": None, "n": 0, "disagree_ids": []})
            c["missing"] = c.get("missing", 0) + 1
    return reports[models[0]] if isinstance(model, str) else {"models": reports}


def _category_of_file(where: str) -> str:
    """The category of a result file's problem (`FILE:LINE` of a BFCL_v4_<category>_result.json)."""
    name = os.path.basename(where.rsplit(":", 1)[0])
    prefix, suffix = f"{bfcl_results.VERSION_PREFIX}_", bfcl_results.RESULT_SUFFIX
    return name[len(prefix) : -len(suffix)] if name.startswith(prefix) and name.endswith(suffix) else name


def print_report(out: Mapping[str, Any]) -> None:
    print(f"{'category':<26} {'n':>5} {'bfcl':>8} {'ours':>8} {'missing':>8}  disagreeing ids")
    fmt = lambda x: "-" if x is None else f"{100 * x:.2f}"
    for cat, c in out["categories"].items():
        ids = c["disagree_ids"]
        shown = ", ".join(ids[:20]) + (f" ... ({len(ids)})" if len(ids) > 20 else "")
        print(f"{cat:<26} {c['n']:>5} {fmt(c['bfcl']):>8} {fmt(c['ours']):>8} {c.get('missing', 0):>8}  {shown or '-'}")
    print(f"disagree: {out['disagree']}; seconds: {out.get('seconds')}; problems: {out.get('problems')}")
    last = {
        "categories": {k: {"bfcl": v["bfcl"], "ours": v["ours"], "n": v["n"]} for k, v in out["categories"].items()},
        "disagree": out["disagree"],
    }
    print(json.dumps(last))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rcgrpo_jax.eval.agree", description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", required=True, help="folder of BFCL result files (DIR/<model>/<group>/...)")
    ap.add_argument(
        "--model", default="", help="BFCL model name (default: the family's, bfcl_results.MODEL_FOR_FAMILY)"
    )
    ap.add_argument("--family", default="hermes", help="tool-call family of the raw texts (chat.parsers)")
    ap.add_argument(
        "--make", choices=("oracle", "perturbed", "format"), help="first write that result set into --results"
    )
    ap.add_argument("--sample", type=int, default=0, help="with --make: the first N entries of each category")
    ap.add_argument("--bfcl-python", default="", help="interpreter with bfcl-eval's CLI (default: the side env)")
    ap.add_argument(
        "--allow-missing",
        action="store_true",
        help="compare despite entries that cannot be decoded (counted per category) instead of stopping",
    )
    args = ap.parse_args(argv)

    model = args.model or bfcl_results.MODEL_FOR_FAMILY[args.family]
    if args.make:
        t0 = time.perf_counter()
        files = make_set(args.results, model, chat.get_parser(args.family), args.make, args.sample)
        print(f"[agree] wrote {len(files)} {args.make} result files in {time.perf_counter() - t0:.1f}s", flush=True)
    python = args.bfcl_python or side_python()
    if not python:
        print("[agree] no bfcl side environment: build it with `bash launch/bench_env.sh bfcl`", file=sys.stderr)
        return 2
    try:
        out = check(args.results, model, args.family, python, allow_missing=args.allow_missing)
    except (InputError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print_report(out)
    return 0 if out["disagree"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
