"""One scheduling cycle (engine/cycle.py, ordering.py, partial.py): ordering, queueing,
stop policies, inactive queues, the gang rule and partial admission."""

from __future__ import annotations

from dataclasses import replace

import pytest

from atoll.engine.cycle import drain, run_cycle
from atoll.engine.decisions import Admit, EvictionReason, Pending, PendingReason, Requeue
from atoll.engine.model import (
    ClusterQueue,
    ClusterQueueName,
    LabelSelector,
    LocalQueue,
    QueueingStrategy,
    StopPolicy,
    WithinClusterQueue,
    Workload,
    WorkloadKey,
)
from atoll.engine.ordering import select_heads
from atoll.engine.snapshot import Snapshot
from tests.engine.builders import (
    NS,
    admitted,
    by_workload,
    cluster_queue,
    cohort,
    flavor,
    group,
    pod_set,
    preemption,
    quotas,
    snapshot,
    summary,
    workload,
)


def cq(name: str, gpus: int, cohort: str | None = "co", **kw) -> ClusterQueue:  # type: ignore[no-untyped-def]
    return cluster_queue(name, group(quotas("f", gpu=gpus)), cohort=cohort, **kw)


ORDER = [
    pytest.param(
        [cq("a", 4), cq("b", 4)],
        [workload("borrows", "a", gpu=6, priority=100), workload("fits", "b", gpu=4, priority=0)],
        0,
        {"fits": "admit:f", "borrows": "pending:WaitingForQuota"},
        id="non-borrowing-heads-go-before-higher-priority-borrowing-heads",
    ),
    pytest.param(
        [cq("a", 0), cq("b", 0)],
        [
            workload("old-low", "a", gpu=4, priority=0, at=0.0),
            workload("new-high", "b", gpu=4, priority=10, at=5.0),
        ],
        4,
        {"new-high": "admit:f", "old-low": "pending:WaitingForQuota"},
        id="then-higher-priority-first",
    ),
    pytest.param(
        [cq("a", 0), cq("b", 0)],
        [workload("new", "a", gpu=4, at=5.0), workload("old", "b", gpu=4, at=1.0)],
        4,
        {"old": "admit:f", "new": "pending:WaitingForQuota"},
        id="then-older-first",
    ),
    pytest.param(
        [cq("a", 0), cq("b", 4)],
        [
            workload("fits", "b", gpu=4, priority=10, at=0.0),
            replace(workload("preemptor", "a", gpu=4, at=5.0), sticky=True),
        ],
        0,
        {"preemptor": "admit:f", "fits": "pending:WaitingForQuota"},
        id="a-sticky-preemptor-goes-first-of-all",
    ),
]


@pytest.mark.parametrize(("cqs", "heads", "shared", "expected"), ORDER)
def test_cross_cluster_queue_order_in_one_cycle(
    cqs: list[ClusterQueue], heads: list[Workload], shared: int, expected: dict[str, str]
) -> None:
    snap = snapshot(cqs, cohorts=[cohort("co", group(quotas("f", gpu=shared)))])
    decisions = by_workload(run_cycle(snap, heads))
    assert {k: summary(d) for k, d in decisions.items()} == expected


def test_heads_that_lose_to_earlier_admissions_are_retried_at_once() -> None:
    d = by_workload(
        run_cycle(
            snapshot([cq("a", 2), cq("b", 2)]),
            [workload("x", "a", gpu=4), workload("y", "b", gpu=4, at=1.0)],
        )
    )
    assert summary(d["x"]) == "admit:f"
    lost = d["y"]
    assert isinstance(lost, Pending)
    assert (lost.message, lost.requeue) == (
        "Workload no longer fits after processing another workload",
        Requeue.IMMEDIATE,
    )


def _drive(snap: Snapshot, pending: list[Workload], cycles: int) -> list[str]:
    """A tiny queue manager: heads per ClusterQueue, park what the engine says to park."""
    parked: set[WorkloadKey] = set()
    queue = {w.key: w for w in pending}
    admitted_order: list[str] = []
    for _ in range(cycles):
        by_cq: dict[ClusterQueueName, list[Workload]] = {
            ClusterQueueName("a"): list(queue.values())
        }
        heads = select_heads(by_cq, frozenset(parked))
        for d in run_cycle(snap, heads):
            if isinstance(d, Admit):
                admitted_order.append(d.workload.split("/")[1])
                del queue[d.workload]
            elif isinstance(d, Pending) and d.requeue is Requeue.INADMISSIBLE:
                parked.add(d.workload)
    return admitted_order


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        pytest.param(QueueingStrategy.STRICT_FIFO, [], id="strict-fifo-blocks-behind-the-head"),
        pytest.param(
            QueueingStrategy.BEST_EFFORT_FIFO, ["small"], id="best-effort-fifo-skips-the-head"
        ),
    ],
)
def test_queueing_strategy(strategy: QueueingStrategy, expected: list[str]) -> None:
    snap = snapshot(
        [cq("a", 4, None, strategy=strategy)], running=[admitted(workload("r", "a", gpu=2), "a")]
    )
    pending = [workload("big", "a", gpu=4, priority=5), workload("small", "a", gpu=1, priority=0)]
    assert _drive(snap, pending, cycles=3) == expected


