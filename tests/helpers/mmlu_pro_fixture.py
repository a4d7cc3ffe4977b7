"""A tiny MMLU-Pro release written here (our own questions, in the benchmark's record format): a test split of
three subjects and a validation split with one worked example per subject, as parquet or JSON lines."""

from __future__ import annotations

import json
import os

LETTERS = "ABCDEFGHIJ"

# (category, question, options, answer index); padded with "N/A" to ten options as the release pads them
_TEST = [
    ("math", "What is 3 + 4?", ["5", "6", "7", "8"], 2),
    ("math", "What is 2 * 6?", ["10", "12", "14", "16", "18", "20", "22", "24", "26", "28"], 1),
    ("math", "What is 9 - 5?", ["3", "4", "5"], 1),
    ("biology", "Which organelle makes ATP?", ["Nucleus", "Ribosome", "Mitochondrion", "Golgi body"], 2),
    ("biology", "How many chambers has a human heart?", ["Two", "Three", "Four", "Five", "Six"], 2),
    ("law", "Who decides a jury trial's verdict?", ["The judge", "The jury", "The clerk", "The bailiff"], 1),
]
_VALIDATION = [
    ("math", "What is 1 + 1?", ["1", "2", "3"], 1),
    ("biology", "What carries oxygen in blood?", ["Plasma", "Haemoglobin", "Platelets"], 1),
    ("law", "What is a plaintiff?", ["The party who sues", "The judge", "A witness"], 0),
]


def _records(rows, start: int, worked: bool) -> list[dict]:
    out = []
    for i, (cat, question, options, idx) in enumerate(rows):
        cot = f"A: Let's think step by step. Only option {LETTERS[idx]} fits. The answer is ({LETTERS[idx]})."
        out.append(
            {
                "question_id": start + i,
                "question": question,
                "options": options + ["N/A"] * (10 - len(options)),
                "answer": LETTERS[idx],
                "answer_index": idx,
                "cot_content": cot if worked else "",
                "category": cat,
                "src": f"ours-{cat}",
            }
        )
    return out


def test_records() -> list[dict]:
    return _records(_TEST, 100, worked=False)


def validation_records() -> list[dict]:
    return _records(_VALIDATION, 900, worked=True)


def write_jsonl(path: str, rows: list[dict]) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return path


def write_parquet(path: str, rows: list[dict]) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_release(folder: str, fmt: str = "parquet") -> str:
    """`folder`/data/{test,validation}-00000-of-00001.<fmt> as the release lays them out; returns `folder`."""
    os.makedirs(os.path.join(folder, "data"), exist_ok=True)
    write = write_parquet if fmt == "parquet" else write_jsonl
    write(os.path.join(folder, "data", f"test-00000-of-00001.{fmt}"), test_records())
    write(os.path.join(folder, "data", f"validation-00000-of-00001.{fmt}"), validation_records())
    return folder
