"""Classic preemption (engine/preemption.py), one rule per case."""

from __future__ import annotations

import pytest

from atoll.engine.cycle import run_cycle
from atoll.engine.decisions import Pending, Preempt, PreemptionReason, Requeue
from atoll.engine.model import (
    AdmittedWorkload,
    BorrowWithinCohortPolicy,
    ClusterQueue,
    Cohort,
    PreemptionPolicy,
    ReclaimWithinCohort,
    WithinClusterQueue,
    Workload,
)
from tests.engine.builders import (
    NO_PREEMPTION,
    admitted,
    by_workload,
    cluster_queue,
    cohort,
    group,
    preemption,
    quotas,
    snapshot,
    summary,
    workload,
)

LOWER = WithinClusterQueue.LOWER_PRIORITY
NEWER_EQUAL = WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY
RECLAIM_LOWER = ReclaimWithinCohort.LOWER_PRIORITY
RECLAIM_ANY = ReclaimWithinCohort.ANY
BORROW_LOWER = BorrowWithinCohortPolicy.LOWER_PRIORITY


def cq(
    name: str, gpus: int, policy: PreemptionPolicy = NO_PREEMPTION, cohort: str | None = "co"
) -> ClusterQueue:
    return cluster_queue(name, group(quotas("f", gpu=gpus)), cohort=cohort, policy=policy)


def run(
    name: str,
    cq_name: str,
    gpus: int,
    *,
    priority: int = 0,
    at: float = 0.0,
    evicted: bool = False,
    queued: float = 0.0,
) -> AdmittedWorkload:
    return admitted(
        workload(name, cq_name, gpu=gpus, priority=priority, at=queued),
        cq_name,
        at=at,
        evicted=evicted,
    )


def single(cqs: list[ClusterQueue], running: list[AdmittedWorkload], head: Workload) -> str:
    (d,) = run_cycle(snapshot(cqs, running=running), [head])
    return summary(d)


