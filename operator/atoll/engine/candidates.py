"""Preemption candidates: which admitted workloads may be evicted for a preemptor, and in
what order they are considered.

Mirrors Kueue's pkg/scheduler/preemption/classical (candidate_generator.go,
hierarchical_preemption.go) and preemption/common (ordering.go, preemption_policy.go):

- same-ClusterQueue workloads allowed by withinClusterQueue;
- workloads of ClusterQueues in the cohort tree that use more than their own quota, allowed
  by reclaimWithinCohort; those in a subtree whose quota would hold the preemptor's request
  are taken over by "hierarchical precedence", the others only as priority allows (and,
  when the preemptor borrows, as borrowWithinCohort allows);
- order: already evicted first, then hierarchy, priority and own-queue candidates, each by
  lower priority, then most recently admitted.

Candidate lists are pre-sorted per ClusterQueue in the snapshot and merged lazily, so a
search only classifies the candidates it looks at. While the overlay is pristine (the
nomination phase of a cycle), a flat cohort's merged list and release totals are computed
once and reused by every preemptor of that cohort.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum

from atoll.engine import candidateindex, quota
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
from atoll.engine.snapshot import candidate_key, queue_candidate_key


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """A preemptor and what it needs: usage per flavor/resource, and which of those
    need preemption (the rest fit already)."""

    workload: Workload
    cluster_queue: ClusterQueue
    node: int
    usage: Mapping[FlavorResource, int]
    need_preemption: frozenset[FlavorResource]


class Variant(Enum):
    NEVER = 0
    WITHIN_CQ = 1
    HIERARCHICAL_RECLAIM = 2
    RECLAIM_WITHOUT_BORROWING = 3
    RECLAIM_WHILE_BORROWING = 4


@dataclass(frozen=True, slots=True)
class Candidate:
    admitted: AdmittedWorkload
    lca: int
    variant: Variant
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


def candidate_order(
    a: AdmittedWorkload, preemptor_cq: ClusterQueueName, usage: float = 0.0
) -> tuple[object, ...]:
    """Kueue's CandidatesOrdering: already evicted first, other ClusterQueues before the
    preemptor's own, (under Admission Fair Sharing, `usage`: the LocalQueue that used more,
    compared within one ClusterQueue only), lower priority first, most recently admitted
    first."""
    return (
        not a.evicted,
        a.cluster_queue == preemptor_cq,
        -usage,
        a.workload.priority,
        -a.reserved_at,
        a.workload.uid,
        a.key,
    )


def uses_resources(ov: UsageOverlay, key: WorkloadKey, frs: frozenset[FlavorResource]) -> bool:
    usage = ov.snapshot.workload_usage[key]
    return any(fr in usage for fr in frs)


def classify(req: Request, a: AdmittedWorkload, hierarchical_advantage: bool) -> Variant:
    cq = req.cluster_queue
    same_cq = a.cluster_queue == cq.name
    policy = cq.preemption.within_cluster_queue if same_cq else cq.preemption.reclaim_within_cohort
    if not satisfies_policy(req.workload, a.workload, policy):
        return Variant.NEVER
    if same_cq:
        return Variant.WITHIN_CQ
    if hierarchical_advantage:
        return Variant.HIERARCHICAL_RECLAIM
    bwc = cq.preemption.borrow_within_cohort
    if bwc.policy is BorrowWithinCohortPolicy.NEVER:
        return Variant.RECLAIM_WITHOUT_BORROWING
    if a.workload.priority >= req.workload.priority or (
        bwc.max_priority_threshold is not None and a.workload.priority > bwc.max_priority_threshold
    ):
        return Variant.RECLAIM_WITHOUT_BORROWING
    return Variant.RECLAIM_WHILE_BORROWING


def _using(ov: UsageOverlay, req: Request, cq: ClusterQueueName) -> Iterable[AdmittedWorkload]:
    """Workloads of `cq` that use a resource needing preemption, in candidate order."""
    per_fr = candidateindex.using(ov, cq)
    if not per_fr:
        return ()
    lists = [per_fr[fr] for fr in req.need_preemption if fr in per_fr]
    if len(lists) <= 1:
        return lists[0] if lists else ()
    lq_usage = ov.snapshot.lq_usage
    if not lq_usage:
        return _unique(heapq.merge(*lists, key=candidate_key))
    return _unique(heapq.merge(*lists, key=lambda a: queue_candidate_key(lq_usage, a)))


def _unique(workloads: Iterable[AdmittedWorkload]) -> Iterator[AdmittedWorkload]:
    seen: set[WorkloadKey] = set()
    for a in workloads:
        if a.key not in seen:
            seen.add(a.key)
            yield a


@dataclass(frozen=True, slots=True)
class Source:
    """A ClusterQueue whose workloads are candidates, and how they are classified."""

    cluster_queue: ClusterQueueName
    lca: int
    advantage: bool
    group: int
    """0: hierarchical precedence, 1: by priority, 2: the preemptor's own queue."""
    node: int


