"""The paper's datasets, written as JSONL in a given directory (nothing generated is committed).

- SFT: expert trajectories only.
- RCTP-FT: expert and failure trajectories 1:1, with the reward goal appended to the first user
  message: "<content>\\n\\n[Reward Goal: <|high_reward|>]" for experts, "<|low_reward|>" for failures.
  Failures come from our generators or from model exploration rollouts written in the same record
  format (`trajectories.rollout_record`).
- RL: task pointers ({"id"}), which the environment turns into prompts at run time.

    python -m rcgrpo_jax.data.datasets --out DIR [--split train] [--seed 0]
"""

from __future__ import annotations

import argparse
import copy
import json
import random
from pathlib import Path
from typing import Iterable, Sequence

from rcgrpo_jax.data import splits, trajectories
from rcgrpo_jax.envs import bfcl
from rcgrpo_jax.models.reward_tokens import HIGH_REWARD_TOKEN, LOW_REWARD_TOKEN  # noqa: F401 (re-exported)

REWARD_GOAL_SEPARATOR = "\n\n"


def reward_goal_text(high: bool) -> str:
    return f"[Reward Goal: {HIGH_REWARD_TOKEN if high else LOW_REWARD_TOKEN}]"


def add_reward_goal(messages: Sequence[dict], high: bool) -> list[dict]:
    """A copy of `messages` with the reward goal appended to the first user message."""
    out = copy.deepcopy(list(messages))
    for msg in out:
        if msg.get("role") == "user":
            msg["content"] = msg["content"] + REWARD_GOAL_SEPARATOR + reward_goal_text(high)
            return out
    raise ValueError("no user message to condition")


def _tasks(ids: Iterable[str | bfcl.Task]) -> list[bfcl.Task]:
    return [i if isinstance(i, bfcl.Task) else bfcl.get_task(i) for i in ids]


def expert_records(ids: Iterable[str | bfcl.Task]) -> list[dict]:
    return [trajectories.expert_trajectory(t) for t in _tasks(ids)]


def failure_records(
    ids: Iterable[str | bfcl.Task], *, seed: int = 0, site: str = "any", kinds: str = "all"
) -> list[dict]:
    """Generated failures of every task, one per kind (`trajectories.failure_kinds(kinds)`) where one exists."""
    names = trajectories.failure_kinds(kinds)
    return [r for t in _tasks(ids) for r in trajectories.failure_trajectories(t, names, seed=seed, site=site)]


SFT_REWARD_SLOTS = ("none", "random")


def sft_records(experts: Iterable[dict], *, reward_slot: str = "none", seed: int = 0) -> list[dict]:
    """The expert records. reward_slot="random": each first user message carries a reward goal whose token is
    drawn with p(high) = 0.5 independently of the trajectory (every one is an expert), so the slot is there and
    its token carries no information: an SFT policy that is never taught what the tokens mean, as an instruct
    model ignores an unknown token (the SFT init of SFT+RC-GRPO)."""
    if reward_slot not in SFT_REWARD_SLOTS:
        raise ValueError(f"reward_slot must be one of {SFT_REWARD_SLOTS}, got {reward_slot!r}")
    rng = random.Random(f"sft-slot:{seed}")
    out = []
    for r in experts:
        if r["kind"] != "expert":
            continue
        record = copy.deepcopy(r)
        if reward_slot == "random":
            high = rng.random() < 0.5
            record["messages"] = add_reward_goal(r["messages"], high)
            record["reward_goal"] = HIGH_REWARD_TOKEN if high else LOW_REWARD_TOKEN
        out.append(record)
    return out


def rctp_records(experts: Sequence[dict], failures: Sequence[dict], *, seed: int = 0) -> list[dict]:
    """Experts and failures 1:1 (as many of each as the smaller side has), reward-goal conditioned,
    in a seeded shuffle. Failures are drawn round-robin over tasks so each task contributes evenly."""
    rng = random.Random(f"rctp:{seed}")
    by_task: dict[str, list[dict]] = {}
    for r in failures:
        by_task.setdefault(r["id"], []).append(r)
    for group in by_task.values():
        rng.shuffle(group)
    round_robin = [
        g[i] for i in range(max(map(len, by_task.values()), default=0)) for g in by_task.values() if i < len(g)
    ]
    n = min(len(experts), len(round_robin))
    picked_experts = rng.sample(list(experts), n)
    out = []
    for record, high in [(r, True) for r in picked_experts] + [(r, False) for r in round_robin[:n]]:
        conditioned = copy.deepcopy(record)
        conditioned["messages"] = add_reward_goal(record["messages"], high)
        conditioned["reward_goal"] = HIGH_REWARD_TOKEN if high else LOW_REWARD_TOKEN
        out.append(conditioned)
    rng.shuffle(out)
    return out


