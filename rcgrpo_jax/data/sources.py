"""Task sources: where a stage's tasks, environments and expert scripts come from, by `config.data.source`.

A source is one `TaskSource` entry of the `SOURCES` registry:

  tasks(data_config, split)   the tasks of 'train' | 'test' (| 'all') of the source
  make_env(task, env_config)  a fresh `envs.base.Environment` for one episode of `task`
  expert(task)                the expert script (turn -> steps -> calls) that solves `task`
  check(data_config)          start-up validation (raise `config_fields.ConfigError`), optional
  tokenizer_corpus / tokenizer_chats(data_config)  text and conversations a tiny checkpoint's tokenizer
                              is trained on, optional

Built in:
- `bfcl`: the BFCL v4 multi-turn tasks of the shipped 720/80 split (the paper's setting).
- `world`: a generated miniature world on the same BFCL classes (rcgrpo_jax.worlds), for CPU runs:
  compact tool lists and short episodes that a tiny model can learn in minutes.
- `steps`: single-step instances (SWiRL) of the BFCL or world expert trajectories, or of JSONL files of chats
  (`data.steps.trajectories=jsonl` over `data.steps.path`: AWPO's own data), rcgrpo_jax.data.steps, scored
  per step by rcgrpo_jax.envs.single_step; options under `data.steps`.

RL, evaluation, exploration and data building all reach tasks, environments and experts through
this module, so adding a source is one `register(TaskSource(...))` call, in this module or in the user's own
(`--config.data.source=my_module:my_source` imports `my_module` first; tests/helpers/toy_source.py is the example).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Sequence

from rcgrpo_jax.config_fields import ConfigError, InputError
from rcgrpo_jax.data import datasets, splits
from rcgrpo_jax.data import steps as steps_lib
from rcgrpo_jax.data.steps import SCHEMA_LINE
from rcgrpo_jax.envs import bfcl, single_step
from rcgrpo_jax.registry import Registry, entry_name
from rcgrpo_jax.worlds import category_of, corpus, generate_iid, generate_rl_pool, generate_world
from rcgrpo_jax.worlds.compose import TRAIN_TYPES
from rcgrpo_jax.worlds.vocab import TRAIN_VOCABS, sides

# rl: the tasks RL trains on (train, unless the source has an RL pool). iid / dev: held-out tasks drawn like the
# train split (the world's data.world.iid_test_per_type / dev_per_type; a source without them refuses).
# pretrain: the world's corpus for a base model (data.world.pretrain_per_type), none of them a train, iid or dev task.
SPLITS = ("train", "test", "all", "rl", "iid", "dev", "pretrain")
_IID_FIELDS = {"iid": "iid_test_per_type", "dev": "dev_per_type", "pretrain": "pretrain_per_type"}


@dataclasses.dataclass(frozen=True)
class TaskSource:
    name: str
    tasks: Callable[[Any, str], Sequence[Any]]  # (data_config, split) -> tasks, each with `.id` and `.category`
    make_env: Callable[[Any, Any], Any]  # (task, env_config | None) -> Environment
    expert: Callable[[Any], list]  # task -> script: turn -> steps -> calls
    check: Callable[[Any], None] | None = None  # data_config -> None, raises ConfigError
    tokenizer_corpus: Callable[[Any], list[str] | None] | None = None
    tokenizer_chats: Callable[[Any], list[dict] | None] | None = None
    # data_config -> the RL stage's tasks, when they differ from the train split (the world's fresh pool).
    rl_tasks: Callable[[Any], Sequence[Any]] | None = None
    # the `rl` config section -> the env config each RL episode's `make_env` gets (None: it gets None).
    rl_env_config: Callable[[Any], Any] | None = None


SOURCES: Registry[TaskSource] = Registry("task source")


def register(source: TaskSource, *, override: bool = False) -> TaskSource:
    SOURCES.register(source.name, override=override)(source)
    return source


def get(name: str) -> TaskSource:
    """The source `name`; "module:name" imports `module` first (a source registered in the user's own code)."""
    return SOURCES.get(entry_name(name))


def names() -> tuple[str, ...]:
    return SOURCES.names()


def source_of(data_config) -> TaskSource:
    return get(data_config.get("source", "bfcl"))


def tasks(data_config, split: str) -> list:
    """The `split` tasks of the configured source; `data.max_examples` > 0 keeps the first that many
    (train only: evaluation always sees the whole test split)."""
    if split not in SPLITS:
        raise ValueError(f"data split must be one of {SPLITS}, got {split!r}")
    source = source_of(data_config)
    if split == "rl" and source.rl_tasks is not None:
        return list(source.rl_tasks(data_config))
    split = "train" if split == "rl" else split
    out = list(source.tasks(data_config, split))
    limit = int(data_config.get("max_examples", -1) or -1)
    return out[:limit] if split == "train" and limit > 0 else out


def make_env(data_config, task, env_config=None):
    """A fresh environment for one episode of `task` (from the configured source)."""
    return source_of(data_config).make_env(task, env_config)


def rl_env_config(data_config, rl_config):
    """The env config the source's RL episodes are made with (BFCL's: the reward named by `rl.reward`)."""
    fn = source_of(data_config).rl_env_config
    return fn(rl_config) if fn is not None else None


def expert(data_config, task) -> list:
    """The expert script of `task` (from the configured source)."""
    return source_of(data_config).expert(task)


def check(data_config) -> None:
    """Start-up validation of `data.source` and the source's own fields."""

    name = data_config.get("source", "bfcl")
    try:
        name = entry_name(name)
    except ImportError as e:
        raise ConfigError("data.source", f"cannot import the module of {name!r}: {e}") from None
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


def _bfcl_rl_env_config(rl_config) -> bfcl.EnvConfig:
    return bfcl.EnvConfig(reward=rl_config.reward)


def _bfcl_tasks(data_config, split: str) -> list[bfcl.Task]:
    if split in _IID_FIELDS:  # BFCL's test split already holds out whole questions of the train distribution
        raise ConfigError("eval.split", f"data.source='bfcl' has no {split!r} split: its 'test' split is i.i.d.")
    ids = splits.split("train") + splits.split("test") if split == "all" else splits.split(split)
    return [bfcl.get_task(i) for i in ids]


def _rl_vocab(w) -> str:
    return str(w.get("rl_vocab", "train") or "train")


def _train_vocab(w) -> str:
    return str(w.get("train_vocab", "narrow") or "narrow")


def _rl_types(w) -> tuple[str, ...]:
    """data.world.rl_types: the trained types the RL pool draws from, comma-separated; empty = all of them."""
    return tuple(t.strip() for t in str(w.get("rl_types", "") or "").split(",") if t.strip())


@functools.lru_cache(maxsize=8)
def _world(
    seed: int, train_per_type: int, test_per_type: int, rl_vocab: str = "train", train_vocab: str = "narrow"
) -> tuple[tuple, tuple]:

    train, test = generate_world(seed, train_per_type, test_per_type, rl_vocab, train_vocab)
    return (tuple(bfcl.Task.from_entry(e) for e in train), tuple(bfcl.Task.from_entry(e) for e in test))


def _world_tasks(data_config, split: str) -> list[bfcl.Task]:
    w = data_config.world
    if split in _IID_FIELDS:
        n = int(w.get(_IID_FIELDS[split], 0) or 0)
        if n <= 0:
            raise ConfigError(
                f"data.world.{_IID_FIELDS[split]}", f"must be positive to use the {split!r} split, got {n}"
            )
        # the pretraining tasks skip the held-out ones too: no task of the base model's corpus is tested
        held_out = () if split != "pretrain" else tuple((s, int(w.get(_IID_FIELDS[s], 0) or 0)) for s in ("iid", "dev"))
        return list(_world_iid(*_world_key(w), split, n, held_out))
    train, test = _world(int(w.seed), int(w.train_per_type), int(w.test_per_type), _rl_vocab(w), _train_vocab(w))
    return list({"train": train, "test": test, "all": train + test}[split])


def _world_key(w) -> tuple[int, int, int, str]:
    return int(w.seed), int(w.train_per_type), int(w.test_per_type), _train_vocab(w)


@functools.lru_cache(maxsize=8)
def _world_iid(
    seed: int, train_per_type: int, test_per_type: int, train_vocab: str, split: str, n: int, skip: tuple = ()
) -> tuple:
    """`n` tasks per type of an i.i.d. split, none equal to a train task or to a task of the (split, n) pairs
    in `skip`."""
    key = (seed, train_per_type, test_per_type, train_vocab)
    train, _ = _world(seed, train_per_type, test_per_type, "train", train_vocab)
    seen = train + tuple(t for s, k in skip if k > 0 for t in _world_iid(*key, s, k))
    entries = generate_iid(seed, split, n, [t.entry for t in seen], train_vocab)
    return tuple(bfcl.Task.from_entry(e) for e in entries)


@functools.lru_cache(maxsize=8)
def _world_pool(
    seed: int, train_per_type: int, test_per_type: int, rl_per_type: int, rl_vocab: str, train_vocab: str
) -> tuple:

    pool = generate_rl_pool(seed, train_per_type, test_per_type, rl_per_type, rl_vocab, train_vocab)
    return tuple(bfcl.Task.from_entry(e) for e in pool)


def _world_rl_tasks(data_config) -> list[bfcl.Task]:
    """data.world.rl_per_type > 0: that many fresh instances per trained type (no stage-1 example is one of
    them), with train names, or with names of their own (data.world.rl_vocab="own" | "fresh"), of the types in
    data.world.rl_types (all when empty); else the train split."""

    w = data_config.world
    n = int(w.get("rl_per_type", 0) or 0)
    if n <= 0:
        return tasks(data_config, "train")
    pool = _world_pool(int(w.seed), int(w.train_per_type), int(w.test_per_type), n, _rl_vocab(w), _train_vocab(w))
    keep = _rl_types(w)
    return [t for t in pool if not keep or category_of(t.id) in keep]


def _world_check(data_config) -> None:

    w = data_config.get("world")
    if w is None:
        raise ConfigError("data.world", "data.source='world' needs the data.world section (seed, train_per_type, ...)")
    for f in ("train_per_type", "test_per_type"):
        if int(w[f]) <= 0:
            raise ConfigError(f"data.world.{f}", f"must be positive, got {w[f]}")
    for f in _IID_FIELDS.values():
        if int(w.get(f, 0) or 0) < 0:
            raise ConfigError(f"data.world.{f}", f"must be 0 (no such split) or positive, got {w.get(f)}")
    if int(w.get("rl_per_type", 0) or 0) < 0:
        raise ConfigError(
            "data.world.rl_per_type", f"must be 0 (RL on the train split) or positive, got {w.rl_per_type}"
        )

    try:  # the vocabularies' own rules, reported on the field at fault
        sides(_train_vocab(w), _rl_vocab(w))
    except ValueError as e:
        field = "train_vocab" if _train_vocab(w) not in TRAIN_VOCABS else "rl_vocab"
        raise ConfigError(f"data.world.{field}", str(e)) from None

    unknown = [t for t in _rl_types(w) if t not in TRAIN_TYPES]
    if unknown:
        raise ConfigError(
            "data.world.rl_types", f"unknown type(s) {', '.join(map(repr, unknown))}; trained: {', '.join(TRAIN_TYPES)}"
        )


def _world_corpus(data_config) -> list[str]:

    return corpus([t.entry for t in tasks(data_config, "train")])


def _world_chats(data_config) -> list[dict]:

    return [
        {"messages": r["messages"], "tools": r["tools"]} for r in datasets.expert_records(tasks(data_config, "train"))
    ]


register(
    TaskSource(
        "bfcl",
        tasks=_bfcl_tasks,
        make_env=_bfcl_env,
        expert=bfcl.ground_truth_script,
        rl_env_config=_bfcl_rl_env_config,
    )
)
register(
    TaskSource(
        "world",
        tasks=_world_tasks,
        make_env=_bfcl_env,
        expert=bfcl.ground_truth_script,
        check=_world_check,
        tokenizer_corpus=_world_corpus,
        tokenizer_chats=_world_chats,
        rl_tasks=_world_rl_tasks,
        rl_env_config=_bfcl_rl_env_config,
    )
)


# ---------------------------------------------------------------- step-level instances (SWiRL)
# `steps`: every assistant step of a set of trajectories as a one-step task (rcgrpo_jax.data.steps), scored by
# rcgrpo_jax.envs.single_step. Its options live under `data.steps` (STEPS_DEFAULTS):
#   trajectories    'bfcl' | 'world': the expert trajectories of that source's split; 'jsonl': the files at
#                   `path`. JSONL rows (the schema of rcgrpo_jax.data.steps) are split by rows with
#                   test_fraction and seed
#   path            trajectories='jsonl': the JSONL file(s), comma-separated (ToolACE, xLAM, Hammer data
#                   converted to the schema); required there, and refused with any other trajectories
#   test_fraction   JSONL only: the share of rows (whole trajectories) held out as 'test'
#   seed            the JSONL split and the name masks
#   mask_names      Hammer-style masking of function and argument names (per instance, invertible)
#   partial_credit  score with ToolRL's partial credit ('partial') instead of the exact match ('exact')
#   calls_only      keep only the tool-calling steps (drop each turn's plain closing answer)

STEPS_DEFAULTS = {
    "trajectories": "bfcl",
    "path": "",
    "test_fraction": 0.1,
    "seed": 0,
    "mask_names": False,
    "partial_credit": False,
    "calls_only": False,
}
STEPS_FROM_SOURCES = ("bfcl", "world")
STEPS_JSONL = "jsonl"  # data.steps.trajectories: read the files at data.steps.path


@dataclasses.dataclass(frozen=True)
class StepsOptions:
    trajectories: str = "bfcl"
    path: str = ""  # comma-separated JSONL files (trajectories='jsonl')
    test_fraction: float = 0.1
    seed: int = 0
    mask_names: bool = False
    partial_credit: bool = False
    calls_only: bool = False


def steps_options(data_config) -> StepsOptions:
    """`data.steps` (missing fields take STEPS_DEFAULTS); raises ConfigError on an unknown field or a bad value."""

    section = data_config.get("steps")
    given = dict(section.items()) if section is not None else {}
    unknown = sorted(set(given) - set(STEPS_DEFAULTS))
    if unknown:
        raise ConfigError(f"data.steps.{unknown[0]}", f"unknown field; known: {', '.join(STEPS_DEFAULTS)}")
    values = {**STEPS_DEFAULTS, **{k: v for k, v in given.items() if v is not None}}
    if values["trajectories"] not in (*STEPS_FROM_SOURCES, STEPS_JSONL):
        raise ConfigError(
            "data.steps.trajectories",
            f"{values['trajectories']!r} is not one of {', '.join((*STEPS_FROM_SOURCES, STEPS_JSONL))} "
            f"({STEPS_JSONL!r} reads the JSONL files at data.steps.path)",
        )
    if not isinstance(values["path"], str):
        raise ConfigError("data.steps.path", f"must be a string (JSONL files, comma-separated), got {values['path']!r}")
    if values["trajectories"] == STEPS_JSONL and not steps_paths(values["path"]):
        raise ConfigError(
            "data.steps.path",
            f"required for data.source=steps with data.steps.trajectories=jsonl (the AWPO presets): a JSONL file "
            f"(several: comma-separated) of {SCHEMA_LINE}",
        )
    if values["path"] and values["trajectories"] != STEPS_JSONL:
        raise ConfigError(
            "data.steps.path",
            f"is set but data.steps.trajectories={values['trajectories']!r} would not read it; "
            "set --config.data.steps.trajectories=jsonl (or clear the path)",
        )
    for f in ("mask_names", "partial_credit", "calls_only"):
        if not isinstance(values[f], bool):
            raise ConfigError(f"data.steps.{f}", f"must be true or false, got {values[f]!r}")
    try:
        fraction, seed = float(values["test_fraction"]), int(values["seed"])
    except (TypeError, ValueError):
        raise ConfigError("data.steps", "test_fraction must be a number and seed an integer") from None
    if not 0.0 <= fraction < 1.0:
        raise ConfigError("data.steps.test_fraction", f"must be in [0, 1), got {fraction}")
    flags = {f: values[f] for f in ("mask_names", "partial_credit", "calls_only")}
    return StepsOptions(
        trajectories=values["trajectories"], path=values["path"], test_fraction=fraction, seed=seed, **flags
    )


def steps_paths(path: str) -> tuple[str, ...]:
    """data.steps.path as its files: comma-separated, blanks dropped."""
    return tuple(p.strip() for p in str(path or "").split(",") if p.strip())


def _steps_key(data_config) -> tuple:
    """Everything the instances depend on, hashable (each JSONL file by path, size and mtime)."""
    import os

    opts = steps_options(data_config)
    if opts.trajectories == "world":
        w = data_config.world
        origin = ("world", int(w.seed), int(w.train_per_type), int(w.test_per_type), _rl_vocab(w), _train_vocab(w))
    elif opts.trajectories == "bfcl":
        origin = ("bfcl",)
    else:
        files = []
        for p in steps_paths(opts.path):
            st = os.stat(os.path.abspath(p))
            files.append((os.path.abspath(p), st.st_size, st.st_mtime_ns))
        origin = ("jsonl", tuple(files))
    return opts, origin


@functools.lru_cache(maxsize=8)
def _steps_trajectories(origin: tuple, test_fraction: float, seed: int) -> dict[str, tuple]:

    if origin[0] == "jsonl":
        rows = steps_lib.load_jsonl_files([f[0] for f in origin[1]])
        split = steps_lib.split_rows(rows, test_fraction, seed)
    elif origin[0] == "world":
        train, test = _world(*origin[1:])
        split = {"train": steps_lib.expert_trajectories(train), "test": steps_lib.expert_trajectories(test)}
    else:
        split = {s: steps_lib.expert_trajectories(_bfcl_tasks(None, s)) for s in ("train", "test")}
    return {"train": tuple(split["train"]), "test": tuple(split["test"]), "all": tuple(split["train"] + split["test"])}


@functools.lru_cache(maxsize=16)
def _steps_instances(opts: StepsOptions, origin: tuple, split: str) -> tuple:

    trajs = _steps_trajectories(origin, opts.test_fraction, opts.seed)[split]
    reward = "partial" if opts.partial_credit else "exact"
    out = steps_lib.instances_of(trajs, reward=reward, calls_only=opts.calls_only)
    return tuple(steps_lib.mask(i, opts.seed) for i in out) if opts.mask_names else tuple(out)


def _steps_tasks(data_config, split: str) -> list:
    return list(_steps_instances(*_steps_key(data_config), split))


def _steps_env(task, env_config=None):
    """A SingleStepEnv; a `SingleStepConfig` is used as given, anything else (None from the RL trainer) gives
    the defaults."""

    if isinstance(env_config, single_step.SingleStepConfig):
        return single_step.SingleStepEnv(task, env_config)
    return single_step.SingleStepEnv(task)


def _steps_expert(task) -> list:

    return steps_lib.expert_script(task)


def _steps_check(data_config) -> None:
    import os

    opts = steps_options(data_config)
    if opts.trajectories == "world":
        _world_check(data_config)
    elif opts.trajectories == STEPS_JSONL:
        for p in steps_paths(opts.path):
            if not os.path.isfile(p):
                raise ConfigError("data.steps.path", f"no such JSONL file: {p!r}")

        try:  # read (and cache) the files now, so a malformed row stops the run at start-up
            _steps_trajectories(_steps_key(data_config)[1], opts.test_fraction, opts.seed)
        except InputError as err:  # a malformed row (StepDataError), an empty or unreadable file
            raise ConfigError("data.steps.path", str(err)) from None


def _steps_corpus(data_config) -> list[str] | None:
    """The world's corpus when the instances come from the world (its names are what the steps use)."""
    if steps_options(data_config).trajectories != "world":
        return None

    return corpus([t.entry for t in _world_tasks(data_config, "train")])


def _steps_chats(data_config) -> list[dict]:
    """The train trajectories as chats; masked instances as one chat each (context + target), so the
    tokenizer sees the masked names."""
    opts, origin = _steps_key(data_config)
    if opts.mask_names:
        return [
            {"messages": list(i.context) + [i.target], "tools": list(i.tools)}
            for i in _steps_instances(opts, origin, "train")
        ]
    trajs = _steps_trajectories(origin, opts.test_fraction, opts.seed)["train"]
    return [{"messages": list(t.messages), "tools": list(t.tools)} for t in trajs]


register(
    TaskSource(
        "steps",
        tasks=_steps_tasks,
        make_env=_steps_env,
        expert=_steps_expert,
        check=_steps_check,
        tokenizer_corpus=_steps_corpus,
        tokenizer_chats=_steps_chats,
    )
)
