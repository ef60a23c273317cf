"""Hierarchical quota (engine/quota.py): available and potential capacity per cohort level."""

from __future__ import annotations

import pytest

from atoll.engine.model import AdmittedWorkload, ClusterQueue, Cohort, FlavorName, ResourceName
from atoll.engine.overlay import UsageOverlay
from tests.engine.builders import (
    admitted,
    cluster_queue,
    cohort,
    group,
    q,
    quotas,
    snapshot,
    workload,
)

GPU = (FlavorName("f"), ResourceName("gpu"))


def cq(
    name: str, nominal: int | tuple[int, int | None, int | None], parent: str | None = "co"
) -> ClusterQueue:
    return cluster_queue(name, group(quotas("f", gpu=nominal)), cohort=parent)


def running(name: str, cq_name: str, gpus: int) -> AdmittedWorkload:
    return admitted(workload(name, cq_name, gpu=gpus), cq_name)


CASES = [
    pytest.param(
        [cq("a", 10, None)],
        [],
        [running("r", "a", 4)],
        "a",
        (6, 10),
        id="without-cohort-available-is-nominal-minus-usage",
    ),
    pytest.param(
        [cq("a", 10), cq("b", 10)], [], [], "a", (20, 20), id="borrows-unused-nominal-of-siblings"
    ),
    pytest.param(
        [cq("a", 10), cq("b", 10)],
        [],
        [running("r", "b", 7)],
        "a",
        (13, 20),
        id="sibling-usage-reduces-what-can-be-borrowed",
    ),
    pytest.param(
        [cq("a", q(10, 3)), cq("b", 10)], [], [], "a", (13, 13), id="borrowing-limit-caps-borrowing"
    ),
    pytest.param(
        [cq("a", q(10, 0)), cq("b", 10)],
        [],
        [],
        "a",
        (10, 10),
        id="borrowing-limit-zero-means-no-borrowing",
    ),
    pytest.param(
        [cq("a", 10), cq("b", q(10, None, 4))],
        [],
        [],
        "a",
        (14, 14),
        id="lending-limit-hides-the-unlent-part",
    ),
    pytest.param(
        [cq("a", 10), cq("b", q(10, None, 4))],
        [],
        [running("r", "a", 14)],
        "b",
        (6, 20),
        id="lending-limit-keeps-the-unlent-part-for-the-lender",
    ),
    pytest.param(
        [cq("a", 10), cq("b", q(10, None, 0))],
        [],
        [],
        "a",
        (10, 10),
        id="lending-limit-zero-lends-nothing",
    ),
    pytest.param(
        [cq("a", 0)],
        [cohort("co", group(quotas("f", gpu=5)))],
        [],
        "a",
        (5, 5),
        id="cohort-own-quota-is-shared-with-members",
    ),
    pytest.param(
        [cq("a", 4, "left"), cq("b", 6, "right")],
        [cohort("root"), cohort("left", parent="root"), cohort("right", parent="root")],
        [],
        "a",
        (10, 10),
        id="borrows-across-subtrees-through-the-root",
    ),
    pytest.param(
        [cq("a", 4, "left"), cq("b", 6, "right")],
        [
            cohort("root"),
            cohort("left", parent="root"),
            cohort("right", group(quotas("f", gpu=q(0, None, 2))), parent="root"),
        ],
        [],
        "a",
        (6, 6),
        id="cohort-lending-limit-bounds-what-its-subtree-lends",
    ),
    pytest.param(
        [cq("a", 4, "left"), cq("b", 6, "right")],
        [
            cohort("root"),
            cohort("left", group(quotas("f", gpu=q(0, 1))), parent="root"),
            cohort("right", parent="root"),
        ],
        [],
        "a",
        (5, 5),
        id="cohort-borrowing-limit-bounds-what-its-subtree-borrows",
    ),
    pytest.param(
        [cq("a", 10, None)],
        [],
        [running("r", "a", 12)],
        "a",
        (0, 10),
        id="over-admission-clamps-available-at-zero",
    ),
]


@pytest.mark.parametrize(("cqs", "cohorts", "run", "name", "expected"), CASES)
def test_available_and_potential_capacity(
    cqs: list[ClusterQueue],
    cohorts: list[Cohort],
    run: list[AdmittedWorkload],
    name: str,
    expected: tuple[int, int],
) -> None:
    """expected: (available now, the most it could ever use)."""
    snap = snapshot(cqs, cohorts=cohorts, running=run)
    ov = UsageOverlay(snap)
    node = ov.node(cluster_queue(name).name)
    assert (ov.available(node, GPU), ov.potential_available(node, GPU)) == expected


def test_usage_above_local_quota_bubbles_to_the_cohort() -> None:
    snap = snapshot([cq("a", q(10, None, 4)), cq("b", 10)], running=[running("r", "a", 8)])
    tree = snap.tree
    root = tree.cohorts[cohort("co").name]
    # a keeps 6 locally (10 - lendingLimit 4); only 8 - 6 = 2 reach the cohort
    assert snap.base_usage[root].get(GPU, 0) == 2
    assert tree.nodes[root].subtree_quota[GPU] == 14


def test_overlay_remove_restores_base_usage_without_touching_the_snapshot() -> None:
    snap = snapshot([cq("a", 10), cq("b", 10)], running=[running("r", "a", 8)])
    ov = UsageOverlay(snap)
    a = ov.node(cluster_queue("a").name)
    before = [dict(m) for m in ov.maps]
    ov.add(a, {GPU: 5})
    assert ov.available(a, GPU) == 7
    ov.remove(a, {GPU: 5})
    assert [dict(m) for m in ov.maps] == before
    assert [dict(m) for m in snap.base_usage] == before


def test_forked_overlays_do_not_see_each_others_writes() -> None:
    snap = snapshot([cq("a", 10, None)])
    ov = UsageOverlay(snap)
    a = ov.node(cluster_queue("a").name)
    ov.add(a, {GPU: 1})
    child = ov.fork()
    child.add(a, {GPU: 2})
    ov.add(a, {GPU: 4})
    assert (ov.used(a, GPU), child.used(a, GPU), snap.base_usage[a].get(GPU, 0)) == (5, 3, 0)
