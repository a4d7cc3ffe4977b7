"""benchmarks.common's shared pieces: the optimizer section every benchmark and peer steps with, and the
per-rollout loss inputs a benchmark's RL step gets from its estimator's declaration (no benchmark names one)."""

from __future__ import annotations

import numpy as np

from benchmarks import common
from rcgrpo_jax.config_lib import common as config_common


def test_constant_optim_is_the_projects_adamw_at_a_constant_rate():
    c, project = common.constant_optim(3e-4, 0.5), config_common.optim(3e-4)
    assert (c.b1, c.b2, c.eps) == (project.b1, project.b2, project.eps)  # read from the one home
    assert (c.lr, c.warmup_ratio, c.end_lr_ratio, c.weight_decay, c.clip_norm) == (3e-4, 0.0, 1.0, 0.0, 0.5)


def test_rollout_inputs_are_what_the_estimator_declares():
    assert common.rollout_inputs("grpo", 6) == {} and common.rollout_inputs("rc_grpo", 6) == {}
    awpo = common.rollout_inputs("awpo", 6)
    assert set(awpo) == {"clip_scale"}  # AWPO's clip scale, neutral: the plain clip
    np.testing.assert_array_equal(awpo["clip_scale"], np.ones(6, np.float32))
