"""Where a stage's tasks come from, chosen by `config.data.source`.

- `bfcl`: the BFCL v4 multi-turn tasks of the shipped 720/80 split (the paper's setting).
- `world`: a generated miniature world on the same BFCL classes (rcgrpo_jax.worlds), for CPU runs:
  compact tool lists and short episodes that a tiny model can learn in minutes.

Both give `bfcl.Task` objects, so every stage (datasets, rollouts, reward, official checker) runs the
same code on either.
"""

from __future__ import annotations

import functools

from rcgrpo_jax.data import splits
from rcgrpo_jax.envs import bfcl

SOURCES = ("bfcl", "world")


@functools.lru_cache(maxsize=8)
def _world(seed: int, train_per_type: int, test_per_type: int) -> tuple[tuple, tuple]:
    from rcgrpo_jax.worlds import generate_world

    train, test = generate_world(seed, train_per_type, test_per_type)
    return (tuple(bfcl.Task.from_entry(e) for e in train), tuple(bfcl.Task.from_entry(e) for e in test))


def tasks(data_config, split: str) -> list[bfcl.Task]:
    """The `split` ('train' | 'test') tasks of the configured source; `data.max_examples` > 0 keeps the
    first that many (train only: evaluation always sees the whole test split)."""
    if split not in ("train", "test"):
        raise ValueError(f"data split must be 'train' or 'test', got {split!r}")
    source = data_config.get("source", "bfcl")
    if source == "bfcl":
        out = [bfcl.get_task(i) for i in splits.split(split)]
    elif source == "world":
        w = data_config.world
        train, test = _world(int(w.seed), int(w.train_per_type), int(w.test_per_type))
        out = list(train if split == "train" else test)
    else:
        raise ValueError(f"config.data.source: unknown task source {source!r}; choose one of {SOURCES}")
    limit = int(data_config.get("max_examples", -1) or -1)
    return out[:limit] if split == "train" and limit > 0 else out


def tokenizer_corpus(data_config) -> list[str] | None:
    """Text to train a tiny checkpoint's tokenizer on: the world's train episodes for `world` (test
    names then reach the model as pieces of trained tokens), None (the builder's default) for `bfcl`."""
    if data_config.get("source", "bfcl") != "world":
        return None
    from rcgrpo_jax.worlds import corpus

    return corpus([t.entry for t in tasks(data_config, "train")])


def tokenizer_chats(data_config) -> list[dict] | None:
    """The world's train expert conversations ({"messages", "tools"}), for a tiny checkpoint's builder to
    render through its own chat template into the tokenizer corpus (the prompt the model really reads
    then merges into few tokens); None for `bfcl`."""
    if data_config.get("source", "bfcl") != "world":
        return None
    from rcgrpo_jax.data import datasets

    return [
        {"messages": r["messages"], "tools": r["tools"]} for r in datasets.expert_records(tasks(data_config, "train"))
    ]
