"""`model`: a judge backed by a local HF checkpoint, decoded greedily by our own sampler, prompted
with `prompt.RUBRIC`. The reply is data: only `parse_score` reads it."""

from __future__ import annotations

from typing import Sequence

import ml_collections
import numpy as np
from ml_collections.config_dict import placeholder

from rcgrpo_jax import chat, models
from rcgrpo_jax.judges.base import COMMON, JUDGES, Counters, JudgeInput, require_positive, require_unit_interval
from rcgrpo_jax.judges.prompt import judge_messages, parse_score
from rcgrpo_jax.registry import OptionError, check_choice
from rcgrpo_jax.sampling import generate


class ModelJudge:
    """A judge backed by the HF checkpoint at `path` (greedy decoding with our sampler).

    `stats()`: calls (items scored), failures and failures/no_score (unparsable replies, scored
    `default`)."""

    stand_in = False

    def __init__(
        self,
        path: str,
        *,
        max_new_tokens: int = 16,
        max_chars: int = 2000,
        default: float = 0.0,
        dtype: str = "float32",
        batch_size: int = 16,
        mesh=None,
    ):
        from transformers import AutoTokenizer

        self.name = f"model:{path}"
        self.config, self.params = models.load_hf(path, dtype=dtype)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.stop_ids = chat.end_of_turn_ids(self.tokenizer)
        self.max_new_tokens, self.max_chars, self.default = max_new_tokens, max_chars, default
        self.batch_size, self.mesh = batch_size, mesh
        self._counters = Counters()

    def prompt(self, item: JudgeInput) -> list[int]:

        return chat.render_prompt(self.tokenizer, judge_messages(item, self.max_chars), None)

    def replies(self, items: Sequence[JudgeInput]) -> list[str]:

        out: list[str] = []
        for i in range(0, len(items), self.batch_size):
            chunk = [self.prompt(x) for x in items[i : i + self.batch_size]]
            res = generate(
                self.config,
                self.params,
                chunk,
                max_new_tokens=self.max_new_tokens,
                temperature=0.0,
                stop_token_ids=self.stop_ids,
                mesh=self.mesh,
            )
            out += [self.tokenizer.decode(t, skip_special_tokens=True) for t in res.tokens]
        return out

    def __call__(self, items: Sequence[JudgeInput]) -> np.ndarray:
        scores = []
        for reply in self.replies(items):
            s = parse_score(reply)
            self._counters.add("calls")
            if s is None:
                self._counters.fail("no_score")
                s = self.default
            scores.append(s)
        return np.asarray(scores, np.float32).reshape(len(items))

    def stats(self) -> dict[str, int]:
        return self._counters.snapshot()


def model_config() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        {
            **COMMON,
            "path": placeholder(str),  # an HF checkpoint directory
            "max_new_tokens": 16,
            "dtype": "float32",
            "batch_size": 16,
        }
    )


def validate_model(cfg: ml_collections.ConfigDict) -> None:
    if not cfg.path:
        raise OptionError("path", "the model judge needs an HF checkpoint directory")
    check_choice(cfg, "dtype", ("float32", "bfloat16", "float16"))
    for f in ("max_new_tokens", "batch_size", "max_chars"):
        require_positive(cfg, f)
    require_unit_interval(cfg, "default")


@JUDGES.register("model", default_config=model_config, validate=validate_model)
def make_model(cfg: ml_collections.ConfigDict, *, mesh=None, **_) -> ModelJudge:
    return ModelJudge(
        cfg.path,
        max_new_tokens=int(cfg.max_new_tokens),
        max_chars=int(cfg.max_chars),
        default=float(cfg.default),
        dtype=cfg.dtype,
        batch_size=int(cfg.batch_size),
        mesh=mesh,
    )
