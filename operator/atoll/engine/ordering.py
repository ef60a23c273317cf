"""Queue order inside a ClusterQueue, and the order heads are processed in one cycle.

Mirrors Kueue's pkg/cache/queue/cluster_queue.go (heap order: under Admission Fair Sharing the
LocalQueue's usage, then the sticky preemptor of a BestEffortFIFO queue, then priority, then
queue-order timestamp, then UID; StrictFIFO vs BestEffortFIFO requeueing) and
pkg/scheduler/scheduler.go (`makeClassicalIterator`: sticky preemptors first, as with Kueue's
PrioritizePreemptorWorkloads gate, then workloads that don't borrow, then priority, then FIFO).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping

from atoll.engine.decisions import Requeue
from atoll.engine.model import ClusterQueueName, QueueingStrategy, Workload, WorkloadKey

QueueKey = tuple[float, bool, int, float, str, str]


def queue_key(w: Workload, usage: float = 0.0) -> QueueKey:
    """Heap order inside one ClusterQueue: under Admission Fair Sharing the lower usage of
    the workload's LocalQueue first (`usage`, 0 otherwise), then a sticky preemptor, then
    higher priority, then older, then UID."""
    return (usage, not w.sticky, -w.priority, w.queued_at, w.uid, w.key)


def with_usage(key: QueueKey, usage: float) -> QueueKey:
    """`key` (a `queue_key`) with another LocalQueue usage in front."""
    return (usage, key[1], key[2], key[3], key[4], key[5])


class SchedulingClass:
    """A scheduling class (`scheduling_class`): its parts, and their hash worked out once.
    The parts are deep (pod sets, namespace labels), and the queues and the decider look a
    class up at every head they pass; equal parts make equal classes, of the same hash."""

    __slots__ = ("_hash", "parts")

    def __init__(self, parts: tuple[Hashable, ...]) -> None:
        self.parts = parts
        self._hash = hash(parts)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, SchedulingClass)
            and self._hash == other._hash
            and self.parts == other.parts
        )

    def __repr__(self) -> str:
        return f"SchedulingClass{self.parts!r}"

    def __reduce__(self) -> tuple[type[SchedulingClass], tuple[tuple[Hashable, ...]]]:
        return SchedulingClass, (self.parts,)  # the hash is worked out again where it lands


def scheduling_class(w: Workload, *, by_time: bool, by_end: bool = False) -> SchedulingClass:
    """What a cycle reads from a pending workload to decide it: two workloads of one class
    in one ClusterQueue get the same decision from the same snapshot (Kueue's scheduling
    equivalence hash). Name and UID only order workloads; the queue-order time counts only
    where the ClusterQueue's LowerOrNewerEqualPriority compares it (`by_time`); a sticky
    preemptor is a class of its own; the run bounds count only in a backfill queue
    (`by_end`), whose reservations read them."""
    base = (
        w.namespace,
        w.queue_name,
        w.pod_sets,
        w.priority,
        w.namespace_labels,
        w.active,
        w.misconfigured,
        w.queued_at if by_time else None,
        w.key if w.sticky else None,
    )
    return SchedulingClass((*base, w.run_limit, w.run_hint) if by_end else base)


def cycle_key(borrow_level: int, w: Workload) -> tuple[bool, int, int, float, str, str]:
    """Order of the heads in one cycle: a sticky preemptor first, then non-borrowing before
    borrowing (then less borrowing first), then higher priority, then older.

    The preemptor goes first so that the quota its victims freed is its own: an older head
    of another queue taking it (in the same cohort, borrowing as much) would leave the
    preemptor without candidates, parked, and its victims at the head of its queue, free
    to reclaim that quota from the thief, only to be preempted again: a livelock (what
    Kueue's PrioritizePreemptorWorkloads gate fixes, Kueue#13662; atoll always does it).
    """
    return (not w.sticky, borrow_level, -w.priority, w.queued_at, w.uid, w.key)


def select_heads(
    pending: Mapping[ClusterQueueName, Iterable[Workload]],
    parked: frozenset[WorkloadKey] = frozenset(),
    usage: Callable[[Workload], float] | None = None,
) -> list[Workload]:
    """The head of every ClusterQueue: its first workload in queue order that isn't parked
    as inadmissible. (A StrictFIFO queue never parks a workload for lack of quota, so its
    head blocks the ones behind it; a BestEffortFIFO queue parks it and moves on.)
    `usage`: each workload's LocalQueue usage under Admission Fair Sharing."""
    heads = []
    for name in sorted(pending):
        candidates = [w for w in pending[name] if w.key not in parked]
        if candidates:
            heads.append(min(candidates, key=lambda w: queue_key(w, usage(w) if usage else 0.0)))
    return heads


def requeue_for(strategy: QueueingStrategy | None, *, immediate: bool = False) -> Requeue:
    """Kueue's RequeueIfNotPresent: StrictFIFO always retries at once; BestEffortFIFO only
    when the failure came from contention within the cycle or a pending preemption."""
    if immediate or strategy is QueueingStrategy.STRICT_FIFO:
        return Requeue.IMMEDIATE
    return Requeue.INADMISSIBLE
