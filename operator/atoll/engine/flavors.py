"""Flavor assignment: which ResourceFlavor each pod set gets, for each resource group.

Mirrors Kueue's pkg/scheduler/flavorassigner/flavorassigner.go (assignFlavors,
findFlavorForPodSets, fitsResourceQuota, isPreferred, shouldTryNextFlavor,
resolveNoFitReason). For each pod set and each resource group it touches, the
ClusterQueue's flavors are tried in order:

- a flavor whose taints the pod doesn't tolerate, or whose nodeLabels contradict the pod's
  nodeSelector / required node affinity, is skipped (NoMatchingFlavor);
- all resources of the group must come from the same flavor, whose mode is its worst
  resource's: Fit (with a borrowing level), Preempt, or NoFit;
- the search stops at a flavor that fits without borrowing, or earlier as flavorFungibility
  says (whenCanBorrow / whenCanPreempt = MayStopSearch); otherwise the best flavor seen
  wins, by `preference`.

A flavor whose topology already refused the pod set in this cycle (`refused`, from
`engine.topologyflavors`) is skipped with that reason (TopologyPlacementFailed).

Earlier pod sets' usage counts when later pod sets are assigned the same flavor. The pod
sets of one podset group (`kueue.x-k8s.io/podset-group-name`, which TAS places in one domain)
are assigned together, as Kueue's assignFlavors does: their requests summed, each resource
group's flavor one that suits every one of them, so they all get the same flavor.
The scan always starts at the first flavor: Kueue's resume-from-last-tried-flavor across
cycles is state the queue would have to carry, and is not modelled; where it matters most
(a flavor with quota whose topology cannot place the gang), the cycle refuses the flavor
and assigns again within one attempt (`engine.topologyflavors`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from atoll.engine import quota
from atoll.engine.decisions import PendingReason, Shortfall
from atoll.engine.matching import flavor_mismatch
from atoll.engine.model import (
    PODS,
    BorrowWithinCohortPolicy,
    ClusterQueue,
    FlavorName,
    FlavorResource,
    FungibilityPolicy,
    FungibilityPreference,
    PodSet,
    PodSetName,
    ReclaimWithinCohort,
    ResourceGroup,
    ResourceName,
    Workload,
)
from atoll.engine.overlay import UsageOverlay
from atoll.engine.quantities import format_quantity
from atoll.engine.targets import Possibility, simulate_preemption


class FitMode(Enum):
    """Kueue's FlavorAssignmentMode (ordered: a larger value is better)."""

    NO_FIT = 0
    PREEMPT = 1
    FIT = 2


class _Mode(Enum):
    NO_FIT = 0
    NO_CANDIDATES = 1
    PREEMPT = 2
    RECLAIM = 3
    FIT = 4


_FIT_MODE = {
    _Mode.NO_FIT: FitMode.NO_FIT,
    _Mode.NO_CANDIDATES: FitMode.PREEMPT,
    _Mode.PREEMPT: FitMode.PREEMPT,
    _Mode.RECLAIM: FitMode.PREEMPT,
    _Mode.FIT: FitMode.FIT,
}
_FROM_POSSIBILITY = {
    Possibility.NO_CANDIDATES: _Mode.NO_CANDIDATES,
    Possibility.PREEMPT: _Mode.PREEMPT,
    Possibility.RECLAIM: _Mode.RECLAIM,
}
_SEVERITY = {
    None: 0,
    PendingReason.TOPOLOGY_PLACEMENT_FAILED: 1,
    PendingReason.WAITING_FOR_QUOTA: 2,
    PendingReason.EXCEEDS_MAX_QUOTA: 3,
    PendingReason.NO_MATCHING_FLAVOR: 4,
}
_WORST = (_Mode.NO_FIT, 1 << 30)
_BEST = (_Mode.FIT, 0)


def most_severe(a: PendingReason | None, b: PendingReason | None) -> PendingReason | None:
    return a if _SEVERITY.get(a, 1) >= _SEVERITY.get(b, 1) else b


@dataclass(frozen=True, slots=True, kw_only=True)
class FlavorChoice:
    flavor: FlavorName
    mode: FitMode
    borrow: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PodSetResult:
    name: PodSetName
    count: int
    requests: Mapping[ResourceName, int]
    """Totals for `count` pods (plus `pods` when the ClusterQueue covers it)."""
    flavors: Mapping[ResourceName, FlavorChoice]
    reasons: tuple[str, ...] = ()
    failed: bool = False

    @property
    def mode(self) -> FitMode:
        if self.failed or (self.requests and not self.flavors):
            return FitMode.NO_FIT
        if not self.reasons:
            return FitMode.FIT
        return min((c.mode for c in self.flavors.values()), key=lambda m: m.value)


