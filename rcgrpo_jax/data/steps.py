"""Step-level data (SWiRL decomposition): a K-step trajectory becomes K single-step instances.

A *step* is one assistant message of a trajectory. The instance of step k (`envs.step_instance.StepInstance`,
the type the environments run) has

  context  every message before the step (system, user, earlier assistant steps, tool results)
  target   the step's assistant message: its `tool_calls` (the action) and its `reasoning_content`
           (the step's chain of thought) when present, plus its text `content`
  tools    the tool list rendered at the top of the conversation (the trajectory's `tools`)

so that `reassemble(decompose(t)) == t.messages`. A step whose target has no calls (a plain answer) is an
instance too; `calls_only` keeps only the tool-calling steps.

Sources: the BFCL (or generated-world) expert trajectories (`expert_trajectories`), and any JSONL of chats in
the OpenAI messages format with tools (ToolACE, xLAM, Hammer data converted to it): `load_jsonl(path)`,
`load_jsonl_files` for several; the schema, its rules and the normalisation on load are `parse_row`'s.
Reference rationales are read from the data only (none is generated here); they travel on
`StepInstance.reference_rationale` for the judge and never reach the policy's context.

`mask(instance, seed)` (Hammer, Lin et al. 2024) renames every function and top-level argument name;
`unmask(mask(x)) == x`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import random
import string
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from rcgrpo_jax import jsonl
from rcgrpo_jax.config_fields import InputError
from rcgrpo_jax.data import trajectories
from rcgrpo_jax.envs.base import Message, Tool
from rcgrpo_jax.envs.step_instance import NameMap, StepInstance

ROLES = ("system", "user", "assistant", "tool")


class StepDataError(InputError):
    """A row of step data that does not follow the schema of `parse_row` (or a file of none)."""


# `parse_row`'s schema in one line, for start-up errors that ask for a file of it (`sources`, `data.steps.path`).
SCHEMA_LINE = (
    '{"messages": [{"role": "system"|"user"|"assistant"|"tool", "content": str, "tool_calls"?: '
    '[{"function": {"name": str, "arguments": object}}], "reasoning_content"?: str}, ...], '
    '"tools": [{"type": "function", "function": {"name", "description", "parameters"}}, ...], '
    '"id"?: str, "category"?: str, "reference_rationale"?: str | [str|null]} per line, '
    "ending with the assistant step (full schema: rcgrpo_jax/data/steps.py)"
)


# --- data types ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Trajectory:
    """One normalised chat: the unit that is decomposed (and that the JSONL split keeps whole)."""

    id: str
    category: str
    messages: tuple[Message, ...]
    tools: tuple[Tool, ...]
    released_tools: tuple[tuple[int, tuple[Tool, ...]], ...] = ()  # (turn, tools) by turn
    rationales: tuple[str | None, ...] = ()  # one per step (assistant message)

    @property
    def step_indices(self) -> tuple[int, ...]:
        return tuple(i for i, m in enumerate(self.messages) if m["role"] == "assistant")


def expert_script(instance: StepInstance) -> list[list[list[dict]]]:
    """The target as an episode script (turn -> steps -> calls): one turn with one step holding the
    target's calls, or one turn with no step when the target is a plain answer."""
    calls = instance.target_calls
    return [[calls]] if calls else [[]]


# --- parsing and validation ----------------------------------------------------------------------


def _fail(where: str, message: str) -> StepDataError:
    return StepDataError(f"{where}: {message}")


def _tool(tool: Any, where: str) -> Tool:
    if not isinstance(tool, dict):
        raise _fail(where, f"a tool must be an object, got {type(tool).__name__}")
    if "function" in tool:
        if tool.get("type", "function") != "function":
            raise _fail(where, f"tool type must be 'function', got {tool.get('type')!r}")
        out = copy.deepcopy(tool)
        out["type"] = "function"
    elif "name" in tool:
        out = {"type": "function", "function": copy.deepcopy(tool)}
    else:
        raise _fail(where, "a tool needs a 'function' object (or is a bare function object with a 'name')")
    fn = out["function"]
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise _fail(where, "a tool's function needs a non-empty string 'name'")
    params = fn.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise _fail(where, f"parameters of {fn['name']!r} must be an object")
    if isinstance(params, dict) and not isinstance(params.get("properties", {}), dict):
        raise _fail(where, f"parameters.properties of {fn['name']!r} must be an object")
    return out