CASES = [
    pytest.param(
        [cq("a", 8, preemption(within=LOWER), None)],
        [run("low", "a", 8, priority=0)],
        workload("w", "a", gpu=4, priority=10),
        "preempt:low",
        id="within-cluster-queue-lower-priority-preempts-lower-priority",
    ),
    pytest.param(
        [cq("a", 8, preemption(), None)],
        [run("low", "a", 8, priority=0)],
        workload("w", "a", gpu=4, priority=10),
        "pending:WaitingForQuota",
        id="within-cluster-queue-never-does-not-preempt",
    ),
    pytest.param(
        [cq("a", 8, preemption(within=LOWER), None)],
        [run("same", "a", 8, priority=10)],
        workload("w", "a", gpu=4, priority=10),
        "pending:WaitingForQuota",
        id="lower-priority-policy-spares-equal-priority",
    ),
    pytest.param(
        [cq("a", 8, preemption(within=NEWER_EQUAL), None)],
        [run("newer", "a", 8, priority=10, queued=5.0)],
        workload("w", "a", gpu=4, priority=10, at=1.0),
        "preempt:newer",
        id="lower-or-newer-equal-priority-preempts-newer-equal-priority",
    ),
    pytest.param(
        [cq("a", 8, preemption(within=NEWER_EQUAL), None)],
        [run("older", "a", 8, priority=10, queued=0.5)],
        workload("w", "a", gpu=4, priority=10, at=1.0),
        "pending:WaitingForQuota",
        id="lower-or-newer-equal-priority-spares-older-equal-priority",
    ),
    pytest.param(
        [cq("a", 8, preemption(within=LOWER), None)],
        [
            run("small-lowest", "a", 2, priority=0, at=10.0),
            run("big-low", "a", 4, priority=1),
            run("high", "a", 2, priority=50),
        ],
        workload("w", "a", gpu=4, priority=10),
        "preempt:big-low",
        id="lower-priority-victim-that-is-not-needed-is-spared",
    ),
    pytest.param(
        [cq("a", 8, preemption(within=LOWER), None)],
        [run("low", "a", 2, priority=0), run("high", "a", 6, priority=20)],
        workload("w", "a", gpu=8, priority=10),
        "pending:WaitingForQuota",
        id="nothing-is-preempted-when-candidates-cannot-free-enough",
    ),
    pytest.param(
        [cq("a", 4, preemption(reclaim=RECLAIM_LOWER)), cq("b", 4)],
        [run("borrower", "b", 6, priority=0)],
        workload("w", "a", gpu=4, priority=10),
        "preempt:borrower",
        id="reclaim-within-cohort-takes-back-lent-quota-from-lower-priority",
    ),
    pytest.param(
        [cq("a", 4, preemption(reclaim=RECLAIM_LOWER)), cq("b", 4)],
        [run("borrower", "b", 6, priority=100)],
        workload("w", "a", gpu=4, priority=10),
        "pending:WaitingForQuota",
        id="reclaim-lower-priority-spares-higher-priority-borrower",
    ),
    pytest.param(
        [cq("a", 4, preemption(reclaim=RECLAIM_ANY)), cq("b", 4)],
        [run("borrower", "b", 6, priority=100)],
        workload("w", "a", gpu=4, priority=10),
        "preempt:borrower",
        id="reclaim-any-ignores-priority",
    ),
    pytest.param(
        [cq("a", 4, preemption()), cq("b", 4)],
        [run("borrower", "b", 6, priority=0)],
        workload("w", "a", gpu=4, priority=10),
        "pending:WaitingForQuota",
        id="reclaim-never-does-not-take-back-lent-quota",
    ),
    pytest.param(
        [cq("a", 4, preemption(reclaim=RECLAIM_ANY)), cq("b", 4), cq("c", 4)],
        [
            run("borrower", "b", 6, priority=0),
            run("in-nominal", "c", 4, priority=0),
            run("mine", "a", 2),
        ],
        workload("w", "a", gpu=2, priority=10),
        "preempt:borrower",
        id="reclaim-only-from-cluster-queues-above-nominal",
    ),
    pytest.param(
        [cq("a", 2, preemption(reclaim=RECLAIM_LOWER)), cq("b", 2), cq("c", 4)],
        [run("borrower", "b", 5, priority=0), run("c-own", "c", 3, priority=0)],
        workload("w", "a", gpu=4, priority=10),
        "pending:WaitingForQuota",
        id="no-preemption-when-preemptor-would-borrow-without-borrow-within-cohort",
    ),
    pytest.param(
        [
            cq("a", 2, preemption(reclaim=RECLAIM_LOWER, borrow=BORROW_LOWER)),
            cq("b", 2),
            cq("c", 4),
        ],
        [run("borrower", "b", 5, priority=0), run("c-own", "c", 3, priority=0)],
        workload("w", "a", gpu=4, priority=10),
        "preempt:borrower",
        id="borrow-within-cohort-preempts-while-borrowing",
    ),
    pytest.param(
        [
            cq("a", 2, preemption(reclaim=RECLAIM_LOWER, borrow=BORROW_LOWER, threshold=3)),
            cq("b", 2),
            cq("c", 4),
        ],
        [run("borrower", "b", 5, priority=5), run("c-own", "c", 3, priority=0)],
        workload("w", "a", gpu=4, priority=10),
        "pending:WaitingForQuota",
        id="borrow-within-cohort-spares-victims-above-max-priority-threshold",
    ),
    pytest.param(
        [cq("a", 4, preemption(within=LOWER, reclaim=RECLAIM_ANY)), cq("b", 4)],
        [run("mine", "a", 2, priority=0), run("borrower", "b", 6, priority=5)],
        workload("w", "a", gpu=2, priority=10),
        "preempt:borrower",
        id="other-cluster-queues-are-preempted-before-own",
    ),
    pytest.param(
        [cq("a", 8, preemption(within=LOWER), None)],
        [run("lowest", "a", 4, priority=0), run("going", "a", 4, priority=5, evicted=True)],
        workload("w", "a", gpu=4, priority=10),
        "preempt:going",
        id="already-evicted-workloads-are-taken-first",
    ),
    pytest.param(
        [cq("a", 8, preemption(within=LOWER), None)],
        [run("older", "a", 4, priority=0, at=1.0), run("newer", "a", 4, priority=0, at=9.0)],
        workload("w", "a", gpu=4, priority=10),
        "preempt:newer",
        id="among-equal-priority-the-most-recently-admitted-is-taken",
    ),
]


@pytest.mark.parametrize(("cqs", "running", "head", "expected"), CASES)
def test_preemption(
    cqs: list[ClusterQueue], running: list[AdmittedWorkload], head: Workload, expected: str
) -> None:
    assert single(cqs, running, head) == expected


