"""BFCL v4 multi-turn tasks and the episode environment over the bfcl-eval package.

`load_tasks()` reads the 800 tasks (base, miss_func, miss_param, long_context) with their ground
truth straight from the package's JSON files; `BFCLEnv(task)` is one episode following the
`Environment` protocol (see base.py). Host-side Python only; nothing here is traced by JAX.

Episode semantics follow BFCL's inference loop: within a user turn the model takes steps (a list of
tool calls -> a list of result strings) until it answers without calls; then `end_turn()` gives the
next user turn. On miss_func the held-out functions are invisible until their release turn, whose
user message is BFCL's "I have updated some more functions ..." text. More than 20 tool-calling steps
in one turn force-terminates the episode (it fails), as do our own caps on total tool calls and the
per-call time limit. Tool output returned to the model is capped in characters (truncated, marked).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib.resources
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from rcgrpo_jax import jsonl
from rcgrpo_jax.envs import dispatch, official, rewards
from rcgrpo_jax.envs.base import Message, Tool
from rcgrpo_jax.envs.dispatch import CallRecord, FunctionSpec, Limits
from rcgrpo_jax.envs.isolation import CLASS_MODULES, INSTALL_HINT, new_instance, package_lock, tool_class
from rcgrpo_jax.envs.schema import compact_tool, to_openai_tool

CATEGORIES = ("base", "miss_func", "miss_param", "long_context")
MAX_STEPS_PER_TURN = 20  # BFCL's MAXIMUM_STEP_LIMIT
RELEASE_MESSAGE = "I have updated some more functions you can choose from. What about now?"


def release_message(released_tools: Sequence[Tool]) -> str:
    """The user message of a miss_func release turn, in BFCL's prompting form: the released docs,
    then BFCL's text. The docs travel in the message because a chat template renders the tool list
    once, at the top of the context, and an append-only context cannot rewrite it; the rollout
    engine and the SFT data both keep the first turn's tool list and read releases from here."""
    docs = json.dumps([t["function"] for t in released_tools])
    return f"{docs}\n{RELEASE_MESSAGE}"


# Class -> function-doc file (mirrors bfcl_eval's MULTI_TURN_FUNC_DOC_FILE_MAPPING).
_DOC_FILES = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
}

# done_reason values; the last three are force terminations, which fail.
COMPLETED = "completed"
MAX_STEPS = "max_steps"
MAX_TOOL_CALLS = "max_tool_calls"
CALL_TIMEOUT = "call_timeout"
FORCE_TERMINATIONS = frozenset({MAX_STEPS, MAX_TOOL_CALLS, CALL_TIMEOUT})

# Where the package's docs disagree with its own data and ground truth, validation accepts both
# (the tool shown to the model stays as BFCL shows it). TicketAPI documents `ticket_id` as an
# integer, but task *_173 loads tickets with string ids ("ticket_001") and its answer closes one.
ARGUMENT_ERRATA: dict[tuple[str, str], dict] = {
    ("TicketAPI", "ticket_id"): {"type": ["integer", "string"]},
}

TRUNCATION_MARK = "\n[tool output truncated: limit reached]"


# --- data ----------------------------------------------------------------------------------------


def data_dir() -> Path:
    try:
        root = importlib.resources.files("bfcl_eval")
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            f"The BFCL data comes with the bfcl-eval package; install it with:\n    {INSTALL_HINT}"
        ) from err
    return Path(str(root)) / "data"


def _read_jsonl(path: Path) -> list[dict]:
    return jsonl.read(path, what="BFCL entries", check=jsonl.json_object())


@dataclasses.dataclass(frozen=True, eq=False)
class Task:
    """One BFCL multi-turn task. `entry` is the package's record (read-only by convention)."""

    id: str
    category: str
    entry: Mapping[str, Any]
    ground_truth: tuple[tuple[str, ...], ...]

    @property
    def involved_classes(self) -> tuple[str, ...]:
        return tuple(self.entry["involved_classes"])

    @property
    def num_turns(self) -> int:
        return len(self.entry["question"])

    @property
    def long_context(self) -> bool:
        return "long_context" in self.category

    @property
    def allowed_functions(self) -> tuple[str, ...] | None:
        """Our extension for compact worlds: when the entry names them, only these functions are
        shown and callable (BFCL's own tasks show every function of the involved classes)."""
        names = self.entry.get("allowed_functions")
        return None if names is None else tuple(names)

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> "Task":
        """A task from an entry in BFCL's format carrying its own `ground_truth` (generated worlds)."""
        missing = [
            k for k in ("id", "question", "initial_config", "involved_classes", "ground_truth") if k not in entry
        ]
        if missing:
            raise ValueError(f"task entry {entry.get('id', '?')!r} lacks fields {missing}")
        if len(entry["ground_truth"]) != len(entry["question"]):
            raise ValueError(
                f"{entry['id']}: {len(entry['ground_truth'])} ground-truth turns for "
                f"{len(entry['question'])} question turns"
            )
        category = entry["id"].rsplit("_", 1)[0].removeprefix("multi_turn_")
        return cls(entry["id"], category, entry, tuple(tuple(t) for t in entry["ground_truth"]))

    @property
    def held_out(self) -> dict[int, tuple[str, ...]]:
        """Release turn -> function names hidden before that turn (miss_func)."""
        return {int(t): tuple(names) for t, names in self.entry.get("missed_function", {}).items()}


