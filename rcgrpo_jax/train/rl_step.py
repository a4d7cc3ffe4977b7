"""The device side of one RL step: rollout rows as arrays, per-token log-probs, the PPO update.

Layout. A micro-batch is m rollouts at one length bucket L: tokens, token_mask [m, L]; targets are
shifted, so column t of a [m, L - 1] array belongs to token t + 1 (the token predicted at position t):
`loss_mask[:, t]` is 1 when token t + 1 was sampled and `old_logp[:, t]` is the sampler's log-prob of it;
advantages and AWPO's clip scale are [m]. Rows are split over the data x fsdp mesh axes.

Update. A PPO mini-batch is a list of micro-batches, each at the smallest bucket holding its rows
(rows are sorted by length first, so short rollouts are not padded to the longest). `Updater` sums the
policy loss's (sum, denominator) pairs and the gradients of the sums over the micro-batches, then
divides once, so any split into micro-batches (and any sharding) gives the same loss and gradient.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from rcgrpo_jax.rl import losses as losses_lib
from rcgrpo_jax.train import state as state_lib

BATCH_AXES = ("data", "fsdp")
TOKEN_KEYS = ("tokens", "token_mask")  # [m, L]
TARGET_KEYS = ("loss_mask", "old_logp", "ref_logp")  # [m, L - 1]
ROW_KEYS = ("advantages", "clip_scale")  # [m]
LOSS_METRICS = ("pg_loss", "ratio_mean", "kl", "clip_frac_low", "clip_frac_high", "clip_frac_dual")


# ----------------------------------------------------------------------------------------------------
# Host side: rollouts -> padded micro-batches.


def pack_rows(
    tokens: list[np.ndarray], loss_mask: list[np.ndarray], logprobs: list[np.ndarray], length: int, pad_id: int
) -> dict[str, np.ndarray]:
    """Rows as [B, L] / [B, L - 1] arrays (right padding; targets shifted by one)."""
    b = len(tokens)
    out = {
        "tokens": np.full((b, length), pad_id, np.int32),
        "token_mask": np.zeros((b, length), bool),
        "loss_mask": np.zeros((b, length - 1), np.float32),
        "old_logp": np.zeros((b, length - 1), np.float32),
    }
    for r, (t, m, lp) in enumerate(zip(tokens, loss_mask, logprobs)):
        n = min(len(t), length)
        out["tokens"][r, :n] = t[:n]
        out["token_mask"][r, :n] = True
        out["loss_mask"][r, : n - 1] = m[1:n]
        out["old_logp"][r, : n - 1] = lp[1:n]
    return out


def bucket_for(length: int, buckets) -> int:
    for b in buckets:
        if b >= length:
            return int(b)
    raise ValueError(f"a rollout of {length} tokens exceeds the largest bucket {buckets[-1]}")


def minibatch_plan(perm: np.ndarray, lengths: np.ndarray, num_minibatches: int, micro: int) -> list[list[np.ndarray]]:
    """perm: a permutation of the B rows (mixes groups across mini-batches). Mini-batch k takes the k-th
    B / num_minibatches rows of perm; within it rows are sorted by length (longest first, stable) and cut
    into micro-batches of `micro` rows. Returns row indices per micro-batch per mini-batch."""
    size = len(perm) // num_minibatches
    plan = []
    for k in range(num_minibatches):
        rows = perm[k * size : (k + 1) * size]
        rows = rows[np.argsort(-lengths[rows], kind="stable")]
        plan.append([rows[i : i + micro] for i in range(0, len(rows), micro)])
    return plan


def row_shardings(mesh: Mesh, keys) -> dict[str, NamedSharding]:
    """The row axis over data x fsdp, everything else whole."""
    return {k: NamedSharding(mesh, P(BATCH_AXES) if k in ROW_KEYS else P(BATCH_AXES, None)) for k in keys}


def put(batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """Host arrays -> global arrays. With several processes every process holds the whole host batch (the
    rollouts are replicated), and each device takes its rows."""
    sh = row_shardings(mesh, batch.keys())
    if jax.process_count() == 1:
        return {k: jax.device_put(v, sh[k]) for k, v in batch.items()}
    return {k: jax.make_array_from_callback(v.shape, sh[k], lambda idx, v=v: v[idx]) for k, v in batch.items()}


def take(batch: dict[str, np.ndarray], rows: np.ndarray, buckets, keys) -> dict[str, np.ndarray]:
    """The micro-batch of `rows`, cut to the smallest bucket holding its longest row."""
    longest = int(batch["token_mask"][rows].sum(axis=1).max())
    length = bucket_for(max(longest, 2), buckets)
    out = {}
    for k in keys:
        v = batch[k][rows]
        if k in TOKEN_KEYS:
            v = v[:, :length]
        elif k in TARGET_KEYS:
            v = v[:, : length - 1]
        out[k] = np.ascontiguousarray(v)
    return out


# ----------------------------------------------------------------------------------------------------
# Pure functions.


def sequence_logprobs(
    model_cfg, params, tokens: jax.Array, token_mask: jax.Array, chunk: int, temperature: float = 1.0
) -> tuple[jax.Array, jax.Array]:
    """(log p(token t+1 | ..t), entropy) [B, L - 1] under `params`; logits never materialised."""
    from rcgrpo_jax.models.transformer import forward, output_embedding
    from rcgrpo_jax.rl.logprobs import chunked_logprobs_and_entropy

    positions = jnp.maximum(jnp.cumsum(token_mask, axis=-1) - 1, 0).astype(jnp.int32)
    hidden, _ = forward(model_cfg, params, tokens, positions, token_mask, return_hidden=True)
    return chunked_logprobs_and_entropy(
        hidden[:, :-1],
        output_embedding(model_cfg, params),
        tokens[:, 1:],
        min(chunk, model_cfg.vocab_size),
        temperature=temperature,
    )


def make_logprob_fn(model_cfg, chunk: int, temperature: float = 1.0) -> Callable:
    """`fn(params, tokens [m, L], token_mask) -> logp [m, L - 1]` (the reference pass, and the optional
    recompute of the behaviour log-probs)."""
    return lambda params, tokens, token_mask: sequence_logprobs(
        model_cfg, params, tokens, token_mask, chunk, temperature
    )[0]


def make_micro_grads(model_cfg, loss_name: str, loss_cfg, chunk: int) -> Callable:
    """`fn(params, micro) -> (grads, sums)` for one micro-batch of m rows at its own length L.

    micro: tokens, token_mask [m, L]; loss_mask, old_logp, ref_logp (absent when no KL is wanted)
    [m, L - 1]; advantages, clip_scale [m]. grads = d(loss sum)/d(params); sums = {loss_sum, denom,
    tokens, <loss metric> x tokens} scalars and per-row entropy sums / target counts under the
    pre-update policy (entropy diagnostics without another forward pass)."""
    policy_loss = losses_lib.get(loss_name)

    def loss(params, micro):
        logp, entropy = sequence_logprobs(model_cfg, params, micro["tokens"], micro["token_mask"], chunk)
        mask = micro["loss_mask"]
        s, d, metrics = policy_loss(
            logp,
            micro["old_logp"],
            micro.get("ref_logp"),
            micro["advantages"],
            mask,
            config=loss_cfg,
            clip_scale=micro["clip_scale"],
        )
        n = mask.sum()
        sums = {
            "loss_sum": s,
            "denom": d,
            "tokens": n,
            **{k: metrics.get(k, 0.0) * n for k in LOSS_METRICS},
            "row_entropy": jax.lax.stop_gradient(entropy * mask).sum(axis=1),
            "row_count": mask.sum(axis=1),
        }
        return s, sums

    def fn(params, micro):
        (_, sums), grads = jax.value_and_grad(loss, has_aux=True)(params, micro)
        return jax.tree.map(lambda g: g.astype(jnp.float32), grads), sums

    return fn


def add_grads(acc, new):
    """Running sum of micro-batch gradients and scalar sums (jitted with the accumulator donated)."""
    return jax.tree.map(jnp.add, acc, new)


def make_apply(tx: optax.GradientTransformation) -> Callable:
    """`fn(state, grads, sums) -> (state, metrics)`: one guarded optimizer update with the mini-batch's
    exact loss sum / denominator (summed over its micro-batches)."""

    def fn(state: state_lib.TrainState, grads, sums):
        denom = jnp.maximum(sums["denom"], 1e-8)
        grads = jax.tree.map(lambda g, p: (g / denom).astype(p.dtype), grads, state.params)
        loss = sums["loss_sum"] / denom
        new_state, finite = state_lib.apply_gradients(state, grads, tx, loss)
        tokens = jnp.maximum(sums["tokens"], 1.0)
        return new_state, {
            "loss": loss,
            "grad_norm": optax.tree.norm(grads),
            "finite": finite,
            "nonfinite_in_row": new_state.nonfinite,
            "loss_tokens": sums["tokens"],
            **{k: sums[k] / tokens for k in LOSS_METRICS},
        }

    return fn


SCALAR_SUMS = ("loss_sum", "denom", "tokens", *LOSS_METRICS)


class Updater:
    """One PPO mini-batch update as jitted pieces: micro-batch gradients (one compilation per length
    bucket), their running sum, and the optimizer step. Micro-batches of one mini-batch may have
    different lengths, so short rollouts are not padded to the longest of the batch."""

    def __init__(self, model_cfg, tx, loss_name: str, loss_cfg, chunk: int, state_sh, mesh: Mesh, keys):
        self.mesh, self.keys = mesh, tuple(keys)
        rep = NamedSharding(mesh, P())
        row = NamedSharding(mesh, P(BATCH_AXES))
        self.sums_sh = {**{k: rep for k in SCALAR_SUMS}, "row_entropy": row, "row_count": row}
        self.grads_sh = state_sh.params
        self._grads = jax.jit(
            make_micro_grads(model_cfg, loss_name, loss_cfg, chunk),
            in_shardings=(state_sh.params, row_shardings(mesh, self.keys)),
            out_shardings=(self.grads_sh, self.sums_sh),
        )
        self._add = jax.jit(
            add_grads, out_shardings=(self.grads_sh, {k: rep for k in SCALAR_SUMS}), donate_argnums=(0,)
        )
        self._apply = jax.jit(
            make_apply(tx),
            in_shardings=(state_sh, self.grads_sh, {k: rep for k in SCALAR_SUMS}),
            out_shardings=(state_sh, rep),
            donate_argnums=(0,),
        )

    def __call__(self, state, micros: list[dict[str, jax.Array]]):
        """Returns (state, metrics, [(row_entropy, row_count) per micro-batch])."""
        acc, rows = None, []
        for micro in micros:
            grads, sums = self._grads(state.params, micro)
            rows.append((sums.pop("row_entropy"), sums.pop("row_count")))
            acc = (grads, sums) if acc is None else self._add(acc, (grads, sums))
        state, metrics = self._apply(state, *acc)
        return state, metrics, rows

    def lower(self, abstract_state, micro_shapes):
        """AOT-compiled micro-gradient and apply steps for the dry run's memory report."""
        g = self._grads.lower(abstract_state.params, micro_shapes).compile()
        sums = {k: jax.ShapeDtypeStruct((), jnp.float32, sharding=self.sums_sh[k]) for k in SCALAR_SUMS}
        grads = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, jnp.float32, sharding=s), abstract_state.params, self.grads_sh
        )
        a = self._apply.lower(abstract_state, grads, sums).compile()
        return g, a


def jit_logprobs(fn, params_sh, mesh: Mesh) -> Callable:
    tok = NamedSharding(mesh, P(BATCH_AXES, None))
    return jax.jit(fn, in_shardings=(params_sh, tok, tok), out_shardings=tok)


def abstract_micro(mesh: Mesh, keys, micro: int, length: int) -> dict[str, Any]:
    """ShapeDtypeStructs of one micro-batch (AOT lowering in dry runs)."""
    sh = row_shardings(mesh, keys)
    out = {}
    for k in keys:
        if k in TOKEN_KEYS:
            shape, dtype = (micro, length), (jnp.int32 if k == "tokens" else jnp.bool_)
        elif k in TARGET_KEYS:
            shape, dtype = (micro, length - 1), jnp.float32
        else:
            shape, dtype = (micro,), jnp.float32
        out[k] = jax.ShapeDtypeStruct(shape, dtype, sharding=sh[k])
    return out