REASONS = [
    pytest.param(
        [cq("a", 8, preemption(within=LOWER), None)],
        [run("v", "a", 8)],
        PreemptionReason.IN_CLUSTER_QUEUE,
        id="in-cluster-queue",
    ),
    pytest.param(
        [cq("a", 4, preemption(reclaim=RECLAIM_ANY)), cq("b", 4)],
        [run("v", "b", 8)],
        PreemptionReason.IN_COHORT_RECLAMATION,
        id="in-cohort-reclamation",
    ),
    pytest.param(
        [
            cq("a", 2, preemption(reclaim=RECLAIM_LOWER, borrow=BORROW_LOWER)),
            cq("b", 2),
            cq("c", 4),
        ],
        [run("v", "b", 5), run("c-own", "c", 3)],
        PreemptionReason.IN_COHORT_RECLAIM_WHILE_BORROWING,
        id="in-cohort-reclaim-while-borrowing",
    ),
]


@pytest.mark.parametrize(("cqs", "running", "reason"), REASONS)
def test_victims_carry_kueue_preemption_reasons(
    cqs: list[ClusterQueue], running: list[AdmittedWorkload], reason: PreemptionReason
) -> None:
    (d,) = run_cycle(snapshot(cqs, running=running), [workload("w", "a", gpu=4, priority=10)])
    assert isinstance(d, Preempt)
    assert [(v.workload, v.reason) for v in d.victims] == [("default/v", reason)]
    assert d.message.endswith(". Pending the preemption of 1 workload(s)")


def test_two_preemptors_never_share_a_victim_in_one_cycle() -> None:
    cqs = [
        cq("a", 4, preemption(reclaim=RECLAIM_ANY)),
        cq("b", 4, preemption(reclaim=RECLAIM_ANY)),
        cq("c", 0),
    ]
    snap = snapshot(cqs, running=[run("borrower", "c", 8)])
    heads = [workload("wa", "a", gpu=4, priority=1), workload("wb", "b", gpu=4, priority=2)]
    decisions = by_workload(run_cycle(snap, heads))
    assert summary(decisions["wb"]) == "preempt:borrower"
    skipped = decisions["wa"]
    assert isinstance(skipped, Pending)
    assert skipped.message == "Workload has overlapping preemption targets with another workload"
    assert skipped.requeue is Requeue.IMMEDIATE


def test_preemptor_without_candidates_holds_its_nominal_quota_in_the_cycle() -> None:
    a = cq("a", 4, preemption(within=LOWER))
    cqs = [a, cq("b", 4), cq("c", 0)]
    running = [run("borrower", "b", 6)]
    heads = [workload("wa", "a", gpu=4, priority=5), workload("wc", "c", gpu=2)]
    decisions = by_workload(run_cycle(snapshot(cqs, running=running), heads))
    assert summary(decisions["wa"]) == "pending:WaitingForQuota"
    assert summary(decisions["wc"]) == "pending:WaitingForQuota"
    # without wa's hold, the 2 free GPUs go to wc
    (alone,) = run_cycle(snapshot(cqs, running=running), heads[1:])
    assert summary(alone) == "admit:f"


def _subtrees(left_quota: int, root_quota: int) -> tuple[list[ClusterQueue], list[Cohort]]:
    cqs = [
        cluster_queue(
            "a",
            group(quotas("f", gpu=0)),
            cohort="left",
            policy=preemption(reclaim=RECLAIM_ANY),
        ),
        cluster_queue("b", group(quotas("f", gpu=0)), cohort="right"),
    ]
    cohorts = [
        cohort("root", group(quotas("f", gpu=root_quota))),
        cohort("left", group(quotas("f", gpu=left_quota)), parent="root"),
        cohort("right", parent="root"),
    ]
    return cqs, cohorts


@pytest.mark.parametrize(
    ("left_quota", "root_quota", "expected"),
    [
        pytest.param(
            4, 0, "preempt:other", id="subtree-quota-gives-hierarchical-precedence-while-borrowing"
        ),
        pytest.param(
            0,
            4,
            "pending:WaitingForQuota",
            id="without-subtree-quota-a-borrowing-preemptor-cannot-reclaim",
        ),
    ],
)
def test_hierarchical_reclaim(left_quota: int, root_quota: int, expected: str) -> None:
    cqs, cohorts = _subtrees(left_quota, root_quota)
    snap = snapshot(cqs, cohorts=cohorts, running=[run("other", "b", 4, priority=100)])
    (d,) = run_cycle(snap, [workload("w", "a", gpu=4)])
    assert summary(d) == expected
