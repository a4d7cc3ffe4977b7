"""Expert and failure trajectories in OpenAI chat format (paper, Appendix B).

A trajectory record (one JSON line) is what SFT, RCTP-FT and the trainers' exploration rollouts
share:

    {"id", "category", "kind": "expert" | "failure" | "rollout", "failure": str | None,
     "messages": [...], "tools": [...], "released_tools": {"<turn>": [...]},
     "reward": float, "official_valid": bool | None}

`messages` holds user turns, assistant messages with an explicit `tool_calls` field
([{"id", "type": "function", "function": {"name", "arguments": {...}}}], arguments as a JSON object
as HF chat templates expect) and, when the model reasoned, its `reasoning_content` (the text of its
``<think>`` block, which Qwen3's template renders), tool messages ({"role": "tool", "tool_call_id", "name", "content"}) and
a closing assistant message per turn. `tools` are the tools of the first turn; on miss_func the
functions released later are listed under `released_tools` by turn.

Experts replay each task's ground truth through `BFCLEnv` (one step per turn holding all of its
calls, BFCL's own form). The records do not depend on the chat template: a template that takes one
call per message (LLaMA-3.1's official one) renders a several-call step in BFCL's content form
(`rcgrpo_jax.chat.template_messages`), and a template that rewrites the past (Qwen3) is tokenised one
sample per assistant step (`rcgrpo_jax.chat.step_samples`). Failures perturb an expert script (wrong tool, wrong or missing parameter,
premature termination, skipped turn) and are kept only when our reward scores them 0.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from rcgrpo_jax import jsonl
from rcgrpo_jax.envs import bfcl
from rcgrpo_jax.envs.bfcl import BFCLEnv, EnvConfig, Task

DONE_TEXT = "I have completed the requested operations."
CANNOT_TEXT = (
    "I cannot complete this request with the functions and information I have. Could you provide what is missing?"
)

Script = list[list[list[dict]]]  # turn -> steps -> calls {name, arguments}
RECORD_KEYS = ("id", "category", "kind", "failure", "messages", "tools", "released_tools", "reward", "official_valid")


# --- recording an episode ------------------------------------------------------------------------


def record_episode(
    task: Task,
    script: Script,
    *,
    kind: str,
    failure: str | None = None,
    stop_after_turn: int | None = None,
    config: EnvConfig = EnvConfig(),
    official: bool = True,
) -> dict:
    """Play `script` through a fresh environment and write the conversation as a record.

    `stop_after_turn` ends the conversation after that turn's closing message (premature
    termination); the episode is then unfinished, which our reward and the official verdict fail.
    """
    env = BFCLEnv(task, config)
    new_messages, tools = env.reset()
    first_tools = tools
    known = {t["function"]["name"] for t in tools}
    released: dict[str, list] = {}
    messages: list[dict] = list(new_messages)
    turn = 0
    while True:
        steps = script[turn] if turn < len(script) else []
        acted = False
        for step_index, calls in enumerate(steps):
            if env.done or not calls:
                continue
            ids = [f"call_{turn}_{step_index}_{i}" for i in range(len(calls))]
            messages.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": cid,
                            "type": "function",
                            "function": {"name": c["name"], "arguments": copy.deepcopy(c["arguments"])},
                        }
                        for cid, c in zip(ids, calls)
                    ],
                }
            )
            results = env.step(calls)
            messages.extend(
                {"role": "tool", "tool_call_id": cid, "name": c["name"], "content": r}
                for cid, c, r in zip(ids, calls, results)
            )
            acted = True
        messages.append({"role": "assistant", "content": DONE_TEXT if acted else CANNOT_TEXT})
        if env.done or (stop_after_turn is not None and turn >= stop_after_turn):
            break
        nxt = env.end_turn()
        if nxt is None:
            break
        new_messages, tools = nxt
        turn += 1
        added = [t for t in tools if t["function"]["name"] not in known]
        if added:
            released[str(turn)] = added
            known.update(t["function"]["name"] for t in added)
        messages.extend(new_messages)
    return {
        "id": task.id,
        "category": task.category,
        "kind": kind,
        "failure": failure,
        "messages": messages,
        "tools": first_tools,
        "released_tools": released,
        "reward": env.reward(),
        "official_valid": env.official_verdict()["valid"] if official else None,
    }


def expert_trajectory(task: Task, config: EnvConfig = EnvConfig()) -> dict:
    return record_episode(task, bfcl.ground_truth_script(task), kind="expert", config=config)


# --- failure generators --------------------------------------------------------------------------
# Each takes (task, expert script, rng, first) and yields candidate (script, stop_after_turn)
# perturbations; `failure_trajectory` keeps the first whose reward is 0. The sites (calls or turns) are
# tried in a random order, or earliest first with first=True: a failure that leaves the expert path at
# its first possible place, so the reward goal decides the very first action (FAILURE_SITES).

Candidate = tuple[Script, int | None]
Generator = Callable[[Task, Script, random.Random, bool], Iterator[Candidate]]
FAILURE_GENERATORS: dict[str, Generator] = {}
FAILURE_SITES = ("any", "first")


def failure_kinds(spec: str) -> tuple[str, ...]:
    """The generator names of a `data.failure_kinds` value: "all", or a comma-separated subset of
    FAILURE_GENERATORS (kept in the registry's order, so a subset draws the same records as the full set)."""
    if spec == "all":
        return tuple(FAILURE_GENERATORS)
    names = [n.strip() for n in str(spec).split(",") if n.strip()]
    unknown = [n for n in names if n not in FAILURE_GENERATORS]
    if unknown or not names:
        raise ValueError(
            f"failure kinds {spec!r}: expected 'all' or a comma-separated subset of {', '.join(FAILURE_GENERATORS)}"
            + (f"; unknown: {', '.join(unknown)}" if unknown else "")
        )
    return tuple(n for n in FAILURE_GENERATORS if n in names)


def _ordered(sites: list, rng: random.Random, first: bool) -> list:
    """The sites to try: earliest first, or shuffled."""
    if first:
        return sorted(sites)
    rng.shuffle(sites)
    return sites


def _generator(name: str) -> Callable[[Generator], Generator]:
    def deco(fn: Generator) -> Generator:
        FAILURE_GENERATORS[name] = fn
        return fn

    return deco


def _call_sites(script: Script) -> list[tuple[int, int, int]]:
    return [(t, s, c) for t, steps in enumerate(script) for s, calls in enumerate(steps) for c in range(len(calls))]


def _specs(task: Task) -> dict:
    return bfcl.all_specs(task)


@_generator("wrong_tool")
def wrong_tool(task: Task, script: Script, rng: random.Random, first: bool = False) -> Iterator[Candidate]:
    """Call a sibling tool of the same class that accepts the same arguments (e.g. cp for mv)."""
    specs = _specs(task)
    for t, s, c in _ordered(_call_sites(script), rng, first):
        call = script[t][s][c]
        own = specs[call["name"]]
        given = set(call["arguments"])
        siblings = sorted(
            name
            for name, spec in specs.items()
            if name != call["name"]
            and spec.class_name == own.class_name
            and given <= set(spec.signature.parameters)
            and {p for p, v in spec.signature.parameters.items() if v.default is v.empty} <= given
        )
        rng.shuffle(siblings)
        for sibling in siblings:
            out = copy.deepcopy(script)
            out[t][s][c]["name"] = sibling
            yield out, None


def _mutate(value: Any, rng: random.Random, pool: Sequence[str]) -> Any:
    if type(value) is bool:
        return not value
    if type(value) is int:
        return value + rng.choice([1, -1, 10])
    if type(value) is float:
        return value * rng.choice([0.5, 2.0]) + 1.0
    if type(value) is str:
        others = [p for p in pool if p != value]
        return rng.choice(others) if others and rng.random() < 0.5 else value + "_old"
    if type(value) is list:
        return value[:-1] if value else ["item"]
    if type(value) is dict:
        return dict(list(value.items())[:-1]) if value else {"key": "value"}
    return value


@_generator("wrong_parameter")
def wrong_parameter(task: Task, script: Script, rng: random.Random, first: bool = False) -> Iterator[Candidate]:
    """Change one argument to a plausible wrong value, or leave one out."""
    pool = sorted(
        {v for turn in script for step in turn for call in step for v in call["arguments"].values() if type(v) is str}
    )
    sites = [site for site in _call_sites(script) if script[site[0]][site[1]][site[2]]["arguments"]]
    for t, s, c in _ordered(sites, rng, first):
        keys = sorted(script[t][s][c]["arguments"])
        rng.shuffle(keys)
        for key in keys:
            out = copy.deepcopy(script)
            args = out[t][s][c]["arguments"]
            if rng.random() < 0.25:
                del args[key]
            else:
                args[key] = _mutate(args[key], rng, pool)
            yield out, None


@_generator("premature_termination")
def premature_termination(task: Task, script: Script, rng: random.Random, first: bool = False) -> Iterator[Candidate]:
    """Stop the conversation inside a turn that has calls, after a strict prefix of them (no call with
    first=True)."""
    turns = [t for t, steps in enumerate(script) if any(steps)]
    for t in _ordered(turns, rng, first):
        calls = [call for step in script[t] for call in step]
        keep = 0 if first else rng.randrange(len(calls))
        out = copy.deepcopy(script[: t + 1])
        out[t] = [calls[:keep]] if keep else []
        yield out, t


@_generator("skipped_turn")
def skipped_turn(task: Task, script: Script, rng: random.Random, first: bool = False) -> Iterator[Candidate]:
    """Take no action in one turn that needs some; the conversation goes on."""
    turns = [t for t, steps in enumerate(script) if any(steps)]
    for t in _ordered(turns, rng, first):
        out = copy.deepcopy(script)
        out[t] = []
        yield out, None


def failure_trajectory(
    task: Task,
    kind: str,
    *,
    seed: int = 0,
    max_tries: int = 8,
    site: str = "any",
    config: EnvConfig = EnvConfig(),
) -> dict | None:
    """A verified failure (reward 0) of the given kind for `task`, or None if none was found. `site`: where
    the perturbation goes ('any': a random call or turn; 'first': the earliest one where it fails)."""
    if site not in FAILURE_SITES:
        raise ValueError(f"failure site {site!r}: expected one of {FAILURE_SITES}")
    rng = random.Random(f"{seed}:{task.id}:{kind}")
    script = bfcl.ground_truth_script(task)
    for tries, (candidate, stop) in enumerate(FAILURE_GENERATORS[kind](task, script, rng, site == "first")):
        if tries >= max_tries:
            break
        record = record_episode(task, candidate, kind="failure", failure=kind, stop_after_turn=stop, config=config)
        if record["reward"] == 0.0:
            return record
    return None


def failure_trajectories(
    task: Task,
    kinds: Iterable[str] = tuple(FAILURE_GENERATORS),
    *,
    seed: int = 0,
    site: str = "any",
    config: EnvConfig = EnvConfig(),
) -> list[dict]:
    out = []
    for kind in kinds:
        record = failure_trajectory(task, kind, seed=seed, site=site, config=config)
        if record is not None:
            out.append(record)
    return out


# --- the record format ---------------------------------------------------------------------------


def rollout_record(
    task_id: str,
    messages: list[dict],
    tools: list[dict],
    reward: float,
    *,
    released_tools: dict | None = None,
    official_valid: bool | None = None,
    kind: str = "rollout",
    failure: str | None = None,
) -> dict:
    """A record for a model's exploration rollout, in the same format as experts and failures."""
    record = {
        "id": task_id,
        "category": task_id.rsplit("_", 1)[0][len("multi_turn_") :],
        "kind": kind,
        "failure": failure,
        "messages": messages,
        "tools": tools,
        "released_tools": released_tools or {},
        "reward": float(reward),
        "official_valid": official_valid,
    }
    validate_record(record)
    return record


def validate_record(record: dict) -> None:
    """Raise ValueError unless `record` has the trajectory format described in the module doc."""
    missing = [k for k in RECORD_KEYS if k not in record]
    if missing:
        raise ValueError(f"record misses {missing}")
    messages = record["messages"]
    if not messages or messages[0].get("role") != "user":
        raise ValueError("a trajectory starts with a user message")
    pending: set[str] = set()
    for i, msg in enumerate(messages):
        role = msg.get("role")
        if role == "assistant":
            if pending:
                raise ValueError(f"message {i}: tool results missing for {sorted(pending)}")
            if not isinstance(msg.get("reasoning_content", ""), str):
                raise ValueError(f"message {i}: reasoning_content must be a string")
            for call in msg.get("tool_calls", []):
                fn = call.get("function", {})
                if not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments"), dict):
                    raise ValueError(f"message {i}: tool calls need a name and object arguments")
                pending.add(call["id"])
        elif role == "tool":
            if msg.get("tool_call_id") not in pending or not isinstance(msg.get("content"), str):
                raise ValueError(f"message {i}: tool message without a matching call")
            pending.discard(msg["tool_call_id"])
        elif role == "user":
            if pending:
                raise ValueError(f"message {i}: user message before all tool results")
            if not isinstance(msg.get("content"), str):
                raise ValueError(f"message {i}: user content must be a string")
        else:
            raise ValueError(f"message {i}: unexpected role {role!r}")


def write_jsonl(path: str | Path, records: Iterable[dict]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def read_jsonl(path: str | Path) -> list[dict]:
    """The records of a file `write_jsonl` wrote (`jsonl.read`: a bad line raises `InputError` naming
    FILE:LINE; an empty file is an empty list)."""
    return jsonl.read(path, what="records", check=jsonl.json_object(), allow_empty=True)
