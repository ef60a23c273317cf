"""Fair sharing: weighted dominant resource share (DRS) and the preemption it drives.

Mirrors Kueue's pkg/cache/scheduler/fair_sharing.go (dominantResourceShare, CompareDRS),
pkg/scheduler/preemption/fairsharing (ordering.go, strategy.go, least_common_ancestor.go,
target.go) and `fairPreemptions` / `runFirstFsStrategy` / `runSecondFsStrategy` of
pkg/scheduler/preemption/preemption.go.

A node's share: for each resource, what it uses above its subtree quota, per mille of what
its parent could lend it (summed over flavors), the largest of these (the dominant resource),
divided by the node's weight. Kueue computes it in float64; here it is an exact fraction of
integers.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from atoll.engine import quota
from atoll.engine.candidates import candidate_order, satisfies_policy, uses_resources
from atoll.engine.decisions import PreemptionReason
from atoll.engine.model import (
    AdmittedWorkload,
    ClusterQueueName,
    CohortName,
    FairSharingStrategy,
    FlavorResource,
    ReclaimWithinCohort,
    WithinClusterQueue,
)
from atoll.engine.overlay import UsageOverlay
from atoll.engine.preemption import Request, Target, fill_back, workload_fits


@dataclass(frozen=True, slots=True, kw_only=True)
class Share:
    """A dominant resource share as an exact fraction: what is borrowed of the dominant
    resource, per mille of what the parent could lend (`numerator / denominator`)."""

    numerator: int
    denominator: int = 1
    weight_milli: int = 1000
    borrowing: bool = False
    dominant: str = ""
    borrowed: frozenset[FlavorResource] = frozenset()

    @property
    def zero_weight_borrows(self) -> bool:
        return self.weight_milli == 0 and self.numerator != 0

    def weighted(self) -> tuple[int, int]:
        """The weighted share as (numerator, positive denominator); 0 when not borrowing
        or when the weight is 0 (see zero_weight_borrows)."""
        if self.numerator == 0 or self.weight_milli == 0:
            return 0, 1
        return self.numerator * 1000, self.denominator * self.weight_milli

    def rounded(self) -> int:
        """Kueue's status.fairSharing.weightedShare (ceil; MaxInt64 when infinite)."""
        if self.zero_weight_borrows:
            return 2**63 - 1
        num, den = self.weighted()
        return -((-num) // den)


NEGATIVE = Share(numerator=-1)


def _cmp(a: tuple[int, int], b: tuple[int, int]) -> int:
    left, right = a[0] * b[1], b[0] * a[1]
    return (left > right) - (left < right)


def compare(a: Share, b: Share) -> int:
    """Kueue's CompareDRS: lower is preferred for admission, higher for preemption."""
    if a.zero_weight_borrows and b.zero_weight_borrows:
        return _cmp((a.numerator, a.denominator), (b.numerator, b.denominator))
    if a.zero_weight_borrows:
        return 1
    if b.zero_weight_borrows:
        return -1
    return _cmp(a.weighted(), b.weighted())


def _weight(ov: UsageOverlay, n: int) -> int:
    node = ov.tree.nodes[n]
    snap = ov.snapshot
    if node.is_cluster_queue:
        return snap.cluster_queues[ClusterQueueName(node.name)].fair_weight_milli
    return snap.cohorts[CohortName(node.name)].fair_weight_milli


def _lendable(ov: UsageOverlay, n: int) -> dict[str, int]:
    """Per resource, what node `n` could lend at most (quota only: cached per overlay)."""
    key = ("lendable", n)
    cached = ov.memo.get(key)
    if cached is None:
        root = ov.tree.nodes[ov.tree.root(n)]
        lendable: dict[str, int] = {}
        for fr in root.subtree_quota:
            lendable[fr[1]] = lendable.get(fr[1], 0) + quota.potential_available(ov.tree, n, fr)
        cached = ov.memo[key] = lendable
    assert isinstance(cached, dict)
    return cached


def dominant_share(
    ov: UsageOverlay, n: int, extra: Mapping[FlavorResource, int] | None = None
) -> Share:
    """The node's share with its current usage (plus `extra`, if given)."""
    if extra:
        return _dominant_share(ov, n, extra)
    key = ("share", n, ov.versions.get(n, 0))
    cached = ov.memo.get(key)
    if cached is None:
        cached = ov.memo[key] = _dominant_share(ov, n, None)
    assert isinstance(cached, Share)
    return cached


def _dominant_share(ov: UsageOverlay, n: int, extra: Mapping[FlavorResource, int] | None) -> Share:
    node = ov.tree.nodes[n]
    weight = _weight(ov, n)
    if node.parent == quota.NO_PARENT:
        return Share(numerator=0, weight_milli=weight)
    used = ov.maps[n]
    per_resource: dict[str, int] = {}
    borrowed: list[FlavorResource] = []
    for fr, q in node.subtree_quota.items():
        over = (extra.get(fr, 0) if extra else 0) + used.get(fr, 0) - q
        if over > 0:
            per_resource[fr[1]] = per_resource.get(fr[1], 0) + over
            borrowed.append(fr)
    if not per_resource:
        return Share(numerator=0, weight_milli=weight)
    lendable = _lendable(ov, node.parent)
    best, dominant = (0, 1), ""
    for resource in sorted(per_resource):
        if lendable.get(resource, 0) > 0:
            ratio = (per_resource[resource] * 1000, lendable[resource])
            if _cmp(ratio, best) > 0:
                best, dominant = ratio, resource
    return Share(
        numerator=best[0],
        denominator=best[1],
        weight_milli=weight,
        borrowing=True,
        dominant=dominant,
        borrowed=frozenset(borrowed),
    )


def _candidates(ov: UsageOverlay, req: Request) -> list[AdmittedWorkload]:
    """Kueue's findCandidates: own ClusterQueue by withinClusterQueue, and borrowing
    ClusterQueues of the whole cohort tree by reclaimWithinCohort."""
    cq, snap = req.cluster_queue, ov.snapshot
    found: list[AdmittedWorkload] = []
    sources: list[tuple[int, WithinClusterQueue | ReclaimWithinCohort]] = []
    if cq.preemption.within_cluster_queue is not WithinClusterQueue.NEVER:
        sources.append((req.node, cq.preemption.within_cluster_queue))
    parent = ov.tree.nodes[req.node].parent
    reclaim = cq.preemption.reclaim_within_cohort
    if parent != quota.NO_PARENT and reclaim is not ReclaimWithinCohort.NEVER:
        for other in ov.tree.subtree_cluster_queues(ov.tree.root(req.node)):
            if other != req.node and any(
                ov.borrowing_with(other, fr) for fr in req.need_preemption
            ):
                sources.append((other, reclaim))
    for n, policy in sources:
        for key in snap.workloads_by_cq.get(ClusterQueueName(ov.tree.nodes[n].name), ()):
            a = snap.admitted[key]
            if uses_resources(ov, key, req.need_preemption) and satisfies_policy(
                req.workload, a.workload, policy
            ):
                found.append(a)
    lq_usage = snap.lq_usage
    found.sort(key=lambda a: candidate_order(a, cq.name, lq_usage.get(a.workload.local_queue, 0.0)))
    return found


class _Ordering:
    """Kueue's TargetClusterQueueOrdering: walk from the root to the child with the highest
    share, repeatedly, yielding ClusterQueues that still have candidates."""

    def __init__(self, ov: UsageOverlay, req: Request, candidates: list[AdmittedWorkload]):
        self.ov, self.req = ov, req
        self.ancestors = set(ov.tree.path_to_root(req.node))
        self.queue: dict[int, list[AdmittedWorkload]] = {}
        for a in candidates:
            self.queue.setdefault(ov.node(a.cluster_queue), []).append(a)
        self.pruned: set[int] = set()

    def __iter__(self) -> Iterator[int]:
        tree = self.ov.tree
        if tree.nodes[self.req.node].parent == quota.NO_PARENT:
            while self.req.node not in self.pruned and self.queue.get(self.req.node):
                yield self.req.node
            return
        root = tree.root(self.req.node)
        while root not in self.pruned:
            target = self._next(root)
            if target is not None:
                yield target

    def _next(self, cohort: int) -> int | None:
        tree, ov = self.ov.tree, self.ov
        best_cq, best_cq_share = -1, NEGATIVE
        best_co, best_co_share = -1, NEGATIVE
        for child in tree.nodes[cohort].children:
            if child in self.pruned:
                continue
            if tree.nodes[child].is_cluster_queue and not self.queue.get(child):
                self.pruned.add(child)  # no candidates left: its share doesn't matter
                continue
            share = dominant_share(ov, child)
            if tree.nodes[child].is_cluster_queue:
                if not share.borrowing and child != self.req.node:
                    self.pruned.add(child)
                elif (c := compare(share, best_cq_share)) > 0 or (
                    c == 0 and self._earlier(child, best_cq)
                ):
                    best_cq, best_cq_share = child, share
            elif not share.borrowing and child not in self.ancestors:
                self.pruned.add(child)
            elif compare(share, best_co_share) >= 0:
                best_co, best_co_share = child, share
        if best_co < 0 and best_cq < 0:
            self.pruned.add(cohort)
            return None
        if best_co >= 0 and compare(best_co_share, best_cq_share) >= 0:
            return self._next(best_co)
        return best_cq

    def _earlier(self, a: int, b: int) -> bool:
        name = self.req.cluster_queue.name
        return candidate_order(self.queue[a][0], name) < candidate_order(self.queue[b][0], name)

    def pop(self, n: int) -> AdmittedWorkload:
        return self.queue[n].pop(0)

    def almost_lcas(self, target: int) -> tuple[int, int]:
        """The children of the lowest common ancestor on the preemptor's and the target's
        paths (Kueue's getAlmostLCAs)."""
        tree = self.ov.tree
        lca = next(a for a in tree.path_to_root(target) if a in self.ancestors)

        def below(n: int) -> int:
            while tree.nodes[n].parent != lca:
                n = tree.nodes[n].parent
            return n

        return below(self.req.node), below(target)


def _fits_without_preemptor(ov: UsageOverlay, req: Request) -> bool:
    ov.begin()
    ov.remove(req.node, req.usage)
    fits = workload_fits(ov, req, True)
    ov.rollback()
    return fits


def _passes(
    strategy: FairSharingStrategy, preemptor_new: Share, target_old: Share, target_new: Share
) -> bool:
    if strategy is FairSharingStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE:
        return compare(preemptor_new, target_new) <= 0
    return compare(preemptor_new, target_old) < 0


def _take(
    ov: UsageOverlay, targets: list[Target], a: AdmittedWorkload, r: PreemptionReason
) -> None:
    ov.remove_workloads((a.key,))
    targets.append(Target(workload=a.key, cluster_queue=a.cluster_queue, reason=r))


def _first_strategy(
    ov: UsageOverlay,
    req: Request,
    candidates: list[AdmittedWorkload],
    strategy: FairSharingStrategy,
) -> tuple[bool, list[Target], list[AdmittedWorkload]]:
    ordering = _Ordering(ov, req, candidates)
    targets: list[Target] = []
    retry: list[AdmittedWorkload] = []
    within_nominal = not any(ov.borrowing_with(req.node, fr) for fr in req.need_preemption)
    for cq in ordering:
        if cq == req.node or within_nominal:
            reason = (
                PreemptionReason.IN_CLUSTER_QUEUE
                if cq == req.node
                else PreemptionReason.IN_COHORT_RECLAMATION
            )
            _take(ov, targets, ordering.pop(cq), reason)
            if _fits_without_preemptor(ov, req):
                return True, targets, []
            continue
        mine, theirs = ordering.almost_lcas(cq)
        preemptor_new, target_old = dominant_share(ov, mine), dominant_share(ov, theirs)
        while ordering.queue.get(cq):
            a = ordering.pop(cq)
            ov.begin()
            ov.remove_workloads((a.key,))
            target_new = dominant_share(ov, theirs)
            ov.rollback()
            if not _passes(strategy, preemptor_new, target_old, target_new):
                retry.append(a)
                continue
            _take(ov, targets, a, PreemptionReason.IN_COHORT_FAIR_SHARING)
            if _fits_without_preemptor(ov, req):
                return True, targets, []
            break
    return False, targets, retry


def _second_strategy(
    ov: UsageOverlay, req: Request, retry: list[AdmittedWorkload], targets: list[Target]
) -> bool:
    """Rule S2-b: preempt while the preemptor's new share is below the target's old one."""
    ordering = _Ordering(ov, req, retry)
    for cq in ordering:
        mine, theirs = ordering.almost_lcas(cq) if cq != req.node else (req.node, req.node)
        a = ordering.pop(cq)
        if compare(dominant_share(ov, mine), dominant_share(ov, theirs)) < 0:
            _take(ov, targets, a, PreemptionReason.IN_COHORT_FAIR_SHARING)
            if _fits_without_preemptor(ov, req):
                return True
        ordering.pruned.add(cq)
    return False


def fair_targets(
    ov: UsageOverlay, req: Request, strategies: tuple[FairSharingStrategy, ...]
) -> tuple[Target, ...]:
    candidates = _candidates(ov, req)
    if not candidates or not strategies:
        return ()
    ov.add(req.node, req.usage)
    fits, targets, retry = _first_strategy(ov, req, candidates, strategies[0])
    if not fits and len(strategies) > 1:
        fits = _second_strategy(ov, req, retry, targets)
    ov.remove(req.node, req.usage)
    if fits:
        fill_back(ov, req, targets, True)
    ov.add_workloads(t.workload for t in targets)
    return tuple(targets) if fits else ()
