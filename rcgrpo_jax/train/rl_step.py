"""The device side of one RL step: per-token log-probs and the PPO update over `rl_batch.RolloutBatch`.

Update. A PPO mini-batch is a list of micro-batches, each at the smallest bucket holding its rows
(rows are sorted by length first, so short rollouts are not padded to the longest). `Updater` sums the
policy loss's (sum, denominator) pairs and the gradients of the sums over the micro-batches, then
divides once, so any split into micro-batches (and any sharding) gives the same loss and gradient.

Every log-prob (update, reference, recompute) is taken at the sampling temperature: the sampler draws
from softmax(logits / T) and reports that distribution's log-probs, so the ratio starts at 1 for any T.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from rcgrpo_jax import sharding as sharding_lib
from rcgrpo_jax.models.transformer import forward, output_embedding
from rcgrpo_jax.rl import losses as losses_lib
from rcgrpo_jax.rl.logprobs import chunked_logprobs_and_entropy
from rcgrpo_jax.train import state as state_lib
from rcgrpo_jax.train.rl_batch import RolloutBatch

LOSS_METRICS = ("pg_loss", "ratio_mean", "kl", "clip_frac_low", "clip_frac_high", "clip_frac_dual")


# ----------------------------------------------------------------------------------------------------
# Pure functions.


def sequence_logprobs(
    model_cfg, params, tokens: jax.Array, token_mask: jax.Array, chunk: int, temperature: float = 1.0
) -> tuple[jax.Array, jax.Array]:
    """(log p(token t+1 | ..t), entropy) [B, L - 1] under `params`; logits never materialised."""

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


def make_micro_grads(model_cfg, loss_name: str, loss_cfg, chunk: int, temperature: float = 1.0) -> Callable:
    """`fn(params, micro: RolloutBatch) -> (grads, sums)` for one micro-batch of m rows at its own length L.

    grads = d(loss sum)/d(params); sums = {loss_sum, denom, tokens, <loss metric> x tokens} scalars and
    per-row entropy sums / target counts under the pre-update policy (entropy diagnostics without another
    forward pass)."""
    policy_loss = losses_lib.get(loss_name)

    def loss(params, micro: RolloutBatch):
        logp, entropy = sequence_logprobs(model_cfg, params, micro.tokens, micro.token_mask, chunk, temperature)
        mask = micro.loss_mask
        s, d, metrics = policy_loss(
            logp,
            micro.old_logp,
            micro.ref_logp,
            micro.advantages,
            mask,
            config=loss_cfg,
            per_rollout=micro.per_rollout,
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

    def __init__(self, model_cfg, tx, loss_name: str, loss_cfg, chunk: int, state_sh, mesh: Mesh, temperature=1.0):
        self.mesh = mesh
        rep = NamedSharding(mesh, P())
        row = sharding_lib.batch_sharding(mesh, 1)
        self.sums_sh = {**{k: rep for k in SCALAR_SUMS}, "row_entropy": row, "row_count": row}
        self.grads_sh = state_sh.params
        # The micro-batch arrives placed by RolloutBatch.put (rows over data x fsdp); its shardings are kept.
        self._grads = jax.jit(
            make_micro_grads(model_cfg, loss_name, loss_cfg, chunk, temperature),
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

    def __call__(self, state, micros: list[RolloutBatch]):
        """Returns (state, metrics, [(row_entropy, row_count) per micro-batch])."""
        acc, rows = None, []
        for micro in micros:
            grads, sums = self._grads(state.params, micro)
            rows.append((sums.pop("row_entropy"), sums.pop("row_count")))
            acc = (grads, sums) if acc is None else self._add(acc, (grads, sums))
        state, metrics = self._apply(state, *acc)
        return state, metrics, rows

    def programs(self) -> tuple[Callable, Callable, Callable]:
        """The jitted pieces (micro-batch gradients, their sum, the optimizer apply), e.g. to count compilations."""
        return self._grads, self._add, self._apply

    def lower(self, abstract_state, micro_shapes):
        """AOT-compiled micro-gradient and apply steps for the dry run's memory report."""
        g = self._grads.lower(abstract_state.params, micro_shapes).compile()
        sums = {k: jax.ShapeDtypeStruct((), jnp.float32, sharding=self.sums_sh[k]) for k in SCALAR_SUMS}
        grads = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, jnp.float32, sharding=s), abstract_state.params, self.grads_sh
        )
        a = self._apply.lower(abstract_state, grads, sums).compile()
        return g, a


@dataclasses.dataclass(frozen=True)
class EpisodeStats:
    """Per-episode sums over the loss tokens of each episode's rows (its training samples), under the policy
    the update's micro-batches saw (the pre-update one in the first PPO epoch); float64 host arrays [E]."""

    entropy_sum: np.ndarray  # sum over the loss tokens of the policy's entropy
    tokens: np.ndarray  # loss tokens

    @property
    def has_tokens(self) -> np.ndarray:
        """[E] bool: the episode has loss tokens (one masked out of the loss has no entropy to report)."""
        return self.tokens > 0

    @property
    def entropy_per_token(self) -> np.ndarray:
        """[E] each episode's mean token entropy (0 without loss tokens)."""
        return self.entropy_sum / np.maximum(self.tokens, 1.0)

    @property
    def entropy_mean(self) -> float:
        """The token-mean entropy over all episodes (not the mean of the episodes' means)."""
        return float(self.entropy_sum.sum() / max(self.tokens.sum(), 1.0))


def episode_stats(row_episodes: Sequence[np.ndarray], rows: Sequence, num_episodes: int) -> EpisodeStats:
    """Reduces the update's per-row outputs to episodes, micro-batch by micro-batch: `row_episodes[i]` is micro-
    batch i's `RolloutBatch.episode` (whose each row is; -1 = padding, dropped) and `rows[i]` its (row_entropy [m],
    row_count [m]) pair as `Updater` returns it (gathered to host arrays)."""
    entropy, tokens = np.zeros((num_episodes,)), np.zeros((num_episodes,))
    for episode, (row_entropy, row_count) in zip(row_episodes, rows, strict=True):
        episode = np.asarray(episode)
        real = episode >= 0
        np.add.at(entropy, episode[real], np.asarray(row_entropy)[: len(episode)][real])
        np.add.at(tokens, episode[real], np.asarray(row_count)[: len(episode)][real])
    return EpisodeStats(entropy, tokens)


def jit_logprobs(fn, params_sh, mesh: Mesh) -> Callable:
    tok = sharding_lib.batch_sharding(mesh, 2)
    return jax.jit(fn, in_shardings=(params_sh, tok, tok), out_shardings=tok)
