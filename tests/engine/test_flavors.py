"""Flavor assignment (engine/flavors.py), one rule per case."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atoll.engine.cycle import run_cycle
from atoll.engine.decisions import Admit, Decision, Pending
from atoll.engine.model import (
    AdmittedWorkload,
    ClusterQueue,
    FungibilityPolicy,
    FungibilityPreference,
    PodSet,
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


def _grouped(ps: PodSet, name: str | None) -> PodSet:
    return dataclasses.replace(ps, group=name)


def test_the_pod_sets_of_a_podset_group_get_one_flavor_for_their_summed_requests() -> None:
    leader, workers = pod_set(name="leader", gpu=3), pod_set(name="workers", gpu=3)
    apart = decide([two_flavors(4, 8)], workload("w", "cq", leader, workers))
    assert isinstance(apart, Admit)
    assert [dict(ps.flavors)["gpu"] for ps in apart.pod_sets] == ["f1", "f2"]
    together = workload("w", "cq", _grouped(leader, "g"), _grouped(workers, "g"))
    d = decide([two_flavors(4, 8)], together)
    assert isinstance(d, Admit)
    assert [dict(ps.flavors)["gpu"] for ps in d.pod_sets] == ["f2", "f2"]


def test_a_podset_group_that_fits_no_single_flavor_waits() -> None:
    together = workload(
        "w", "cq", pod_set(name="a", gpu=3, group="g"), pod_set(name="b", gpu=3, group="g")
    )
    d = decide([two_flavors(4, 4)], together)
    assert isinstance(d, Pending)
    assert "insufficient quota for gpu in flavor f1" in d.message


def test_a_flavor_must_suit_every_pod_set_of_the_group() -> None:
    labelled = [flavor("f1", {"pool": "a"}), flavor("f2", {"pool": "b"})]
    picky = pod_set(name="picky", gpu=1, selector={"pool": "b"}, group="g")
    d = decide(
        [two_flavors(8, 8)],
        workload("w", "cq", pod_set(name="easy", gpu=1, group="g"), picky),
        flavors=labelled,
    )
    assert isinstance(d, Admit)
    assert [dict(ps.flavors)["gpu"] for ps in d.pod_sets] == ["f2", "f2"]


@st.composite
def _grouped_worlds(draw: st.DrawFn) -> tuple[ClusterQueue, list[ResourceFlavor], Workload]:
    n_flavors = draw(st.integers(1, 3))
    names = [f"f{i}" for i in range(n_flavors)]
    pools = [draw(st.sampled_from(["a", "b"])) for _ in names]
    quotas_ = [quotas(n, gpu=draw(st.integers(0, 12))) for n in names]
    cq = cluster_queue("cq", group(*quotas_))
    flavors_ = [flavor(n, {"pool": p}) for n, p in zip(names, pools, strict=True)]
    sets = []
    for i in range(draw(st.integers(1, 5))):
        selector = draw(st.sampled_from([None, {"pool": "a"}, {"pool": "b"}]))
        sets.append(
            pod_set(
                name=f"ps{i}",
                count=draw(st.integers(1, 3)),
                gpu=draw(st.integers(0, 3)),
                selector=selector,
                group=draw(st.sampled_from([None, "g1", "g2"])),
            )
        )
    return cq, flavors_, workload("w", "cq", *sets)


@settings(max_examples=200, deadline=None)
@given(_grouped_worlds())
def test_pod_sets_of_one_podset_group_always_share_their_flavors(
    world: tuple[ClusterQueue, list[ResourceFlavor], Workload],
) -> None:
    cq, flavors_, w = world
    d = decide([cq], w, flavors=flavors_)
    if not isinstance(d, Admit):
        return
    by_group: dict[str, set[str]] = {}
    for ps, given_ps in zip(w.pod_sets, d.pod_sets, strict=True):
        if ps.group is not None and dict(ps.requests).get("gpu"):
            by_group.setdefault(ps.group, set()).add(dict(given_ps.flavors)["gpu"])
    assert all(len(f) == 1 for f in by_group.values()), by_group
