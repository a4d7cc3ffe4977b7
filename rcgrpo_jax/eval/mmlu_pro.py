"""MMLU-Pro (TIGER-Lab): its released records, the chain-of-thought prompt and the benchmark's answer rules.

Data: `load` (the release's splits from the user's copy at `eval.mmlu_pro.path`).

Prompt (`prompt_text`): the benchmark's chain-of-thought prompt as its chat-model script sends it, one
user message: the instruction naming the subject and asking to finish with "The answer is (X)", `shots`
worked examples of the same subject from the validation split, then the question with lettered options
and "Answer: Let's think step by step.". The checkpoint's chat template renders it (`mmlu_pro_run`).

Answer extraction (`extract_answer`), the benchmark's three rules in order: the first
``answer is \\(?([A-J])\\)?``; else the last ``[aA]nswer:\\s*([A-J])`` on the first line that has one; else
the last stand-alone letter A-J of the text. Before extracting, the text is cut at the first
"Question:" (the benchmark's stop string: a model that starts a new question has finished).

Scoring (`score`): correct when the extracted letter is the answer. When no letter is extracted the
benchmark draws a random option and counts a hit as correct; we do the same with `random.Random(GUESS_SEED)`
drawn in record order (the benchmark's draws depend on its own process's order, which cannot be
reproduced), mark the record `no_answer` and report the strict accuracy (a guess counts as wrong) beside.
Accuracy per subject and overall; overall counts every question (the benchmark's micro average).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
from typing import Any, Mapping, Sequence

LETTERS = "ABCDEFGHIJ"
MAX_OPTIONS = 10
PAD_OPTION = "N/A"  # the release pads every question to ten options with it; dropped before prompting
STOP = "Question:"  # the benchmark's stop string
GUESS_SEED = 12345  # the benchmark's random.seed
FORMATS = (".parquet", ".jsonl", ".json")
FIELDS = ("question_id", "question", "options", "answer", "answer_index", "cot_content", "category", "src")

NO_ANSWER = "no_answer"  # no letter could be extracted (scored by the benchmark's random guess)
WRONG_ANSWER = "wrong_answer"
MISSING_OUTPUT = "missing_output"
TRUNCATED = "truncated"  # the prompt does not fit eval.max_context
RENDER_ERROR = "render_error"  # the chat template refused the prompt

_FIRST = re.compile(r"answer is \(?([A-J])\)?")
_SECOND = re.compile(r".*[aA]nswer:\s*([A-J])")
_LAST = re.compile(r"\b[A-J]\b(?!.*\b[A-J]\b)", re.DOTALL)


class MmluProDataError(ValueError):
    """A file or record that is not MMLU-Pro's release format; the message names where and what."""


@dataclasses.dataclass(frozen=True)
class Question:
    id: str  # str(question_id)
    category: str
    question: str
    options: tuple[str, ...]  # without the "N/A" padding
    answer: str  # the letter
    answer_index: int
    cot_content: str = ""
    src: str = ""


@dataclasses.dataclass(frozen=True)
class Splits:
    test: tuple[Question, ...]
    validation: tuple[Question, ...]  # empty when the path holds only the test split
    test_files: tuple[str, ...]
    validation_files: tuple[str, ...]


# ---------------------------------------------------------------- reading


def _rows(path: str) -> list[Any]:
    ext = os.path.splitext(path)[1].lower()
    if ext == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:  # pyarrow is optional: only the parquet release needs it
            raise MmluProDataError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from None
        try:
            return pq.read_table(path).to_pylist()
        except Exception as err:  # noqa: BLE001 - any arrow error is a file that is not parquet
            raise MmluProDataError(f"{path}: not a readable parquet file ({type(err).__name__}: {err})") from None
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if ext == ".json" and text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as err:
            raise MmluProDataError(f"{path}: not a JSON list of records: {err}") from None
        return rows
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise MmluProDataError(f"{path}:{n}: not a JSON object ({err})") from None
    return rows


