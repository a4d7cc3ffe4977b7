"""Reasoning judges for AWPO: host-side callables that score each rollout's (or step's) reasoning in [0, 1].

A `JUDGES` registry, selected by `rl.judge.name`, each judge's options in its own subsection
(`rl.judge.http.url`, ...; `default_config()`), the shape of every selection in the configs:

- `http`:  an OpenAI-compatible chat-completions endpoint (vLLM / SGLang serving e.g. Qwen3-235B-A22B),
           with concurrency, timeout, retries with backoff, a request cache, the API key from an
           environment variable (`judges.http`);
- `model`: a local HF checkpoint decoded by our own sampler (`judges.model`);
- `rule`:  a deterministic CPU rubric, a stand-in for tests and CPU runs (`stand_in = True`).

Every judge has `name`, `stand_in` and `stats() -> dict[str, int]` (cumulative: calls, failures,
failures/<kind>, ...). A failure never raises: the item scores the judge's `default` and is counted.
The prompt and the score parser are in `judges.prompt`.

    judge = judges.make_judge(config.rl.judge)
    scores = judge([judges.from_episode(e) for e in episodes])   # float32 [len(episodes)]
"""

from rcgrpo_jax.judges import http, model, rule  # noqa: F401  (registers the entries)
from rcgrpo_jax.judges.base import (
    FAILURE_KINDS,
    JUDGES,
    Counters,
    Judge,
    JudgeInput,
    check_config,
    default_config,
    failure_budget,
    from_episode,
    make_judge,
)
from rcgrpo_jax.judges.http import HttpJudge
from rcgrpo_jax.judges.model import ModelJudge
from rcgrpo_jax.judges.prompt import RUBRIC, judge_messages, parse_deviation, parse_score, render_item
from rcgrpo_jax.judges.rule import RuleJudge

__all__ = [
    "FAILURE_KINDS",
    "JUDGES",
    "RUBRIC",
    "Counters",
    "HttpJudge",
    "Judge",
    "JudgeInput",
    "ModelJudge",
    "RuleJudge",
    "check_config",
    "default_config",
    "failure_budget",
    "from_episode",
    "judge_messages",
    "make_judge",
    "parse_deviation",
    "parse_score",
    "render_item",
]
