"""Fair sharing (engine/fairsharing.py, tournament.py): dominant resource share, admission
order and preemption strategies."""

from __future__ import annotations

from dataclasses import replace

import pytest

from atoll.engine.cycle import run_cycle
from atoll.engine.decisions import Preempt, PreemptionReason
from atoll.engine.fairsharing import dominant_share
from atoll.engine.model import (
    AdmittedWorkload,
    ClusterQueue,
    FairSharing,
    FairSharingStrategy,
    ReclaimWithinCohort,
)
from atoll.engine.overlay import UsageOverlay
from tests.engine.builders import (
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

FAIR = FairSharing()
LTEFS = FairSharingStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE
LTIS = FairSharingStrategy.LESS_THAN_INITIAL_SHARE


def cq(
    name: str,
    gpus: int,
    weight: int = 1000,
    reclaim: ReclaimWithinCohort = ReclaimWithinCohort.NEVER,
) -> ClusterQueue:
    return cluster_queue(
        name,
        group(quotas("f", gpu=gpus)),
        cohort="co",
        weight=weight,
        policy=preemption(reclaim=reclaim),
    )


def run(name: str, cq_name: str, gpus: int, priority: int = 0) -> AdmittedWorkload:
    return admitted(workload(name, cq_name, gpu=gpus, priority=priority), cq_name)


SHARES = [
    pytest.param(1000, 6, 250, id="share-is-borrowed-per-mille-of-lendable"),
    pytest.param(2000, 6, 125, id="weight-two-halves-the-share"),
    pytest.param(0, 6, 2**63 - 1, id="zero-weight-while-borrowing-is-infinite"),
    pytest.param(1000, 4, 0, id="not-borrowing-has-zero-share"),
]


@pytest.mark.parametrize(("weight", "used", "expected"), SHARES)
def test_weighted_share(weight: int, used: int, expected: int) -> None:
    snap = snapshot([cq("a", 4, weight), cq("b", 4)], running=[run("r", "a", used)], fair=FAIR)
    ov = UsageOverlay(snap)
    assert dominant_share(ov, ov.node(cq("a", 0).name)).rounded() == expected


def test_admission_prefers_the_lower_share_over_priority() -> None:
    cqs = [cq("a", 1), cq("b", 1), cq("c", 4)]
    running = [run("a-old", "a", 3), run("b-old", "b", 1)]
    heads = [workload("wa", "a", gpu=2, priority=100), workload("wb", "b", gpu=2, priority=0)]
    fair = by_workload(run_cycle(snapshot(cqs, running=running, fair=FAIR), heads))
    assert (summary(fair["wb"]), summary(fair["wa"])) == ("admit:f", "pending:WaitingForQuota")
    classic = by_workload(run_cycle(snapshot(cqs, running=running), heads))
    assert (summary(classic["wa"]), summary(classic["wb"])) == (
        "admit:f",
        "pending:WaitingForQuota",
    )


def test_a_sticky_preemptor_wins_the_tournament_over_a_lower_share() -> None:
    # wb's subtree would borrow less, but wa already evicted workloads for this quota
    cqs = [cq("a", 1), cq("b", 1), cq("c", 4)]
    running = [run("a-old", "a", 3), run("b-old", "b", 1)]
    heads = [
        replace(workload("wa", "a", gpu=2, priority=100), sticky=True),
        workload("wb", "b", gpu=2, priority=0),
    ]
    fair = by_workload(run_cycle(snapshot(cqs, running=running, fair=FAIR), heads))
    assert (summary(fair["wa"]), summary(fair["wb"])) == ("admit:f", "pending:WaitingForQuota")


def _borrowed_cohort() -> tuple[ClusterQueue, ...]:
    return cq("a", 2, reclaim=ReclaimWithinCohort.ANY), cq("b", 2), cq("c", 2)


STRATEGIES = [
    pytest.param(
        (LTEFS, LTIS),
        "preempt:b2,b3",
        id="less-than-initial-share-completes-what-final-share-starts",
    ),
    pytest.param(
        (LTEFS,),
        "pending:WaitingForQuota",
        id="final-share-alone-refuses-to-make-the-preemptor-richer",
    ),
]


@pytest.mark.parametrize(("strategies", "expected"), STRATEGIES)
def test_fair_preemption_strategies(
    strategies: tuple[FairSharingStrategy, ...], expected: str
) -> None:
    fair = FairSharing(preemption_strategies=strategies)
    running = [
        run("b1", "b", 2, priority=3),
        run("b2", "b", 2, priority=1),
        run("b3", "b", 2, priority=0),
    ]
    snap = snapshot(_borrowed_cohort(), running=running, fair=fair)
    (d,) = run_cycle(snap, [workload("w", "a", gpu=3)])
    assert summary(d) == expected
    if isinstance(d, Preempt):
        assert {v.reason for v in d.victims} == {PreemptionReason.IN_COHORT_FAIR_SHARING}


def test_preemptor_within_nominal_reclaims_regardless_of_shares() -> None:
    snap = snapshot(
        [cq("a", 4, reclaim=ReclaimWithinCohort.ANY), cq("b", 4)],
        running=[run("b1", "b", 4), run("b2", "b", 4)],
        fair=FAIR,
    )
    (d,) = run_cycle(snap, [workload("w", "a", gpu=4)])
    assert isinstance(d, Preempt)
    assert [v.reason for v in d.victims] == [PreemptionReason.IN_COHORT_RECLAMATION]
