"""Reward shaping: a change to the step's task rewards before the group filter and the estimator. One signature,
one registry, selected by a config section:

    fn(rewards [N, G] float32, episodes, *, rl, config=None) -> (rewards [N, G] float32, metrics {name: float})

`episodes` are the step's N * G episodes, group-major (`rollout.episode.Episode`: its `samples()`, tokens, ...),
`rl` is the run's `rl` config section (run-wide fields such as rl.max_context), `config` the entry's options
(missing fields take its defaults, unknown ones raise). Shaping runs on the host between the rollouts and the
update, so an entry may read anything an episode holds. The config picks the entry as every registry's
(`registry.selection`):

    rl.shaping.name = "dapo_overlong"              # or "module:name", an entry registered in the user's module
    rl.shaping.dapo_overlong.cache_len = 2048      # each entry's options in its own subsection

Beside `validate(options)` (every registry's start-up check), an entry may declare `check(options, rl)`, run at
start-up with the `rl` section, for options whose bounds depend on it; both raise `OptionError(field, message)`.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from rcgrpo_jax.registry import OptionError, Registry, resolve

Array = jax.Array
Metrics = dict[str, float]
Shaping = Callable[..., tuple[np.ndarray, Metrics]]
RunCheck = Callable[[ml_collections.ConfigDict, Any], None]

REWARD_SHAPING: Registry[Shaping] = Registry("reward shaping")
_, get, names, default_config, check = REWARD_SHAPING.api()  # `register` below also records the run check
_RUN_CHECKS: dict[str, RunCheck | None] = {}


def register(
    name: str,
    *,
    default_config: Callable[[], ml_collections.ConfigDict] | None = None,
    validate: Callable[[ml_collections.ConfigDict], None] | None = None,
    check: RunCheck | None = None,
    override: bool = False,
) -> Callable[[Shaping], Shaping]:
    """Registers a shaping under `name` (a decorator); `check(options, rl)` is its start-up check against the run."""
    deco = REWARD_SHAPING.register(name, default_config=default_config, validate=validate, override=override)

    def wrap(fn: Shaping) -> Shaping:
        fn = deco(fn)
        _RUN_CHECKS[name] = check
        return fn

    return wrap


def check_run(name: str, options: ml_collections.ConfigDict, rl) -> None:
    """`name`'s start-up check of its resolved options against the run's `rl` section (none: nothing to check)."""
    get(name)  # clear error for unknown names
    fn = _RUN_CHECKS.get(name)
    if fn is not None:
        fn(options, rl)


def _f32(rewards: Any) -> np.ndarray:
    rewards = np.asarray(rewards, np.float32)
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [N, G], got shape {rewards.shape}")
    return rewards


@register("none")
def unshaped(rewards: Any, episodes: Sequence[Any], *, rl=None, config=None) -> tuple[np.ndarray, Metrics]:
    """r' = r (no shaping)."""
    return _f32(rewards), {}


# ---------------------------------------------------------------- DAPO's soft overlong punishment


def response_lengths(episodes: Sequence[Any]) -> np.ndarray:
    """[B] int: the tokens each episode's policy sampled (its loss-mask tokens, over every training sample
    of a re-rendered episode), the length DAPO's overlong shaping measures. The prompt, tool results and
    the next user turns in the context are not the model's response and do not count."""
    return np.asarray([sum(int(np.sum(s.loss_mask)) for s in e.samples()) for e in episodes], np.int64)


def overlong_penalty(lengths: Array, *, max_len: int, cache_len: int, penalty: float = 1.0) -> Array:
    """DAPO's soft overlong punishment, added to the task reward (values in [-penalty, 0]). `lengths` are
    response lengths (`response_lengths`: sampled tokens, not the whole multi-turn context).

    0                                                 if L <= max_len - cache_len
    penalty * (max_len - cache_len - L) / cache_len   if max_len - cache_len < L <= max_len
    -penalty                                          if L > max_len
    """
    if not 0 < cache_len <= max_len:
        raise ValueError(f"need 0 < cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}")
    lengths = jnp.asarray(lengths, jnp.float32)
    soft_start = max_len - cache_len
    ramp = (soft_start - lengths) / cache_len
    shaped = jnp.where(lengths <= soft_start, 0.0, jnp.where(lengths <= max_len, ramp, -1.0))
    return penalty * shaped


def overlong_config() -> ml_collections.ConfigDict:
    # max_len: DAPO's L_max in response tokens, 0 = rl.max_context (our choice: a multi-turn BFCL episode has no
    # response budget of its own); cache_len: the soft zone before it, 0 = L_max // 8; penalty: the reward lost at
    # L_max and beyond.
    return ml_collections.ConfigDict({"max_len": 0, "cache_len": 0, "penalty": 1.0})


def overlong_lengths(options: ml_collections.ConfigDict, rl) -> tuple[int, int]:
    """(L_max, cache_len) in response tokens: L_max = max_len, or rl.max_context when that is 0 (an episode
    cannot sample more than its context holds); cache_len, or L_max // 8 when that is 0."""
    max_len = int(options.max_len or 0)
    max_len = max_len if max_len > 0 else int(rl.max_context)
    cache_len = int(options.cache_len or 0)
    return max_len, cache_len if cache_len > 0 else max_len // 8


def overlong_validate(cfg: ml_collections.ConfigDict) -> None:
    for field in ("max_len", "cache_len"):
        if int(cfg[field]) < 0:
            raise OptionError(field, f"must be >= 0 (0 = the default), got {cfg[field]}")
    if not float(cfg.penalty) >= 0.0:
        raise OptionError("penalty", f"must be >= 0, got {cfg.penalty}")


def overlong_check(cfg: ml_collections.ConfigDict, rl) -> None:
    """0 < cache_len <= L_max once both are resolved against the run (`overlong_lengths`)."""
    max_len, cache_len = overlong_lengths(cfg, rl)
    if not 0 < cache_len <= max_len:
        raise OptionError(
            "cache_len", f"must be in (0, L_max = {max_len}] (max_len, or rl.max_context), got {cache_len}"
        )


@register("dapo_overlong", default_config=overlong_config, validate=overlong_validate, check=overlong_check)
def dapo_overlong(rewards: Any, episodes: Sequence[Any], *, rl, config=None) -> tuple[np.ndarray, Metrics]:
    """DAPO's soft overlong punishment on the response length L_i of each episode (`response_lengths`):

        r'_i = r_i + `overlong_penalty`(L_i; L_max, cache_len, penalty)

    with (L_max, cache_len) from `overlong_lengths`. Metric: overlong_penalty_mean, the mean added term.
    """
    cfg = resolve(config, overlong_config())
    r = _f32(rewards)
    max_len, cache_len = overlong_lengths(cfg, rl)
    lengths = response_lengths(episodes).reshape(r.shape)  # the model's own tokens only
    shaped = np.asarray(overlong_penalty(lengths, max_len=max_len, cache_len=cache_len, penalty=float(cfg.penalty)))
    return r + shaped.astype(np.float32), {"overlong_penalty_mean": float(np.mean(shaped))}
