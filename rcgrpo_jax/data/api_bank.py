"""API-Bank (Li et al., 2023) levels 1-3 from a local copy, as tasks, and the `api_bank` task source.

Layout (the benchmark's own `api-bank/` folder at DIR, plus its released level-3 test file):

  DIR/apis/*.py                                  the API classes of levels 1-2 (`envs.api_bank` runs them)
  DIR/lv3_apis/*.py                              the API classes of level 3
  DIR/init_database/*.json                       the databases the API classes start from
  DIR/lv1-lv2-samples/level-1-given-desc/*.jsonl level 1 (Call): one dialogue per file
  DIR/lv1-lv2-samples/level-2-toolsearcher/*.jsonl  level 2 (Retrieve + Call)
  DIR/test-data/level-3.json (or test_data/)     level 3 (Plan + Retrieve + Call), from the release

A dialogue file holds one item per line: ``{"role": "User"|"AI", "text": str}`` or ``{"role": "API",
"api_name": str, "param_dict": {...}, "result": {"api_name", "input", "output", "exception"}}``. As the
benchmark's evaluator does, every API item is one task: the dialogue before it is the context, the item
is the call to make. Level 3 is a JSON list of ``{"requirement": str, "apis": [{"api_name", "input",
"output": <result as above>}, ...]}``; each API of a sample is one task, its context the requirement and
the sample's API calls before it (as the benchmark's level-3 scorer indexes them, sample_id and api_id).

What the model is shown (`envs.api_bank` renders it): level 1 the descriptions of every API of the dialogue
(the evaluator's given-description setting); levels 2 and 3 only ToolSearcher, plus the APIs that the
context's ToolSearcher results have revealed.

Registered as the task source `api_bank` (its environment: `envs.api_bank.ApiBankEnv`); the eval suite
`api_bank` (`eval.api_bank_run`) reads `eval.api_bank.path` and `.levels`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Sequence

from rcgrpo_jax.data import sources
from rcgrpo_jax.envs.api_bank import ApiBankEnv

LEVELS = (1, 2, 3)
LEVEL_DIRS = {1: "lv1-lv2-samples/level-1-given-desc", 2: "lv1-lv2-samples/level-2-toolsearcher"}
LEVEL3_FILES = ("test-data/level-3.json", "test_data/level-3.json")
API_DIRS = {1: "apis", 2: "apis", 3: "lv3_apis"}
DATABASE_DIR = "init_database"
TOOL_SEARCHER = "ToolSearcher"
RESULT_FIELDS = ("api_name", "input", "output", "exception")
REQUIRED_RESULT_FIELDS = ("output", "exception")


class ApiBankDataError(ValueError):
    """The copy at the path is not in API-Bank's layout or format (a file that is not in the layout, a line that
    is not JSON or an item without its fields); the message names the file, the line or sample, and the field."""


@dataclasses.dataclass(frozen=True)
class Task:
    id: str  # level-<n>/<file>#<api item>  |  level-3/<sample>#<api>
    category: str  # level_1 | level_2 | level_3
    level: int
    root: str  # the copy's folder (the API classes and databases live there)
    context: tuple[dict, ...]  # the dialogue items before the call, in the file's form
    dialogue_apis: tuple[str, ...]  # every API name of the dialogue (level 1 shows them all)
    api_name: str  # the call to make ...
    param_dict: dict  # ... its arguments ...
    result: dict  # ... and the result it returned (the evaluator's ground truth)
    dialogue: str  # the file (levels 1-2) or the sample index (level 3) the task comes from


def parse_levels(value: Any) -> tuple[int, ...]:
    """`eval.api_bank.levels` ("1,2,3", "3", ...) as sorted ints; ValueError on anything else."""
    parts = [p.strip() for p in str(value).split(",") if p.strip()]
    if not parts or any(p not in ("1", "2", "3") for p in parts):
        raise ValueError(f"expected levels among 1,2,3, comma-separated, got {value!r}")
    return tuple(sorted({int(p) for p in parts}))


def _check_result(result: Any, where: str, field: str = "result") -> None:
    """The result as the API classes' checks read it: an object with at least `output` and `exception` (the
    released data sometimes lacks `api_name`, or has a null `input`; the class's own check then decides)."""
    if not isinstance(result, dict) or any(k not in result for k in REQUIRED_RESULT_FIELDS):
        raise ApiBankDataError(
            f"{where}: field {field!r}: expected an object with {', '.join(REQUIRED_RESULT_FIELDS)} "
            f"(the API's returned {', '.join(RESULT_FIELDS)})"
        )


def _check_item(item: Any, where: str) -> dict:
    if not isinstance(item, dict) or item.get("role") not in ("User", "AI", "API"):
        raise ApiBankDataError(f"{where}: field 'role': expected 'User', 'AI' or 'API'")
    if item["role"] in ("User", "AI"):
        if not isinstance(item.get("text"), str):
            raise ApiBankDataError(f"{where}: field 'text': expected a string")
        return item
    if not isinstance(item.get("api_name"), str) or not item["api_name"]:
        raise ApiBankDataError(f"{where}: field 'api_name': expected the API's class name")
    if not isinstance(item.get("param_dict"), dict):
        raise ApiBankDataError(f"{where}: field 'param_dict': expected an object of the call's arguments")
    _check_result(item.get("result"), where)
    return item


def read_dialogue(path: str) -> list[dict]:
    """The items of one level-1/2 dialogue file, checked."""
    items = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as err:
                raise ApiBankDataError(f"{path}:{n}: not a JSON object ({err})") from None
            items.append(_check_item(item, f"{path}:{n}"))
    return items