@dataclass(frozen=True, slots=True, kw_only=True)
class Assignment:
    pod_sets: tuple[PodSetResult, ...]
    usage: Mapping[FlavorResource, int]
    borrowing: int
    mode: FitMode
    no_fit_reason: PendingReason | None
    shortfalls: tuple[Shortfall, ...]

    def message(self) -> str:
        parts = [
            f"couldn't assign flavors to pod set {ps.name}: {', '.join(sorted(ps.reasons))}"
            for ps in self.pod_sets
            if ps.mode is not FitMode.FIT or ps.reasons
        ]
        return "; ".join(parts)

    def need_preemption(self) -> frozenset[FlavorResource]:
        return frozenset(
            (c.flavor, r)
            for ps in self.pod_sets
            for r, c in ps.flavors.items()
            if c.mode is FitMode.PREEMPT
        )


@dataclass(slots=True)
class _Group:
    """The outcome of choosing a flavor for one resource group of one pod set."""

    flavors: dict[ResourceName, FlavorChoice]
    reasons: list[str]
    no_fit: dict[FlavorName, PendingReason | None]
    shortfalls: list[Shortfall]


def _preferred(a: tuple[_Mode, int], b: tuple[_Mode, int], cq: ClusterQueue) -> bool:
    """Kueue's isPreferred: is granular mode `a` better than `b`?"""
    if a[0] is _Mode.NO_FIT:
        return False
    if b[0] is _Mode.NO_FIT:
        return True
    if (a[0] is _Mode.NO_CANDIDATES) != (b[0] is _Mode.NO_CANDIDATES):
        return b[0] is _Mode.NO_CANDIDATES
    pref = cq.flavor_fungibility.preference
    if pref is FungibilityPreference.PREEMPTION_OVER_BORROWING and a[1] != b[1]:
        return a[1] < b[1]
    if a[0] is not b[0]:
        return bool(a[0].value > b[0].value)
    return a[1] < b[1]


def _try_next(mode: tuple[_Mode, int], cq: ClusterQueue) -> bool:
    fung = cq.flavor_fungibility
    if mode[0] in (_Mode.NO_FIT, _Mode.NO_CANDIDATES):
        return True
    if mode[0] in (_Mode.PREEMPT, _Mode.RECLAIM) and (
        fung.when_can_preempt is FungibilityPolicy.TRY_NEXT_FLAVOR
    ):
        return True
    return mode[1] > 0 and fung.when_can_borrow is FungibilityPolicy.TRY_NEXT_FLAVOR


def _can_preempt_while_borrowing(ov: UsageOverlay, cq: ClusterQueue) -> bool:
    if cq.preemption.borrow_within_cohort.policy is not BorrowWithinCohortPolicy.NEVER:
        return True
    return (
        ov.snapshot.fair_sharing is not None
        and cq.preemption.reclaim_within_cohort is not ReclaimWithinCohort.NEVER
    )


Refused = Mapping[tuple[PodSetName, FlavorName], str]
"""(pod set, flavor) → why the flavor's topology cannot place the pod set."""


@dataclass(frozen=True, slots=True)
class _Ctx:
    ov: UsageOverlay
    workload: Workload
    cq: ClusterQueue
    node: int
    refused: Refused


def _exceeds_max(
    group: _Group, fr: FlavorResource, assumed: int, request: int, maximum: int
) -> None:
    flavor, resource = fr
    fmt = format_quantity
    group.reasons.append(
        f"insufficient quota for {resource} in flavor {flavor}, previously considered "
        f"podsets requests ({fmt(resource, assumed)}) + current podset request "
        f"({fmt(resource, request)}) > maximum capacity ({fmt(resource, maximum)})"
    )
    group.no_fit[flavor] = most_severe(group.no_fit.get(flavor), PendingReason.EXCEEDS_MAX_QUOTA)


def _short(ctx: _Ctx, group: _Group, fr: FlavorResource, value: int, available: int) -> None:
    """Record "insufficient unused quota", with the numbers behind it."""
    ov, node = ctx.ov, ctx.node
    flavor, resource = fr
    fmt = format_quantity
    nominal = ov.tree.nodes[node].nominal.get(fr, 0)
    borrowable = max(0, available - max(0, nominal - ov.used(node, fr)))
    group.reasons.append(
        f"insufficient unused quota for {resource} in flavor {flavor}, "
        f"{fmt(resource, value - available)} more needed (needs {fmt(resource, value)}, "
        f"free {fmt(resource, available)} incl. {fmt(resource, borrowable)} borrowable "
        f"from the cohort)"
    )


