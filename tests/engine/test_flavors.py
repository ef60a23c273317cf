"""Flavor assignment (engine/flavors.py), one rule per case."""

from __future__ import annotations

import pytest

from atoll.engine.cycle import run_cycle
from atoll.engine.decisions import Admit, Decision, Pending
from atoll.engine.model import (
    AdmittedWorkload,
    ClusterQueue,
    FungibilityPolicy,
    FungibilityPreference,
    ResourceFlavor,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
    WithinClusterQueue,
    Workload,
)
from tests.engine.builders import (
    admitted,
    cluster_queue,
    flavor,
    fungibility,
    group,
    pod_set,
    preemption,
    q,
    quotas,
    snapshot,
    summary,
    workload,
)

TRY = FungibilityPolicy.TRY_NEXT_FLAVOR
STOP = FungibilityPolicy.MAY_STOP_SEARCH
SPOT_TAINT = Taint(key="spot", value="true", effect=TaintEffect.NO_SCHEDULE)
TOLERATE_SPOT = Toleration(key="spot", operator=TolerationOperator.EQUAL, value="true")


def decide(
    cqs: list[ClusterQueue],
    w: Workload,
    flavors: list[ResourceFlavor] | None = None,
    running: list[AdmittedWorkload] | None = None,
) -> Decision:
    snap = snapshot(cqs, flavors=flavors, running=running or [])
    (decision,) = run_cycle(snap, [w])
    return decision


def two_flavors(first: int, second: int, **kw) -> ClusterQueue:  # type: ignore[no-untyped-def]
    return cluster_queue("cq", group(quotas("f1", gpu=first), quotas("f2", gpu=second)), **kw)


def lender() -> ClusterQueue:
    return cluster_queue("lender", group(quotas("f1", gpu=10), quotas("f2", gpu=10)), cohort="co")


CASES = [
    pytest.param(
        [two_flavors(4, 8)],
        workload("w", "cq", gpu=2),
        None,
        None,
        "admit:f1",
        id="first-flavor-that-fits-wins",
    ),
    pytest.param(
        [two_flavors(2, 8)],
        workload("w", "cq", gpu=4),
        None,
        None,
        "admit:f2",
        id="flavor-without-room-is-skipped",
    ),
    pytest.param(
        [cluster_queue("cq", group(quotas("f1", cpu=8000, gpu=1), quotas("f2", cpu=8000, gpu=4)))],
        workload("w", "cq", cpu=1000, gpu=2),
        None,
        None,
        "admit:f2",
        id="all-resources-of-a-group-come-from-one-flavor",
    ),
    pytest.param(
        [
            cluster_queue(
                "cq",
                group(quotas("cpu-a", cpu=8000)),
                group(quotas("gpu-x", gpu=1), quotas("gpu-y", gpu=4)),
            )
        ],
        workload("w", "cq", cpu=1000, gpu=2),
        None,
        None,
        "admit:cpu-a,gpu-y",
        id="each-resource-group-picks-its-own-flavor",
    ),
    pytest.param(
        [two_flavors(8, 8)],
        workload("w", "cq", gpu=2),
        [flavor("f1", taints=(SPOT_TAINT,)), flavor("f2")],
        None,
        "admit:f2",
        id="untolerated-taint-skips-flavor",
    ),
    pytest.param(
        [two_flavors(8, 8)],
        workload("w", "cq", pod_set(gpu=2, tolerations=(TOLERATE_SPOT,))),
        [flavor("f1", taints=(SPOT_TAINT,)), flavor("f2")],
        None,
        "admit:f1",
        id="pod-toleration-allows-tainted-flavor",
    ),
    pytest.param(
        [two_flavors(8, 8)],
        workload("w", "cq", gpu=2),
        [flavor("f1", taints=(SPOT_TAINT,), tolerations=(TOLERATE_SPOT,)), flavor("f2")],
        None,
        "admit:f1",
        id="flavor-tolerations-cover-its-own-taints",
    ),
    pytest.param(
        [two_flavors(8, 8)],
        workload("w", "cq", gpu=2),
        [
            flavor("f1", taints=(Taint(key="spot", effect=TaintEffect.PREFER_NO_SCHEDULE),)),
            flavor("f2"),
        ],
        None,
        "admit:f1",
        id="prefer-no-schedule-taint-does-not-block",
    ),
    pytest.param(
        [two_flavors(8, 8)],
        workload("w", "cq", pod_set(gpu=2, selector={"zone": "b"})),
        [flavor("f1", {"zone": "a"}), flavor("f2", {"zone": "b"})],
        None,
        "admit:f2",
        id="node-selector-conflicting-with-node-labels-skips-flavor",
    ),
    pytest.param(
        [two_flavors(8, 8)],
        workload("w", "cq", pod_set(gpu=2, selector={"team": "x"})),
        [flavor("f1", {"zone": "a"}), flavor("f2")],
        None,
        "admit:f1",
        id="node-selector-on-keys-the-flavor-does-not-label-is-ignored",
    ),
    pytest.param(
        [two_flavors(8, 8)],
        workload("w", "cq", pod_set(gpu=2, selector={"zone": "c"})),
        [flavor("f1", {"zone": "a"}), flavor("f2", {"zone": "b"})],
        None,
        "pending:NoMatchingFlavor",
        id="no-flavor-matching-affinity-is-no-matching-flavor",
    ),
    pytest.param(
        [two_flavors(8, 8)],
        workload("w", "cq", gpu=2, memory=10),
        None,
        None,
        "pending:NoMatchingFlavor",
        id="resource-not-covered-by-cluster-queue-is-no-matching-flavor",
    ),
    pytest.param(
        [two_flavors(8, 8)],
        workload("w", "cq", gpu=2, memory=0),
        None,
        None,
        "admit:f1",
        id="zero-request-of-uncovered-resource-is-ignored",
    ),
    pytest.param(
        [two_flavors(4, 4)],
        workload("w", "cq", gpu=5),
        None,
        None,
        "pending:ExceedsMaxQuota",
        id="request-above-any-flavor-capacity-exceeds-max-quota",
    ),
    pytest.param(
        [two_flavors(4, 4)],
        workload("w", "cq", gpu=3),
        None,
        [
            admitted(workload("r1", "cq", gpu=2), "cq", "f1"),
            admitted(workload("r2", "cq", gpu=2), "cq", "f2"),
        ],
        "pending:WaitingForQuota",
        id="request-within-capacity-but-used-is-waiting-for-quota",
    ),
    pytest.param(
        [
            cluster_queue("cq", group(quotas("f1", gpu=2), quotas("f2", gpu=8)), cohort="co"),
            lender(),
        ],
        workload("w", "cq", gpu=4),
        None,
        None,
        "admit:f1",
        id="when-can-borrow-may-stop-search-borrows-on-first-flavor",
    ),
    pytest.param(
        [
            cluster_queue(
                "cq",
                group(quotas("f1", gpu=2), quotas("f2", gpu=8)),
                cohort="co",
                fungible=fungibility(borrow=TRY),
            ),
            lender(),
        ],
        workload("w", "cq", gpu=4),
        None,
        None,
        "admit:f2",
        id="when-can-borrow-try-next-flavor-prefers-no-borrowing",
    ),
]


