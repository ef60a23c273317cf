"""Pending queues: each ClusterQueue's pending workloads in queue order, and which of them
are parked as inadmissible.

Mirrors Kueue's pkg/cache/queue/cluster_queue.go: one queue per ClusterQueue in heap order
(`engine.ordering.queue_key`) plus the inadmissible workloads that a capacity or queue change
(`Cache.bump`, a new epoch) sends back. Kept up to date one changed workload at a time
(`touch`), so that taking the heads costs the changes since the last time, not the length
of the queues.

A workload is parked in two ways, with the same meaning: one at a time (`park`, a failed
head), or a whole queue at once (`park_all`), as a marker: every workload in the queue when
it was set stays parked until the queue's next epoch, exactly as if each had been parked on
its own, but without touching each. A workload that leaves the queue while the marker covers
it is parked on its own then, so that it comes back parked, as it would have.

Each queue has an epoch: a workload parked at its queue's epoch is asleep; waking a queue
gives it a new one. Every queue is woken at once (`wake_all`), or only some (`wake_queues`:
Kueue's requeuer wakes the ClusterQueues of one root Cohort's tree). Epochs are values of one
counter (`clock`), so a workload that was parked in one queue and moved to another is asleep
there only if that queue was not woken since.

Each workload also has an equivalence class (`engine.ordering.scheduling_class`): what the
engine cycle reads from it. Workloads of one class in one queue get the same decision from
the same snapshot (Kueue's scheduling equivalence hashing).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Hashable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass, field

from atoll.engine.ordering import QueueKey, with_usage

Parked = MutableMapping[str, tuple[str | None, int]]
"""Workloads parked on their own: workload → (its queue, that queue's epoch) when parked."""


@dataclass(slots=True)
class _Queue:
    order: list[tuple[QueueKey, str]] = field(default_factory=list)
    """(queue key, workload key), sorted: the queue order."""
    entry: dict[str, QueueKey] = field(default_factory=dict)
    cls: dict[str, Hashable] = field(default_factory=dict)
    classes: dict[Hashable, set[str]] = field(default_factory=dict)
    """The members of each equivalence class present in the queue."""
    canon: dict[Hashable, Hashable] = field(default_factory=dict)
    """Each class present → the one object of it that `cls` gives all its members: a
    look-up by class then finds it by identity, without comparing its deep parts."""
    marker: tuple[int, int] | None = None
    """(epoch, seq): the members with a seq up to this one were all parked at that epoch."""
    fresh: set[str] = field(default_factory=set)
    """Members the marker does not cover: those that joined after it was set, and those
    woken alone since (`wake`)."""
    cursor: int = 0
    """`order[:cursor]` are known to be parked at `cursor_epoch`."""
    cursor_epoch: int = -1

    def copy(self) -> _Queue:
        return _Queue(
            order=list(self.order),
            entry=dict(self.entry),
            cls=dict(self.cls),
            classes={c: set(ks) for c, ks in self.classes.items()},
            canon=dict(self.canon),
            marker=self.marker,
            fresh=set(self.fresh),
            cursor=self.cursor,
            cursor_epoch=self.cursor_epoch,
        )


@dataclass(slots=True)
class PendingQueues:
    """The pending workloads of a cache by queue (see the module docstring)."""

    groups: dict[str, _Queue] = field(default_factory=dict)
    group_of: dict[str, str] = field(default_factory=dict)
    seq: dict[str, int] = field(default_factory=dict)
    """When each workload last became unparked (entered a queue, changed its spec, was
    assumed): a marker covers the members with a lower seq only."""
    next_seq: int = 1
    dirty: set[str] = field(default_factory=set)
    """Workloads whose place in the queues may have changed since `place` last saw them."""
    deferred: list[tuple[float, str]] = field(default_factory=list)
    """(requeueAt, key) of workloads waiting for their backoff to end (a heap)."""
    version: int = -1
    """The cache's queue-objects version the queues were built for."""
    clock: int = 0
    """Bumped by every wake, of all queues or of some: the epochs are its values."""
    base: int = 0
    """The epoch of every queue not woken on its own since the last `wake_all`."""
    woken: dict[str, int] = field(default_factory=dict)
    """The epoch of each queue woken on its own since the last `wake_all` (`wake_queues`)."""

    def fork(self) -> PendingQueues:
        return PendingQueues(
            groups={g: q.copy() for g, q in self.groups.items()},
            group_of=dict(self.group_of),
            seq=dict(self.seq),
            next_seq=self.next_seq,
            dirty=set(self.dirty),
            deferred=list(self.deferred),
            version=self.version,
            clock=self.clock,
            base=self.base,
            woken=dict(self.woken),
        )

    def epoch_of(self, group: str | None) -> int:
        """The epoch of queue `group` (of no queue: that of the queues never woken alone)."""
        return self.base if group is None else self.woken.get(group, self.base)

    def wake_all(self, parked: Parked) -> None:
        """A new epoch for every queue: every parked workload is awake."""
        self.clock += 1
        self.base = self.clock
        self.woken.clear()
        parked.clear()

    def wake_queues(self, groups: Iterable[str], parked: Parked) -> None:
        """A new epoch for the queues `groups`: their parked workloads are awake, the other
        queues' stay parked."""
        self.clock += 1
        woken = set(groups)
        for group in woken:
            self.woken[group] = self.clock
        for key in [k for k, (group, _) in parked.items() if group in woken]:
            del parked[key]

    # -- changes --------------------------------------------------------------------------
    def touch(self, key: str) -> None:
        self.dirty.add(key)

    def renew(self, key: str) -> None:
        """`key` is no longer parked by any marker (the cache unparked it)."""
        self.seq[key] = self.next_seq
        self.next_seq += 1
        self.dirty.add(key)

    def defer(self, at: float, key: str) -> None:
        heapq.heappush(self.deferred, (at, key))

    def due(self, now: float) -> None:
        """Mark the workloads whose backoff ended by `now` as changed."""
        while self.deferred and self.deferred[0][0] <= now:
            self.dirty.add(heapq.heappop(self.deferred)[1])

    def rebuild(self, version: int, parked: Parked) -> set[str]:
        """Empty every queue (the queue objects changed); returns the keys that were in one."""
        keys = set(self.group_of)
        for key in keys:
            self.place(key, None, parked)
        self.groups.clear()
        self.version = version
        return keys

    def place(
        self,
        key: str,
        target: tuple[str, QueueKey, Hashable] | None,
        parked: Parked,
    ) -> None:
        """Put `key` in queue `target` = (group, queue key, class), or in none."""
        old = self.group_of.get(key)
        if old is not None:
            q = self.groups[old]
            if target is None or target[0] != old:
                if self._covered(q, old, key):
                    self.park(key, parked, old)  # it stays parked without the marker
                del self.group_of[key]
            self._remove(q, key)
            if not q.entry and q.marker is None:
                del self.groups[old]
        if target is None:
            return
        group, qkey, cls = target
        if old != group:
            self.seq[key] = self.next_seq
            self.next_seq += 1
            self.group_of[key] = group
            if key in parked:  # parked on its own in no queue or another: now in this one's
                if self._alone(key, parked):
                    self.park(key, parked, group)
                else:
                    del parked[key]
        q = self.groups.setdefault(group, _Queue())
        i = bisect.bisect_left(q.order, (qkey, key))
        q.order.insert(i, (qkey, key))
        q.cursor = min(q.cursor, i)
        q.entry[key] = qkey
        cls = q.canon.setdefault(cls, cls)
        q.cls[key] = cls
        q.classes.setdefault(cls, set()).add(key)
        if q.marker is not None and self.seq[key] > q.marker[1]:
            q.fresh.add(key)

    def _remove(self, q: _Queue, key: str) -> None:
        qkey = q.entry.pop(key)
        i = bisect.bisect_left(q.order, (qkey, key))
        del q.order[i]
        if i < q.cursor:
            q.cursor -= 1
        cls = q.cls.pop(key)
        members = q.classes[cls]
        members.discard(key)
        if not members:
            del q.classes[cls]
            del q.canon[cls]
        q.fresh.discard(key)

    def rekey(self, group: str, keys: Iterable[str], first: float) -> None:
        """Give the members `keys` of queue `group` the leading key part `first` (Admission
        Fair Sharing's LocalQueue usage): they keep their order among themselves and move
        together, in one pass over the queue rather than a removal and insertion each."""
        q = self.groups.get(group)
        if q is None:
            return
        entry = q.entry
        moved = entry.keys() & keys
        if not moved:
            return
        order = q.order
        rest = [e for e in order if e[1] not in moved]
        mine = [(with_usage(qkey, first), key) for qkey, key in order if key in moved]
        entry.update((key, new) for new, key in mine)
        mine.sort()  # in order already when they shared their first part (linear then)
        rest += mine
        rest.sort()  # two sorted runs: merged in linear time
        q.order = rest
        q.cursor = 0

    # -- parking --------------------------------------------------------------------------
    def _covered(self, q: _Queue, group: str, key: str) -> bool:
        m = q.marker
        return (
            m is not None
            and m[0] == self.epoch_of(group)
            and self.seq.get(key, 0) <= m[1]
            and key not in q.fresh
        )

    def _alone(self, key: str, parked: Parked) -> bool:
        """Whether `key` is parked on its own, and its queue was not woken since."""
        at = parked.get(key)
        return at is not None and at[1] == self.epoch_of(at[0])

    def asleep(self, key: str, parked: Parked) -> bool:
        """Whether `key` is parked (on its own or by its queue's marker)."""
        if self._alone(key, parked):
            return True
        group = self.group_of.get(key)
        return group is not None and self._covered(self.groups[group], group, key)

    def awake_of(self, group: str, keys: Iterable[str], parked: Parked) -> list[str]:
        """Those of `keys`, members of queue `group`, that are not `asleep` (in their order)."""
        q = self.groups[group]
        epoch = self.epoch_of(group)
        m = q.marker if q.marker is not None and q.marker[0] == epoch else None
        seq, fresh, epoch_of = self.seq, q.fresh, self.epoch_of
        out = []
        for key in keys:
            at = parked.get(key)
            if at is not None and at[1] == (epoch if at[0] == group else epoch_of(at[0])):
                continue  # parked on its own
            if m is not None and seq.get(key, 0) <= m[1] and key not in fresh:
                continue  # parked by the marker
            out.append(key)
        return out

    def park(self, key: str, parked: Parked, group: str | None) -> None:
        """Park `key` on its own until the next epoch of queue `group` (its queue now)."""
        parked[key] = (group, self.epoch_of(group))

    def park_all(self, group: str) -> None:
        """Park every workload now in `group` until the queue's next epoch."""
        q = self.groups[group]
        q.marker = (self.epoch_of(group), self.next_seq - 1)
        q.fresh = set()

    def wake(self, key: str, parked: Parked) -> None:
        """Wake `key` alone if it is parked (on its own or by its queue's marker); the rest
        of its queue stays as it is."""
        if self._alone(key, parked):
            del parked[key]
        group = self.group_of.get(key)
        if group is None:
            return
        q = self.groups[group]
        if self._covered(q, group, key):
            self.renew(key)  # newer than the marker, also once placed again
            q.fresh.add(key)
        q.cursor = 0

    def parked_keys(self, parked: Parked) -> set[str]:
        out = {k for k, (g, e) in parked.items() if e == self.epoch_of(g)}
        for group, q in self.groups.items():
            m = q.marker
            if m is not None and m[0] == self.epoch_of(group):
                out.update(k for k in q.entry if self.seq[k] <= m[1] and k not in q.fresh)
        return out

    def any_parked(self, parked: Parked) -> bool:
        """Whether a workload is parked (on its own, or in a queue by its marker)."""
        return any(e == self.epoch_of(g) for g, e in parked.values()) or any(
            self._covered(q, g, k)
            for g, q in self.groups.items()
            if q.marker is not None and q.marker[0] == self.epoch_of(g)
            for k in q.entry
        )

    # -- heads ----------------------------------------------------------------------------
    def heads(self, parked: Parked) -> Iterator[tuple[str, str]]:
        """(group, key) of the first unparked workload of every queue, by group name."""
        for group in sorted(self.groups):
            head = self._head(self.groups[group], self.epoch_of(group), parked)
            if head is not None:
                yield group, head

    def _head(self, q: _Queue, epoch: int, parked: Parked) -> str | None:
        if q.marker is not None and q.marker[0] != epoch:
            q.marker, q.fresh = None, set()
        if not q.order:
            return None
        if q.marker is not None:
            awake = [k for k in q.fresh if not self._alone(k, parked)]
            return min(awake, key=lambda k: (q.entry[k], k)) if awake else None
        if q.cursor_epoch != epoch:
            q.cursor, q.cursor_epoch = 0, epoch
        i, order = q.cursor, q.order
        while i < len(order) and self._alone(order[i][1], parked):
            i += 1
        q.cursor = i
        return order[i][1] if i < len(order) else None

    def first(self, group: str) -> str | None:
        """The first workload of queue `group` in queue order, parked or not."""
        q = self.groups.get(group)
        return q.order[0][1] if q is not None and q.order else None

    def ordered(self, group: str) -> Iterator[str]:
        """The workloads of queue `group` in queue order, parked or not."""
        q = self.groups.get(group)
        return iter(()) if q is None else (key for _, key in list(q.order))

    def classes_of(self, group: str) -> dict[Hashable, set[str]]:
        return self.groups[group].classes

    def class_of(self, key: str) -> tuple[str, Hashable] | None:
        group = self.group_of.get(key)
        return None if group is None else (group, self.groups[group].cls[key])