VALIDATION = [
    pytest.param(
        cq("a", 4, None),
        [LocalQueue(namespace=NS, name="a", cluster_queue=ClusterQueueName("gone"))],
        {},
        PendingReason.MISCONFIGURED,
        "ClusterQueue gone not found",
        id="local-queue-pointing-at-a-missing-cluster-queue-is-misconfigured",
    ),
    pytest.param(
        cq("a", 4, None, selector=LabelSelector(match_labels=frozenset({("team", "x")}))),
        None,
        {},
        PendingReason.NAMESPACE_MISMATCH,
        "Workload namespace doesn't match ClusterQueue selector",
        id="namespace-not-selected",
    ),
    pytest.param(
        cq("a", 4, None, selector=None),
        None,
        {},
        PendingReason.NAMESPACE_MISMATCH,
        "Workload namespace doesn't match ClusterQueue selector",
        id="nil-namespace-selector-admits-nothing",
    ),
    pytest.param(
        cq("a", 4, None),
        [],
        {},
        PendingReason.MISCONFIGURED,
        "LocalQueue a doesn't exist",
        id="missing-local-queue-is-misconfigured",
    ),
    pytest.param(
        cq("a", 4, None, stop=StopPolicy.HOLD),
        None,
        {},
        PendingReason.SUSPENDED,
        "ClusterQueue a is inactive: Stopped",
        id="held-cluster-queue-admits-nothing",
    ),
    pytest.param(
        cq("a", 4, None),
        [
            LocalQueue(
                namespace=NS,
                name="a",
                cluster_queue=ClusterQueueName("a"),
                stop_policy=StopPolicy.HOLD,
            )
        ],
        {},
        PendingReason.SUSPENDED,
        "LocalQueue a is stopped",
        id="held-local-queue-admits-nothing",
    ),
    pytest.param(
        cq("a", 4, None),
        None,
        {"flavors": []},
        PendingReason.SUSPENDED,
        "ClusterQueue a is inactive: FlavorNotFound",
        id="cluster-queue-with-missing-flavor-is-inactive",
    ),
]


@pytest.mark.parametrize(("queue", "lqs", "kw", "reason", "message"), VALIDATION)
def test_heads_that_cannot_be_considered(
    queue: ClusterQueue,
    lqs: list[LocalQueue] | None,
    kw: dict[str, list[object]],
    reason: PendingReason,
    message: str,
) -> None:
    snap = snapshot([queue], local_queues=lqs, **kw)  # type: ignore[arg-type]
    (d,) = run_cycle(snap, [workload("w", "a", gpu=1)])
    assert isinstance(d, Pending)
    assert (d.reason, d.message) == (reason, message)


def test_deactivated_workload_is_not_admitted() -> None:
    (d,) = run_cycle(snapshot([cq("a", 4, None)]), [workload("w", "a", gpu=1, active=False)])
    assert summary(d) == "pending:Deactivated"


def test_inactive_reason_from_the_caller_suspends_the_queue() -> None:
    queue = replace(cq("a", 4, None), inactive_reason="AdmissionCheckInactive")
    (d,) = run_cycle(snapshot([queue]), [workload("w", "a", gpu=1)])
    assert isinstance(d, Pending)
    assert d.message == "ClusterQueue a is inactive: AdmissionCheckInactive"


@pytest.mark.parametrize(
    ("cq_stop", "lq_stop", "expected"),
    [
        pytest.param(
            StopPolicy.HOLD, StopPolicy.NONE, [], id="hold-keeps-admitted-workloads-running"
        ),
        pytest.param(
            StopPolicy.HOLD_AND_DRAIN,
            StopPolicy.NONE,
            [EvictionReason.CLUSTER_QUEUE_STOPPED],
            id="hold-and-drain-evicts-admitted-workloads",
        ),
        pytest.param(
            StopPolicy.NONE,
            StopPolicy.HOLD_AND_DRAIN,
            [EvictionReason.LOCAL_QUEUE_STOPPED],
            id="local-queue-hold-and-drain-evicts-its-workloads",
        ),
    ],
)
def test_stop_policy_drain(
    cq_stop: StopPolicy, lq_stop: StopPolicy, expected: list[EvictionReason]
) -> None:
    lqs = [
        LocalQueue(namespace=NS, name="a", cluster_queue=ClusterQueueName("a"), stop_policy=lq_stop)
    ]
    snap = snapshot(
        [cq("a", 4, None, stop=cq_stop)],
        running=[admitted(workload("r", "a", gpu=2), "a")],
        local_queues=lqs,
    )
    assert [e.reason for e in drain(snap)] == expected


