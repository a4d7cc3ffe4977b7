"""The miniature world's task sets, in BFCL's own entry format, and a text corpus for its tokenizer.

An entry is what BFCL's multi-turn data holds (id, question, initial_config, involved_classes) plus
`ground_truth` (per turn, BFCL call strings) and `allowed_functions` (the task's compact tool list,
so a tiny model's system prompt stays short). id = f"{category}_{index}", so the category is
`id.rsplit('_', 1)[0]` as in BFCL; indices run on from train into test, so ids are unique in a world.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import random

from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING

from rcgrpo_jax.worlds import arithmetic as ar
from rcgrpo_jax.worlds import filesystem as fs
from rcgrpo_jax.worlds.compose import HELDOUT_TYPES, TRAIN_TYPES, Builder
from rcgrpo_jax.worlds.replay import Session, parse_call, replay
from rcgrpo_jax.worlds.vocab import Vocab, sides, test_side

CLASS_TOOLS: dict[str, tuple[str, ...]] = {fs.CLASS: fs.TOOLS, ar.CLASS: ar.TOOLS}


def category_of(task_id: str) -> str:
    return task_id.rsplit("_", 1)[0]


def to_entry(s: Session, task_id: str) -> dict:
    return {
        "id": task_id,
        "question": [[{"role": "user", "content": q}] for q in s.questions],
        "initial_config": s.initial_config,
        "involved_classes": s.involved_classes,
        "ground_truth": s.ground_truth,
        "allowed_functions": [t for c in s.involved_classes for t in CLASS_TOOLS[c]],
        "compact_docs": True,  # the env shows short tool docs (rcgrpo_jax.envs.schema.compact_tool)
    }


def _build(seed: int, category: str, builder: Builder, vocab: Vocab, index: int) -> dict:
    # A string seed is hashed with sha512 by `random`, so tasks repeat across processes and Pythons.
    rng = random.Random(f"rcgrpo-world:{seed}:{vocab.split}:{category}:{index}")
    return to_entry(builder(rng, vocab), f"{category}_{index}")


def generate_world(
    seed: int, n_train_per_type: int, n_test_per_type: int, rl_vocab: str = "train", train_vocab: str = "narrow"
) -> tuple[list[dict], list[dict]]:
    """(train_tasks, test_tasks). Train: the trained types with train names (without the RL side's when
    rl_vocab="own"), from the narrow, wide or coded train side (train_vocab). Test: the trained types with test
    names (fresh instances), plus the held-out compositions (category compose_heldout); its names are the
    test side of the train side's naming (`vocab.test_side`: syllables, or codes for "coded")."""
    stage1, _ = sides(train_vocab, rl_vocab)
    train = [_build(seed, cat, b, stage1, i) for cat, b in TRAIN_TYPES.items() for i in range(n_train_per_type)]
    test_vocab = test_side(train_vocab)
    test = [
        _build(seed, cat, b, test_vocab, n_train_per_type + i)
        for cat, b in TRAIN_TYPES.items()
        for i in range(n_test_per_type)
    ]
    test += [_build(seed, cat, b, test_vocab, i) for cat, b in HELDOUT_TYPES.items() for i in range(n_test_per_type)]
    return train, test


def generate_rl_pool(
    seed: int,
    n_train_per_type: int,
    n_test_per_type: int,
    n_per_type: int,
    rl_vocab: str = "train",
    train_vocab: str = "narrow",
) -> list[dict]:
    """Fresh instances of the trained types for RL, indices after the test ones, so no stage-1 task is among
    them and ids stay unique in the world. rl_vocab="train": with train names; "own": with the RL side's
    names, roots and operands, which no stage-1 task uses; "fresh": with names and operands outside both
    stage 1's and the test's. Test names stay unseen by every stage."""
    start = n_train_per_type + n_test_per_type
    _, vocab = sides(train_vocab, rl_vocab)
    return [_build(seed, cat, b, vocab, start + i) for cat, b in TRAIN_TYPES.items() for i in range(n_per_type)]


# Index bases of the i.i.d. splits: far above any train, test or pool index, so their rng streams and ids are
# their own (`_build` seeds on the index). "pretrain": the base model's corpus (experiments.pretrain).
IID_INDEX_BASE = {"iid": 1_000_000, "dev": 2_000_000, "pretrain": 3_000_000}


def generate_iid(
    seed: int, split: str, n_per_type: int, train_tasks: list[dict], train_vocab: str = "narrow"
) -> list[dict]:
    """Fresh instances of the trained types drawn exactly as stage 1's are (the stage-1 vocabulary, new
    compositions and arguments): the world's i.i.d. test ("iid", the paper's held-out questions of the same
    classes), its small held-out set for RL curves ("dev"), or the base model's pretraining tasks ("pretrain").
    A draw whose user turns equal one of `train_tasks`' is skipped: pass every task the split must not repeat
    (the pretraining split is given the train, iid and dev tasks)."""
    if split not in IID_INDEX_BASE:
        raise ValueError(f"i.i.d. split must be one of {sorted(IID_INDEX_BASE)}, got {split!r}")
    stage1, _ = sides(train_vocab, "train")
    seen = {_questions_key(t) for t in train_tasks}
    out = []
    for cat, b in TRAIN_TYPES.items():
        index, kept = IID_INDEX_BASE[split], 0
        while kept < n_per_type:
            entry = _build(seed, cat, b, stage1, index)
            index += 1
            if _questions_key(entry) not in seen:
                out.append(entry)
                kept += 1
    return out


def _questions_key(entry: dict) -> str:
    return json.dumps([entry["question"], entry["initial_config"]], sort_keys=True)


@functools.cache
def _func_docs(class_name: str) -> dict[str, dict]:
    path = (
        importlib.resources.files("bfcl_eval")
        / "data"
        / "multi_turn_func_doc"
        / MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name]
    )
    docs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {d["name"]: d for d in docs}


def tool_docs(task: dict) -> list[dict]:
    """BFCL's function docs for the task's allowed functions, in allowed_functions order."""
    docs = {}
    for c in task["involved_classes"]:
        docs.update(_func_docs(c))
    return [docs[name] for name in task["allowed_functions"]]


def render_episode(task: dict) -> str:
    """A compact text rendering of the expert episode: user turns, JSON calls, tool results."""
    lines = []
    for question, calls, results in zip(task["question"], task["ground_truth"], replay(task)):
        lines += [f"user: {m['content']}" for m in question]
        for call, result in zip(calls, results):
            name, args = parse_call(call)
            lines.append("call: " + json.dumps({"name": name, "arguments": args}))
            lines.append(f"tool: {result}")
    return "\n".join(lines)


def corpus(tasks: list[dict]) -> list[str]:
    """Text for training the tiny tokenizer: each task's rendered episode (user texts, JSON calls, tool
    outputs, BFCL call strings) and the docs of every tool used. Pass the train tasks only, so test
    names reach the model as pieces of trained tokens rather than as untrained whole-word tokens."""
    texts, seen_docs = [], set()
    for task in tasks:
        texts.append(render_episode(task))
        texts.append("\n".join(c for turn in task["ground_truth"] for c in turn))
        for doc in tool_docs(task):
            if doc["name"] not in seen_docs:
                seen_docs.add(doc["name"])
                texts.append(json.dumps({k: doc[k] for k in ("name", "description", "parameters")}))
    return texts
