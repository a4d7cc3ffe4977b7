"""Group filters: which groups of a step train. One signature, one registry, selected by a config section:

    fn(rewards [N, G] float32, *, config=None) -> (keep [N] bool, metrics {name: scalar})

N = groups (tasks), G = rollouts per group; `rewards` are the step's task rewards after reward shaping
(`rl.shaping`). `config` is the entry's options (missing fields take its defaults, unknown ones raise).
The config picks the entry as every registry's (`registry.selection`):

    rl.group_filter.name = "dapo"          # or "module:name", a filter registered in the user's module
    rl.group_filter.dapo.atol = 0.0        # each entry's options in its own subsection

A filter returns a keep-mask rather than dropping rows, so it stays jittable and composes with any estimator:
the trainer passes it as aux["group_mask"] (a dropped group gets zero advantage and no loss);
`select_groups` does an actual drop on the host. Adding one:

    @filters.register("my_filter")
    def my_filter(rewards, *, config=None):
        return rewards.mean(axis=1) < 1.0, {}       # drop the groups that all succeeded
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from rcgrpo_jax.registry import OptionError, Registry, resolve

Array = jax.Array
Metrics = dict[str, Array]
GroupFilter = Callable[..., tuple[Array, Metrics]]

GROUP_FILTERS: Registry[GroupFilter] = Registry("group filter")
register, get, names, default_config, check = GROUP_FILTERS.api()


def _f32(rewards: Array) -> Array:
    rewards = jnp.asarray(rewards, jnp.float32)
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [N, G], got shape {rewards.shape}")
    return rewards


@register("none")
def keep_all(rewards: Array, *, config=None) -> tuple[Array, Metrics]:
    """keep_i = True for every group i (no filter)."""
    return jnp.ones((_f32(rewards).shape[0],), bool), {}


def dapo_config() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict({"atol": 0.0})


def dapo_validate(cfg: ml_collections.ConfigDict) -> None:
    if not float(cfg.atol) >= 0.0:
        raise OptionError("atol", f"must be >= 0, got {cfg.atol}")


@register("dapo", default_config=dapo_config, validate=dapo_validate)
def dapo_group_filter(rewards: Array, *, config=None) -> tuple[Array, Metrics]:
    """DAPO's dynamic sampling: keep_i = (max_g r_ig - min_g r_ig > atol), i.e. drop the groups whose rewards
    are all equal (within atol).

    Such groups carry no group-relative signal (every centred advantage is 0), so DAPO resamples instead of
    training on them; we keep shapes fixed and mask them. Metrics: dapo_groups_dropped = sum_i (1 - keep_i),
    dapo_frac_dropped = dapo_groups_dropped / N.
    """
    cfg = resolve(config, dapo_config())
    r = _f32(rewards)
    keep = r.max(axis=1) - r.min(axis=1) > cfg.atol
    dropped = jnp.sum(~keep).astype(jnp.int32)
    return keep, {"dapo_groups_dropped": dropped, "dapo_frac_dropped": dropped / r.shape[0]}


def select_groups(keep: Any, *arrays: Any) -> tuple[np.ndarray, ...]:
    """Host-side drop: each array's leading [N] axis indexed by the keep mask (dynamic shape)."""
    idx = np.flatnonzero(np.asarray(keep))
    return tuple(np.asarray(a)[idx] for a in arrays)
