"""Task sources: where a stage's tasks, environments and expert scripts come from, by `config.data.source`.

A source is one `TaskSource` entry of the `SOURCES` registry:

  tasks(data_config, split)   the tasks of 'train' | 'test' (| 'all') of the source
  make_env(task, env_config)  a fresh `envs.base.Environment` for one episode of `task`
  expert(task)                the expert script (turn -> steps -> calls) that solves `task`
  check(data_config)          start-up validation (raise `config_checks.ConfigError`), optional
  tokenizer_corpus / tokenizer_chats(data_config)  text and conversations a tiny checkpoint's tokenizer
                              is trained on, optional

Built in:
- `bfcl`: the BFCL v4 multi-turn tasks of the shipped 720/80 split (the paper's setting).
- `world`: a generated miniature world on the same BFCL classes (rcgrpo_jax.worlds), for CPU runs:
  compact tool lists and short episodes that a tiny model can learn in minutes.

RL, evaluation, exploration and data building all reach tasks, environments and experts through
this module, so adding a source is one `register(TaskSource(...))` call.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Sequence

from rcgrpo_jax.data import splits
from rcgrpo_jax.envs import bfcl
from rcgrpo_jax.rl.registry import Registry

SPLITS = ("train", "test", "all")


@dataclasses.dataclass(frozen=True)
class TaskSource:
    name: str
    tasks: Callable[[Any, str], Sequence[Any]]  # (data_config, split) -> tasks, each with `.id` and `.category`
    make_env: Callable[[Any, Any], Any]  # (task, env_config | None) -> Environment
    expert: Callable[[Any], list]  # task -> script: turn -> steps -> calls
    check: Callable[[Any], None] | None = None  # data_config -> None, raises ConfigError
    tokenizer_corpus: Callable[[Any], list[str] | None] | None = None
    tokenizer_chats: Callable[[Any], list[dict] | None] | None = None


SOURCES: Registry[TaskSource] = Registry("task source")


def register(source: TaskSource, *, override: bool = False) -> TaskSource:
    SOURCES.register(source.name, override=override)(source)
    return source


def get(name: str) -> TaskSource:
    return SOURCES.get(name)


def names() -> tuple[str, ...]:
    return SOURCES.names()


def source_of(data_config) -> TaskSource:
    return get(data_config.get("source", "bfcl"))


def tasks(data_config, split: str) -> list:
    """The `split` tasks of the configured source; `data.max_examples` > 0 keeps the first that many
    (train only: evaluation always sees the whole test split)."""
    if split not in SPLITS:
        raise ValueError(f"data split must be one of {SPLITS}, got {split!r}")
    out = list(source_of(data_config).tasks(data_config, split))
    limit = int(data_config.get("max_examples", -1) or -1)
    return out[:limit] if split == "train" and limit > 0 else out


def make_env(data_config, task, env_config=None):
    """A fresh environment for one episode of `task` (from the configured source)."""
    return source_of(data_config).make_env(task, env_config)


def expert(data_config, task) -> list:
    """The expert script of `task` (from the configured source)."""
    return source_of(data_config).expert(task)


def check(data_config) -> None:
    """Start-up validation of `data.source` and the source's own fields."""
    from rcgrpo_jax.config_checks import ConfigError

    name = data_config.get("source", "bfcl")
    if name not in SOURCES:
        raise ConfigError("data.source", f"unknown task source {name!r}; known: {', '.join(names())}")
    fn = get(name).check
    if fn is not None:
        fn(data_config)


def tokenizer_corpus(data_config) -> list[str] | None:
    """Text a tiny checkpoint's tokenizer is trained on (the world's train episodes, so test names reach the
    model as pieces of trained tokens); None = the builder's default corpus."""
    fn = source_of(data_config).tokenizer_corpus
    return fn(data_config) if fn is not None else None


def tokenizer_chats(data_config) -> list[dict] | None:
    """Expert conversations ({"messages", "tools"}) a tiny checkpoint's builder renders through its own
    chat template into the tokenizer corpus; None = the builder's default corpus."""
    fn = source_of(data_config).tokenizer_chats
    return fn(data_config) if fn is not None else None


# ---------------------------------------------------------------- built-in sources


def _bfcl_env(task, env_config=None):
    return bfcl.BFCLEnv(task) if env_config is None else bfcl.BFCLEnv(task, env_config)


def _bfcl_tasks(data_config, split: str) -> list[bfcl.Task]:
    ids = splits.split("train") + splits.split("test") if split == "all" else splits.split(split)
    return [bfcl.get_task(i) for i in ids]


@functools.lru_cache(maxsize=8)
def _world(seed: int, train_per_type: int, test_per_type: int) -> tuple[tuple, tuple]:
    from rcgrpo_jax.worlds import generate_world

    train, test = generate_world(seed, train_per_type, test_per_type)
    return (tuple(bfcl.Task.from_entry(e) for e in train), tuple(bfcl.Task.from_entry(e) for e in test))


def _world_tasks(data_config, split: str) -> list[bfcl.Task]:
    w = data_config.world
    train, test = _world(int(w.seed), int(w.train_per_type), int(w.test_per_type))
    return list({"train": train, "test": test, "all": train + test}[split])


def _world_check(data_config) -> None:
    from rcgrpo_jax.config_checks import ConfigError

    w = data_config.get("world")
    if w is None:
        raise ConfigError("data.world", "data.source='world' needs the data.world section (seed, train_per_type, ...)")
    for f in ("train_per_type", "test_per_type"):
        if int(w[f]) <= 0:
            raise ConfigError(f"data.world.{f}", f"must be positive, got {w[f]}")


def _world_corpus(data_config) -> list[str]:
    from rcgrpo_jax.worlds import corpus

    return corpus([t.entry for t in tasks(data_config, "train")])


def _world_chats(data_config) -> list[dict]:
    from rcgrpo_jax.data import datasets

    return [
        {"messages": r["messages"], "tools": r["tools"]} for r in datasets.expert_records(tasks(data_config, "train"))
    ]


register(TaskSource("bfcl", tasks=_bfcl_tasks, make_env=_bfcl_env, expert=bfcl.ground_truth_script))
register(
    TaskSource(
        "world",
        tasks=_world_tasks,
        make_env=_bfcl_env,
        expert=bfcl.ground_truth_script,
        check=_world_check,
        tokenizer_corpus=_world_corpus,
        tokenizer_chats=_world_chats,
    )
)
