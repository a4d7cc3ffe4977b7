"""Multi-process (multi-host) helpers: which share of the work a process owns, global arrays from host
arrays, and reading global arrays back on the host.

In a multi-process run every process sees the global mesh but addresses only its own devices. A row-sharded
array (rows over data x fsdp) is then assembled from each process's own rows, and a sharded result can not be
`device_get` on one process: it is read per process (its own rows) or gathered (a collective that every
process must call in the same order). Replicated arrays are read locally, without a collective.
With one process every helper reduces to the plain single-process operation.
"""

from __future__ import annotations

from typing import Any, Sequence, TypeVar

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Sharding

T = TypeVar("T")


def process_slice(n: int, index: int | None = None, count: int | None = None) -> slice:
    """The contiguous share of `n` items (tasks, episodes) that process `index` of `count` handles.

    Shares differ by at most one item and are in process order, so concatenating every process's results
    in process order restores the original order."""
    index = jax.process_index() if index is None else index
    count = jax.process_count() if count is None else count
    base, extra = divmod(n, count)
    start = index * base + min(index, extra)
    return slice(start, start + base + (index < extra))


def place(tree: T, shardings: Any) -> T:
    """Host arrays that every process holds whole -> global arrays: each device takes its block of each
    leaf under `shardings` (one sharding for every leaf, or a tree of them matching `tree`). The one way
    host batches reach the devices (SFT batches, RL micro-batches, sampler inputs). One process: device_put."""
    if isinstance(shardings, Sharding):
        shardings = jax.tree.map(lambda _: shardings, tree)
    if jax.process_count() == 1:
        return jax.device_put(tree, shardings)

    def one(v, sh):
        if isinstance(v, jax.Array):  # already global (the same value on every process)
            return jax.device_put(v, sh)
        v = np.asarray(v)
        return jax.make_array_from_callback(v.shape, sh, lambda idx: v[idx])

    return jax.tree.map(one, tree, shardings)


def local_value(x: Any) -> np.ndarray:
    """The host value of an array this process can read whole: fully addressable, or fully replicated (then
    from its first local shard; no collective)."""
    if not isinstance(x, jax.Array) or x.is_fully_addressable:
        return np.asarray(jax.device_get(x))
    if x.is_fully_replicated:
        return np.asarray(x.addressable_data(0))
    raise ValueError(
        f"array of shape {x.shape} with sharding {x.sharding} is split across processes; "
        "use `gather` (a collective) or read its local rows"
    )


def gather(tree: T) -> T:
    """Every leaf as a host numpy array of its global value. A collective when some leaf is split across
    processes: every process must call it with the same tree structure, in the same order."""
    leaves, treedef = jax.tree.flatten(tree)
    split = [
        i
        for i, x in enumerate(leaves)
        if isinstance(x, jax.Array) and not x.is_fully_addressable and not x.is_fully_replicated
    ]
    out = [local_value(x) if i not in split else None for i, x in enumerate(leaves)]
    if split:
        got = multihost_utils.process_allgather([leaves[i] for i in split], tiled=True)
        for i, v in zip(split, got):
            out[i] = np.asarray(v)
    return jax.tree.unflatten(treedef, out)


