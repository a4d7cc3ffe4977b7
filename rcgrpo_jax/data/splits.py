"""The question-level train/test split of the 800 BFCL v4 multi-turn tasks (paper, Appendix B.1.1).

The paper holds out whole questions: its 90/10 split is "ID-based", prevents question overlap between
training and evaluation, and keeps shared IDs together. BFCL's four multi-turn categories hold variants
of one question at one index (`long_context_i` and `miss_func_i` start from `base_i`'s question), so a
split over single task ids would put siblings on both sides. Here:

1. **Questions.** Tasks are joined into one group when they share any of: the index in their id, a user
   turn (whitespace- and case-normalised text), or their whole ground truth (`question_groups`). On the
   shipped data this gives 197 groups: 194 of 4 tasks (one per category) and 3 of 8.
2. **Hold-out.** Groups are ranked by sha256(f"{SEED}:{first id}") and taken in that order into the test
   split while it has room (`NUM_TEST` tasks) and no category passes its share (ceil(NUM_TEST / number of
   categories)); a second pass without the share fills what the shares left empty. On the shipped data
   the test split is 20 groups of 4: 20 tasks per category.

The hash makes the split independent of file order, Python's hash seed and platform. The manifest
`bfcl_split.json` shipped beside this file pins it so every stage uses the same split; `check_manifest()`
regenerates it and compares.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import math
from pathlib import Path
from typing import Iterable, Sequence

from rcgrpo_jax.envs.bfcl import load_tasks

SEED = "rcgrpo-bfcl-v4-multi-turn-question-split-v2"
NUM_TEST = 80
MANIFEST_PATH = Path(__file__).with_name("bfcl_split.json")


def category_of(task_id: str) -> str:
    return task_id.rsplit("_", 1)[0][len("multi_turn_") :]


def index_of(task_id: str) -> str:
    """The question index BFCL's categories share: `multi_turn_miss_func_12` -> "12"."""
    return task_id.rsplit("_", 1)[1]


def normalise_text(text: str) -> str:
    """User text as the split compares it: case and runs of whitespace do not make a new question."""
    return " ".join(text.split()).lower()


@dataclasses.dataclass(frozen=True)
class Question:
    """What the split reads of one task: its id, its user turns' texts and its ground truth."""

    id: str
    user_texts: tuple[str, ...] = ()
    ground_truth: tuple[tuple[str, ...], ...] | None = None

    @classmethod
    def of_task(cls, task) -> "Question":
        """From an `envs.bfcl.Task` (or anything with `id`, `entry["question"]` and `ground_truth`)."""
        texts = tuple(
            normalise_text(m["content"])
            for turn in task.entry["question"]
            for m in turn
            if m.get("role") == "user" and str(m.get("content", "")).strip()
        )
        return cls(task.id, texts, tuple(tuple(t) for t in task.ground_truth))

    def keys(self) -> list[tuple[str, str]]:
        """Everything that makes two tasks one question (see the module docstring)."""
        out = [("index", index_of(self.id))]
        out += [("user", normalise_text(t)) for t in self.user_texts]
        if self.ground_truth is not None and any(self.ground_truth):
            out.append(("ground_truth", json.dumps(self.ground_truth)))
        return out


def question_groups(questions: Iterable[Question]) -> list[tuple[str, ...]]:
    """Connected components of "shares a key" (union-find), each a sorted id tuple; sorted by first id."""
    questions = sorted({q.id: q for q in questions}.values(), key=lambda q: q.id)
    parent = {q.id: q.id for q in questions}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    owner: dict[tuple[str, str], str] = {}
    for q in questions:
        for key in q.keys():
            if key in owner:
                a, b = find(owner[key]), find(q.id)
                if a != b:
                    parent[max(a, b)] = min(a, b)
            else:
                owner[key] = q.id
    groups = collections.defaultdict(list)
    for q in questions:
        groups[find(q.id)].append(q.id)
    return sorted((tuple(sorted(g)) for g in groups.values()), key=lambda g: g[0])


def _rank(group: Sequence[str], seed: str) -> str:
    return hashlib.sha256(f"{seed}:{group[0]}".encode("utf-8")).hexdigest()


