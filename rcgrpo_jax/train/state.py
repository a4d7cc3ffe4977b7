"""The train state: one pytree (step, params, optimizer state, rng, non-finite counter), its shardings,
and the guarded update shared by the SFT and RL trainers.

Everything in the state is a plain array so orbax saves and restores it as is, and a resumed run sees
bit-identical inputs. The rng is kept as raw key data (uint32[2]) for the same reason.
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P


@flax.struct.dataclass
class TrainState:
    step: jax.Array  # int32 scalar: optimizer steps taken, skipped ones included (also the data position)
    params: Any
    opt_state: Any
    rng: jax.Array  # uint32[2] raw PRNG key data
    nonfinite: jax.Array  # int32 scalar: non-finite steps in a row (0 after a finite one)


def create(params, tx: optax.GradientTransformation, rng: jax.Array) -> TrainState:
    """A fresh state; `rng` is a raw uint32[2] key (jax.random.PRNGKey)."""
    return TrainState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        opt_state=tx.init(params),
        rng=jnp.asarray(rng, jnp.uint32),
        nonfinite=jnp.zeros((), jnp.int32),
    )


def abstract_state(abstract_params, tx: optax.GradientTransformation) -> TrainState:
    """Shapes and dtypes of the state, without allocating anything."""
    return jax.eval_shape(lambda p: create(p, tx, jnp.zeros((2,), jnp.uint32)), abstract_params)


def state_shardings(abstract: TrainState, mesh: Mesh, param_shardings, tx: optax.GradientTransformation) -> TrainState:
    """Optimizer moments follow their parameter's sharding (FSDP); scalars and counters are replicated."""
    replicated = NamedSharding(mesh, P())
    opt = optax.tree_map_params(
        tx, lambda _, s: s, abstract.opt_state, param_shardings, transform_non_params=lambda _: replicated
    )
    return TrainState(step=replicated, params=param_shardings, opt_state=opt, rng=replicated, nonfinite=replicated)


def with_shardings(abstract: TrainState, shardings: TrainState) -> TrainState:
    """ShapeDtypeStructs that carry their sharding: the target of an orbax restore and of AOT lowering."""
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings)


def tree_is_finite(tree) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.bool_(True)


def apply_gradients(state: TrainState, grads, tx: optax.GradientTransformation, loss: jax.Array):
    """One optimizer step, skipped (params and moments kept, counter raised) when the loss or a gradient
    is not finite. Returns (new state, finite flag)."""
    finite = jnp.isfinite(loss) & tree_is_finite(grads)
    # Zeroed gradients keep NaNs out of the (discarded) candidate update, so nothing non-finite is computed.
    safe_grads = jax.tree.map(lambda g: jnp.where(finite, g, jnp.zeros_like(g)), grads)
    updates, new_opt = tx.update(safe_grads, state.opt_state, state.params)
    new_params = optax.apply_updates(state.params, updates)
    keep = lambda new, old: jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, old)
    return state.replace(
        step=state.step + 1,
        params=keep(new_params, state.params),
        opt_state=keep(new_opt, state.opt_state),
        nonfinite=jnp.where(finite, 0, state.nonfinite + 1).astype(jnp.int32),
    ), finite


def applied_updates(opt_state) -> jax.Array:
    """The optimizer's own step count (skipped steps excluded), which drives the lr schedule."""
    counts = optax.tree_utils.tree_get_all_with_path(opt_state, "count")
    return counts[0][1] if counts else jnp.zeros((), jnp.int32)