@functools.lru_cache(maxsize=None)
def _all_tasks() -> tuple[Task, ...]:
    root = data_dir()
    tasks = []
    for category in CATEGORIES:
        name = f"BFCL_v4_multi_turn_{category}.json"
        entries = _read_jsonl(root / name)
        answers = {a["id"]: a["ground_truth"] for a in _read_jsonl(root / "possible_answer" / name)}
        for entry in entries:
            truth = answers[entry["id"]]
            if len(truth) != len(entry["question"]):
                raise ValueError(
                    f"{entry['id']}: {len(truth)} ground-truth turns for {len(entry['question'])} question turns"
                )
            tasks.append(
                Task(
                    entry["id"],
                    entry["id"].rsplit("_", 1)[0][len("multi_turn_") :],
                    entry,
                    tuple(tuple(turn) for turn in truth),
                )
            )
    return tuple(tasks)


def load_tasks(categories: Sequence[str] = CATEGORIES) -> list[Task]:
    """The BFCL v4 multi-turn tasks of the given categories (all 800 by default), in file order."""
    unknown = set(categories) - set(CATEGORIES)
    if unknown:
        raise ValueError(f"unknown categories {sorted(unknown)}; known: {CATEGORIES}")
    return [t for t in _all_tasks() if t.category in categories]


@functools.lru_cache(maxsize=None)
def _task_index() -> dict[str, Task]:
    return {t.id: t for t in _all_tasks()}


def get_task(task_id: str) -> Task:
    try:
        return _task_index()[task_id]
    except KeyError:
        raise KeyError(f"unknown BFCL task id {task_id!r}") from None


@functools.lru_cache(maxsize=None)
def function_docs(class_name: str) -> tuple[dict, ...]:
    """The package's function docs of one class (BFCL form: "type": "dict", ...)."""
    return tuple(_read_jsonl(data_dir() / "multi_turn_func_doc" / _DOC_FILES[class_name]))


def _task_functions(task: Task) -> list[tuple[str, FunctionSpec, dict]]:
    """(name, spec, tool) of every function the task may use, class by class in doc order."""
    allowed = task.allowed_functions
    return [
        item for c in task.involved_classes for item in _class_functions(c) if allowed is None or item[0] in allowed
    ]


@functools.lru_cache(maxsize=None)
def _class_functions(class_name: str) -> tuple[tuple[str, FunctionSpec, dict], ...]:
    """(name, spec, OpenAI tool) per documented public method, in doc order."""
    cls = tool_class(class_name)
    out = []
    for doc in function_docs(class_name):
        name = doc["name"]
        if name.startswith("_") or not callable(getattr(cls, name, None)):
            raise ValueError(f"{class_name}: documented function {name!r} is not a public method")
        tool = to_openai_tool(doc)
        parameters = copy.deepcopy(tool["function"]["parameters"])
        for (erratum_class, param), patch in ARGUMENT_ERRATA.items():
            if erratum_class == class_name and param in parameters.get("properties", {}):
                parameters["properties"][param].update(copy.deepcopy(patch))
        spec = FunctionSpec(name, class_name, parameters, dispatch.method_signature(cls, name))
        out.append((name, spec, tool))
    return tuple(out)


def _visible(task: Task, turn: int) -> list[tuple[str, FunctionSpec, dict]]:
    """Functions visible at `turn`, in BFCL's order: the class docs minus held-out ones, then the
    held-out ones in order of release."""
    hidden_until = {name: t for t, names in task.held_out.items() for name in names}
    functions = _task_functions(task)
    base = [item for item in functions if item[0] not in hidden_until]
    released = []
    for t in sorted(task.held_out):
        if t <= turn:
            for name in task.held_out[t]:
                released.extend(i for i in functions if i[0] == name)
    return base + released


