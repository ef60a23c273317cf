"""Classic preemption: which admitted workloads to evict so that a pending one fits.

Mirrors Kueue's pkg/scheduler/preemption/preemption.go (classicalPreemptions,
fillBackWorkloads, workloadFits), preemption/classical (candidate_generator.go,
hierarchical_preemption.go) and preemption/common (ordering.go, preemption_policy.go).

- Candidates: same-ClusterQueue workloads allowed by withinClusterQueue; workloads of
  ClusterQueues in the cohort tree that are over their nominal quota, allowed by
  reclaimWithinCohort, and (when the preemptor would borrow) by borrowWithinCohort.
- Candidates over whose quota the preemptor has hierarchical precedence may be taken
  regardless of priority.
- Victims are removed in candidate order until the preemptor fits, then added back in
  reverse order while it still fits: the set is minimal with respect to that order, and
  nothing is returned when even all candidates would not free enough.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum

from atoll.engine import quota
from atoll.engine.decisions import PreemptionReason
from atoll.engine.model import (
    AdmittedWorkload,
    BorrowWithinCohortPolicy,
    ClusterQueue,
    ClusterQueueName,
    FlavorResource,
    ReclaimWithinCohort,
    WithinClusterQueue,
    Workload,
    WorkloadKey,
)
from atoll.engine.overlay import UsageOverlay
from atoll.engine.snapshot import candidate_key


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    workload: WorkloadKey
    cluster_queue: ClusterQueueName
    reason: PreemptionReason


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """A preemptor and what it needs: usage per flavor/resource, and which of those
    need preemption (the rest fit already)."""

    workload: Workload
    cluster_queue: ClusterQueue
    node: int
    usage: Mapping[FlavorResource, int]
    need_preemption: frozenset[FlavorResource]


class _Variant(Enum):
    NEVER = 0
    WITHIN_CQ = 1
    HIERARCHICAL_RECLAIM = 2
    RECLAIM_WITHOUT_BORROWING = 3
    RECLAIM_WHILE_BORROWING = 4


_REASON = {
    _Variant.WITHIN_CQ: PreemptionReason.IN_CLUSTER_QUEUE,
    _Variant.HIERARCHICAL_RECLAIM: PreemptionReason.IN_COHORT_RECLAMATION,
    _Variant.RECLAIM_WITHOUT_BORROWING: PreemptionReason.IN_COHORT_RECLAMATION,
    _Variant.RECLAIM_WHILE_BORROWING: PreemptionReason.IN_COHORT_RECLAIM_WHILE_BORROWING,
}


@dataclass(frozen=True, slots=True)
class _Candidate:
    admitted: AdmittedWorkload
    lca: int
    variant: _Variant
    group: int


def satisfies_policy(
    preemptor: Workload,
    candidate: Workload,
    policy: WithinClusterQueue | ReclaimWithinCohort,
) -> bool:
    """Kueue's SatisfiesPreemptionPolicy."""
    if policy in (WithinClusterQueue.LOWER_PRIORITY, ReclaimWithinCohort.LOWER_PRIORITY):
        return preemptor.priority > candidate.priority
    if policy is WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY:
        newer_equal = (
            preemptor.priority == candidate.priority and preemptor.queued_at < candidate.queued_at
        )
        return preemptor.priority > candidate.priority or newer_equal
    return policy is ReclaimWithinCohort.ANY


def candidate_order(a: AdmittedWorkload, preemptor_cq: ClusterQueueName) -> tuple[object, ...]:
    """Kueue's CandidatesOrdering: already evicted first, other ClusterQueues before the
    preemptor's own, lower priority first, most recently admitted first."""
    return (
        not a.evicted,
        a.cluster_queue == preemptor_cq,
        a.workload.priority,
        -a.reserved_at,
        a.workload.uid,
        a.key,
    )


def uses_resources(ov: UsageOverlay, key: WorkloadKey, frs: frozenset[FlavorResource]) -> bool:
    usage = ov.snapshot.workload_usage[key]
    return any(fr in usage for fr in frs)


