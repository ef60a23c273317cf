"""The queue order that ends reclaim ping-pong: a preemptor keeps the head of its queue.

Kueue's BestEffortFIFO ClusterQueue keeps the workload that issued preemptions at its head
until it is admitted (the "sticky" preemptor, Kueue#6929/#7157). Without it, quota freed by
the victims wakes older inadmissible workloads of the preemptor's queue, one of them is the
head in the next cycle, the preemptor gets no turn, and the victim takes its quota back —
to be reclaimed again in the cycle after, forever.
"""

from __future__ import annotations

from dataclasses import replace

from atoll.engine.cycle import run_cycle
from atoll.engine.decisions import Admit, Pending, Preempt, Requeue
from atoll.engine.model import (
    AdmittedWorkload,
    ClusterQueueName,
    ReclaimWithinCohort,
    WithinClusterQueue,
    Workload,
    WorkloadKey,
)
from atoll.engine.ordering import select_heads
from tests.engine.builders import (
    admitted,
    cluster_queue,
    cohort,
    group,
    pod_set,
    preemption,
    quotas,
    snapshot,
    workload,
)

RECLAIM = preemption(within=WithinClusterQueue.LOWER_PRIORITY, reclaim=ReclaimWithinCohort.ANY)
CQS = [
    cluster_queue(name, group(quotas("f", gpu=4)), cohort="co", policy=RECLAIM)
    for name in ("a", "b")
]


def _gang(name: str, queue: str, pods: int, at: float) -> Workload:
    return workload(name, queue, pod_set(count=pods, gpu=1), at=at)


def _drive(*, sticky: bool, cycles: int = 5) -> list[list[str]]:
    """A queue manager as the cache is one: victims leave at once and are pending again,
    released quota unparks every parked workload; with `sticky`, a preemptor stays the
    head of its queue until admitted. Returns the non-pending decisions of each cycle."""
    running: dict[WorkloadKey, AdmittedWorkload] = {}
    for w in (_gang("u", "b", 4, 0.0), _gang("v", "b", 4, 1.0)):
        running[w.key] = admitted(w, "b", at=w.queued_at)  # v is the newest: reclaimed first
    pending = {w.key: w for w in (_gang("big", "a", 6, 10.0), _gang("small", "a", 4, 20.0))}
    parked: set[WorkloadKey] = set()
    preemptor: WorkloadKey | None = None
    history = []
    for cycle in range(cycles):
        by_cq: dict[ClusterQueueName, list[Workload]] = {}
        for w in pending.values():
            head = replace(w, sticky=True) if sticky and w.key == preemptor else w
            by_cq.setdefault(ClusterQueueName(w.queue_name), []).append(head)
        decisions = run_cycle(
            snapshot(CQS, cohorts=[cohort("co")], running=running.values()),
            select_heads(by_cq, frozenset(parked)),
        )
        step = []
        for d in decisions:
            if isinstance(d, Admit):
                running[d.workload] = admitted(
                    pending.pop(d.workload), d.cluster_queue, at=100.0 + cycle
                )
                step.append(f"admit {d.workload.removeprefix('default/')}")
                if d.workload == preemptor:
                    preemptor = None
            elif isinstance(d, Preempt):
                preemptor = d.workload
                for v in d.victims:
                    pending[v.workload] = running.pop(v.workload).workload
                parked.clear()
                victims = ",".join(v.workload.removeprefix("default/") for v in d.victims)
                step.append(f"{d.workload.removeprefix('default/')} preempts {victims}")
            elif isinstance(d, Pending) and d.requeue is Requeue.INADMISSIBLE:
                parked.add(d.workload)
        history.append(step)
    return history


def test_without_a_sticky_preemptor_the_victim_and_the_reclaimer_take_turns() -> None:
    assert _drive(sticky=False) == [
        [],  # big can't fit even by reclaiming v: parked
        ["small preempts v"],
        ["admit v"],  # big is the head of a again (and parked again); v borrows a's quota
        ["small preempts v"],
        ["admit v"],
    ]


def test_a_sticky_preemptor_is_admitted_in_the_next_cycle() -> None:
    assert _drive(sticky=True) == [[], ["small preempts v"], ["admit small"], [], []]


def test_select_heads_puts_the_sticky_workload_first_unless_it_is_parked() -> None:
    old = workload("old", "a", gpu=1, at=0.0)
    urgent = workload("urgent", "a", gpu=1, priority=9, at=5.0)
    preemptor = replace(workload("preemptor", "a", gpu=1, at=9.0), sticky=True)
    queue = {ClusterQueueName("a"): [old, urgent, preemptor]}
    assert select_heads(queue) == [preemptor]
    assert select_heads(queue, frozenset({preemptor.key})) == [urgent]