def _tools(tools: Any, where: str) -> tuple[Tool, ...]:
    if not isinstance(tools, list):
        raise _fail(where, f"'tools' must be a list, got {type(tools).__name__}")
    out = tuple(_tool(t, f"{where}: tools[{i}]") for i, t in enumerate(tools))
    names = [t["function"]["name"] for t in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise _fail(where, f"duplicate tool names {dup}")
    return out


def _call(call: Any, where: str) -> dict:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        raise _fail(where, "a tool call must be an object with a 'function' object")
    if call.get("type", "function") != "function":
        raise _fail(where, f"tool call type must be 'function', got {call.get('type')!r}")
    if "id" in call and not isinstance(call["id"], str):
        raise _fail(where, "a tool call 'id' must be a string")
    fn = call["function"]
    if not isinstance(fn.get("name"), str) or not fn["name"]:
        raise _fail(where, "a tool call needs a non-empty string function.name")
    if "arguments" not in fn:
        raise _fail(where, f"call to {fn['name']!r} has no 'arguments'")
    args = fn["arguments"]
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError as err:
            raise _fail(where, f"arguments of {fn['name']!r} are not valid JSON: {err}") from None
    if not isinstance(args, dict):
        raise _fail(where, f"arguments of {fn['name']!r} must be a JSON object, got {type(args).__name__}")
    out = copy.deepcopy(call)
    out["type"] = "function"
    out["function"] = {**copy.deepcopy(fn), "arguments": copy.deepcopy(args)}
    return out


def _message(msg: Any, where: str) -> tuple[Message, str | None]:
    """(normalised message, its reference rationale)."""
    if not isinstance(msg, dict):
        raise _fail(where, f"a message must be an object, got {type(msg).__name__}")
    role = msg.get("role")
    if role not in ROLES:
        raise _fail(where, f"role must be one of {ROLES}, got {role!r}")
    out = {k: copy.deepcopy(v) for k, v in msg.items() if k != "reference_rationale"}
    rationale = msg.get("reference_rationale")
    if rationale is not None and (role != "assistant" or not isinstance(rationale, str)):
        raise _fail(where, "reference_rationale must be a string on an assistant message")
    content = msg.get("content")
    if role == "assistant":
        if content is None:
            out["content"] = ""
        elif not isinstance(content, str):
            raise _fail(where, f"assistant content must be a string or null, got {type(content).__name__}")
        if "function_call" in msg:
            raise _fail(where, "the legacy 'function_call' field is not supported; use 'tool_calls'")
        calls = msg.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, list):
                raise _fail(where, "'tool_calls' must be a list")
            out["tool_calls"] = [_call(c, f"{where}: tool_calls[{j}]") for j, c in enumerate(calls)]
        if msg.get("reasoning_content") is not None and not isinstance(msg["reasoning_content"], str):
            raise _fail(where, "reasoning_content must be a string")
    else:
        if not isinstance(content, str):
            raise _fail(where, f"{role} content must be a string, got {type(content).__name__}")
        if role == "tool" and "name" in msg and not isinstance(msg["name"], str):
            raise _fail(where, "a tool message 'name' must be a string")
    return out, rationale