def _classify(req: Request, a: AdmittedWorkload, hierarchical_advantage: bool) -> _Variant:
    cq = req.cluster_queue
    same_cq = a.cluster_queue == cq.name
    policy = cq.preemption.within_cluster_queue if same_cq else cq.preemption.reclaim_within_cohort
    if not satisfies_policy(req.workload, a.workload, policy):
        return _Variant.NEVER
    if same_cq:
        return _Variant.WITHIN_CQ
    if hierarchical_advantage:
        return _Variant.HIERARCHICAL_RECLAIM
    bwc = cq.preemption.borrow_within_cohort
    if bwc.policy is BorrowWithinCohortPolicy.NEVER:
        return _Variant.RECLAIM_WITHOUT_BORROWING
    if a.workload.priority >= req.workload.priority or (
        bwc.max_priority_threshold is not None and a.workload.priority > bwc.max_priority_threshold
    ):
        return _Variant.RECLAIM_WITHOUT_BORROWING
    return _Variant.RECLAIM_WHILE_BORROWING


def _using(ov: UsageOverlay, req: Request, cq: ClusterQueueName) -> Iterable[AdmittedWorkload]:
    """Workloads of `cq` that use a resource needing preemption, in candidate order."""
    per_fr = ov.snapshot.using.get(cq)
    if per_fr is None:
        return ()
    lists = [per_fr[fr] for fr in req.need_preemption if fr in per_fr]
    if len(lists) <= 1:
        return lists[0] if lists else ()
    return _unique(heapq.merge(*lists, key=candidate_key))


def _unique(workloads: Iterable[AdmittedWorkload]) -> Iterator[AdmittedWorkload]:
    seen: set[WorkloadKey] = set()
    for a in workloads:
        if a.key not in seen:
            seen.add(a.key)
            yield a


@dataclass(frozen=True, slots=True)
class _Source:
    """A ClusterQueue whose workloads are candidates, and how they are classified."""

    cluster_queue: ClusterQueueName
    lca: int
    advantage: bool
    group: int
    """0: hierarchical precedence, 1: by priority, 2: the preemptor's own queue."""


def _from_source(ov: UsageOverlay, req: Request, src: _Source) -> Iterator[_Candidate]:
    any_priority = req.cluster_queue.preemption.reclaim_within_cohort is ReclaimWithinCohort.ANY
    if src.group == 2:
        any_priority = False
    for a in _using(ov, req, src.cluster_queue):
        if not a.evicted and not any_priority and a.workload.priority > req.workload.priority:
            return  # sorted by priority: nobody further can satisfy a priority policy
        variant = _classify(req, a, src.advantage)
        if variant is not _Variant.NEVER:
            yield _Candidate(a, src.lca, variant, src.group)


def _over_nominal_children(ov: UsageOverlay, req: Request, current: int) -> Iterable[int]:
    """Children of `current` above their own quota in some resource needing preemption."""
    tree = ov.tree
    if ov.pristine:
        if len(req.need_preemption) == 1:
            return ov.snapshot.over_nominal.get((current, next(iter(req.need_preemption))), ())
        found: set[int] = set()
        for fr in req.need_preemption:
            found.update(ov.snapshot.over_nominal.get((current, fr), ()))
        return sorted(found)
    return [
        child
        for child in tree.nodes[current].children
        if not quota.within_nominal(tree, ov.maps, child, req.need_preemption)
    ]


def _sources_in_subtree(
    ov: UsageOverlay, req: Request, current: int, *, root: int, skip: int, advantage: bool
) -> list[_Source]:
    tree, found = ov.tree, []
    for child in _over_nominal_children(ov, req, current):
        if child in (skip, req.node):
            continue
        node = tree.nodes[child]
        if node.is_cluster_queue:
            group = 0 if advantage else 1
            found.append(_Source(ClusterQueueName(node.name), root, advantage, group))
        else:
            found += _sources_in_subtree(ov, req, child, root=root, skip=skip, advantage=advantage)
    return found


def _hierarchy_sources(ov: UsageOverlay, req: Request) -> list[_Source]:
    """Other ClusterQueues' candidates: those the preemptor has hierarchical precedence
    over (its quota is nearer to them), and those only priority can win."""
    reclaim = req.cluster_queue.preemption.reclaim_within_cohort
    if ov.tree.nodes[req.node].parent == quota.NO_PARENT or reclaim is ReclaimWithinCohort.NEVER:
        return []
    advantage, remaining = quota.quantities_fit_in_quota(ov.tree, ov.maps, req.node, req.usage)
    previous = quota.NO_PARENT
    found: list[_Source] = []
    for ancestor in ov.tree.path_to_root(req.node):
        found += _sources_in_subtree(
            ov, req, ancestor, root=ancestor, skip=previous, advantage=advantage
        )
        fits, remaining = quota.quantities_fit_in_quota(ov.tree, ov.maps, ancestor, remaining)
        advantage = advantage or fits
        previous = ancestor
    return found


