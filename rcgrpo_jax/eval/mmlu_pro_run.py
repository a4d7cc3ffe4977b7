"""The `mmlu_pro` evaluation suite: prompts through the checkpoint's chat template, one greedy message per
question with our sampler (batched, with a progress bar), scored by the benchmark's answer rules
(`eval.mmlu_pro`). Options under `eval.mmlu_pro`: `path` (FILE_OR_DIR, the released split), `shots` (worked
examples per question from the validation split; the benchmark's own script uses 5) and `max_new_tokens`
(the benchmark's 2048). Importing the module registers the suite (`eval.suites`)."""

from __future__ import annotations

from typing import Any, Sequence

from rcgrpo_jax import chat
from rcgrpo_jax.config_fields import ConfigError
from rcgrpo_jax.eval import greedy, suites
from rcgrpo_jax.eval import mmlu_pro as mp

PATH_FIELD = "eval.mmlu_pro.path"


def load_checked(eval_cfg) -> mp.Splits:
    """The splits at eval.mmlu_pro.path, checked; a bad path, layout or record raises ConfigError naming
    the field (start-up: before any model loads)."""
    section = eval_cfg.mmlu_pro
    if not section.path:
        raise ConfigError(
            PATH_FIELD, "the mmlu_pro suite needs the released test split: a parquet/JSONL file or its folder"
        )
    try:
        splits = mp.load(section.path)
    except (mp.MmluProDataError, OSError) as err:
        raise ConfigError(PATH_FIELD, str(err)) from None
    shots = int(section.shots)
    if shots < 0:
        raise ConfigError("eval.mmlu_pro.shots", f"must be >= 0, got {shots}")
    if shots > 0:
        missing = sorted({q.category for q in splits.test} - {q.category for q in splits.validation})
        if missing:
            raise ConfigError(
                "eval.mmlu_pro.shots",
                f"{shots} worked examples need the validation split (validation*.parquet|jsonl|json beside the test "
                f"split) with questions of every subject; none for {', '.join(missing[:5])}; or set shots=0",
            )
    if int(section.max_new_tokens) <= 0:
        raise ConfigError("eval.mmlu_pro.max_new_tokens", f"must be positive, got {section.max_new_tokens}")
    return splits


def questions_of(splits: mp.Splits, max_per_subject: int) -> list[mp.Question]:
    """The test questions, the first `max_per_subject` of each subject when it is > 0."""
    if max_per_subject <= 0:
        return list(splits.test)
    seen: dict[str, int] = {}
    out = []
    for q in splits.test:
        if seen.get(q.category, 0) < max_per_subject:
            seen[q.category] = seen.get(q.category, 0) + 1
            out.append(q)
    return out


def records(
    eval_cfg, tokenizer, model_cfg, params, policy: str, *, mesh=None, progress: bool = False
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(one record per question, the suite summary) under `policy` (model | oracle)."""
    splits = load_checked(eval_cfg)
    questions = questions_of(splits, int(eval_cfg.max_tasks))
    shots = int(eval_cfg.mmlu_pro.shots)
    failures: dict[str, dict] = {}
    prompts: list[str | None] = []
    for q in questions:
        message = [{"role": "user", "content": mp.prompt_text(q, mp.shots_for(q, splits.validation, shots))}]
        try:
            prompts.append(
                chat.render_text(
                    tokenizer, message, None, add_generation_prompt=True, thinking=eval_cfg.get("thinking")
                )
            )
        except Exception as err:  # noqa: BLE001 - one question the template refuses must not stop the suite
            prompts.append(None)
            failures[q.id] = mp.failed(q, mp.RENDER_ERROR, f"{type(err).__name__}: {err}")
    if policy == "oracle":
        outputs = {q.id: mp.oracle_output(q) for q in questions}
    else:
        outputs = _generate(questions, prompts, tokenizer, model_cfg, params, eval_cfg, mesh, progress, failures)
    recs = mp.score_all(questions, outputs, failures)
    summary = {"files": list(splits.test_files), "shots": shots, **mp.summarize(recs)}
    return recs, summary


def _generate(
    questions: Sequence[mp.Question], prompts, tokenizer, model_cfg, params, eval_cfg, mesh, progress, failures
) -> dict[str, str]:
    todo = [i for i, p in enumerate(prompts) if p is not None]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(todo), desc="[eval] mmlu_pro", unit="question")

    def advance(done: int, total: int) -> None:
        bar.update(done - bar.n)

    try:
        texts, too_long = greedy.generate(
            [prompts[i] for i in todo],
            tokenizer,
            model_cfg,
            params,
            greedy.decoding_of(eval_cfg, int(eval_cfg.mmlu_pro.max_new_tokens)),
            mesh=mesh,
            on_batch=advance if bar is not None else None,
        )
    finally:
        if bar is not None:
            bar.close()
    for j, why in too_long.items():
        q = questions[todo[j]]
        failures[q.id] = mp.failed(q, mp.TRUNCATED, why)
    return {questions[i].id: t for i, t in zip(todo, texts) if t is not None}


def markdown(summary: dict[str, Any], label: str) -> str:
    """The suite's table: accuracy (%) per subject, overall (every question), strict overall."""
    lines = [f"| MMLU-Pro subject | {label} | n |", "|---|---:|---:|"]
    lines += [f"| {c} | {100 * a:.2f} | {summary['n'][c]} |" for c, a in summary["categories"].items()]
    lines.append(f"| overall | {100 * summary['overall']:.2f} | {summary['questions']} |")
    lines.append(f"| overall, no guesses | {100 * summary['overall_strict']:.2f} | {summary['questions']} |")
    if summary["unscored"]:
        lines.append("")
        lines.append(
            "Not scored from an extracted letter: " + ", ".join(f"{k} {v}" for k, v in summary["unscored"].items())
        )
    return "\n".join(lines) + "\n"


SUITE = suites.register(suites.Suite("mmlu_pro", load_checked, records, markdown))
