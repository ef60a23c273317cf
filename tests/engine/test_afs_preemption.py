"""Admission Fair Sharing in preemption: among the candidates of one ClusterQueue, those of
the LocalQueue that used more are tried first, before priority (Kueue's CandidatesOrdering:
`TestCandidatesOrdering` "workloads with higher LQ usage first", and the integration case
"should preempt a workload from LQ with higher recent usage"). Which workloads may be
preempted does not change, only the order they are tried in."""

from __future__ import annotations

from atoll.engine.cycle import run_cycle
from atoll.engine.model import (
    ClusterQueueName,
    LocalQueue,
    LocalQueueKey,
    ReclaimWithinCohort,
    WithinClusterQueue,
)
from atoll.engine.snapshot import Snapshot, queue_candidate_key
from tests.engine.builders import (
    NS,
    admitted,
    by_workload,
    cluster_queue,
    group,
    preemption,
    quotas,
    snapshot,
    summary,
    workload,
)


def _lqs(*pairs: tuple[str, str]) -> list[LocalQueue]:
    return [
        LocalQueue(namespace=NS, name=lq, cluster_queue=ClusterQueueName(cq)) for lq, cq in pairs
    ]


def _one_queue(a: str, a_priority: int, b: str, usage: dict[str, float] | None) -> Snapshot:
    """ClusterQueue `cq` of 10 CPUs (withinClusterQueue LowerPriority) running `a` (lq-a,
    5 CPUs, `a_priority`) and `b` (lq-b, 5 CPUs, priority 1)."""
    cq = cluster_queue(
        "cq",
        group(quotas("f", cpu=10)),
        policy=preemption(within=WithinClusterQueue.LOWER_PRIORITY),
    )
    running = [
        admitted(workload(a, "lq-a", priority=a_priority, cpu=5), "cq"),
        admitted(workload(b, "lq-b", priority=1, cpu=5), "cq"),
    ]
    lqs = _lqs(("lq-a", "cq"), ("lq-b", "cq"))
    return snapshot([cq], running=running, local_queues=lqs, lq_usage=usage)


def test_within_a_cluster_queue_the_localqueue_that_used_more_is_preempted_first() -> None:
    head = workload("p", "lq-b", priority=10, cpu=5)
    fair = _one_queue("a", 5, "b", {f"{NS}/lq-a": 2.0})
    assert summary(by_workload(run_cycle(fair, [head]))["p"]) == "preempt:a"
    plain = _one_queue("a", 5, "b", None)
    assert summary(by_workload(run_cycle(plain, [head]))["p"]) == "preempt:b"


def _borrowing_cohort(
    usage: dict[str, float] | None,
    *,
    reclaim: ReclaimWithinCohort = ReclaimWithinCohort.ANY,
    a_priority: int = 10,
) -> Snapshot:
    """cq1 borrows 16 CPUs for `a` (lq-a, 20 CPUs) and `b` (lq-b, 12 CPUs, priority 1); cq2
    reclaims as `reclaim` says."""
    cq1 = cluster_queue("cq1", group(quotas("f", cpu=16)), cohort="all")
    cq2 = cluster_queue(
        "cq2", group(quotas("f", cpu=16)), cohort="all", policy=preemption(reclaim=reclaim)
    )
    running = [
        admitted(workload("a", "lq-a", priority=a_priority, cpu=20), "cq1", at=1.0),
        admitted(workload("b", "lq-b", priority=1, cpu=12), "cq1", at=2.0),
    ]
    lqs = _lqs(("lq-a", "cq1"), ("lq-b", "cq1"), ("lq-c", "cq2"))
    return snapshot([cq1, cq2], running=running, local_queues=lqs, lq_usage=usage)


def test_reclaim_takes_the_borrowing_localqueue_that_used_more_first() -> None:
    """cq1 borrows 16 CPUs for lq-a (20, priority 10) and lq-b (12, priority 1); cq2
    reclaims 10: lq-a's Workload goes, though its priority is higher, as its LocalQueue used
    more. Without Admission Fair Sharing, the lower priority goes."""
    head = workload("c", "lq-c", cpu=10)
    fair = _borrowing_cohort({f"{NS}/lq-a": 20.0, f"{NS}/lq-b": 12.0})
    assert summary(by_workload(run_cycle(fair, [head]))["c"]) == "preempt:a"
    plain = _borrowing_cohort(None)
    assert summary(by_workload(run_cycle(plain, [head]))["c"]) == "preempt:b"


def test_the_candidate_key_puts_evicted_first_then_usage_then_priority() -> None:
    usage = {f"{NS}/lq-a": 0.5, f"{NS}/lq-b": 0.1}
    mid = admitted(workload("mid", "lq-a", priority=10, cpu=1), "cq")
    low = admitted(workload("low", "lq-b", priority=1, cpu=1), "cq")
    gone = admitted(workload("gone", "lq-b", priority=50, cpu=1), "cq", evicted=True)
    by_usage = {LocalQueueKey(k): v for k, v in usage.items()}
    ordered = sorted([low, mid, gone], key=lambda a: queue_candidate_key(by_usage, a))
    assert [a.workload.name for a in ordered] == ["gone", "mid", "low"]
    assert [
        a.workload.name for a in sorted([low, mid], key=lambda a: queue_candidate_key({}, a))
    ] == ["low", "mid"]


def test_a_higher_priority_workload_of_the_busier_localqueue_hides_no_eligible_one() -> None:
    """The busier LocalQueue's Workload comes first in the candidate order but its priority
    is above the preemptor's: the search goes on to the next (a list by usage is not by
    priority, so no priority bound may end it)."""
    snap = _one_queue("busy", 20, "idle", {f"{NS}/lq-a": 5.0})
    head = workload("p", "lq-b", priority=10, cpu=5)
    assert summary(by_workload(run_cycle(snap, [head]))["p"]) == "preempt:idle"


def test_reclaim_by_priority_skips_the_busier_localqueues_higher_priority() -> None:
    """With LowerPriority, `a` (priority 20, the busier LocalQueue's, first in the order)
    may not be taken by a preemptor of priority 10: `b` is."""
    usage = {f"{NS}/lq-a": 20.0, f"{NS}/lq-b": 0.0}
    snap = _borrowing_cohort(usage, reclaim=ReclaimWithinCohort.LOWER_PRIORITY, a_priority=20)
    head = workload("c", "lq-c", priority=10, cpu=10)
    assert summary(by_workload(run_cycle(snap, [head]))["c"]) == "preempt:b"