def _from_source(ov: UsageOverlay, req: Request, src: Source) -> Iterator[Candidate]:
    any_priority = req.cluster_queue.preemption.reclaim_within_cohort is ReclaimWithinCohort.ANY
    if src.group == 2:
        any_priority = False
    by_priority = not ov.snapshot.lq_usage
    for a in _using(ov, req, src.cluster_queue):
        if (
            by_priority
            and not a.evicted
            and not any_priority
            and a.workload.priority > req.workload.priority
        ):
            return  # sorted by priority: nobody further can satisfy a priority policy
        variant = classify(req, a, src.advantage)
        if variant is not Variant.NEVER:
            yield Candidate(a, src.lca, variant, src.group)


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
) -> list[Source]:
    tree, found = ov.tree, []
    for child in _over_nominal_children(ov, req, current):
        if child in (skip, req.node):
            continue
        node = tree.nodes[child]
        if node.is_cluster_queue:
            group = 0 if advantage else 1
            found.append(Source(ClusterQueueName(node.name), root, advantage, group, child))
        else:
            found += _sources_in_subtree(ov, req, child, root=root, skip=skip, advantage=advantage)
    return found


def hierarchy_sources(ov: UsageOverlay, req: Request) -> list[Source]:
    """Other ClusterQueues' candidates: those the preemptor has hierarchical precedence
    over (its quota is nearer to them), and those only priority can win."""
    reclaim = req.cluster_queue.preemption.reclaim_within_cohort
    if ov.tree.nodes[req.node].parent == quota.NO_PARENT or reclaim is ReclaimWithinCohort.NEVER:
        return []
    advantage, remaining = quota.quantities_fit_in_quota(ov.tree, ov.maps, req.node, req.usage)
    previous = quota.NO_PARENT
    found: list[Source] = []
    for ancestor in ov.tree.path_to_root(req.node):
        found += _sources_in_subtree(
            ov, req, ancestor, root=ancestor, skip=previous, advantage=advantage
        )
        fits, remaining = quota.quantities_fit_in_quota(ov.tree, ov.maps, ancestor, remaining)
        advantage = advantage or fits
        previous = ancestor
    return found


def ordered(
    ov: UsageOverlay, req: Request, sources: list[Source], borrowing: bool
) -> Iterator[Candidate]:
    """Kueue's candidate order: evicted first; then hierarchy candidates, priority
    candidates, own queue; within each, candidate_key. A lazy k-way merge of the queues'
    pre-sorted lists: only the candidates actually examined get classified. When the
    preemptor may borrow, candidates that may only be reclaimed without borrowing are
    skipped (Kueue skips them one by one in the same order)."""
    if borrowing and (
        req.cluster_queue.preemption.borrow_within_cohort.policy is BorrowWithinCohortPolicy.NEVER
    ):
        sources = [src for src in sources if src.group != 1]
    streams: list[tuple[Iterator[AdmittedWorkload], Source, bool]] = []
    heap: list[tuple[tuple[object, ...], int, AdmittedWorkload]] = []
    by_priority = not ov.snapshot.lq_usage  # else a queue's list is by LocalQueue usage first
    for src in sources:
        stream = iter(_using(ov, req, src.cluster_queue))
        streams.append((stream, src, by_priority and _priority_bound(req, src)))
        _push(heap, streams, len(streams) - 1, req)
    heapq.heapify(heap)
    while heap:
        _, index, a = heapq.heappop(heap)
        _push(heap, streams, index, req, heapify=True)
        src = streams[index][1]
        variant = classify(req, a, src.advantage)
        if variant is Variant.NEVER:
            continue
        if borrowing and variant is Variant.RECLAIM_WITHOUT_BORROWING:
            continue
        yield Candidate(a, src.lca, variant, src.group)