@pytest.mark.parametrize(("cqs", "w", "flavors", "running", "expected"), CASES)
def test_flavor_assignment(
    cqs: list[ClusterQueue],
    w: Workload,
    flavors: list[ResourceFlavor] | None,
    running: list[AdmittedWorkload] | None,
    expected: str,
) -> None:
    assert summary(decide(cqs, w, flavors, running)) == expected


def _preempt_or_borrow(**kw) -> list[ClusterQueue]:  # type: ignore[no-untyped-def]
    """f1: room only by preempting a low-priority workload in cq; f2: room by borrowing."""
    cq = cluster_queue(
        "cq",
        group(quotas("f1", gpu=4), quotas("f2", gpu=q(0))),
        cohort="co",
        policy=preemption(within=WithinClusterQueue.LOWER_PRIORITY),
        **kw,
    )
    return [
        cq,
        cluster_queue("lender", group(quotas("f1", gpu=0), quotas("f2", gpu=8)), cohort="co"),
    ]


FUNGIBILITY = [
    pytest.param({}, "admit:f2", id="default-tries-next-flavor-instead-of-preempting"),
    pytest.param(
        {"fungible": fungibility(preempt=STOP)},
        "preempt:low",
        id="when-can-preempt-may-stop-search-preempts-on-first-flavor",
    ),
    pytest.param(
        {
            "fungible": fungibility(
                borrow=TRY, preempt=TRY, preference=FungibilityPreference.PREEMPTION_OVER_BORROWING
            )
        },
        "preempt:low",
        id="preemption-over-borrowing-prefers-preempting",
    ),
    pytest.param(
        {
            "fungible": fungibility(
                borrow=TRY, preempt=TRY, preference=FungibilityPreference.BORROWING_OVER_PREEMPTION
            )
        },
        "admit:f2",
        id="borrowing-over-preemption-prefers-borrowing",
    ),
]


@pytest.mark.parametrize(("kw", "expected"), FUNGIBILITY)
def test_flavor_fungibility(kw: dict[str, object], expected: str) -> None:
    running = [admitted(workload("low", "cq", gpu=4, priority=0), "cq", "f1")]
    d = decide(_preempt_or_borrow(**kw), workload("w", "cq", gpu=4, priority=10), running=running)
    assert summary(d) == expected


def test_later_pod_sets_see_earlier_pod_sets_usage_on_the_same_flavor() -> None:
    w = workload(
        "w", "cq", pod_set(name="driver", count=1, gpu=3), pod_set(name="workers", count=1, gpu=3)
    )
    d = decide([two_flavors(4, 4)], w)
    assert isinstance(d, Admit)
    assert [dict(ps.flavors)["gpu"] for ps in d.pod_sets] == ["f1", "f2"]


def test_pods_resource_is_charged_per_pod_when_covered() -> None:
    cq = cluster_queue("cq", group(quotas("f", gpu=8, pods=2)))
    d = decide([cq], workload("w", "cq", pod_set(count=3, gpu=1)))
    assert isinstance(d, Pending)
    assert "insufficient quota for pods in flavor f" in d.message


def test_pending_message_says_needed_free_and_borrowable() -> None:
    cq = cluster_queue("cq", group(quotas("f", gpu=4)), cohort="co")
    other = cluster_queue("other", group(quotas("f", gpu=4)), cohort="co")
    running = [
        admitted(workload("r", "other", gpu=3), "other"),
        admitted(workload("s", "cq", gpu=2), "cq"),
    ]
    d = decide([cq, other], workload("w", "cq", gpu=5), running=running)
    assert isinstance(d, Pending)
    assert d.message == (
        "couldn't assign flavors to pod set main: insufficient unused quota for gpu in flavor f, "
        "2 more needed (needs 5, free 3 incl. 1 borrowable from the cohort)"
    )
    assert [(s.needed, s.available, s.maximum) for s in d.shortfalls] == [(5, 3, 8)]