def _question(row: Any, where: str) -> Question:
    def bad(field: str, expected: str) -> MmluProDataError:
        got = repr(row.get(field))[:80] if isinstance(row, dict) else type(row).__name__
        return MmluProDataError(f"{where}: field {field!r}: expected {expected}, got {got}")

    if not isinstance(row, dict):
        raise MmluProDataError(f"{where}: expected a record (object) with fields {', '.join(FIELDS)}")
    for field in FIELDS:
        if field not in row:
            raise bad(field, "the field (it is missing)")
    qid = row["question_id"]
    if isinstance(qid, bool) or not isinstance(qid, int):
        raise bad("question_id", "an integer")
    for field in ("question", "category", "src"):
        if not isinstance(row[field], str) or (field != "src" and not row[field].strip()):
            raise bad(field, "a non-empty string" if field != "src" else "a string")
    if row["cot_content"] is not None and not isinstance(row["cot_content"], str):
        raise bad("cot_content", "a string (may be empty)")
    raw = row["options"]
    if not isinstance(raw, list) or not all(isinstance(o, str) for o in raw):
        raise bad("options", "a list of strings")
    options = tuple(o for o in raw if o != PAD_OPTION)
    if not 1 <= len(options) <= MAX_OPTIONS:
        raise bad("options", f"1 to {MAX_OPTIONS} options besides the {PAD_OPTION!r} padding")
    index = row["answer_index"]
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(options):
        raise bad("answer_index", f"an integer in [0, {len(options)}) (one per option)")
    if row["answer"] != LETTERS[index]:
        raise bad("answer", f"the letter of answer_index {index}, {LETTERS[index]!r}")
    return Question(
        id=str(qid),
        category=row["category"],
        question=row["question"],
        options=options,
        answer=row["answer"],
        answer_index=index,
        cot_content=row["cot_content"] or "",
        src=row["src"],
    )


def read_file(path: str) -> list[Question]:
    """The questions of one released file (parquet, JSON lines or a JSON list); raises MmluProDataError."""
    if os.path.splitext(path)[1].lower() not in FORMATS:
        raise MmluProDataError(f"{path}: expected a {', '.join(FORMATS)} file")
    rows = _rows(path)
    if not isinstance(rows, list) or not rows:
        raise MmluProDataError(f"{path}: no records")
    out = [_question(r, f"{path}: record {i}") for i, r in enumerate(rows)]
    seen: dict[str, int] = {}
    for i, q in enumerate(out):
        if q.id in seen:
            raise MmluProDataError(
                f"{path}: record {i}: field 'question_id': {q.id} already used by record {seen[q.id]}"
            )
        seen[q.id] = i
    return out


def _split_files(folder: str, prefix: str) -> list[str]:
    found = []
    for root, _, files in os.walk(folder):
        for name in files:
            if name.startswith(prefix) and os.path.splitext(name)[1].lower() in FORMATS:
                found.append(os.path.join(root, name))
    return sorted(found)


def load(path: str) -> Splits:
    """The test split (and the validation split when the folder has one) at `path`; raises MmluProDataError.

    The released splits as the user has them on disk, read at `eval.mmlu_pro.path`: one file, or a folder
    holding the test split (a file whose name starts with `test`, e.g. the release's
    `data/test-00000-of-00001.parquet`) and optionally the validation split (`validation*`, the few-shot
    examples). Formats: parquet (the release's, read with pyarrow), JSON lines, or one JSON list. A record has
    `question_id` (int), `question` (str), `options` (list of str; the release pads to ten with "N/A", which
    the benchmark drops before prompting, as `load` does), `answer` (a letter A-J), `answer_index` (int, the
    answer's position, `answer == "ABCDEFGHIJ"[answer_index]`), `cot_content` (str, the validation split's
    worked answer; may be empty), `category` (the subject) and `src` (str). A missing field, a wrong type,
    more than ten options or an answer that disagrees with its index raises `MmluProDataError` naming the
    file, the record and the field.
    """
    if not path or not os.path.exists(path):
        raise MmluProDataError(f"no such file or folder: {path!r}")
    if os.path.isfile(path):
        test_files, val_files = [path], []
    else:
        test_files, val_files = _split_files(path, "test"), _split_files(path, "validation")
        if not test_files:
            raise MmluProDataError(
                f"{path}: no test split: expected a file named test*{{{','.join(FORMATS)}}} in it or below it "
                "(the release's data/test-00000-of-00001.parquet)"
            )
    test = [q for f in test_files for q in read_file(f)]
    val = [q for f in val_files for q in read_file(f)]
    return Splits(tuple(test), tuple(val), tuple(test_files), tuple(val_files))


# ---------------------------------------------------------------- prompt, extraction, scoring


def _example(q: Question, worked: bool) -> str:
    lines = [f"Question: {q.question}", "Options:"]
    lines += [f"{LETTERS[i]}. {o}" for i, o in enumerate(q.options)]
    if not worked:
        return "\n".join(lines) + "\nAnswer: Let's think step by step."
    cot = q.cot_content
    if cot.startswith("A: "):
        cot = cot[3:]
    return "\n".join(lines) + f"\nAnswer: {cot}\n\n"