def sync(name: str) -> None:
    """A barrier across processes named `name` (every process must reach it); a no-op with one process."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


def any_process(flag: bool) -> bool:
    """True on every process when `flag` is true on any process (a logical OR across processes). A
    collective: every process must call it, in the same order. With one process it is `bool(flag)` and
    touches no device. Used for decisions every process must take together (stop on SIGTERM at the same
    step), which a per-process flag would split."""
    if jax.process_count() == 1:
        return bool(flag)
    flags = multihost_utils.process_allgather(np.asarray([int(bool(flag))], np.int32))
    return bool(np.asarray(flags).any())


def allgather_json(local: Sequence[Any]) -> list[Any]:
    """Each process's host results (JSON-serialisable items, e.g. its share of episodes) concatenated in
    process order, on every process. A collective. JSON, not pickle: what is exchanged holds model output,
    which is data and must never be able to run as code. Processes may hold different numbers of items."""
    import json

    payload = np.frombuffer(json.dumps(list(local)).encode(), np.uint8)
    sizes = np.asarray(multihost_utils.process_allgather(np.asarray([payload.size], np.int64))).reshape(-1)
    # a power-of-two width, so the allgather compiles a few times rather than once per payload size
    padded = np.zeros((max(1024, 1 << int(sizes.max() - 1).bit_length()),), np.uint8)
    padded[: payload.size] = payload
    every = np.asarray(multihost_utils.process_allgather(padded)).reshape(len(sizes), -1)
    out: list = []
    for p, n in enumerate(sizes):
        out += json.loads(every[p, : int(n)].tobytes().decode())
    return out


class LockstepPolicy:
    """Runs a rollout policy whose device work spans all processes (a `ModelPolicy` on the global mesh)
    while each process drives only its own share of the episodes with its own environments.

    The engine of each process calls start / act / finish / extend / replace with its local episode
    indices. The device calls are collectives, so every process must make the same ones: finish, replace
    (the re-render mode's "row i's context is now X") and extend are held until the next act, and each act
    exchanges (a JSON allgather) what every process holds, then calls the inner policy with the global
    rows, in the order a single process would (finish, replace, extend, act; rows ascending). Episode i of
    process p is global row offset_p + i, offsets in process order, so the inner policy sees exactly the
    calls of a single-process run over all episodes. A process whose episodes have all ended calls
    `drain()`, which keeps taking part in the exchanges until no process has a live episode left.
    An inner policy without `replace` makes this one's `replace` None too, so the engine's start-up check
    of the re-render mode refuses it on every process alike (not one process failing mid-exchange).
    """

    def __init__(self, inner):
        self.inner = inner
        if not callable(getattr(inner, "replace", None)):
            self.replace = None  # the engine checks callable(policy.replace) for the re-render mode
        self.offset = 0
        self._finish: list[int] = []
        self._replace: list[tuple[int, list[int]]] = []
        self._extend: list[tuple[int, list[int]]] = []

    def start(self, prompts: Sequence[Sequence[int]], groups: Sequence[int]) -> None:
        mine = [[list(map(int, p)), int(g)] for p, g in zip(prompts, groups)]
        counts = np.asarray(multihost_utils.process_allgather(np.asarray([len(mine)], np.int64))).reshape(-1)
        self.offset = int(counts[: jax.process_index()].sum())
        every = allgather_json(mine)
        self._finish, self._replace, self._extend = [], [], []
        self.inner.start([p for p, _ in every], [g for _, g in every])

    def finish(self, rows: Sequence[int]) -> None:
        self._finish += [self.offset + int(i) for i in rows]

    def extend(self, rows: Sequence[int], deltas: Sequence[Sequence[int]]) -> None:
        self._extend += [(self.offset + int(i), [int(t) for t in d]) for i, d in zip(rows, deltas)]

    def replace(self, rows: Sequence[int], contexts: Sequence[Sequence[int]]) -> None:
        self._replace += [(self.offset + int(i), [int(t) for t in c]) for i, c in zip(rows, contexts)]

    def act(self, rows: Sequence[int], budgets: Sequence[int]) -> list:
        mine = [self.offset + int(i) for i in rows]
        samples = self._exchange([[r, int(b)] for r, b in zip(mine, budgets)])
        return [samples[r] for r in mine]

    def drain(self) -> None:
        """Take part in the exchanges, asking for nothing, until every process is done."""
        while self._exchange([]) is not None:
            pass

    def _exchange(self, asks: list) -> dict | None:
        """One lockstep round: apply everyone's held finish/replace/extend, then act on everyone's rows.
        Returns the samples by global row, or None once no process asks for a step."""
        every = allgather_json(
            [{"finish": self._finish, "replace": self._replace, "extend": self._extend, "act": asks}]
        )
        self._finish, self._replace, self._extend = [], [], []
        finish = sorted(r for e in every for r in e["finish"])
        replace = sorted((r, c) for e in every for r, c in e["replace"])
        extend = sorted((r, d) for e in every for r, d in e["extend"])
        act = sorted((r, b) for e in every for r, b in e["act"])
        if finish:
            self.inner.finish(finish)
        if replace:
            self.inner.replace([r for r, _ in replace], [c for _, c in replace])
        if extend:
            self.inner.extend([r for r, _ in extend], [d for _, d in extend])
        if not act:
            return None
        return dict(zip((r for r, _ in act), self.inner.act([r for r, _ in act], [b for _, b in act])))