@functools.lru_cache(maxsize=4096)
def _tools_json(classes: tuple[str, ...], held_out: tuple, turn: int, allowed: tuple[str, ...] | None) -> str:
    entry = {"involved_classes": list(classes), "missed_function": {str(t): list(n) for t, n in held_out}}
    if allowed is not None:
        entry["allowed_functions"] = list(allowed)
    return json.dumps([tool for _, _, tool in _visible(Task("", "", entry, ()), turn)])


def tools_for(task: Task, turn: int) -> list[Tool]:
    """OpenAI-style tools the model sees at `turn` (fresh copies: a JSON round trip of a cached
    string, much cheaper than deep-copying ~28 nested dicts per turn)."""
    released = max([t for t in task.held_out if t <= turn], default=-1)
    held_out = tuple(sorted(task.held_out.items()))
    tools = json.loads(_tools_json(task.involved_classes, held_out, released, task.allowed_functions))
    # Our extension for generated worlds: short docs, so a tiny model's prompt stays short.
    return [compact_tool(t) for t in tools] if task.entry.get("compact_docs") else tools


def all_specs(task: Task) -> dict[str, FunctionSpec]:
    """Every function the task may use (`_task_functions`: held-out ones included), by name."""
    return {name: spec for name, spec, _ in _task_functions(task)}


@functools.lru_cache(maxsize=8192)  # keyed by Task identity (eq=False): BFCL's tasks are cached once
def _parsed_truth(task: Task) -> tuple[tuple[tuple[str, dict, dict], ...], ...]:
    task_id = task.id
    specs = all_specs(task)
    turns = []
    for turn in task.ground_truth:
        calls = []
        for text in turn:
            name, positional, keyword = official.parse_call_string(text)
            if name not in specs:
                raise ValueError(f"{task_id}: ground-truth call to unknown function {name!r}")
            sig = specs[name].signature
            given = dict(sig.bind(*positional, **keyword).arguments)
            calls.append((name, given, dispatch.bind_arguments(sig, positional, keyword)))
        turns.append(tuple(calls))
    return tuple(turns)


class TruthOrder:
    """Which ground-truth calls of one task commute, decided by the environment (the order-aware
    action coverage of `rewards`). Calls i < j (indices into the flattened ground truth) commute
    when, from the state just before call i (fresh instances after replaying calls 0..i-1), running
    i then j and j then i give equal public state (attributes not starting with "_") of every
    instance and the same result string and status for each of the two calls. Answers are cached;
    nothing runs until a model reorders a pair. One per (task, limits) via `truth_order`."""

    def __init__(self, task: Task, limits: Limits = Limits()):
        self.task, self.limits = task, limits
        self._specs = all_specs(task)
        self._calls = [(name, given, bound) for turn in _parsed_truth(task) for name, given, bound in turn]
        self._known: dict[tuple[int, int], bool] = {}
        self.evaluated = 0  # pairs actually run (for tests and cost reports)

    def commutes(self, i: int, j: int) -> bool:
        if not 0 <= i < j < len(self._calls):
            raise ValueError(f"{self.task.id}: commutes({i}, {j}) needs 0 <= i < j < {len(self._calls)}")
        if (i, j) not in self._known:
            self._known[(i, j)] = self._run_both_orders(i, j)
            self.evaluated += 1
        return self._known[(i, j)]

    def _run(self, instances: dict[str, Any], index: int) -> tuple[str, str]:
        name, given, bound = self._calls[index]
        record = CallRecord(name, given, dispatch.OK, "", bound)
        dispatch.run_call(instances[self._specs[name].class_name], record, self.limits)
        return record.status, record.result

    def _run_both_orders(self, i: int, j: int) -> bool:
        task = self.task
        with package_lock:
            before = {
                c: new_instance(c, task.entry["initial_config"].get(c, {}), long_context=task.long_context)
                for c in task.involved_classes
            }
            for index in range(i):
                self._run(before, index)
            first = copy.deepcopy(before)
            forward = (self._run(first, i), self._run(first, j))
            backward = tuple(reversed((self._run(before, j), self._run(before, i))))
            return forward == backward and all(
                _public_state(first[c]) == _public_state(before[c]) for c in task.involved_classes
            )


def _public_state(instance: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(instance).items() if not k.startswith("_")}


@functools.lru_cache(maxsize=8192)  # keyed by Task identity, like _parsed_truth
def truth_order(task: Task, limits: Limits = Limits()) -> TruthOrder:
    return TruthOrder(task, limits)


