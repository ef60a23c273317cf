"""Classic preemption: which admitted workloads to evict so that a pending one fits.

Mirrors Kueue's pkg/scheduler/preemption/preemption.go (classicalPreemptions,
fillBackWorkloads, workloadFits); the candidates themselves are candidates.py.

- Attempts with and without borrowing, in Kueue's order; a preemptor may take victims
  while it borrows only when borrowWithinCohort allows, else it must fit within nominal.
- Victims are removed in candidate order until the preemptor fits, then added back in
  reverse order while it still fits: the set is minimal with respect to that order, and
  nothing is returned when even all candidates would not free enough.
"""

from __future__ import annotations

from dataclasses import dataclass

from atoll.engine import quota
from atoll.engine.candidates import Candidate, Plan, Request, Variant, plan
from atoll.engine.decisions import PreemptionReason
from atoll.engine.model import (
    BorrowWithinCohortPolicy,
    ClusterQueueName,
    FlavorResource,
    WorkloadKey,
)
from atoll.engine.overlay import UsageOverlay

__all__ = ["Request", "Target", "classical_targets", "fill_back", "workload_fits"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    workload: WorkloadKey
    cluster_queue: ClusterQueueName
    reason: PreemptionReason


_REASON = {
    Variant.WITHIN_CQ: PreemptionReason.IN_CLUSTER_QUEUE,
    Variant.HIERARCHICAL_RECLAIM: PreemptionReason.IN_COHORT_RECLAMATION,
    Variant.RECLAIM_WITHOUT_BORROWING: PreemptionReason.IN_COHORT_RECLAMATION,
    Variant.RECLAIM_WHILE_BORROWING: PreemptionReason.IN_COHORT_RECLAIM_WHILE_BORROWING,
}


def _valid(ov: UsageOverlay, req: Request, c: Candidate, borrowing: bool) -> bool:
    """Candidates stop being valid once their ClusterQueue (or a cohort between it and the
    common ancestor) is back within nominal quota."""
    if c.admitted.cluster_queue == req.cluster_queue.name:
        return True
    if borrowing and c.variant is Variant.RECLAIM_WITHOUT_BORROWING:
        return False
    node = ov.node(c.admitted.cluster_queue)
    if quota.within_nominal(ov.tree, ov.maps, node, req.need_preemption):
        return False
    for ancestor in ov.tree.path_to_root(node):
        if ancestor == c.lca:
            break
        if quota.within_nominal(ov.tree, ov.maps, ancestor, req.need_preemption):
            return False
    return True


def workload_fits(ov: UsageOverlay, req: Request, allow_borrowing: bool) -> bool:
    for fr, value in req.usage.items():
        if not allow_borrowing and ov.borrowing_with(req.node, fr, value):
            return False
        if value > ov.available(req.node, fr):
            return False
    return True


def fill_back(
    ov: UsageOverlay,
    req: Request,
    targets: list[Target],
    borrowing: bool,
    only: frozenset[FlavorResource] | None = None,
) -> None:
    """Give back, last-removed first (the last one is needed by construction), every
    victim whose return still lets the preemptor fit."""
    for i in range(len(targets) - 2, -1, -1):
        ov.add_workloads((targets[i].workload,), only)
        if workload_fits(ov, req, borrowing):
            del targets[i]
        else:
            ov.remove_workloads((targets[i].workload,), only)


def _under_nominal(ov: UsageOverlay, req: Request) -> bool:
    nominal = ov.tree.nodes[req.node].nominal
    return all(nominal.get(fr, 0) > ov.used(req.node, fr) for fr in req.need_preemption)


def _attempts(ov: UsageOverlay, req: Request, *, hierarchy: bool, others: bool) -> tuple[bool, ...]:
    forbidden = (
        req.cluster_queue.preemption.borrow_within_cohort.policy is BorrowWithinCohortPolicy.NEVER
    )
    if not others or (forbidden and not _under_nominal(ov, req)):
        return (True,)
    if forbidden and not hierarchy:
        return (False, True)
    return (True, False)


def _could_fit(ov: UsageOverlay, req: Request, p: Plan, borrowing: bool) -> bool:
    """False when even evicting every candidate an attempt may take would not make room:
    such an attempt finds nothing, and skipping it gives the same answer."""
    bwc_never = (
        req.cluster_queue.preemption.borrow_within_cohort.policy is BorrowWithinCohortPolicy.NEVER
    )
    nominal = ov.tree.nodes[req.node].nominal
    for fr, value in req.usage.items():
        hierarchy, by_priority, own = p.release[fr]
        if not borrowing and ov.used(req.node, fr) - own + value > nominal.get(fr, 0):
            return False
        if fr in req.need_preemption:
            total = hierarchy + own + (0 if borrowing and bwc_never else by_priority)
            if ov.available(req.node, fr) + total < value:
                return False
    return True


def _search(
    ov: UsageOverlay, req: Request, p: Plan, attempts: tuple[bool, ...]
) -> tuple[Target, ...]:
    # Only these flavor/resources are read below: victims are released just for them.
    only = frozenset(req.usage) | req.need_preemption
    for borrowing in attempts:
        ov.begin()
        targets: list[Target] = []
        for c in p.stream(borrowing):
            if not _valid(ov, req, c, borrowing):
                continue
            ov.remove_workloads((c.admitted.key,), only)
            targets.append(
                Target(
                    workload=c.admitted.key,
                    cluster_queue=c.admitted.cluster_queue,
                    reason=_REASON[c.variant],
                )
            )
            if workload_fits(ov, req, borrowing):
                fill_back(ov, req, targets, borrowing, only)
                ov.rollback()
                return tuple(targets)
        ov.rollback()
    return ()


def classical_targets(ov: UsageOverlay, req: Request) -> tuple[Target, ...]:
    """The victims that make room for `req`, or () when no set of candidates does."""
    p = plan(ov, req)
    if p is None:
        return ()
    attempts = tuple(
        borrowing
        for borrowing in _attempts(ov, req, hierarchy=p.hierarchy, others=p.others)
        if _could_fit(ov, req, p, borrowing)
    )
    return _search(ov, req, p, attempts) if attempts else ()
