"""AWPO: GRPO whose advantage mixes in a reasoning reward from a judge through variance-aware gating,
difficulty weighting and a clip radius that tightens with reliance on the judge (a reconstruction from
the paper's text: see rcgrpo_jax.rl.advantages.awpo). The judge is `rl.judge`: 'rule' (cheap, tests and
CPU runs) or 'model' (an HF checkpoint at rl.judge.path scoring with a rubric prompt).

  python -m rcgrpo_jax.main --config=configs/awpo.py:qwen3_8b --config.model.path=... \
      --config.rl.judge.name=http --config.rl.judge.http.url=http://judge:8000/v1 --workdir=...

The tiny preset runs on AWPO's own backbone family: without `model.path` it builds a tiny Qwen3 (q/k
RMSNorm, no attention biases, head_dim = 2 x hidden/heads; `rcgrpo_jax.models.tiny`) under the workdir,
then trains on the CPU world with the `rule` judge:

  python -m rcgrpo_jax.main --config=configs/awpo.py:tiny --workdir=/tmp/awpo
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from configs import common, grpo  # noqa: E402


def get_config(arg: str | None = None):
    preset = common.parse_preset(arg)
    c = grpo.rl_config("awpo", preset, estimator="awpo")
    if preset == "tiny":  # AWPO's backbone family (the papers' Qwen3s), built offline when model.path is unset
        c.model.tiny_arch = "qwen3"
    return c
