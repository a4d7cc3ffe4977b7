"""Multi-turn rollout throughput on BFCL tasks: our engine vs a naive loop that re-prefills the whole
history every step (as BFCL's own handlers do), with the time split between policy (device) and host.

    python -m benchmarks.rollout [--tasks 4] [--group 2] [--step-tokens 16] [--repeats 2]

A tiny random Qwen2 checkpoint (built offline) samples at temperature 1.0 with a fixed per-step decode
budget; both sides run the same engine, environments, tokenizer and parser, only the policy differs.
One JSON line per slot mode ("shrink": finished episodes leave the batch; "keep": they stay, skipped).
Figures are medians over repeats after a warm-up run (compilation is not counted).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import jax
import numpy as np

from rcgrpo_jax import chat, models
from rcgrpo_jax.envs import bfcl
from rcgrpo_jax.models.tiny import build_tiny_checkpoint
from rcgrpo_jax.rollout import EpisodeSpec, ModelPolicy, RolloutConfig, StepSample, run_episodes
from rcgrpo_jax.sampling import SamplingParams, generate


class NaivePolicy:
    """The peer: every step re-prefills each live episode's whole token history from scratch."""

    def __init__(self, config, params, *, stop_ids, max_step_tokens, sampling, rng):
        self.config, self.params, self.stop_ids = config, params, tuple(stop_ids)
        self.max_step_tokens, self.sampling, self.rng = max_step_tokens, sampling, rng
        self.history: dict[int, list[int]] = {}

    def start(self, prompts, groups):
        self.history = {i: list(p) for i, p in enumerate(prompts)}

    def act(self, rows, budgets):
        self.rng, key = jax.random.split(self.rng)
        res = generate(
            self.config,
            self.params,
            [self.history[i] for i in rows],
            max_new_tokens=self.max_step_tokens,
            temperature=self.sampling.temperature,
            stop_token_ids=self.stop_ids,
            rng=key,
        )
        out = []
        for i, b, toks, lps, stopped in zip(rows, budgets, res.tokens, res.logprobs, res.stopped):
            toks, lps, stopped = toks[:b], lps[:b], stopped and len(toks) <= b
            self.history[i] += toks
            out.append(StepSample(toks, np.asarray(lps), stopped))
        return out

    def extend(self, rows, deltas):
        for i, d in zip(rows, deltas):
            self.history[i] += list(d)

    def finish(self, rows):
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--group", type=int, default=2)
    ap.add_argument("--step-tokens", type=int, default=16)
    ap.add_argument("--max-context", type=int, default=16384)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as d:
        build_tiny_checkpoint(d, arch="qwen2")
        config, params = models.load_hf(d, dtype="float32")
        import transformers

        tok = transformers.AutoTokenizer.from_pretrained(d)
    parser = chat.get_parser(chat.family_for(config.model_type))
    stops = chat.end_of_turn_ids(tok)
    tasks = [t for t in bfcl.load_tasks(("base",))][: args.tasks]
    sampling = SamplingParams(temperature=1.0)
    rc = RolloutConfig(max_context=args.max_context, max_step_tokens=args.step_tokens)

    def run(make_policy):
        specs = [
            EpisodeSpec(bfcl.BFCLEnv(t), t.id, group=k, rollout_index=j)
            for k, t in enumerate(tasks)
            for j in range(args.group)
        ]
        t0 = time.perf_counter()
        episodes, split = run_episodes(specs, make_policy(), tok, parser, rc)
        wall = time.perf_counter() - t0
        return wall, split, episodes

    def ours(mode):
        return lambda: ModelPolicy(
            config,
            params,
            stop_ids=stops,
            max_step_tokens=args.step_tokens,
            max_context=args.max_context,
            sampling=sampling,
            prefill_chunk=512,
            slot_mode=mode,
            rng=jax.random.key(0),
        )

    naive = lambda: NaivePolicy(
        config, params, stop_ids=stops, max_step_tokens=args.step_tokens, sampling=sampling, rng=jax.random.key(0)
    )

    def measure(make):
        run(make)  # warm-up: compilation
        runs = [run(make) for _ in range(args.repeats)]
        wall = statistics.median(r[0] for r in runs)
        split = {k: round(statistics.median(r[1][k] for r in runs), 4) for k in runs[0][1]}
        steps = sum(e.steps for e in runs[0][2])
        return wall, split, steps

    n = len(tasks) * args.group
    naive_wall, naive_split, _ = measure(naive)
    for mode in ("shrink", "keep"):
        wall, split, steps = measure(ours(mode))
        host = split["env"] + split["chat"]
        print(
            json.dumps(
                {
                    "bench": "rollout",
                    "slot_mode": mode,
                    "episodes": n,
                    "assistant_steps": steps,
                    "step_tokens": args.step_tokens,
                    "ours_episodes_s": round(n / wall, 3),
                    "naive_episodes_s": round(n / naive_wall, 3),
                    "ratio": round(naive_wall / wall, 2),
                    "split_s": split,
                    "host_fraction": round(host / wall, 3),
                    "env_fraction": round(split["env"] / wall, 3),
                    "naive_split_s": naive_split,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
