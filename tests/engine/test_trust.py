"""Admissions read back at start: refused when they name what does not exist or exceed quota
together (the most recent first), kept otherwise."""

from __future__ import annotations

import pytest

from atoll.engine import model as m
from atoll.engine.trust import Distrust, Held, audit
from tests.engine.builders import cluster_queue, cohort, group, q, quotas


def held(key: str, cq: str, gpus: int, *, at: float, flavor: str = "f") -> Held:
    return Held(
        key=key,
        admission=m.Admission(
            cluster_queue=m.ClusterQueueName(cq),
            pod_sets=(
                m.PodSetAssignment(
                    name=m.PodSetName("main"),
                    count=1,
                    flavors=((m.ResourceName("gpu"), m.FlavorName(flavor)),),
                    resource_usage=((m.ResourceName("gpu"), gpus),),
                ),
            ),
        ),
        reserved_at=at,
    )


def _audit(
    admissions: list[Held],
    queues: list[m.ClusterQueue],
    cohorts: tuple[m.Cohort, ...] = (),
    flavors: tuple[str, ...] = ("f",),
) -> list[tuple[str, Distrust]]:
    refused = audit(
        admissions,
        cluster_queues={c.name: c for c in queues},
        cohorts={c.name: c for c in cohorts},
        flavors={m.FlavorName(f) for f in flavors},
    )
    return [(r.key, r.reason) for r in refused]


ALONE = [cluster_queue("a", group(quotas("f", gpu=8)))]
PAIR = [
    cluster_queue("a", group(quotas("f", gpu=q(8, borrow=4))), cohort="co"),
    cluster_queue("b", group(quotas("f", gpu=8)), cohort="co"),
]


@pytest.mark.parametrize(
    ("admissions", "queues", "refused"),
    [
        pytest.param([held("w1", "a", 8, at=1)], ALONE, [], id="fits"),
        pytest.param(
            [held("w1", "gone", 1, at=1)],
            ALONE,
            [("w1", Distrust.CLUSTER_QUEUE_MISSING)],
            id="missing-cluster-queue",
        ),
        pytest.param(
            [held("w1", "a", 1, at=1, flavor="ghost")],
            ALONE,
            [("w1", Distrust.FLAVOR_MISSING)],
            id="missing-flavor",
        ),
        pytest.param(
            [held("old", "a", 4, at=1), held("new", "a", 8, at=3), held("mid", "a", 4, at=2)],
            ALONE,
            [("new", Distrust.QUOTA_EXCEEDED)],
            id="over-quota-evicts-the-newest",
        ),
        pytest.param(
            [held("w1", "a", 12, at=1), held("w2", "b", 4, at=2)],
            PAIR,
            [],
            id="borrowing-within-limit-and-cohort",
        ),
        pytest.param(
            [held("w1", "a", 13, at=1)],
            PAIR,
            [("w1", Distrust.QUOTA_EXCEEDED)],
            id="over-the-borrowing-limit",
        ),
        pytest.param(
            [held("w1", "a", 12, at=1), held("w2", "b", 8, at=2)],
            PAIR,
            [("w2", Distrust.QUOTA_EXCEEDED)],
            id="over-the-cohort",
        ),
    ],
)
def test_audit(
    admissions: list[Held], queues: list[m.ClusterQueue], refused: list[tuple[str, Distrust]]
) -> None:
    assert _audit(admissions, queues) == refused


def test_a_flavor_the_queue_does_not_offer_is_refused() -> None:
    queues = [cluster_queue("a", group(quotas("f", gpu=8)))]

    assert _audit([held("w1", "a", 1, at=1, flavor="g")], queues, flavors=("f", "g")) == [
        ("w1", Distrust.FLAVOR_MISSING)
    ]


def test_cohort_quota_counts_for_the_whole_tree() -> None:
    queues = [
        cluster_queue("a", group(quotas("f", gpu=4)), cohort="child"),
        cluster_queue("b", group(quotas("f", gpu=4)), cohort="root"),
    ]
    tree = (cohort("child", parent="root"), cohort("root", group(quotas("f", gpu=8))))

    within = [held("w1", "a", 10, at=1), held("w2", "b", 6, at=2)]
    over = [*within, held("w3", "b", 1, at=3)]

    assert _audit(within, queues, tree) == []
    assert _audit(over, queues, tree) == [("w3", Distrust.QUOTA_EXCEEDED)]
