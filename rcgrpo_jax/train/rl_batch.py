"""The RL step's rollout batch: one typed pytree from the episodes to the PPO update.

Layout. Row b is rollout b (group-major: b = task * G + member). A batch of m rows at length bucket L:
tokens, token_mask [m, L]; the target arrays are shifted, so column t of a [m, L - 1] array belongs to
token t + 1 (the token predicted at position t): `loss_mask[:, t]` is 1 when token t + 1 was sampled and
counts in the loss, `old_logp[:, t]` is the sampler's log-prob of it, `ref_logp` the reference's (None
when no reference pass is needed); `advantages` is [m]; `per_rollout` is the advantage estimator's pytree
of per-rollout loss inputs (`rl.advantages.Estimate.per_rollout`, {} for most estimators), each leaf
gathered from [N, G, ...] to its rows, [m, ...], without knowing its names, and handed to the policy loss
whole. `episode` [m] int32 is each row's episode (-1: padding), a host-side field: per-episode statistics
are reduced from the rows that carry it (`rl_step.episode_stats`), and `put` leaves it on the host.
On the device rows are split over data x fsdp.
"""

from __future__ import annotations

from typing import Any, Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from rcgrpo_jax import multihost
from rcgrpo_jax import sharding as sharding_lib


@flax.struct.dataclass
class RolloutBatch:
    tokens: np.ndarray | jax.Array  # [m, L] int32
    token_mask: np.ndarray | jax.Array  # [m, L] bool
    loss_mask: np.ndarray | jax.Array  # [m, L - 1] float32
    old_logp: np.ndarray | jax.Array  # [m, L - 1] float32
    advantages: np.ndarray | jax.Array  # [m] float32
    per_rollout: Any = flax.struct.field(default_factory=dict)  # pytree, leaves [m, ...]: the loss's per_rollout
    ref_logp: np.ndarray | jax.Array | None = None  # [m, L - 1] float32
    episode: np.ndarray | None = None  # [m] int32: the row's episode, -1 for padding (host only: `put` drops it)

    @property
    def rows(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def row_lengths(self) -> np.ndarray:
        """[m] tokens per row (host arrays)."""
        return np.asarray(self.token_mask).sum(axis=1)

    @property
    def length(self) -> int:
        return int(self.tokens.shape[1])

    def take(self, rows: np.ndarray, buckets: Sequence[int]) -> "RolloutBatch":
        """The rows `rows`, cut to the smallest bucket holding the longest of them (host arrays)."""
        longest = int(np.asarray(self.token_mask)[rows].sum(axis=1).max())
        length = bucket_for(max(longest, 2), buckets)

        def cut(v, width):
            if v is None:
                return None
            v = np.asarray(v)[rows]
            return np.ascontiguousarray(v if width is None else v[:, :width])

        return RolloutBatch(
            tokens=cut(self.tokens, length),
            token_mask=cut(self.token_mask, length),
            loss_mask=cut(self.loss_mask, length - 1),
            old_logp=cut(self.old_logp, length - 1),
            advantages=cut(self.advantages, None),
            per_rollout=jax.tree.map(lambda v: cut(v, None), self.per_rollout),
            ref_logp=cut(self.ref_logp, length - 1),
            episode=cut(self.episode, None),
        )

    def shardings(self, mesh: Mesh) -> "RolloutBatch":
        """Each field's NamedSharding: rows over data x fsdp, everything else whole."""
        return jax.tree.map(lambda v: sharding_lib.batch_sharding(mesh, len(v.shape)), self)

    def put(self, mesh: Mesh) -> "RolloutBatch":
        """Host arrays -> global arrays on `shardings(mesh)` (every process holds the whole host batch); the
        host-only `episode` stays behind (the device batch has episode=None)."""
        on_device = self.replace(episode=None)
        return multihost.place(on_device, on_device.shardings(mesh))

    def abstract(self, mesh: Mesh) -> "RolloutBatch":
        """ShapeDtypeStructs with shardings (AOT lowering in dry runs)."""
        return jax.tree.map(lambda v, s: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=s), self, self.shardings(mesh))