def parse_row(row: Any, where: str, *, default_id: str = "", default_category: str = "jsonl") -> Trajectory:
    """A normalised `Trajectory` from one row of the schema (our trajectory records included);
    raises `StepDataError` prefixed by `where` on anything else.

    JSONL schema (one JSON object per line; blank lines are skipped; a malformed row raises
    `StepDataError` naming the file and line):

      {"messages": [...],                      required, non-empty
       "tools": [...],                         required (may be empty)
       "id": str,                              optional; default "<file name>:<line>"
       "category": str,                        optional; default "jsonl"
       "reference_rationale": str | [str|null],  optional: a string when the row has one step, else one
                                               entry per assistant step (null: none for that step)
       "released_tools": {"<turn>": [tool]}}   optional: tools documented inside a later user turn (our
                                               BFCL records, miss_func); visible to steps from that turn on

      messages: {"role": "system" | "user", "content": str}
                {"role": "assistant", "content": str | null, "tool_calls": [call]?, "reasoning_content": str?,
                 "reference_rationale": str?}
                {"role": "tool", "content": str, "name": str?, "tool_call_id": str?}
      call:     {"id": str?, "type": "function"?, "function": {"name": str, "arguments": object | JSON string}}
      tool:     {"type": "function", "function": {"name", "description"?, "parameters"?}}, or the bare
                {"name", "description"?, "parameters"?} object (wrapped on load). Names are unique per row.

    Rules: the first step has a user message before it; a tool message follows an assistant message with
    calls (or another tool message); the row ends with an assistant message (trailing messages would be in
    no instance, so they are refused rather than dropped). Reasoning is read from `reasoning_content` only.

    Normalisation on load (what `reassemble` gives back): arguments given as JSON strings are parsed to
    objects, `"type": "function"` is added to calls and bare tools, an assistant `content` of null becomes
    "", and `reference_rationale` is moved off the messages onto the instances (`reassemble(...,
    rationales=True)` puts it back). Every other field of every message is kept as it was.

    Reference rationales are read from the data only (message field first, else the row field; both given
    and different is an error); none is generated here. They travel on `StepInstance.reference_rationale`
    for the judge and never reach the policy's context.
    """
    if not isinstance(row, dict):
        raise _fail(where, f"a row must be a JSON object, got {type(row).__name__}")
    for key in ("messages", "tools"):
        if key not in row:
            raise _fail(where, f"missing field {key!r}")
    raw = row["messages"]
    if not isinstance(raw, list) or not raw:
        raise _fail(where, "'messages' must be a non-empty list")
    tools = _tools(row["tools"], where)
    messages, rationales = [], []
    seen_user, prev = False, None
    for i, m in enumerate(raw):
        mw = f"{where}: messages[{i}]"
        msg, rationale = _message(m, mw)
        role = msg["role"]
        if role == "assistant":
            if not seen_user:
                raise _fail(mw, "an assistant step before any user message")
            rationales.append(rationale)
        elif role == "tool":
            if prev is None or not (prev["role"] == "tool" or (prev["role"] == "assistant" and prev.get("tool_calls"))):
                raise _fail(mw, "a tool message must follow an assistant message with tool_calls")
        seen_user |= role == "user"
        messages.append(msg)
        prev = msg
    if messages[-1]["role"] != "assistant":
        raise _fail(where, f"the chat must end with an assistant message, not {messages[-1]['role']!r}")
    rationales = _row_rationales(row.get("reference_rationale"), rationales, where)
    released = _released(row.get("released_tools"), where)
    tid = row.get("id", default_id)
    category = row.get("category", default_category)
    if not isinstance(tid, str) or not tid:
        raise _fail(where, "'id' must be a non-empty string")
    if not isinstance(category, str):
        raise _fail(where, "'category' must be a string")
    return Trajectory(tid, category, tuple(messages), tools, released, tuple(rationales))


def _row_rationales(value: Any, from_messages: list[str | None], where: str) -> list[str | None]:
    n = len(from_messages)
    if value is None:
        return from_messages
    if isinstance(value, str):
        if n != 1:
            raise _fail(
                where, f"a string reference_rationale needs a one-step row; this one has {n} steps (use a list)"
            )
        value = [value]
    if not isinstance(value, list) or len(value) != n or not all(v is None or isinstance(v, str) for v in value):
        raise _fail(where, f"reference_rationale must be a string or a list of {n} strings/nulls (one per step)")
    out = []
    for k, (row_v, msg_v) in enumerate(zip(value, from_messages)):
        if row_v is not None and msg_v is not None and row_v != msg_v:
            raise _fail(where, f"step {k}: the row's and the message's reference_rationale differ")
        out.append(msg_v if msg_v is not None else row_v)
    return out