def split_groups(groups: Sequence[Sequence[str]], *, seed: str = SEED, num_test: int = NUM_TEST) -> dict:
    """{"train": [...], "test": [...]} (each sorted by id), whole groups on each side (module docstring)."""
    groups = [tuple(sorted(g)) for g in groups]
    total = sum(len(g) for g in groups)
    if num_test > total:
        raise ValueError(f"num_test={num_test} > {total} tasks")
    categories = sorted({category_of(i) for g in groups for i in g})
    share = math.ceil(num_test / max(len(categories), 1))
    ranked = sorted(groups, key=lambda g: (_rank(g, seed), g))
    test: list[tuple[str, ...]] = []
    counts: collections.Counter = collections.Counter()
    for capped in (True, False):
        for g in ranked:
            if g in test or sum(counts.values()) + len(g) > num_test:
                continue
            need = collections.Counter(category_of(i) for i in g)
            if capped and any(counts[c] + n > share for c, n in need.items()):
                continue
            test.append(g)
            counts += need
    held = {i for g in test for i in g}
    ids = sorted(i for g in groups for i in g)
    return {"train": [i for i in ids if i not in held], "test": [i for i in ids if i in held]}


def split_questions(questions: Iterable[Question], *, seed: str = SEED, num_test: int = NUM_TEST) -> dict:
    """`split_groups` over the `question_groups` of `questions`."""
    return split_groups(question_groups(questions), seed=seed, num_test=num_test)


def split_ids(ids: Iterable[str], *, seed: str = SEED, num_test: int = NUM_TEST) -> dict:
    """The split of bare ids: only the shared index joins tasks (for ids without task contents)."""
    return split_questions((Question(i) for i in ids), seed=seed, num_test=num_test)


def bfcl_questions() -> list[Question]:
    """The `Question` of every BFCL v4 multi-turn task."""

    return [Question.of_task(t) for t in load_tasks()]


def build_manifest(questions: Iterable[Question] | None = None, *, seed: str = SEED, num_test: int = NUM_TEST) -> dict:
    """The manifest for `questions` (default: every BFCL multi-turn task)."""
    questions = list(questions) if questions is not None else bfcl_questions()
    groups = question_groups(questions)
    split = split_groups(groups, seed=seed, num_test=num_test)
    counts = {
        name: dict(sorted(collections.Counter(category_of(i) for i in part).items())) for name, part in split.items()
    }
    test = set(split["test"])
    sizes = {
        name: dict(sorted(collections.Counter(len(g) for g in groups if (g[0] in test) == (name == "test")).items()))
        for name in split
    }
    return {
        "seed": seed,
        "num_train": len(split["train"]),
        "num_test": len(split["test"]),
        "counts": counts,
        "group_sizes": {name: {str(k): v for k, v in s.items()} for name, s in sizes.items()},
        **split,
    }


def write_manifest(path: str | Path = MANIFEST_PATH, manifest: dict | None = None) -> Path:
    path = Path(path)
    manifest = manifest if manifest is not None else build_manifest()
    path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def load_manifest(path: str | Path = MANIFEST_PATH) -> dict:
    """The shipped manifest; regenerated from the tasks if the file is absent."""
    path = Path(path)
    if not path.exists():
        return build_manifest()
    return json.loads(path.read_text(encoding="utf-8"))


def split(name: str, path: str | Path = MANIFEST_PATH) -> list[str]:
    """Task ids of the "train" or "test" split."""
    if name not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {name!r}")
    return list(load_manifest(path)[name])


def check_manifest(path: str | Path = MANIFEST_PATH) -> None:
    """Raise if the manifest differs from a fresh regeneration."""
    shipped = json.loads(Path(path).read_text(encoding="utf-8"))
    fresh = build_manifest(seed=shipped["seed"], num_test=shipped["num_test"])
    if shipped != fresh:
        raise ValueError(f"{path} does not match the split regenerated from the tasks")


def overlap(questions: Iterable[Question], train: Iterable[str], test: Iterable[str]) -> dict[str, list[str]]:
    """Test ids that share an index, a user turn or the ground truth with a train task, by kind of key."""
    by_id = {q.id: q for q in questions}
    train_keys = collections.defaultdict(set)
    for i in train:
        for kind, value in by_id[i].keys():
            train_keys[kind].add(value)
    out: dict[str, list[str]] = {"index": [], "user": [], "ground_truth": []}
    for i in sorted(test):
        for kind in sorted({kind for kind, value in by_id[i].keys() if value in train_keys[kind]}):
            out[kind].append(i)
    return out


if __name__ == "__main__":
    out = write_manifest()
    manifest = load_manifest(out)
    shared = overlap(bfcl_questions(), manifest["train"], manifest["test"])
    print(
        json.dumps(
            {
                "path": str(out),
                "num_train": manifest["num_train"],
                "num_test": manifest["num_test"],
                "counts": manifest["counts"],
                "group_sizes": manifest["group_sizes"],
                "test_tasks_sharing_with_train": {k: len(v) for k, v in shared.items()},
            }
        )
    )