def ground_truth_calls(task: Task) -> list[list[dict]]:
    """Ground truth as parsed calls: turn -> [{"name", "arguments"}], positional arguments bound to
    their names (defaults not filled: the arguments the answer states)."""
    return [[{"name": n, "arguments": copy.deepcopy(given)} for n, given, _ in turn] for turn in _parsed_truth(task)]


def ground_truth_script(task: Task) -> list[list[list[dict]]]:
    """Ground truth as an episode script: turn -> steps -> calls; each non-empty turn is one step
    holding all its calls (BFCL's own form for the ground truth)."""
    return [[calls] if calls else [] for calls in ground_truth_calls(task)]


# --- environment ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    max_steps_per_turn: int = MAX_STEPS_PER_TURN
    max_tool_calls: int | None = 200  # per episode
    max_output_chars: int | None = 200_000  # tool output returned to the model, per episode
    limits: Limits = Limits()
    reward: str = "rc_grpo"
    # BFCL executes any public method of an involved class, including functions held out (not yet
    # shown) on miss_func, and one ground truth (miss_func_49) calls a held-out function before its
    # release. True keeps BFCL's behaviour; False refuses held-out functions until released.
    held_out_callable: bool = True


class BFCLEnv:
    """One BFCL multi-turn episode. See the module docstring and `rcgrpo_jax.envs.base`."""

    def __init__(self, task: Task | str, config: EnvConfig = EnvConfig()):
        self.task = get_task(task) if isinstance(task, str) else task
        self.config = config
        rewards.get(config.reward)  # fail at construction on a typo
        self.done = True
        self.done_reason: str | None = None
        self._instances: dict[str, Any] = {}

    # protocol -------------------------------------------------------------------------------
    def reset(self) -> tuple[list[Message], list[Tool]]:
        task = self.task
        with package_lock:
            self._instances = {
                c: new_instance(c, task.entry["initial_config"].get(c, {}), long_context=task.long_context)
                for c in task.involved_classes
            }
        self._turn = 0
        self._steps_in_turn = 0
        self._turns: list[list[list[CallRecord]]] = [[]]
        self._num_calls = 0
        self._output_chars = 0
        self._truth_state: dict[str, Any] | None = None
        self.done = False
        self.done_reason = None
        return self._enter_turn(0)

    def step(self, tool_calls: Sequence[Any]) -> list[str]:
        if self.done:
            raise RuntimeError(f"episode {self.task.id} is over ({self.done_reason}); call reset()")
        if not tool_calls:
            return []
        config = self.config
        if self._steps_in_turn >= config.max_steps_per_turn:
            # BFCL force-quits a turn after its step limit: this step is not run.
            records = [
                CallRecord(
                    None,
                    None,
                    dispatch.SKIPPED,
                    f"Error: more than {config.max_steps_per_turn} steps in one turn; the episode was force-terminated",
                )
                for _ in tool_calls
            ]
            self._finish_step(records, MAX_STEPS)
            return [r.result for r in records]
        records, reason = [], None
        for raw in tool_calls:
            if reason is not None:
                records.append(
                    CallRecord(None, None, dispatch.SKIPPED, "Error: not run, the episode was force-terminated")
                )
                continue
            if config.max_tool_calls is not None and self._num_calls >= config.max_tool_calls:
                reason = MAX_TOOL_CALLS
                records.append(
                    CallRecord(
                        None,
                        None,
                        dispatch.SKIPPED,
                        f"Error: tool-call limit ({config.max_tool_calls}) reached; the episode was force-terminated",
                    )
                )
                continue
            self._num_calls += 1
            record, spec = dispatch.prepare_call(raw, self._callable, config.limits)
            if spec is not None:
                with package_lock:
                    dispatch.run_call(self._instances[spec.class_name], record, config.limits)
                if record.status == dispatch.TIMEOUT:
                    reason = CALL_TIMEOUT
            record.result = self._cap_output(record.result)
            records.append(record)
        self._finish_step(records, reason)
        return [r.result for r in records]

    def end_turn(self) -> tuple[list[Message], list[Tool]] | None:
        if self.done:
            return None
        if self._turn + 1 >= self.task.num_turns:
            self.done, self.done_reason = True, COMPLETED
            return None
        self._turn += 1
        self._steps_in_turn = 0
        self._turns.append([])
        return self._enter_turn(self._turn)

    def reward(self, name: str | None = None) -> float:
        """The configured reward (or the registered reward `name`) of the episode so far."""
        return rewards.get(name or self.config.reward)(self.outcome())

    def official_verdict(self) -> dict:
        """BFCL's official checker on this episode's calls (see `official.official_check`)."""
        if self.done_reason in FORCE_TERMINATIONS:
            return official.force_terminated(f"episode force-terminated: {self.done_reason}")
        return official.official_check(self.task.entry, self.task.ground_truth, self.call_strings())

    def trace(self) -> dict:
        return {
            "id": self.task.id,
            "category": self.task.category,
            "done": self.done,
            "done_reason": self.done_reason,
            "num_tool_calls": self._num_calls,
            "output_chars": self._output_chars,
            "turns": [[[r.to_json() for r in step] for step in turn] for turn in self._turns],
        }

    # details ----------------------------------------------------------------------------------
    def call_strings(self) -> list[list[list[str]]]:
        """The episode's calls as BFCL call strings, turn -> step -> call; refused calls become the
        inert `official.REJECTED_CALL`."""
        out = []
        for turn in self._turns:
            steps = []
            for step in turn:
                calls = [
                    official.format_call(r.name, r.arguments)
                    if r.status in dispatch.EXECUTED
                    else official.REJECTED_CALL
                    for r in step
                ]
                if calls:
                    steps.append(calls)
            out.append(steps)
        return out

    def executed_calls(self) -> list[tuple[str, dict]]:
        return [
            (r.name, r.bound) for turn in self._turns for step in turn for r in step if r.status in dispatch.EXECUTED
        ]

    def outcome(self) -> rewards.EpisodeOutcome:
        truth = tuple((n, bound) for turn in _parsed_truth(self.task) for n, _, bound in turn)
        return rewards.EpisodeOutcome(
            states_equal=self._states_equal(),
            model_calls=tuple(self.executed_calls()),
            truth_calls=truth,
            terminated=self.done_reason in FORCE_TERMINATIONS,
            commutes=truth_order(self.task, self.config.limits).commutes,
        )

    def _enter_turn(self, turn: int) -> tuple[list[Message], list[Tool]]:
        visible = _visible(self.task, turn)
        self._callable = (
            all_specs(self.task) if self.config.held_out_callable else {name: spec for name, spec, _ in visible}
        )
        messages = copy.deepcopy(list(self.task.entry["question"][turn]))
        tools = tools_for(self.task, turn)
        if not messages and turn in self.task.held_out:
            released = [t for t in tools if t["function"]["name"] in self.task.held_out[turn]]
            messages = [{"role": "user", "content": release_message(released)}]
        return messages, tools

    def _finish_step(self, records: list[CallRecord], reason: str | None) -> None:
        self._turns[-1].append(records)
        self._steps_in_turn += 1
        if reason is not None:
            self.done, self.done_reason = True, reason

    def _cap_output(self, text: str) -> str:
        cap = self.config.max_output_chars
        if cap is None:
            self._output_chars += len(text)
            return text
        room = cap - self._output_chars
        if len(text) > room:
            text = text[: max(room, 0)] + TRUNCATION_MARK
        self._output_chars += len(text)
        return text

    def _truth_instances(self) -> dict[str, Any]:
        """Fresh instances after replaying the whole ground truth (computed once per episode)."""
        if self._truth_state is None:
            task, specs = self.task, all_specs(self.task)
            with package_lock:
                instances = {
                    c: new_instance(c, task.entry["initial_config"].get(c, {}), long_context=task.long_context)
                    for c in task.involved_classes
                }
                for turn in _parsed_truth(task):
                    for name, given, bound in turn:
                        record = CallRecord(name, given, dispatch.OK, "", bound)
                        dispatch.run_call(instances[specs[name].class_name], record, self.config.limits)
            self._truth_state = instances
        return self._truth_state

    def _states_equal(self) -> bool:
        for class_name, truth in self._truth_instances().items():
            model = self._instances[class_name]
            for key, value in vars(truth).items():
                if not key.startswith("_") and getattr(model, key, _MISSING) != value:
                    return False
        return True


_MISSING = object()


def run_script(env: BFCLEnv, script: Sequence[Sequence[Sequence[Any]]]) -> BFCLEnv:
    """Play an episode from a script (turn -> steps -> calls); turns beyond the script take no
    action. The episode ends when the turns run out or it is force-terminated."""
    env.reset()
    turn = 0
    while True:
        steps = script[turn] if turn < len(script) else []
        for calls in steps:
            if env.done:
                break
            env.step(list(calls))
        if env.done or env.end_turn() is None:
            return env
        turn += 1


__all__ = [
    "BFCLEnv",
    "CATEGORIES",
    "EnvConfig",
    "Task",
    "TruthOrder",
    "get_task",
    "ground_truth_calls",
    "release_message",
    "ground_truth_script",
    "load_tasks",
    "run_script",
    "tools_for",
    "truth_order",
    "CLASS_MODULES",
]