def _fits_quota(
    ctx: _Ctx,
    fr: FlavorResource,
    assumed: int,
    request: int,
    group: _Group,
    *,
    so_far: tuple[_Mode, int],
) -> tuple[_Mode, int]:
    """Kueue's fitsResourceQuota: the mode of one resource on one flavor. `so_far` is the
    flavor's mode from its other resources: when that is already "preemption without
    candidates" at this borrowing level or worse, the preemption oracle can't change the
    flavor's outcome and isn't consulted (the answer is the same either way)."""
    ov, node = ctx.ov, ctx.node
    value = assumed + request
    maximum = ov.potential_available(node, fr)
    available = ov.available(node, fr)
    if value > maximum:
        _exceeds_max(group, fr, assumed, request, maximum)
        group.shortfalls.append(
            Shortfall(
                flavor=fr[0], resource=fr[1], needed=value, available=available, maximum=maximum
            )
        )
        return _Mode.NO_FIT, 0
    borrow, may_reclaim = quota.lowest_fitting_subtree(ov.tree, ov.maps, node, fr, value)
    if value <= available:
        return _Mode.FIT, borrow
    _short(ctx, group, fr, value, available)
    group.shortfalls.append(
        Shortfall(flavor=fr[0], resource=fr[1], needed=value, available=available, maximum=maximum)
    )
    nominal = ov.tree.nodes[node].nominal.get(fr, 0)
    if nominal >= value or may_reclaim or _can_preempt_while_borrowing(ov, ctx.cq):
        if so_far[0] is _Mode.NO_CANDIDATES and borrow <= so_far[1]:
            return _Mode.NO_CANDIDATES, borrow
        possibility, after = simulate_preemption(ov, ctx.workload, ctx.cq, fr, value)
        return _FROM_POSSIBILITY[possibility], after
    group.no_fit[fr[0]] = most_severe(group.no_fit.get(fr[0]), PendingReason.WAITING_FOR_QUOTA)
    return _Mode.NO_FIT, borrow


def _choose_flavor(
    ctx: _Ctx,
    pod_sets: Sequence[PodSet],
    rg: ResourceGroup,
    requests: Mapping[ResourceName, int],
    usage: Mapping[FlavorResource, int],
) -> _Group:
    """Kueue's findFlavorForPodSets for one resource group: a flavor must suit every pod set
    of `pod_sets` (one, or one podset group), and `requests` are their summed totals."""
    group = _Group(flavors={}, reasons=[], no_fit={}, shortfalls=[])
    wanted = sorted(r for r in requests if r in rg.covered_resources)
    best: dict[ResourceName, FlavorChoice] = {}
    best_mode = _WORST
    for fq in rg.flavors:
        flavor = ctx.ov.snapshot.flavors[fq.flavor]
        mismatch = next(
            (why for ps in pod_sets if (why := flavor_mismatch(flavor, ps)) is not None), None
        )
        if mismatch is not None:
            group.reasons.append(mismatch)
            group.no_fit[fq.flavor] = PendingReason.NO_MATCHING_FLAVOR
            continue
        refusal = next(  # a flavor refused for one pod set of a group is refused for all
            (r for ps in pod_sets if (r := ctx.refused.get((ps.name, fq.flavor))) is not None),
            None,
        )
        if refusal is not None:
            group.reasons.append(refusal)
            group.no_fit[fq.flavor] = PendingReason.TOPOLOGY_PLACEMENT_FAILED
            continue
        chosen: dict[ResourceName, FlavorChoice] = {}
        mode = _BEST
        for resource in wanted:
            fr = (fq.flavor, resource)
            this = _fits_quota(ctx, fr, usage.get(fr, 0), requests[resource], group, so_far=mode)
            if _preferred(mode, this, ctx.cq):
                mode = this
            if mode[0] is _Mode.NO_FIT:
                break
            chosen[resource] = FlavorChoice(
                flavor=fq.flavor, mode=_FIT_MODE[this[0]], borrow=this[1]
            )
        if mode[0] is not _Mode.NO_FIT:
            group.no_fit.pop(fq.flavor, None)
        if not _try_next(mode, ctx.cq):
            best, best_mode = chosen, mode
            break
        if _preferred(mode, best_mode, ctx.cq):
            best, best_mode = chosen, mode
    group.flavors = best
    if best_mode[0] is _Mode.FIT:
        group.reasons = []
    return group


def pod_set_requests(cq_covers_pods: bool, pod_set: PodSet, count: int) -> dict[ResourceName, int]:
    totals = {r: q * count for r, q in pod_set.requests if q}
    if cq_covers_pods:
        totals[PODS] = count
    return totals


def _pod_set_reason(groups: list[_Group], unavailable: bool) -> PendingReason | None:
    """Kueue's resolveNoFitReason for one pod set: the least severe reason among a group's
    flavors (alternatives), the most severe across groups (all are needed)."""
    if unavailable:
        return PendingReason.NO_MATCHING_FLAVOR
    reason: PendingReason | None = None
    for g in groups:
        if g.flavors or not g.no_fit:
            continue
        least = min(g.no_fit.values(), key=lambda r: _SEVERITY.get(r, 1))
        reason = most_severe(reason, least)
    return reason if reason is not None else PendingReason.NO_MATCHING_FLAVOR