def _priority_bound(req: Request, src: Source) -> bool:
    """Whether the source's policy only admits lower (or equal) priorities."""
    if src.group == 2:
        return True
    return req.cluster_queue.preemption.reclaim_within_cohort is not ReclaimWithinCohort.ANY


def _push(
    heap: list[tuple[tuple[object, ...], int, AdmittedWorkload]],
    streams: list[tuple[Iterator[AdmittedWorkload], Source, bool]],
    index: int,
    req: Request,
    *,
    heapify: bool = False,
) -> None:
    stream, src, bounded = streams[index]
    a = next(stream, None)
    if a is None:
        return
    if bounded and not a.evicted and a.workload.priority > req.workload.priority:
        return  # sorted by priority: nobody further in this queue satisfies the policy
    entry = ((a.evicted is False, src.group, *candidate_key(a)[1:]), index, a)
    if heapify:
        heapq.heappush(heap, entry)
    else:
        heap.append(entry)


def has_candidates(ov: UsageOverlay, req: Request, sources: list[Source]) -> bool:
    return any(next(_from_source(ov, req, src), None) is not None for src in sources)


def releasable(ov: UsageOverlay, req: Request, src: Source, fr: FlavorResource) -> int:
    """At most what evicting the source queue's workloads the policy allows could free."""
    r = candidateindex.totals(ov, src.cluster_queue, fr)
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
    allowed = r.evicted + r.cumulative[count]
    if src.group == 2 or len(req.need_preemption) != 1:
        return allowed
    # Another queue's workloads are taken only while it is above its quota in the one
    # resource that needs preemption: at most what it uses above quota, plus the
    # overshoot of the last one taken.
    over = max(0, ov.used(src.node, fr) - ov.tree.nodes[src.node].subtree_quota.get(fr, 0))
    return min(allowed, over + r.largest)


@dataclass(slots=True, kw_only=True)
class Plan:
    """Everything a victim search needs about its candidates."""

    hierarchy: bool
    """Some candidate the preemptor has hierarchical precedence over exists."""
    others: bool
    """Some candidate outside the preemptor's queue exists."""
    release: dict[FlavorResource, tuple[int, int, int]]
    """Per flavor/resource: at most what (hierarchy, priority, own-queue) candidates free."""
    stream: Callable[[bool], Iterator[Candidate]]
    """Candidates in order, for an attempt with or without borrowing."""


def _general_plan(ov: UsageOverlay, req: Request) -> Plan | None:
    sources = hierarchy_sources(ov, req)
    if req.cluster_queue.preemption.within_cluster_queue is not WithinClusterQueue.NEVER:
        sources.append(Source(req.cluster_queue.name, quota.NO_PARENT, False, 2, req.node))
    if not sources:
        return None
    hierarchy = has_candidates(ov, req, [s for s in sources if s.group == 0])
    others = hierarchy or has_candidates(ov, req, [s for s in sources if s.group == 1])
    release = {}
    for fr in req.usage:
        amounts = [0, 0, 0]
        for src in sources:
            amounts[src.group] += releasable(ov, req, src, fr)
        release[fr] = (amounts[0], amounts[1], amounts[2])
    return Plan(
        hierarchy=hierarchy,
        others=others,
        release=release,
        stream=lambda borrowing: ordered(ov, req, sources, borrowing),
    )


@dataclass(frozen=True, slots=True)
class _Flat:
    """A flat cohort's candidates for one flavor/resource at cycle start (see Plan)."""

    merged: tuple[AdmittedWorkload, ...]
    sources: dict[ClusterQueueName, Source]


def _flat(ov: UsageOverlay, root: int, fr: FlavorResource) -> _Flat:
    key = ("flat", root, fr)
    found = ov.memo.get(key)
    if found is None:
        children = ov.snapshot.over_nominal.get((root, fr), ())
        sources = {}
        lists = []
        for child in children:
            name = ClusterQueueName(ov.tree.nodes[child].name)
            sources[name] = Source(name, root, False, 1, child)
            lists.append(candidateindex.using(ov, name).get(fr, ()))
        found = ov.memo[key] = _Flat(tuple(heapq.merge(*lists, key=candidate_key)), sources)
    assert isinstance(found, _Flat)
    return found


