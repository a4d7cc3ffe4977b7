"""How the training rewards agree with BFCL's official checker, on replayed scripts.

    python -m rcgrpo_jax.envs.reward_agreement --agreement [--limit N]

prints, as JSON, how the order-aware and the multiset rewards (`rewards.py`) agree with the official
checker on every task's ground truth with each turn's calls reversed, and the oracle check on the ground
truth itself.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, Callable, Sequence

from rcgrpo_jax.envs import bfcl, rewards


def reversed_script(task):
    """The task's ground truth with each step's calls in reverse order."""
    return [[list(reversed(calls)) for calls in steps] for steps in bfcl.ground_truth_script(task)]


VERDICT_KEYS = ("reward1_official_pass", "reward1_official_fail", "reward0_official_pass", "reward0_official_fail")


def agreement(tasks: Sequence[Any], make_script: Callable[[Any], Any], reward_names: Sequence[str]) -> dict:
    """Counts of (reward, official verdict) per reward name over episodes replayed from scripts
    (`make_script(task)` -> turn -> steps -> calls, or None to skip the task), with the host time
    per episode of the replay, of `env.outcome()` (ground-truth replay and state comparison, shared
    by every reward) and of each reward on that outcome. The first reward of a task pays for the
    commutation runs it asks for; `<last name>_cached` computes the last reward again, with those
    answers cached (what later rollouts of the same task pay)."""
    counts = {name: dict.fromkeys(VERDICT_KEYS, 0) for name in reward_names}
    cached = f"{reward_names[-1]}_cached"
    seconds = dict.fromkeys(("replay", "outcome", *reward_names, cached), 0.0)
    episodes = 0
    for task in tasks:
        script = make_script(task)
        if script is None:
            continue
        start = time.perf_counter()
        env = bfcl.run_script(bfcl.BFCLEnv(task), script)
        seconds["replay"] += time.perf_counter() - start
        verdict = "pass" if env.official_verdict()["valid"] else "fail"
        episodes += 1
        start = time.perf_counter()
        outcome = env.outcome()  # replays the ground truth and compares states (shared by all rewards)
        seconds["outcome"] += time.perf_counter() - start
        for label, name in (*((n, n) for n in reward_names), (cached, reward_names[-1])):
            start = time.perf_counter()
            reward = rewards.get(name)(outcome)
            seconds[label] += time.perf_counter() - start
            if label in counts:
                counts[label][f"reward{int(reward == 1.0)}_official_{verdict}"] += 1
    per_episode = {k: round(1000 * v / max(episodes, 1), 4) for k, v in seconds.items()}
    return {"episodes": episodes, **counts, "host_ms_per_episode": per_episode}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rcgrpo_jax.envs.reward_agreement")
    parser.add_argument("--agreement", action="store_true", help="reward vs official verdict on reversed turns")
    parser.add_argument("--limit", type=int, default=None, help="only the first N tasks (default: all 800)")
    args = parser.parse_args(argv)
    if not args.agreement:
        parser.error("nothing to do: pass --agreement")
    tasks = bfcl.load_tasks()[: args.limit]
    names_ = ("rc_grpo_multiset", "rc_grpo")
    oracle = agreement(tasks, bfcl.ground_truth_script, names_)
    print(json.dumps({"bench": "ground_truth", **oracle}))
    start = time.perf_counter()
    reversed_counts = agreement(tasks, reversed_script, names_)
    print(
        json.dumps(
            {
                "bench": "reversed_turns",
                "before": "rc_grpo_multiset",
                "after": "rc_grpo",
                **reversed_counts,
                "seconds": round(time.perf_counter() - start, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
