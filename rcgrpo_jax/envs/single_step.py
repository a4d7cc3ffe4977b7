"""One single-step instance (`envs.step_instance.StepInstance`) as an `Environment`, and its outcome rewards.

Episode: `reset()` gives the instance's context messages and tools; the policy takes one step. A step
with calls is recorded (not executed: there is no world state behind a decomposed step) and ends the
episode, `done_reason = "completed"`; each call's result string is `NOT_EXECUTED`. An answer without
calls ends it through `end_turn()` (which returns None). A second `step` raises, as on `BFCLEnv`.

Reward: the step's calls against the target's, both as {name, arguments}, order-free (calls of one
step are parallel). Before comparing, with `fill_defaults`, each call's missing top-level arguments
are filled from the `"default"` of its tool's JSON schema (the instance's tools and released tools;
BFCL's targets state only the arguments they give, as `bfcl.ground_truth_calls` does), and values
compare as JSON data (`rewards.canonical`: 1 == 1.0, booleans distinct from numbers). Arguments that
are not plain JSON objects (bounded depth and size) never match.

STEP_REWARDS (by name; `StepInstance.reward` or `SingleStepConfig.reward` chooses): `exact` and `partial`
(ToolRL's credit), each defined in its docstring. `official_verdict` is our exact match (BFCL has no checker
for one step of a multi-turn episode), with an error type saying how it failed.

Rollouts: a step whose output does not parse never reaches `step`, and the engine by default lets the
model try again; run single-step sources with `RolloutConfig(max_steps_per_turn=0)` so that every
episode is exactly one assistant step (a call step then ends as "step_limit", scored as usual).

The judge: `SingleStepEnv.reference_rationale` (and `trace()["reference_rationale"]`) is the data's
rationale for the step, None when the data has none.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
from typing import Any, Callable, Mapping, Sequence

from rcgrpo_jax.envs import rewards
from rcgrpo_jax.envs.base import Message, Tool
from rcgrpo_jax.envs.dispatch import Limits, normalize_call
from rcgrpo_jax.envs.schema import check_json_value
from rcgrpo_jax.envs.step_instance import StepInstance
from rcgrpo_jax.registry import Registry

COMPLETED = "completed"
NOT_EXECUTED = "[single-step episode: the call is scored against the reference step, not executed]"
CHECKER = "single_step_exact (ours: BFCL has no checker for one step of a multi-turn episode)"

Call = tuple[Any, Any]  # (name, arguments dict) or (name | None, None) for a call that cannot match
StepReward = Callable[[Sequence[Call], Sequence[Call]], float]  # (predicted, target) -> reward
STEP_REWARDS: Registry[StepReward] = Registry("step reward")


def _key(call: Call) -> tuple | None:
    name, args = call
    return None if args is None or type(name) is not str else rewards.call_key(name, args)


@STEP_REWARDS.register("exact")
def exact(predicted: Sequence[Call], target: Sequence[Call]) -> float:
    """1 if the multiset of predicted calls equals the target's, else 0 (a plain-answer target is matched by an
    answer without calls)."""
    keys = [_key(c) for c in predicted]
    if any(k is None for k in keys):
        return 0.0
    return float(collections.Counter(keys) == collections.Counter(_key(c) for c in target))


def _pair_score(g: Mapping[str, Any], p: Mapping[str, Any]) -> float:
    gk, pk = set(g), set(p)
    union = gk | pk
    jaccard = len(gk & pk) / len(union) if union else 1.0
    values = sum(1 for k in gk & pk if rewards.canonical(g[k]) == rewards.canonical(p[k]))
    return jaccard + values


@STEP_REWARDS.register("partial")
def partial(predicted: Sequence[Call], target: Sequence[Call]) -> float:
    """ToolRL's name + argument-key + argument-value credit (Qian et al. 2025), rescaled to [0, 1]:

        R = r_name + max over matchings M of sum_{(g, p) in M} [ J(keys g, keys p) + #{k in keys g: g[k] == p[k]} ]
        partial = R / S_max,   S_max = 1 + |G| + sum_{g in G} |keys g|

    with r_name the Jaccard index of the predicted and target name multisets (1 when both are empty), J the
    Jaccard index of argument-key sets (1 when both are empty), M a one-to-one matching of target calls G to
    predicted calls of the same name (maximised exactly, Hungarian). ToolRL's R_correct in [-3, 3] is
    6 * partial - 3; its format reward is not part of it. partial == 1 exactly when exact == 1."""
    gn = collections.Counter(n for n, _ in target)
    pn = collections.Counter(n if type(n) is str else None for n, _ in predicted)
    union = sum((gn | pn).values())
    r_name = sum((gn & pn).values()) / union if union else 1.0
    s_max = 1 + len(target) + sum(len(a) for _, a in target)
    matched = 0.0
    if target and predicted:
        import numpy as np
        from scipy.optimize import linear_sum_assignment

        w = np.zeros((len(target), len(predicted)))
        for i, (gname, gargs) in enumerate(target):
            for j, (pname, pargs) in enumerate(predicted):
                if pargs is not None and pname == gname:
                    w[i, j] = _pair_score(gargs, pargs)
        rows, cols = linear_sum_assignment(w, maximize=True)
        matched = float(w[rows, cols].sum())
    return (r_name + matched) / s_max


# --- call normalisation --------------------------------------------------------------------------


def _defaults(tools: Sequence[Tool]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for tool in tools:
        fn = tool["function"]
        props = (fn.get("parameters") or {}).get("properties") or {}
        out.setdefault(
            fn["name"], {k: v["default"] for k, v in props.items() if isinstance(v, dict) and "default" in v}
        )
    return out


def normalize_calls(raw_calls: Sequence[Any], tools: Sequence[Tool], *, fill_defaults: bool = True) -> list[Call]:
    """Model or target calls as (name, arguments) pairs ready to compare; a call whose name is not a
    string or whose arguments are not a plain JSON object (see `schema.check_json_value`) becomes
    (name | None, None), which matches nothing."""
    limits = Limits()
    defaults = _defaults(tools) if fill_defaults else {}
    out: list[Call] = []
    for raw in raw_calls:
        name, args, err = normalize_call(raw)
        ok = (
            err is None
            and type(name) is str
            and type(args) is dict
            and check_json_value(args, max_depth=limits.max_argument_depth, max_chars=limits.max_argument_chars) is None
        )
        if not ok:
            out.append((name if type(name) is str else None, None))
            continue
        filled = {k: copy.deepcopy(v) for k, v in defaults.get(name, {}).items() if k not in args}
        out.append((name, {**copy.deepcopy(args), **filled}))
    return out


def error_type(predicted: Sequence[Call], target: Sequence[Call]) -> str | None:
    """None for an exact match; else how the step missed the target."""
    if exact(predicted, target) == 1.0:
        return None
    if target and not predicted:
        return "single_step:no_call"
    if predicted and not target:
        return "single_step:unexpected_call"
    pn, gn = collections.Counter(n for n, _ in predicted), collections.Counter(n for n, _ in target)
    if pn != gn:
        if not pn - gn:
            return "single_step:missing_call"  # a strict sub-multiset of the target's functions
        if not gn - pn:
            return "single_step:extra_call"
        return "single_step:wrong_function"
    return "single_step:wrong_arguments"


# --- environment ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SingleStepConfig:
    reward: str | None = None  # a STEP_REWARDS name; None = the instance's own (`StepInstance.reward`)
    fill_defaults: bool = True  # fill schema defaults on both sides before comparing


class SingleStepEnv:
    """One single-step instance as an episode (module docstring; protocol in `envs.base`)."""

    def __init__(self, instance: StepInstance, config: SingleStepConfig = SingleStepConfig()):
        self.task = instance
        self.config = config
        self.reward_name = config.reward or instance.reward
        self._reward_fn = STEP_REWARDS.get(self.reward_name)  # fail at construction on a typo
        self.done = True
        self.done_reason: str | None = None
        self._raw_calls: list[Any] = []
        self._stepped = False

    @property
    def reference_rationale(self) -> str | None:
        """The data's reference rationale for this step (for the judge), or None."""
        return self.task.reference_rationale

    # protocol -------------------------------------------------------------------------------
    def reset(self) -> tuple[list[Message], list[Tool]]:
        self._raw_calls = []
        self._stepped = False
        self.done, self.done_reason = False, None
        return copy.deepcopy(list(self.task.context)), copy.deepcopy(list(self.task.tools))

    def step(self, tool_calls: Sequence[Any]) -> list[str]:
        if self.done:
            raise RuntimeError(f"episode {self.task.id} is over ({self.done_reason}); call reset()")
        if not tool_calls:
            return []
        self._raw_calls = copy.deepcopy(list(tool_calls))
        self._stepped = True
        self.done, self.done_reason = True, COMPLETED
        return [NOT_EXECUTED] * len(self._raw_calls)

    def end_turn(self) -> None:
        if not self.done:
            self.done, self.done_reason = True, COMPLETED
        return None

    def reward(self) -> float:
        return float(self._reward_fn(*self._compared()))

    def official_verdict(self) -> dict:
        """Our exact match, named as such (`checker`), with an error type saying how it failed: single_step:
        no_call, unexpected_call, missing_call / extra_call (the function multisets nest), wrong_function,
        wrong_arguments."""
        predicted, target = self._compared()
        etype = error_type(predicted, target)
        return {
            "valid": etype is None,
            "error_type": etype,
            "error_message": None if etype is None else f"expected {self._show(target)}, got {self._show(predicted)}",
            "checker": CHECKER,
        }

    def trace(self) -> dict:
        predicted, target = self._compared()
        return {
            "id": self.task.id,
            "category": self.task.category,
            "trajectory_id": self.task.trajectory_id,
            "step": self.task.step,
            "done": self.done,
            "done_reason": self.done_reason,
            "masked": self.task.name_map is not None,
            "reward_name": self.reward_name,
            "reward": self.reward(),
            "exact": exact(predicted, target) == 1.0,
            "calls": [{"name": n, "arguments": a} for n, a in predicted],
            "target_calls": [{"name": n, "arguments": a} for n, a in target],
            "reference_rationale": self.task.reference_rationale,
        }

    # details ----------------------------------------------------------------------------------
    def _compared(self) -> tuple[list[Call], list[Call]]:
        tools = list(self.task.tools) + list(self.task.released_tools)
        fill = self.config.fill_defaults
        return (
            normalize_calls(self._raw_calls, tools, fill_defaults=fill),
            normalize_calls(self.task.target_calls, tools, fill_defaults=fill),
        )

    @staticmethod
    def _show(calls: Sequence[Call]) -> str:
        return ", ".join(f"{n}({a})" for n, a in calls)[:300] or "no call"