def _flat_release(ov: UsageOverlay, req: Request, root: int, fr: FlavorResource) -> int:
    """What all over-quota queues of a flat cohort could free for this preemptor."""
    preemption = req.cluster_queue.preemption
    key = ("release", root, fr, preemption.reclaim_within_cohort, req.workload.priority)
    total = ov.memo.get(key)
    if total is None:
        flat = _flat(ov, root, fr)
        total = ov.memo[key] = sum(releasable(ov, req, s, fr) for s in flat.sources.values())
    assert isinstance(total, int)
    own = _flat(ov, root, fr).sources.get(req.cluster_queue.name)
    return total - (releasable(ov, req, own, fr) if own is not None else 0)


def _flat_stream(
    ov: UsageOverlay, req: Request, root: int, advantage: bool, borrowing: bool
) -> Iterator[Candidate]:
    fr = next(iter(req.need_preemption))
    group = 0 if advantage else 1
    bounded = (
        req.cluster_queue.preemption.reclaim_within_cohort is not ReclaimWithinCohort.ANY
        and not ov.snapshot.lq_usage
    )
    if (
        borrowing
        and group == 1
        and (
            req.cluster_queue.preemption.borrow_within_cohort.policy
            is BorrowWithinCohortPolicy.NEVER
        )
    ):
        return
    own = req.cluster_queue.name
    for a in _flat(ov, root, fr).merged:
        if a.cluster_queue == own:
            continue
        if bounded and not a.evicted and a.workload.priority > req.workload.priority:
            return
        variant = classify(req, a, advantage)
        if variant is Variant.NEVER:
            continue
        if borrowing and variant is Variant.RECLAIM_WITHOUT_BORROWING:
            continue
        yield Candidate(a, root, variant, group)


def _flat_plan(ov: UsageOverlay, req: Request) -> Plan | None:
    """The plan for a preemptor directly under a root cohort whose children are all
    ClusterQueues, at cycle start: the same candidates, order and bounds as the general
    plan, from per-cohort data computed once."""
    tree = ov.tree
    root = tree.nodes[req.node].parent
    (fr,) = req.need_preemption
    advantage, _ = quota.quantities_fit_in_quota(tree, ov.maps, req.node, req.usage)
    group = 0 if advantage else 1
    exists = next(_flat_stream(ov, req, root, advantage, False), None) is not None
    own: Source | None = None
    if req.cluster_queue.preemption.within_cluster_queue is not WithinClusterQueue.NEVER:
        own = Source(req.cluster_queue.name, quota.NO_PARENT, False, 2, req.node)
    release = {}
    for r in req.usage:
        amounts = [0, 0, 0]
        if r == fr:
            amounts[group] = _flat_release(ov, req, root, fr)
        if own is not None:
            amounts[2] = releasable(ov, req, own, r)
        release[r] = (amounts[0], amounts[1], amounts[2])

    def stream(borrowing: bool) -> Iterator[Candidate]:
        others = _flat_stream(ov, req, root, advantage, borrowing)
        if own is None:
            return others
        mine = (c for c in ordered(ov, req, [own], borrowing))
        return heapq.merge(
            others,
            mine,
            key=lambda c: (c.admitted.evicted is False, c.group, *candidate_key(c.admitted)[1:]),
        )

    return Plan(hierarchy=exists and advantage, others=exists, release=release, stream=stream)


def plan(ov: UsageOverlay, req: Request) -> Plan | None:
    """The candidates for `req`, or None when there can't be any."""
    tree = ov.tree
    parent = tree.nodes[req.node].parent
    if (
        ov.pristine
        and len(req.need_preemption) == 1
        and parent != quota.NO_PARENT
        and tree.nodes[parent].parent == quota.NO_PARENT
        and tree.nodes[parent].height == 1
        and req.cluster_queue.preemption.reclaim_within_cohort is not ReclaimWithinCohort.NEVER
    ):
        return _flat_plan(ov, req)
    return _general_plan(ov, req)
