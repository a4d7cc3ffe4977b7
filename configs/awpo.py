"""AWPO: GRPO whose advantage mixes in a reasoning reward from a judge through variance-aware gating,
difficulty weighting and a clip radius that tightens with reliance on the judge (a reconstruction from
the paper's text: see rcgrpo_jax.rl.advantages.awpo). The judge is `rl.judge`: 'rule' (cheap, tests and
CPU runs) or 'model' (an HF checkpoint at rl.judge.path scoring with a rubric prompt).

  python -m rcgrpo_jax.main --config=configs/awpo.py:qwen2_5_7b --config.model.path=... \
      --config.rl.judge.kind=model --config.rl.judge.path=/models/judge --workdir=...
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from configs import common, grpo  # noqa: E402


def get_config(arg: str | None = None):
    return grpo.rl_config("awpo", common.parse_preset(arg), estimator="awpo")