def prompt_text(q: Question, shots: Sequence[Question] = ()) -> str:
    """The user message for `q`: instruction, worked examples `shots`, the question (module docstring)."""
    head = (
        f"The following are multiple choice questions (with answers) about {q.category}. Think step by step and "
        'then finish your answer with "the answer is (X)" where X is the correct letter choice.\n\n'
    )
    return head + "".join(_example(s, True) for s in shots) + _example(q, False)


def shots_for(q: Question, validation: Sequence[Question], k: int) -> list[Question]:
    """The first `k` validation questions of `q`'s subject (the benchmark's choice of examples)."""
    return [v for v in validation if v.category == q.category][: max(int(k), 0)]


def extract_answer(text: str) -> tuple[str | None, str | None]:
    """(letter, rule) by the benchmark's three rules (module docstring); (None, None) when none applies.
    rule: "answer_is" | "answer_colon" | "last_letter"."""
    text = text.split(STOP, 1)[0]
    m = _FIRST.search(text)
    if m:
        return m.group(1), "answer_is"
    m = _SECOND.search(text)
    if m:
        return m.group(1), "answer_colon"
    m = _LAST.search(text)
    if m:
        return m.group(0), "last_letter"
    return None, None


def score(q: Question, output: str, rng: random.Random) -> dict[str, Any]:
    """One record: {id, category, official_pass, reward, error_kind, pred, extracted_by, guess, output}."""
    letter, rule = extract_answer(output)
    guess = None
    if letter is None:
        guess = LETTERS[rng.randint(0, len(q.options) - 1)]
        ok = guess == q.answer
        kind = NO_ANSWER
    else:
        ok = letter == q.answer
        kind = None if ok else WRONG_ANSWER
    return {
        "id": q.id,
        "category": q.category,
        "official_pass": ok,
        "strict_pass": letter == q.answer,
        "reward": float(ok),
        "error_kind": kind,
        "answer": q.answer,
        "pred": letter,
        "extracted_by": rule,
        "guess": guess,
        "output": output,
    }


def failed(q: Question, kind: str, message: str) -> dict[str, Any]:
    """A question that could not be scored from an output (counted, never dropped)."""
    return {
        "id": q.id,
        "category": q.category,
        "official_pass": False,
        "strict_pass": False,
        "reward": 0.0,
        "error_kind": kind,
        "answer": q.answer,
        "pred": None,
        "extracted_by": None,
        "guess": None,
        "error_message": message[:300],
        "output": None,
    }


def score_all(
    questions: Sequence[Question], outputs: Mapping[str, str], failures: Mapping[str, dict] = {}
) -> list[dict[str, Any]]:
    """Each question's record, in order: its failure, else its output scored, else missing_output. The
    guesses for unextracted answers are drawn from one `random.Random(GUESS_SEED)` in this order."""
    rng = random.Random(GUESS_SEED)
    out = []
    for q in questions:
        if q.id in failures:
            out.append(failures[q.id])
        elif q.id in outputs:
            out.append(score(q, outputs[q.id], rng))
        else:
            out.append(failed(q, MISSING_OUTPUT, "no output for this question"))
    return out


def summarize(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Accuracy per subject and overall (over every question), strict figures beside, and the records
    that could not be scored, by kind, with their ids."""
    by_cat: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        by_cat.setdefault(r["category"], []).append(r)

    def acc(rs, key="official_pass"):
        return sum(bool(r[key]) for r in rs) / len(rs) if rs else None

    unscored: dict[str, list[str]] = {}
    for r in records:
        if r["error_kind"] not in (None, WRONG_ANSWER):
            unscored.setdefault(r["error_kind"], []).append(r["id"])
    return {
        "categories": {c: acc(rs) for c, rs in sorted(by_cat.items())},
        "n": {c: len(rs) for c, rs in sorted(by_cat.items())},
        "overall": acc(records),
        "overall_strict": acc(records, "strict_pass"),
        "questions": len(records),
        "unscored": {k: len(v) for k, v in sorted(unscored.items())},
        "unscored_ids": {k: v for k, v in sorted(unscored.items())},
    }


def oracle_output(q: Question) -> str:
    """A chain of thought that ends the way the instruction asks, with the right letter."""
    return f"Let's think step by step. The question asks about {q.category}. The answer is ({q.answer})."
