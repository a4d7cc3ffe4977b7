"""A user's own advantage estimator with an option, from outside the package, for the launcher's pre-import of
`module:entry` overrides (`main.import_user_modules`). Imported only by the subprocess of
tests/test_module_entries.py, so no other test's config gains its option subsection:

    --config.rl.advantage.name=tests.helpers.user_estimator:scaled_grpo --config.rl.advantage.scaled_grpo.scale=2
"""

from __future__ import annotations

import ml_collections

from rcgrpo_jax.registry import OptionError, resolve
from rcgrpo_jax.rl import advantages


def scaled_config() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict({"scale": 1.0})


def scaled_validate(cfg: ml_collections.ConfigDict) -> None:
    if not float(cfg.scale) > 0.0:
        raise OptionError("scale", f"must be > 0, got {cfg.scale}")


@advantages.register("scaled_grpo", default_config=scaled_config, validate=scaled_validate, override=True)
def scaled_grpo(rewards, *, aux=None, config=None):
    """A = scale * GRPO's (r - mean_g) / (std_g + eps)."""
    scale = float(resolve(config, scaled_config()).scale)
    adv, metrics = advantages.get("grpo")(rewards, aux=aux)
    return scale * adv, metrics