def pack(
    tokens: Sequence[np.ndarray],
    loss_mask: Sequence[np.ndarray],
    logprobs: Sequence[np.ndarray],
    advantages: np.ndarray,
    per_rollout: Any = None,
    *,
    length: int,
    pad_id: int,
) -> RolloutBatch:
    """Rows as a host RolloutBatch (right padding; targets shifted by one); per-token inputs are [T_b] each,
    advantages [b], per_rollout a pytree of [b, ...] leaves (None: {})."""
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
    return RolloutBatch(
        **out,
        advantages=np.asarray(advantages, np.float32).reshape(b),
        per_rollout=jax.tree.map(np.ascontiguousarray, {} if per_rollout is None else per_rollout),
    )


def from_episodes(
    episodes: Sequence,
    advantages: np.ndarray,
    per_rollout: Any,
    live: np.ndarray,
    *,
    buckets: Sequence[int],
    pad_id: int,
    row_multiple: int,
) -> RolloutBatch:
    """One row per training sample of each episode (`rollout.Episode.samples()`: one per episode in append
    mode, one per step when the template re-renders the past), each with its episode's advantage and
    per-rollout inputs (every leaf of the pytree `per_rollout`, [N, G, ...], gathered to [R, ...]); the rows
    of an episode with live = False (a dropped group, a non-finite reward) carry no loss.
    Zero-loss copies of row 0 pad the rows to a multiple of `row_multiple` (whole micro-batches).

    Returns the host batch, `episode` [R] set (each row's episode, -1 for padding). With token-mean
    aggregation every sampled token counts once either way; the sequence-mean modes count each sample as a
    sequence, so an episode of K re-rendered steps weighs K times one of a single sample."""
    samples = [(j, s) for j, e in enumerate(episodes) for s in e.samples()]
    samples += [(-1, samples[0][1])] * ((-len(samples)) % row_multiple)
    owner = np.asarray([j for j, _ in samples], np.int32)
    src = np.maximum(owner, 0)
    lengths = np.asarray([len(s.tokens) for _, s in samples])
    batch = pack(
        [s.tokens for _, s in samples],
        [s.loss_mask for _, s in samples],
        [s.logprobs for _, s in samples],
        np.asarray(advantages, np.float32).reshape(-1)[src],
        jax.tree.map(lambda v: gather_rollouts(v, src), per_rollout),
        length=bucket_for(int(lengths.max()), buckets),
        pad_id=pad_id,
    )
    rows_live = (owner >= 0) & np.asarray(live, bool).reshape(-1)[src]
    return batch.replace(loss_mask=batch.loss_mask * rows_live[:, None].astype(np.float32), episode=owner)


def gather_rollouts(values, src: np.ndarray) -> np.ndarray:
    """[N, G, ...] per-rollout values (group-major) -> [len(src), ...]: row i takes rollout src[i]."""
    v = np.asarray(values)
    return v.reshape(-1, *v.shape[2:])[src]


def abstract_batch(mesh: Mesh, rows: int, length: int, *, with_ref: bool, per_rollout: Any = None) -> RolloutBatch:
    """The abstract micro-batch of `rows` rows at `length` (dry runs). per_rollout: one rollout's share of the
    estimator's per-rollout inputs, a pytree of ShapeDtypeStructs (`rl.advantages.per_rollout_shapes`; None: {})."""
    host = RolloutBatch(
        tokens=jax.ShapeDtypeStruct((rows, length), jnp.int32),
        token_mask=jax.ShapeDtypeStruct((rows, length), jnp.bool_),
        loss_mask=jax.ShapeDtypeStruct((rows, length - 1), jnp.float32),
        old_logp=jax.ShapeDtypeStruct((rows, length - 1), jnp.float32),
        advantages=jax.ShapeDtypeStruct((rows,), jnp.float32),
        per_rollout=jax.tree.map(lambda s: jax.ShapeDtypeStruct((rows, *s.shape), s.dtype), per_rollout or {}),
        ref_logp=jax.ShapeDtypeStruct((rows, length - 1), jnp.float32) if with_ref else None,
    )
    return host.abstract(mesh)


def bucket_for(length: int, buckets: Sequence[int]) -> int:
    """The smallest bucket >= length."""
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
