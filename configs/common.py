"""Not a stage file: the config builders live in `rcgrpo_jax.config_lib` now. This name stays only for
`rcgrpo_jax/bench/rollout_plan.py` and `tests/models/test_qwen3.py` (`from configs import common`); delete it
once they import `rcgrpo_jax.config_lib.common`."""

from rcgrpo_jax.config_lib.common import PRESETS, hf_architecture  # noqa: F401
