"""The virtual clock: a heap of timed events, popped one instant at a time."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from enum import IntEnum


class Kind(IntEnum):
    """Event kinds, in the order they are handled within one instant: work that ends frees
    capacity before new work arrives."""

    COMPLETE = 0
    OUT_OF_TIME = 1
    """The Workload's maximum execution time is up (`state.workloads.execution_time_left`)."""
    TIMEOUT = 2
    REQUEUE = 3
    ARRIVE = 4
    PODS = 5
    """Greedy mode: the Job controller creates the next batch of pods."""
    REQUEUE_PARKED = 6
    """The batched requeue of the parked (inadmissible) workloads is due
    (`state.cache.Cache.requeue_due`): the step runs then."""
    SAMPLE_USAGE = 7
    """A LocalQueue's usage sample is due (Admission Fair Sharing; the operator's timer,
    `Cache.next_requeue`): the step takes it."""


@dataclass(frozen=True, slots=True, order=True)
class Event:
    t: float
    kind: Kind
    seq: int
    key: str = field(compare=False)
    gen: int = field(compare=False, default=0)
    """The owner's generation when scheduled; a stale event (owner evicted or restarted
    since) is ignored."""


@dataclass(slots=True)
class Clock:
    now: float = 0.0
    _heap: list[Event] = field(default_factory=list)
    _seq: int = 0

    def at(self, t: float, kind: Kind, key: str, gen: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, Event(t, kind, self._seq, key, gen))

    def next_time(self) -> float | None:
        return self._heap[0].t if self._heap else None

    def pop_instant(self) -> list[Event]:
        """Every event of the earliest instant, in handling order; advances `now`."""
        t = self._heap[0].t
        self.now = t
        out = []
        while self._heap and self._heap[0].t == t:
            out.append(heapq.heappop(self._heap))
        return out

    def __len__(self) -> int:
        return len(self._heap)
