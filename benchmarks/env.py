"""Benchmark of the BFCL environment: ground-truth replay episodes per second.

Prints JSON lines:
- replay with our reward, and with reward + official verdict (ours), against the package's own
  `multi_turn_checker` on the ground-truth strings (peer) measured in the same run, with the ratio;
- how often reward and official verdict disagree on two perturbations of the ground truth
  (each turn's calls reversed; one argument changed), the figures quoted in docs/bfcl.md.

    python -m benchmarks.env [--repeats 3]
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import time

from rcgrpo_jax.envs import bfcl
from rcgrpo_jax.envs.isolation import import_bfcl
from rcgrpo_jax.envs.reward_agreement import reversed_script


def _best_rate(fn, tasks, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for task in tasks:
            fn(task)
        best = min(best, time.perf_counter() - start)
    return len(tasks) / best


def _replay(task):
    return bfcl.run_script(bfcl.BFCLEnv(task), bfcl.ground_truth_script(task))


def _peer(task):
    checker = import_bfcl("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker")
    gt = [list(t) for t in task.ground_truth]
    name = f"bench_{id(task)}_{time.perf_counter_ns()}"
    checker.multi_turn_checker([[t] if t else [] for t in gt], gt, task.entry, task.id.rsplit("_", 1)[0], name)
    cache = vars(import_bfcl("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils"))
    for key in [k for k in cache if k.startswith(name)]:
        del cache[key]


def changed_argument_script(task, rng: random.Random):
    """Change one argument of one call: numbers +1, booleans flipped, strings suffixed, lists cut."""
    script = copy.deepcopy(bfcl.ground_truth_script(task))
    sites = [
        (t, c)
        for t, steps in enumerate(script)
        for c, call in enumerate(steps[0] if steps else [])
        if call["arguments"]
    ]
    if not sites:
        return None
    t, c = rng.choice(sites)
    args = script[t][0][c]["arguments"]
    key = rng.choice(sorted(args))
    value = args[key]
    if type(value) is bool:
        args[key] = not value
    elif type(value) in (int, float):
        args[key] = value + 1
    elif type(value) is str:
        args[key] = value + "_x"
    elif type(value) is list:
        args[key] = value[:-1] if value else ["x"]
    else:
        return None
    return script


def disagreement(tasks, make_script) -> dict:
    counts = {"episodes": 0, "reward1_official_fail": 0, "reward0_official_pass": 0, "agree": 0}
    for task in tasks:
        script = make_script(task)
        if script is None:
            continue
        env = bfcl.run_script(bfcl.BFCLEnv(task), script)
        reward, valid = env.reward(), env.official_verdict()["valid"]
        counts["episodes"] += 1
        if reward == 1.0 and not valid:
            counts["reward1_official_fail"] += 1
        elif reward == 0.0 and valid:
            counts["reward0_official_pass"] += 1
        else:
            counts["agree"] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    tasks = bfcl.load_tasks()
    for task in tasks[:20]:  # warm caches (parsed docs and ground truth)
        _replay(task).official_verdict()

    reward_rate = _best_rate(lambda t: _replay(t).reward(), tasks, args.repeats)
    full_rate = _best_rate(lambda t: (lambda e: (e.reward(), e.official_verdict()))(_replay(t)), tasks, args.repeats)
    peer_rate = _best_rate(_peer, tasks, args.repeats)
    print(
        json.dumps(
            {"bench": "gt_replay_with_reward", "episodes": len(tasks), "ours_episodes_per_s": round(reward_rate, 1)}
        )
    )
    print(
        json.dumps(
            {
                "bench": "gt_replay_with_reward_and_official",
                "episodes": len(tasks),
                "ours_episodes_per_s": round(full_rate, 1),
                "peer": "bfcl_eval multi_turn_checker on ground-truth strings only",
                "peer_episodes_per_s": round(peer_rate, 1),
                "ratio_ours_over_peer": round(full_rate / peer_rate, 3),
            }
        )
    )
    print(json.dumps({"bench": "disagreement_reversed_turns", **disagreement(tasks, reversed_script)}))
    rng = random.Random(0)
    print(
        json.dumps(
            {
                "bench": "disagreement_one_argument_changed",
                "seed": 0,
                **disagreement(tasks, lambda t: changed_argument_script(t, rng)),
            }
        )
    )


if __name__ == "__main__":
    main()
