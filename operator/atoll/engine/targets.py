"""Choosing preemption targets, and the preemption oracle flavor assignment consults.

Mirrors Kueue's Preemptor.GetTargets (classic or fair-sharing preemption, by configuration)
and pkg/scheduler/preemption/preemption_oracle.go (SimulatePreemption).
"""

from __future__ import annotations

from enum import Enum

from atoll.engine import quota
from atoll.engine.fairsharing import fair_targets
from atoll.engine.model import ClusterQueue, FlavorResource, Workload
from atoll.engine.overlay import UsageOverlay
from atoll.engine.preemption import Request, Target, classical_targets


class Possibility(Enum):
    NO_CANDIDATES = 0
    PREEMPT = 1
    """Targets found, some in the preemptor's own ClusterQueue."""
    RECLAIM = 2
    """Targets found, all outside the preemptor's ClusterQueue."""


def find_targets(ov: UsageOverlay, req: Request) -> tuple[Target, ...]:
    fair = ov.snapshot.fair_sharing
    if fair is not None:
        return fair_targets(ov, req, fair.preemption_strategies)
    return classical_targets(ov, req)


def simulate_preemption(
    ov: UsageOverlay, workload: Workload, cq: ClusterQueue, fr: FlavorResource, value: int
) -> tuple[Possibility, int]:
    """Could preemption make room for `value` of `fr` alone? Also the borrowing level the
    workload would have afterwards."""
    node = ov.node(cq.name)
    req = Request(
        workload=workload,
        cluster_queue=cq,
        node=node,
        usage={fr: value},
        need_preemption=frozenset((fr,)),
    )
    targets = find_targets(ov, req)
    if not targets:
        borrow, _ = quota.lowest_fitting_subtree(ov.tree, ov.maps, node, fr, value)
        return Possibility.NO_CANDIDATES, borrow
    ov.begin()
    ov.remove_workloads((t.workload for t in targets), (fr,))
    borrow, _ = quota.lowest_fitting_subtree(ov.tree, ov.maps, node, fr, value)
    ov.rollback()
    if any(t.cluster_queue == cq.name for t in targets):
        return Possibility.PREEMPT, borrow
    return Possibility.RECLAIM, borrow
