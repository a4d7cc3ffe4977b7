"""`rule`: a deterministic rubric on the CPU, a stand-in for an LLM judge in tests and CPU runs. It
measures the form of the reasoning, not its truth, and says so: `stand_in = True`."""

from __future__ import annotations

import re
from typing import Sequence

import ml_collections
import numpy as np

from rcgrpo_jax.judges.base import JUDGES, Counters, JudgeInput

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class RuleJudge:
    """score = mean of three checks, each in [0, 1]:

    explained: the share of steps whose text is not empty (the model said why it acts);
    grounded:  the share of called tool names (or their words split at '_', longer than 2 letters)
               named somewhere in the text or the user turns, i.e. the reasoning talks about what it
               does (= explained when there is no call);
    clean:     1 if the rollout parsed without errors, else 0.
    A rollout with no step scores 0. The reference rationale is not read.
    """

    name = "rule (deterministic stand-in, not an LLM judge)"
    stand_in = True

    def __init__(self):
        self._counters = Counters()

    def score(self, item: JudgeInput) -> float:
        if not item.reasoning:
            return 0.0
        texts = [t.strip() for t in item.reasoning]
        explained = float(np.mean([bool(t) for t in texts]))
        words = {w.lower() for t in (*texts, *item.questions) for w in _WORD.findall(t)}
        if item.calls:
            hits = [
                c.lower() in words or any(p in words for p in c.lower().split("_") if len(p) > 2) for c in item.calls
            ]
            grounded = float(np.mean(hits))
        else:
            grounded = explained
        clean = float(item.parse_errors == 0)
        return (explained + grounded + clean) / 3.0

    def __call__(self, items: Sequence[JudgeInput]) -> np.ndarray:
        self._counters.add("calls", len(items))
        return np.asarray([self.score(i) for i in items], np.float32).reshape(len(items))

    def stats(self) -> dict[str, int]:
        return self._counters.snapshot()

    def __repr__(self) -> str:
        return "RuleJudge(stand_in=True)"


def rule_config() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict()


@JUDGES.register("rule", default_config=rule_config)
def make_rule(cfg: ml_collections.ConfigDict, **_) -> RuleJudge:
    return RuleJudge()
