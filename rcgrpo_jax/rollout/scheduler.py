"""Which waiting episodes enter which free decode rows, and when: continuous batching as pure bookkeeping.

The rollouts of an RL step stream through a fixed number of decode rows. Episodes are admitted a whole
group at a time (the G rollouts of one task: they share a prompt prefix, prefilled once and copied to the
group's rows), in the order the groups first appear (or of a given priority, e.g. longest prompt first, so
rows decoding together have similar lengths and the tail is short), FIFO: the next group enters as soon as there are as
many free rows as it has members still waiting (it never overtakes an earlier one, so the order of a run
is fixed by the inputs alone, the same on every process). A row is freed when its episode ends; a freed
row is refilled at the next `admit`.

Nothing here touches a device: `ModelPolicy` drives a `DecodeSession` from these decisions; the same
object serves any caller that schedules episode lengths with no model.

On a mesh whose m row shards each hold a block of rows/m rows (`sampling.row_shards`), `shards=m` hands
free rows out striped over the shards (row 0 of each shard, then row 1 of each, ...), so a group's rows,
and the rows that step together, spread over the devices: each device's part of an append's sub-batch is
about 1/m of it, not a whole group on one device.

`shrink` is the tail of a step (nothing left waiting): the running episodes are renumbered onto the first
rows, in episode order, so the batch can be gathered into fewer rows.
"""

from __future__ import annotations

import dataclasses
from typing import Hashable, Sequence


@dataclasses.dataclass(frozen=True)
class Admission:
    """One group entering the batch: episodes[k] gets row rows[k]; rows[0] holds the shared prefix."""

    group: Hashable
    episodes: tuple[int, ...]
    rows: tuple[int, ...]


class RowScheduler:
    """Rows 0..rows-1 shared by episodes 0..n-1, whose admission groups are `groups[i]`.

    Invariants: every episode is admitted at most once and only while it waits; a row holds at most one
    episode; `running + waiting` are exactly the episodes neither ended nor dropped.
    """

    def __init__(self, rows: int, groups: Sequence[Hashable], priority: Sequence[float] | None = None, shards: int = 1):
        """priority: per episode; groups are admitted in ascending order of their first member's priority
        (ties: order of first appearance). None = order of first appearance. shards: the row shards the
        free rows are striped over (module docstring; 1 = lowest free rows first)."""
        if rows < 1:
            raise ValueError(f"rows must be >= 1, got {rows}")
        if shards < 1 or rows % shards:
            raise ValueError(f"rows ({rows}) must split over shards ({shards})")
        self.shards = int(shards)
        if priority is not None and len(priority) != len(groups):
            raise ValueError(f"{len(priority)} priorities for {len(groups)} episodes")
        self.rows = int(rows)
        waiting: dict[Hashable, list[int]] = {}
        for i, g in enumerate(groups):
            waiting.setdefault(g, []).append(i)
        order = list(waiting)
        if priority is not None:
            order.sort(key=lambda g: priority[waiting[g][0]])  # stable: ties keep first appearance
        self._waiting = {g: waiting[g] for g in order}
        big = {g: len(m) for g, m in self._waiting.items() if len(m) > self.rows}
        if big:
            g, size = next(iter(big.items()))
            raise ValueError(f"group {g!r} has {size} episodes but the batch has only {self.rows} rows")
        self.row_of: dict[int, int] = {}  # running episode -> row
        self._free = sorted(range(self.rows), key=self._stripe)  # the order rows are handed out

    def _stripe(self, row: int) -> tuple[int, int]:
        """A free row's place in the hand-out order: its index within its shard's block, then its shard."""
        block = self.rows // self.shards
        return (row % block, row // block) if self.rows % self.shards == 0 else (row, 0)

    @property
    def waiting(self) -> int:
        return sum(len(m) for m in self._waiting.values())

    @property
    def free_rows(self) -> tuple[int, ...]:
        return tuple(self._free)

    def admit(self) -> list[Admission]:
        """Fill free rows with the next waiting groups (FIFO, whole groups, free rows in stripe order: the
        lowest first with one shard)."""
        out = []
        while self._waiting:
            group, members = next(iter(self._waiting.items()))
            if len(members) > len(self._free):
                break
            rows, self._free = self._free[: len(members)], self._free[len(members) :]
            del self._waiting[group]
            self.row_of.update(zip(members, rows))
            out.append(Admission(group, tuple(members), tuple(rows)))
        return out

    def end(self, episodes: Sequence[int]) -> None:
        """Episodes that ended: a running one frees its row, a waiting one never enters (unknown: ignored)."""
        gone = set(int(i) for i in episodes)
        for i in gone:
            row = self.row_of.pop(i, None)
            if row is not None:
                self._free.append(row)
        self._free.sort(key=self._stripe)
        for g in list(self._waiting):
            self._waiting[g] = [i for i in self._waiting[g] if i not in gone]
            if not self._waiting[g]:
                del self._waiting[g]

    def shrink(self, rows: int) -> list[int]:
        """Renumber the running episodes onto rows 0..k-1 (episode order) of a batch of `rows` rows;
        returns, per new row, the old row it comes from (padding rows repeat the first). Only with nothing
        waiting (a refilled batch keeps its rows)."""
        if self.waiting:
            raise ValueError("shrink is for the tail of a step: episodes are still waiting for rows")
        live = sorted(self.row_of)
        if rows < max(len(live), 1):
            raise ValueError(f"cannot shrink {len(live)} running episodes into {rows} rows")
        src = [self.row_of[i] for i in live]
        src += [src[0] if src else 0] * (rows - len(src))
        self.rows = int(rows)
        self.row_of = {i: r for r, i in enumerate(live)}
        self._free = list(range(len(live), self.rows))  # nothing waits: the order is never used
        return src