def _released(value: Any, where: str) -> tuple[tuple[int, tuple[Tool, ...]], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise _fail(where, "'released_tools' must be an object {turn: [tools]}")
    out = []
    for key, tools in value.items():
        try:
            turn = int(key)
        except (TypeError, ValueError):
            raise _fail(where, f"released_tools key {key!r} is not a turn number") from None
        out.append((turn, _tools(tools, f"{where}: released_tools[{key!r}]")))
    return tuple(sorted(out, key=lambda item: item[0]))


def load_jsonl(path: str | Path) -> list[Trajectory]:
    """The trajectories of a JSONL file of the schema; a malformed row raises `StepDataError`
    naming the file and the (1-based) line."""
    path = Path(path)
    try:
        out = jsonl.read(
            path,
            what="trajectories",
            check=lambda row, where: parse_row(row, where, default_id=f"{path.name}:{where.rsplit(':', 1)[1]}"),
        )
    except StepDataError:
        raise
    except InputError as err:  # not JSON, empty, missing: the reader's words
        raise StepDataError(str(err)) from None
    ids = [t.id for t in out]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise _fail(str(path), f"duplicate row ids {dup[:5]}")
    return out


def load_jsonl_files(paths: Sequence[str | Path]) -> list[Trajectory]:
    """The trajectories of several JSONL files (e.g. ToolACE, xLAM and Hammer data), in order; a row id
    used in two files raises `StepDataError` naming both files (ids default to "<file name>:<line>")."""
    if not paths:
        raise StepDataError("no JSONL file given")
    out: list[Trajectory] = []
    where: dict[str, str] = {}
    for path in paths:
        rows = load_jsonl(path)
        for t in rows:
            if t.id in where:
                raise _fail(str(path), f"row id {t.id!r} is also a row of {where[t.id]}")
            where[t.id] = str(path)
        out += rows
    return out


# --- decomposition -------------------------------------------------------------------------------


def _turn_of(messages: Sequence[Message], index: int) -> int:
    """The user turn message `index` belongs to: the number of runs of user messages before it, less one."""
    turn, prev = -1, None
    for m in messages[:index]:
        if m["role"] == "user" and prev != "user":
            turn += 1
        prev = m["role"]
    return turn


def decompose(trajectory: Trajectory, *, reward: str = "exact") -> list[StepInstance]:
    """The K single-step instances of a K-step trajectory, in step order. The instances share the
    trajectory's message and tool objects (read-only by convention: the environment hands out copies)."""
    steps = trajectory.step_indices
    rationales = trajectory.rationales or (None,) * len(steps)
    out = []
    for k, i in enumerate(steps):
        turn = _turn_of(trajectory.messages, i)
        released = tuple(t for when, tools in trajectory.released_tools if when <= turn for t in tools)
        out.append(
            StepInstance(
                id=f"{trajectory.id}:step{k}",
                category=trajectory.category,
                trajectory_id=trajectory.id,
                step=k,
                num_steps=len(steps),
                context=trajectory.messages[:i],
                tools=trajectory.tools,
                target=trajectory.messages[i],
                released_tools=released,
                reference_rationale=rationales[k],
                reward=reward,
            )
        )
    return out


def reassemble(instances: Sequence[StepInstance], *, rationales: bool = False) -> list[Message]:
    """The trajectory's messages from its instances (all K, in step order): each context must extend
    the messages so far; its new messages and then its target are appended. `rationales=True` puts
    each instance's reference rationale back on its target message."""
    if not instances:
        raise ValueError("no instances to reassemble")
    first = instances[0]
    if [i.step for i in instances] != list(range(first.num_steps)) or any(
        i.trajectory_id != first.trajectory_id for i in instances
    ):
        raise ValueError(f"need the {first.num_steps} steps of {first.trajectory_id!r} in order")
    plain: list[Message] = []  # as the contexts hold them (no rationale fields)
    out: list[Message] = []
    for inst in instances:
        if list(inst.context[: len(plain)]) != plain:
            raise ValueError(f"{inst.id}: its context does not extend the steps before it")
        new = copy.deepcopy(list(inst.context[len(plain) :]))
        target = copy.deepcopy(inst.target)
        plain += copy.deepcopy(new) + [copy.deepcopy(target)]
        if rationales and inst.reference_rationale is not None:
            target["reference_rationale"] = inst.reference_rationale
        out += new + [target]
    return out


def expert_trajectories(tasks: Iterable[Any]) -> list[Trajectory]:
    """Normalised expert trajectories of BFCL-format tasks (`bfcl.Task`: the BFCL split or a world)."""

    out = []
    for task in tasks:
        script = trajectories.bfcl.ground_truth_script(task)  # as `expert_trajectory`, without its official check
        record = trajectories.record_episode(task, script, kind="expert", official=False)
        out.append(parse_row(record, f"expert trajectory {task.id}", default_category=task.category))
    return out


def instances_of(trajectories: Iterable[Trajectory], *, reward: str = "exact", calls_only: bool = False):
    """All instances of the trajectories, in order; `calls_only` keeps the tool-calling steps."""
    out = [inst for t in trajectories for inst in decompose(t, reward=reward)]
    return [i for i in out if i.target.get("tool_calls")] if calls_only else out


def split_rows(trajectories: Sequence[Trajectory], test_fraction: float, seed: int) -> dict[str, list[Trajectory]]:
    """A seeded split of whole trajectories (no trajectory's steps on both sides): round(n * fraction)
    rows go to 'test', in file order on each side."""
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    order = list(range(len(trajectories)))
    random.Random(f"steps-split:{seed}").shuffle(order)
    test = set(order[: round(len(trajectories) * test_fraction)])
    return {
        "train": [t for i, t in enumerate(trajectories) if i not in test],
        "test": [t for i, t in enumerate(trajectories) if i in test],
    }


# --- Hammer-style masking ------------------------------------------------------------------------

_ALPHABET = string.ascii_lowercase + string.digits


def _fn_doc_names(doc: Mapping[str, Any]) -> tuple[str, list[str]]:
    params = doc.get("parameters") if isinstance(doc.get("parameters"), dict) else {}
    props = params.get("properties") if isinstance(params.get("properties"), dict) else {}
    return doc["name"], list(props)


def _release_docs(content: str) -> tuple[list[dict], str] | None:
    """The function docs of a user message in BFCL's release form (`bfcl.release_message`: the docs as
    `json.dumps` writes them, a newline, text), or None for any other content."""
    head, sep, tail = content.partition("\n")
    if not sep or not head.startswith("[{"):
        return None
    try:
        docs = json.loads(head)
    except (ValueError, RecursionError):
        return None
    if not all(isinstance(d, dict) and isinstance(d.get("name"), str) for d in docs) or json.dumps(docs) != head:
        return None
    return docs, sep + tail


def _collect(inst: StepInstance) -> tuple[dict[str, list[str]], set[str]]:
    """Function -> argument names in first-seen order (tools, released tools, release docs, calls),
    and every name string in use (so that masked names never collide with one)."""
    names: dict[str, list[str]] = {}
    used: set[str] = set()

    def add(fn: str, args: Iterable[str]) -> None:
        seen = names.setdefault(fn, [])
        used.add(fn)
        for a in args:
            used.add(a)
            if a not in seen:
                seen.append(a)

    for tool in inst.tools + inst.released_tools:
        add(*_fn_doc_names(tool["function"]))
    for msg in inst.context + (inst.target,):
        if msg["role"] == "user":
            docs = _release_docs(msg["content"])
            for doc in docs[0] if docs else []:
                add(*_fn_doc_names(doc))
        elif msg["role"] == "tool" and isinstance(msg.get("name"), str):
            used.add(msg["name"])
        for call in msg.get("tool_calls") or []:
            add(call["function"]["name"], call["function"]["arguments"])
    return names, used


def _random_name(rng: random.Random, taken: set[str]) -> str:
    while True:
        name = rng.choice(string.ascii_lowercase) + "".join(rng.choices(_ALPHABET, k=7))
        if name not in taken:
            taken.add(name)
            return name


def make_name_map(inst: StepInstance, seed: int = 0) -> NameMap:
    """A random bijective renaming of the instance's functions and (per function) arguments, seeded by
    (seed, instance id); masked names are 8 characters [a-z][a-z0-9]{7} and never equal a name in use."""
    names, used = _collect(inst)
    rng = random.Random(f"mask:{seed}:{inst.id}")
    taken = set(used)
    functions = tuple((fn, _random_name(rng, taken)) for fn in names)
    arguments = tuple((fn, tuple((a, _random_name(rng, taken)) for a in args)) for fn, args in names.items())
    return NameMap(functions, arguments)


def _rename_doc(doc: dict, fns: Mapping[str, str], args: Mapping[str, Mapping[str, str]]) -> dict:
    """A renamed function doc; descriptions and schemas below the top-level names are shared, not copied."""
    amap = args.get(doc["name"], {})
    out = {**doc, "name": fns.get(doc["name"], doc["name"])}
    params = doc.get("parameters")
    if isinstance(params, dict):
        params = dict(params)
        if isinstance(params.get("properties"), dict):
            params["properties"] = {amap.get(k, k): v for k, v in params["properties"].items()}
        if isinstance(params.get("required"), list):
            params["required"] = [amap.get(k, k) if isinstance(k, str) else k for k in params["required"]]
        out["parameters"] = params
    return out


def _rename_tool(tool: Tool, fns, args) -> Tool:
    return {**tool, "function": _rename_doc(tool["function"], fns, args)}


def _rename_message(msg: Message, fns, args) -> Message:
    """A renamed copy; a message without names in it is returned as it is (shared, not copied)."""
    role = msg["role"]
    if role == "user":
        docs = _release_docs(msg["content"])
        if docs is None:
            return msg
        return {**msg, "content": json.dumps([_rename_doc(d, fns, args) for d in docs[0]]) + docs[1]}
    if role == "tool":
        name = msg.get("name")
        return {**msg, "name": fns.get(name, name)} if isinstance(name, str) and name in fns else msg
    if not msg.get("tool_calls"):
        return msg
    calls = []
    for call in msg["tool_calls"]:
        fn = call["function"]
        amap = args.get(fn["name"], {})
        renamed = {
            **fn,
            "name": fns.get(fn["name"], fn["name"]),
            "arguments": {amap.get(k, k): copy.deepcopy(v) for k, v in fn["arguments"].items()},
        }
        calls.append({**call, "function": renamed})
    return {**msg, "tool_calls": calls}


def _rename(inst: StepInstance, fns, args, name_map: NameMap | None) -> StepInstance:
    return dataclasses.replace(
        inst,
        context=tuple(_rename_message(m, fns, args) for m in inst.context),
        tools=tuple(_rename_tool(t, fns, args) for t in inst.tools),
        target=_rename_message(inst.target, fns, args),
        released_tools=tuple(_rename_tool(t, fns, args) for t in inst.released_tools),
        name_map=name_map,
    )


def mask(inst: StepInstance, seed: int = 0) -> StepInstance:
    """The instance with every function name and every top-level argument name replaced by a random string
    (Hammer, Lin et al. 2024), consistently across the tools, the released tools, the
    history (calls, tool-message names, BFCL release docs in user messages) and the target; descriptions,
    values and free text (message content, `reasoning_content`, tool results, rationales: they may still
    spell a name) are untouched. The mapping is kept on the instance and `unmask(mask(x)) == x`.
    """
    if inst.name_map is not None:
        raise ValueError(f"{inst.id} is already masked")
    name_map = make_name_map(inst, seed)
    return _rename(inst, *name_map.forward(), name_map)


def unmask(inst: StepInstance) -> StepInstance:
    """The original of a masked instance."""
    if inst.name_map is None:
        raise ValueError(f"{inst.id} is not masked")
    return _rename(inst, *inst.name_map.inverse(), None)


def unmask_calls(calls: Sequence[Mapping[str, Any]], name_map: NameMap) -> list[dict]:
    """Calls written with masked names (e.g. a policy's output) in the original names; unknown names
    are kept."""
    fns, args = name_map.inverse()
    out = []
    for c in calls:
        amap = args.get(c["name"], {})
        arguments = c.get("arguments")
        if isinstance(arguments, dict):
            arguments = {amap.get(k, k): v for k, v in arguments.items()}
        out.append({"name": fns.get(c["name"], c["name"]), "arguments": copy.deepcopy(arguments)})
    return out