def _assign_pod_sets(
    ctx: _Ctx, members: Sequence[tuple[PodSet, int]], usage: Mapping[FlavorResource, int]
) -> tuple[list[PodSetResult], list[_Group], PendingReason | None]:
    """Flavors for one pod set, or for the pod sets of one podset group together (Kueue's
    assignFlavors over `groupedRequests`): their requests are summed, each resource group
    gets one flavor that suits all of them, and each pod set gets the flavors of the
    resources it requests, with the group's reasons."""
    groups_of = ctx.ov.snapshot.group_of[ctx.cq.name]
    each = [pod_set_requests(PODS in groups_of, ps, count) for ps, count in members]
    requests: dict[ResourceName, int] = {}
    for own in each:
        for resource, value in own.items():
            requests[resource] = requests.get(resource, 0) + value
    pod_sets = [ps for ps, _ in members]
    flavors: dict[ResourceName, FlavorChoice] = {}
    reasons: list[str] = []
    groups: list[_Group] = []
    failure: PendingReason | None = None
    for resource in sorted(requests):
        if resource in flavors:
            continue
        rg = groups_of.get(resource)
        if rg is None:
            reasons.append(f"resource {resource} unavailable in ClusterQueue")
            failure = PendingReason.NO_MATCHING_FLAVOR
            break
        group = _choose_flavor(ctx, pod_sets, rg, requests, usage)
        groups.append(group)
        reasons += group.reasons
        if not group.flavors:
            failure = _pod_set_reason(groups, False)
            break
        flavors.update(group.flavors)
    results = [
        PodSetResult(
            name=ps.name,
            count=count,
            requests=own,
            flavors={} if failure else {r: c for r, c in flavors.items() if r in own},
            reasons=tuple(reasons),
            failed=failure is not None,
        )
        for (ps, count), own in zip(members, each, strict=True)
    ]
    return results, groups, failure


def podset_groups(workload: Workload) -> list[tuple[int, ...]]:
    """The indices of the pod sets assigned together, in order of their first pod set: one
    podset group's (Kueue's podSetGroupName), or a pod set alone."""
    order: dict[object, list[int]] = {}
    for i, ps in enumerate(workload.pod_sets):
        order.setdefault(i if ps.group is None else ("group", ps.group), []).append(i)
    return [tuple(v) for v in order.values()]


def assign_flavors(
    ov: UsageOverlay,
    workload: Workload,
    cq: ClusterQueue,
    counts: tuple[int, ...] | None = None,
    refused: Refused | None = None,
) -> Assignment:
    """Flavors for every pod set of `workload` in `cq`, against the overlay's usage, none
    of them a flavor `refused` for its pod set."""
    ctx = _Ctx(ov, workload, cq, ov.node(cq.name), refused or {})
    usage: dict[FlavorResource, int] = {}
    results: list[tuple[int, PodSetResult]] = []
    shortfalls: list[Shortfall] = []
    borrowing = 0
    for indices in podset_groups(workload):
        members = [
            (workload.pod_sets[i], workload.pod_sets[i].count if counts is None else counts[i])
            for i in indices
        ]
        got, groups, failure = _assign_pod_sets(ctx, members, usage)
        results.extend(zip(indices, got, strict=True))
        for g in groups:
            shortfalls += g.shortfalls
        if failure is not None:
            return Assignment(
                pod_sets=_in_order(results),
                usage=usage,
                borrowing=borrowing,
                mode=FitMode.NO_FIT,
                no_fit_reason=failure,
                shortfalls=tuple(shortfalls),
            )
        for result in got:
            for resource, choice in result.flavors.items():
                fr = (choice.flavor, resource)
                usage[fr] = usage.get(fr, 0) + result.requests[resource]
                borrowing = max(borrowing, choice.borrow)
    mode = min((r.mode for _, r in results), key=lambda m: m.value, default=FitMode.NO_FIT)
    return Assignment(
        pod_sets=_in_order(results),
        usage=usage,
        borrowing=borrowing,
        mode=mode,
        no_fit_reason=None if mode is not FitMode.NO_FIT else PendingReason.NO_MATCHING_FLAVOR,
        shortfalls=tuple(shortfalls) if mode is not FitMode.FIT else (),
    )


def _in_order(results: list[tuple[int, PodSetResult]]) -> tuple[PodSetResult, ...]:
    """The results by pod set index (a podset group's pod sets are assigned together)."""
    return tuple(r for _, r in sorted(results, key=lambda pair: pair[0]))
