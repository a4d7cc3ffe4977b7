"""One batch of episodes run across all processes: RL rollouts, evaluation and exploration alike.

Each process builds and steps only the environments of its `multihost.process_slice` of the batch; the
finished episodes are then exchanged as JSON (`to_record` / `from_record`), so every process returns the
whole batch in global order, as a single process would. A model policy's device calls span the global
mesh (collectives), so every process drives it in lockstep over all rows (`multihost.LockstepPolicy`);
a policy without device calls (the scripted oracle) just runs each process's own rows.

The exchange format lives here, not in episode.py, because what travels is this module's concern (the
conversation only when a caller reads it) and nothing else reads it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Sequence

import jax

from rcgrpo_jax import multihost
from rcgrpo_jax.rollout.engine import EpisodeSpec, Policy, RolloutConfig, run_episodes
from rcgrpo_jax.rollout.episode import Episode, Sample


def run_across_processes(
    n: int,
    make_spec: Callable[[int], EpisodeSpec],
    make_policy: Callable[[Sequence[int]], Policy],
    tokenizer,
    parser,
    config: RolloutConfig,
    *,
    lockstep: bool = True,
    with_messages: bool = False,
) -> tuple[list[Episode], dict[str, float]]:
    """Episodes 0..n-1, in order and identical on every process, and this process's own time split.

    make_spec(i): episode i's spec; called only for this process's rows, so an environment is built
      only by the process that steps it.
    make_policy(rows): the policy whose row k is episode rows[k]. Every row with one process or with
      `lockstep`; this process's own rows otherwise.
    lockstep: the policy makes device calls over the global mesh (a ModelPolicy), so every process must
      make the same ones. False only for a policy without device calls (ScriptedPolicy): a ModelPolicy
      run without lockstep would issue different collectives per process.
    with_messages: the conversation (messages and tools) travels in the exchange; leave it off when no
      caller reads it (it is most of the payload).
    With one process: the plain engine over all specs, no exchange.
    """
    if n == 0:
        return [], {"policy": 0.0, "env": 0.0, "chat": 0.0}
    if jax.process_count() == 1:
        return run_episodes([make_spec(i) for i in range(n)], make_policy(range(n)), tokenizer, parser, config)
    mine = range(n)[multihost.process_slice(n)]
    policy = make_policy(range(n) if lockstep else mine)
    driver = multihost.LockstepPolicy(policy) if lockstep else policy
    episodes, split = run_episodes([make_spec(i) for i in mine], driver, tokenizer, parser, config)
    if lockstep:
        driver.drain()  # keep answering the exchanges until every process's episodes have ended
    every = multihost.allgather_json([to_record(e, messages=with_messages) for e in episodes])
    return [from_record(r) for r in every], split


def _jsonable(x: Any) -> Any:
    """`x` with anything JSON can not hold written as its str (a checker's odd value must not break the
    exchange)."""
    return json.loads(json.dumps(x, default=str))


def to_record(episode: Episode, *, messages: bool = False) -> dict[str, Any]:
    """What the other processes need of a finished episode, as plain JSON (never pickle: it holds model
    output): tokens, masks, log-probs (and a re-rendered episode's earlier samples), counts, end reason,
    reward and official verdict; the conversation (`messages` and the first turn's `tools`) only when
    asked."""
    skip = ("messages", "tools", "past_samples")
    rec = {f.name: getattr(episode, f.name) for f in dataclasses.fields(episode) if f.name not in skip}
    rec["past_samples"] = [s.to_json() for s in episode.past_samples]
    rec["tokens"] = [int(t) for t in episode.tokens]
    rec["loss_mask"] = [int(m) for m in episode.loss_mask]
    rec["logprobs"] = [float(x) for x in episode.logprobs]  # float32 -> float64: exact through JSON
    rec["step_spans"] = [list(map(int, s)) for s in episode.step_spans]
    rec["turn_starts"] = [int(t) for t in episode.turn_starts]
    rec["reward"] = float(episode.reward)
    rec["verdict"] = _jsonable(episode.verdict)
    if messages:
        rec["messages"] = _jsonable(episode.messages)
        rec["tools"] = _jsonable(episode.tools)
    return rec


def from_record(rec: dict[str, Any]) -> Episode:
    """The `Episode` of a `to_record`."""
    rec = dict(rec)
    rec["step_spans"] = [tuple(s) for s in rec["step_spans"]]
    rec["past_samples"] = [Sample.from_json(s) for s in rec.get("past_samples", ())]
    return Episode(**rec)