def pretrain_records(
    experts: Sequence[dict], failures: Sequence[dict], *, failure_share: float, seed: int = 0
) -> list[dict]:
    """A base model's corpus: one conversation per task, its expert or (with probability `failure_share`, where
    the task has one) one of its failures drawn at random, with no reward goal (the records as they are), in a
    seeded shuffle. A model trained on it calls the tools in their form and copies names, and has seen the
    deviations the failures make beside the expert's choices."""
    if not 0.0 <= failure_share <= 1.0:
        raise ValueError(f"failure_share must be in [0, 1], got {failure_share}")
    rng = random.Random(f"pretrain:{seed}")
    by_task: dict[str, list[dict]] = {}
    for r in failures:
        by_task.setdefault(r["id"], []).append(r)
    out = []
    for expert in experts:
        options = by_task.get(expert["id"], [])
        pick = rng.choice(options) if options and rng.random() < failure_share else expert
        out.append(copy.deepcopy(pick))
    rng.shuffle(out)
    return out


def rl_records(ids: Iterable[str | bfcl.Task]) -> list[dict]:
    return [{"id": t.id} for t in _tasks(ids)]


def failure_mix(records: Iterable[dict]) -> dict[str, int]:
    """Failure records by origin: 'exploration' (a policy's own rollouts that scored 0, the paper's source)
    and each synthetic perturbation kind ('wrong_tool', ...)."""
    out: dict[str, int] = {}
    for r in records:
        if r.get("kind") == "failure":
            out[str(r.get("failure"))] = out.get(str(r.get("failure")), 0) + 1
    return dict(sorted(out.items()))


def build_all(
    out_dir: str | Path,
    *,
    split: str = "train",
    seed: int = 0,
    ids: Sequence[str | bfcl.Task] | None = None,
    explored: Sequence[dict] = (),
    failure_site: str = "any",
    failure_kinds: str = "all",
    sft_reward_slot: str = "none",
) -> dict[str, Path]:
    """Write expert, failure, SFT, RCTP-FT and RL files for a split (or explicit task ids or tasks), and
    manifest.json with the counts and the failures' mix. `explored`: exploration records
    (`train.exploration.collect`); their failures join the perturbations before the 1:1 RCTP-FT draw.
    `failure_site`: where generated failures leave the expert path (trajectories.FAILURE_SITES);
    `failure_kinds`: which perturbations are generated (trajectories.failure_kinds); `sft_reward_slot`: the SFT
    examples' reward-goal slot (`sft_records`)."""
    out_dir = Path(out_dir)
    ids = list(ids) if ids is not None else splits.split(split)
    experts = expert_records(ids)
    failures = failure_records(ids, seed=seed, site=failure_site, kinds=failure_kinds) + [
        r for r in explored if r.get("kind") == "failure"
    ]
    rctp = rctp_records(experts, failures, seed=seed)
    write = trajectories.write_jsonl
    paths = {
        "expert": write(out_dir / "expert.jsonl", experts),
        "failure": write(out_dir / "failure.jsonl", failures),
        "sft": write(out_dir / "sft.jsonl", sft_records(experts, reward_slot=sft_reward_slot, seed=seed)),
        "rctp_ft": write(out_dir / "rctp_ft.jsonl", rctp),
        "rl": write(out_dir / "rl.jsonl", rl_records(ids)),
    }
    manifest = {
        "tasks": len(ids),
        "experts": len(experts),
        "failures": failure_mix(failures),
        "rctp_ft": {
            "examples": len(rctp),
            "failures": failure_mix(
                [{**r, "kind": "failure"} for r in rctp if r.get("reward_goal") == LOW_REWARD_TOKEN]
            ),
        },
        "seed": seed,
        "failure_site": failure_site,
        "failure_kinds": list(trajectories.failure_kinds(failure_kinds)),
        "sft_reward_slot": sft_reward_slot,
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    paths["manifest"] = out_dir / "manifest.json"
    return paths


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--split", default="train", choices=["train", "test"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--failure_site", default="any", choices=trajectories.FAILURE_SITES)
    parser.add_argument("--failure_kinds", default="all", help="'all' or a comma-separated subset of the generators")
    args = parser.parse_args(argv)
    try:
        trajectories.failure_kinds(args.failure_kinds)
    except ValueError as e:
        parser.error(str(e))
    paths = build_all(
        args.out, split=args.split, seed=args.seed, failure_site=args.failure_site, failure_kinds=args.failure_kinds
    )
    counts = {name: sum(1 for _ in open(p, encoding="utf-8")) for name, p in paths.items() if p.suffix == ".jsonl"}
    print(json.dumps({"out": str(args.out), "split": args.split, "counts": counts}))


if __name__ == "__main__":
    main()