def _dialogue_tasks(root: str, level: int) -> list[Task]:
    folder = os.path.join(root, LEVEL_DIRS[level])
    if not os.path.isdir(folder):
        raise ApiBankDataError(f"{root}: no level-{level} dialogues: expected the folder {LEVEL_DIRS[level]}/")
    files = sorted(f for f in os.listdir(folder) if f.endswith(".jsonl"))
    if not files:
        raise ApiBankDataError(f"{folder}: no *.jsonl dialogue files")
    out = []
    for name in files:
        items = read_dialogue(os.path.join(folder, name))
        apis = tuple(sorted({i["api_name"] for i in items if i["role"] == "API"}))
        for k, item in enumerate(items):
            if item["role"] != "API":
                continue
            out.append(
                Task(
                    id=f"level-{level}/{name}#{k}",
                    category=f"level_{level}",
                    level=level,
                    root=root,
                    context=tuple(items[:k]),
                    dialogue_apis=apis,
                    api_name=item["api_name"],
                    param_dict=item["param_dict"],
                    result=item["result"],
                    dialogue=name,
                )
            )
    return out


def level3_path(root: str) -> str | None:
    """The release's level-3 file under `root`, None when absent."""
    for rel in LEVEL3_FILES:
        if os.path.isfile(os.path.join(root, rel)):
            return os.path.join(root, rel)
    return None


def _level3_tasks(root: str) -> list[Task]:
    path = level3_path(root)
    if path is None:
        raise ApiBankDataError(
            f"{root}: no level-3 data: expected {LEVEL3_FILES[0]} (the release's test data; or {LEVEL3_FILES[1]})"
        )
    try:
        with open(path, encoding="utf-8") as f:
            samples = json.load(f)
    except json.JSONDecodeError as err:
        raise ApiBankDataError(f"{path}: not JSON ({err})") from None
    if not isinstance(samples, list):
        raise ApiBankDataError(f"{path}: expected a JSON list of samples")
    out = []
    for s, sample in enumerate(samples):
        where = f"{path}: sample {s}"
        if not isinstance(sample, dict) or not isinstance(sample.get("requirement"), str):
            raise ApiBankDataError(f"{where}: field 'requirement': expected the user's request as a string")
        apis = sample.get("apis")
        if not isinstance(apis, list) or not apis:
            raise ApiBankDataError(f"{where}: field 'apis': expected a non-empty list of API calls")
        items: list[dict] = [{"role": "User", "text": sample["requirement"]}]
        for a, api in enumerate(apis):
            w = f"{where}, api {a}"
            if not isinstance(api, dict) or not isinstance(api.get("api_name"), str):
                raise ApiBankDataError(f"{w}: field 'api_name': expected the API's class name")
            if not isinstance(api.get("input"), dict):
                raise ApiBankDataError(f"{w}: field 'input': expected an object of the call's arguments")
            _check_result(api.get("output"), w, "output")
            items.append(
                {"role": "API", "api_name": api["api_name"], "param_dict": api["input"], "result": api["output"]}
            )
        names = tuple(sorted({i["api_name"] for i in items[1:]}))
        for a in range(len(apis)):
            item = items[a + 1]
            out.append(
                Task(
                    id=f"level-3/{s}#{a}",
                    category="level_3",
                    level=3,
                    root=root,
                    context=tuple(items[: a + 1]),
                    dialogue_apis=names,
                    api_name=item["api_name"],
                    param_dict=item["param_dict"],
                    result=item["result"],
                    dialogue=str(s),
                )
            )
    return out


def check_layout(root: str, levels: Sequence[int]) -> None:
    """Raise ApiBankDataError when `root` lacks a folder the levels need (the API classes, the databases)."""
    if not root or not os.path.isdir(root):
        raise ApiBankDataError(f"no such folder: {root!r} (expected a copy of the benchmark's api-bank/ folder)")
    for rel in sorted({API_DIRS[lv] for lv in levels} | {DATABASE_DIR}):
        if not os.path.isdir(os.path.join(root, rel)):
            raise ApiBankDataError(f"{root}: no {rel}/ folder (the benchmark's {rel}/, which the levels need)")
    if not os.path.isfile(os.path.join(root, "apis", "api.py")):
        raise ApiBankDataError(f"{root}: no apis/api.py (the benchmark's API base class)")


def load(root: str, levels: Sequence[int] = LEVELS) -> list[Task]:
    """Every task of `levels` in the copy at `root`, level by level, files in name order."""
    root = os.path.abspath(root) if root else root
    check_layout(root, levels)
    out: list[Task] = []
    for lv in levels:
        out += _level3_tasks(root) if lv == 3 else _dialogue_tasks(root, lv)
    return out


def expert(task: Task) -> list:
    """The ground-truth call as a script: one turn, one step, one call. Its arguments are the input the
    ground-truth result records when that has the same names as `param_dict` (the released dialogues write
    some list arguments in `param_dict` as the text of a list, e.g. "['Ann', 'Bo']", and the result's input
    holds the list), else `param_dict`."""
    given = task.result.get("input")
    args = given if isinstance(given, dict) and set(given) == set(task.param_dict) else task.param_dict
    return [[[{"name": task.api_name, "arguments": dict(args)}]]]


# ---------------------------------------------------------------- the task source


def _source_tasks(data_config, split: str) -> list[Task]:
    """The tasks of `<section>.api_bank` (path, levels); API-Bank has no training split, every split is all."""
    section = data_config.api_bank
    return load(section.path, parse_levels(section.levels))


def _source_env(task: Task, env_config=None) -> ApiBankEnv:
    return ApiBankEnv(task)


API_BANK = sources.register(
    sources.TaskSource("api_bank", tasks=_source_tasks, make_env=_source_env, expert=expert), override=True
)