def _ordered(
    ov: UsageOverlay, req: Request, sources: list[_Source], borrowing: bool
) -> Iterator[_Candidate]:
    """Kueue's candidate order: evicted first; then hierarchy candidates, priority
    candidates, own queue; within each, candidate_key. When the preemptor may borrow,
    candidates that may only be reclaimed without borrowing are left out up front (Kueue
    skips them one by one)."""
    bwc_never = (
        req.cluster_queue.preemption.borrow_within_cohort.policy is BorrowWithinCohortPolicy.NEVER
    )
    if borrowing and bwc_never:
        sources = [src for src in sources if src.group != 1]
    streams = [_from_source(ov, req, src) for src in sources]
    merged = heapq.merge(
        *streams,
        key=lambda c: (c.admitted.evicted is False, c.group, *candidate_key(c.admitted)[1:]),
    )
    if not borrowing:
        return merged
    return (c for c in merged if c.variant is not _Variant.RECLAIM_WITHOUT_BORROWING)


def _has_candidates(ov: UsageOverlay, req: Request, sources: list[_Source]) -> bool:
    return any(next(_from_source(ov, req, src), None) is not None for src in sources)


def _valid(ov: UsageOverlay, req: Request, c: _Candidate, borrowing: bool) -> bool:
    """Candidates stop being valid once their ClusterQueue (or a cohort between it and the
    common ancestor) is back within nominal quota."""
    if c.admitted.cluster_queue == req.cluster_queue.name:
        return True
    if borrowing and c.variant is _Variant.RECLAIM_WITHOUT_BORROWING:
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


def _releasable(ov: UsageOverlay, req: Request, src: _Source, fr: FlavorResource) -> int:
    """At most what evicting the source queue's workloads the policy allows could free."""
    r = ov.snapshot.releasable.get((src.cluster_queue, fr))
    if r is None:
        return 0
    preemption = req.cluster_queue.preemption
    policy = preemption.within_cluster_queue if src.group == 2 else preemption.reclaim_within_cohort
    priority = req.workload.priority
    if policy in (WithinClusterQueue.LOWER_PRIORITY, ReclaimWithinCohort.LOWER_PRIORITY):
        count = bisect.bisect_left(r.priorities, priority)
    elif policy is WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY:
        count = bisect.bisect_right(r.priorities, priority)
    else:
        count = len(r.priorities)
    return r.evicted + r.cumulative[count]


def _could_fit(ov: UsageOverlay, req: Request, sources: list[_Source]) -> bool:
    """False when even evicting every workload the policies allow would not free enough:
    then no victim set exists, and the search can be skipped (its answer is the same)."""
    for fr in req.need_preemption:
        value = req.usage.get(fr)
        if value is None:
            continue
        releasable = sum(_releasable(ov, req, src, fr) for src in sources)
        if ov.available(req.node, fr) + releasable < value:
            return False
    return True


def _search(
    ov: UsageOverlay, req: Request, sources: list[_Source], attempts: tuple[bool, ...]
) -> tuple[Target, ...]:
    # Only these flavor/resources are read below: victims are released just for them.
    only = frozenset(req.usage) | req.need_preemption
    for borrowing in attempts:
        ov.begin()
        targets: list[Target] = []
        for c in _ordered(ov, req, sources, borrowing):
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
    cq = req.cluster_queue
    sources = _hierarchy_sources(ov, req)
    if cq.preemption.within_cluster_queue is not WithinClusterQueue.NEVER:
        sources.append(_Source(cq.name, quota.NO_PARENT, False, 2))
    if not sources or not _could_fit(ov, req, sources):
        return ()
    hierarchy = _has_candidates(ov, req, [s for s in sources if s.group == 0])
    others = hierarchy or _has_candidates(ov, req, [s for s in sources if s.group == 1])
    attempts = _attempts(ov, req, hierarchy=hierarchy, others=others)
    return _search(ov, req, sources, attempts)