def test_drain_evicts_deactivated_workloads_that_hold_quota() -> None:
    snap = snapshot(
        [cq("a", 4, None)], running=[admitted(workload("r", "a", gpu=2, active=False), "a")]
    )
    assert [(e.workload, e.reason) for e in drain(snap)] == [
        (WorkloadKey("default/r"), EvictionReason.DEACTIVATED)
    ]


def test_already_admitted_heads_are_skipped() -> None:
    w = workload("w", "a", gpu=1)
    snap = snapshot([cq("a", 4, None)], running=[admitted(w, "a")])
    assert run_cycle(snap, [w]) == ()


GANG = workload(
    "gang", "a", pod_set(name="driver", count=1, gpu=1), pod_set(name="workers", count=4, gpu=1)
)


def test_gang_is_admitted_with_every_pod_set_and_every_pod() -> None:
    (d,) = run_cycle(snapshot([cq("a", 5, None)]), [GANG])
    assert isinstance(d, Admit)
    assert [(ps.name, ps.count, dict(ps.resource_usage)) for ps in d.pod_sets] == [
        ("driver", 1, {"gpu": 1}),
        ("workers", 4, {"gpu": 4}),
    ]


def test_gang_that_fits_only_in_part_is_not_admitted_at_all() -> None:
    (d,) = run_cycle(snapshot([cq("a", 4, None)]), [GANG])
    assert isinstance(d, Pending)
    assert "pod set workers" in d.message


PARTIAL = [
    pytest.param(6, 6, id="partial-admission-reduces-count-to-what-fits"),
    pytest.param(3, None, id="partial-admission-stops-at-min-count"),
    pytest.param(10, 10, id="full-count-when-it-fits"),
]


@pytest.mark.parametrize(("capacity", "expected"), PARTIAL)
def test_partial_admission(capacity: int, expected: int | None) -> None:
    w = workload("w", "a", pod_set(count=10, min_count=4, gpu=1))
    (d,) = run_cycle(snapshot([cq("a", capacity, None)]), [w])
    counts = [ps.count for ps in d.pod_sets] if isinstance(d, Admit) else None
    assert counts == (None if expected is None else [expected])


def test_partial_admission_only_when_preemption_cannot_make_room_for_the_whole_gang() -> None:
    queue = cq("a", 10, None, policy=preemption(within=WithinClusterQueue.LOWER_PRIORITY))
    snap = snapshot([queue], running=[admitted(workload("low", "a", gpu=4), "a")])
    (d,) = run_cycle(snap, [workload("w", "a", pod_set(count=10, min_count=4, gpu=1), priority=5)])
    assert summary(d) == "preempt:low"


def test_partial_admission_scales_every_reducible_pod_set_together() -> None:
    w = workload(
        "w",
        "a",
        pod_set(name="ps1", count=4, min_count=2, gpu=1),
        pod_set(name="ps2", count=4, min_count=2, gpu=1),
    )
    (d,) = run_cycle(snapshot([cq("a", 6, None)]), [w])
    assert isinstance(d, Admit)
    assert [ps.count for ps in d.pod_sets] == [3, 3]


def test_no_matching_flavor_message_names_the_flavor() -> None:
    snap = snapshot([cq("a", 4, None)], flavors=[flavor("f", {"zone": "a"})])
    (d,) = run_cycle(snap, [workload("w", "a", pod_set(gpu=1, selector={"zone": "b"}))])
    assert isinstance(d, Pending)
    assert (d.reason, d.message) == (
        PendingReason.NO_MATCHING_FLAVOR,
        "couldn't assign flavors to pod set main: flavor f doesn't match node affinity",
    )


def test_cohort_cycle_makes_its_cluster_queues_inactive() -> None:
    cohorts = [cohort("x", parent="y"), cohort("y", parent="x")]
    snap = snapshot([cq("a", 4, "x"), cq("b", 4, None)], cohorts=cohorts)
    decisions = by_workload(
        run_cycle(snap, [workload("wa", "a", gpu=1), workload("wb", "b", gpu=1)])
    )
    stuck = decisions["wa"]
    assert isinstance(stuck, Pending)
    assert stuck.message == "ClusterQueue a is inactive: CohortCycle"
    assert summary(decisions["wb"]) == "admit:f"


def test_cohort_named_but_never_created_is_an_implicit_root() -> None:
    snap = snapshot([cq("a", 2, "implicit"), cq("b", 2, "implicit")])
    (d,) = run_cycle(snap, [workload("w", "a", gpu=4)])
    assert isinstance(d, Admit)
    assert (d.borrowing, d.borrow_level) == (True, 1)
