"""The immutable snapshot one scheduling cycle reads, and how it is built.

Mirrors Kueue's pkg/cache/scheduler/snapshot.go and the tree accumulation of
resource_node.go (`updateCohortResourceNode`, `accumulateFromChild`). Built once from plain
model objects; cycles and what-ifs layer their changes on top (overlay.py), never copy it.

Two parts: the `Structure` (flavors, queues, cohorts, the quota tree, inactive queues),
which only changes with a queue object, and what is admitted at this instant (the usage
charged to the tree). `build_snapshot` builds both from scratch; a caller that keeps the
structure and the usage up to date between cycles (the cache) joins them with `assemble`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from atoll.engine.model import (
    Admission,
    AdmittedWorkload,
    ClusterQueue,
    ClusterQueueName,
    Cohort,
    CohortName,
    FairSharing,
    FlavorName,
    FlavorResource,
    LocalQueue,
    LocalQueueKey,
    ResourceFlavor,
    ResourceGroup,
    ResourceName,
    StopPolicy,
    WorkloadKey,
)
from atoll.engine.quota import NO_PARENT, QuotaNode, QuotaTree, add_usage

if TYPE_CHECKING:
    from atoll.engine.cycle import Placer


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    flavors: Mapping[FlavorName, ResourceFlavor]
    cluster_queues: Mapping[ClusterQueueName, ClusterQueue]
    cohorts: Mapping[CohortName, Cohort]
    local_queues: Mapping[LocalQueueKey, LocalQueue]
    admitted: Mapping[WorkloadKey, AdmittedWorkload]
    fair_sharing: FairSharing | None
    tree: QuotaTree
    base_usage: tuple[Mapping[FlavorResource, int], ...]
    """Usage per quota-tree node, as Kueue's resourceNode.Usage."""
    workload_usage: Mapping[WorkloadKey, Mapping[FlavorResource, int]]
    workloads_by_cq: Mapping[ClusterQueueName, tuple[WorkloadKey, ...]]
    inactive: Mapping[ClusterQueueName, str]
    """ClusterQueues that admit nothing, with the reason (Stopped, FlavorNotFound, ...)."""
    group_of: Mapping[ClusterQueueName, Mapping[ResourceName, ResourceGroup]]
    over_nominal: Mapping[tuple[int, FlavorResource], tuple[int, ...]]
    """Per cohort node and flavor/resource: its children using more than their own quota."""
    draining: bool = False
    """Some ClusterQueue or LocalQueue is set to HoldAndDrain."""
    backfill_queues: tuple[ClusterQueueName, ...] = ()
    """The ClusterQueues with backfill on, by name (an index: a step asks each for its
    reservation holders, and the others have none)."""
    deactivated: tuple[WorkloadKey, ...] = ()
    """Admitted workloads that are deactivated (`active: false`), sorted."""
    evicted: frozenset[WorkloadKey] = frozenset()
    """Admitted workloads marked `evicted`."""
    lq_usage: Mapping[LocalQueueKey, float] = field(default_factory=dict)
    """Admission Fair Sharing: the usage of each LocalQueue of a ClusterQueue ordered by it.
    Among the preemption candidates of one such ClusterQueue, those of the LocalQueue that
    used more go first (`queue_candidate_key`)."""
    cq_memo: Mapping[ClusterQueueName, dict[object, object]] = field(
        default_factory=dict, compare=False
    )
    """Per ClusterQueue with admitted workloads, a memo of data derived from them alone
    (their entries in `admitted` and `workload_usage`): a cache hands the same dict to the
    snapshots that follow while the queue's workloads stay the same, so that such data is
    computed once, not once per cycle."""
    placer: Placer | None = field(default=None, compare=False)
    """Placement (topology and devices), when the cycle must place what it admits: the
    inventory, the gangs placed earlier in the cycle and the domains nominated for
    preemptors, behind `engine.cycle.Placer` (`engine.gangstep.CyclePlacer`; `placing`
    gives a snapshot one). A snapshot without it admits on quota alone."""


def placing(snapshot: Snapshot, placer: Placer) -> Snapshot:
    """`snapshot` for one cycle that places what it admits with `placer` (the rest is
    shared, not copied)."""
    return dataclasses.replace(snapshot, placer=placer)


class _ListWriter:
    __slots__ = ("maps",)

    def __init__(self, maps: list[dict[FlavorResource, int]]) -> None:
        self.maps = maps

    def writable(self, n: int) -> dict[FlavorResource, int]:
        return self.maps[n]


def _quotas(
    groups: tuple[ResourceGroup, ...],
) -> tuple[dict[FlavorResource, int], dict[FlavorResource, int], dict[FlavorResource, int]]:
    nominal: dict[FlavorResource, int] = {}
    borrowing: dict[FlavorResource, int] = {}
    lending: dict[FlavorResource, int] = {}
    for group in groups:
        for fq in group.flavors:
            for rq in fq.resources:
                fr = (fq.flavor, rq.resource)
                nominal[fr] = rq.nominal
                if rq.borrowing_limit is not None:
                    borrowing[fr] = rq.borrowing_limit
                if rq.lending_limit is not None:
                    lending[fr] = rq.lending_limit
    return nominal, borrowing, lending


def _resolve_cohorts(
    cohorts: Iterable[Cohort], cluster_queues: Iterable[ClusterQueue]
) -> tuple[dict[CohortName, Cohort], set[CohortName]]:
    """Explicit cohorts plus implicit ones (named but never created), and those in cycles."""
    found = {c.name: c for c in cohorts}
    wanted = [cq.cohort for cq in cluster_queues] + [c.parent for c in list(found.values())]
    for name in wanted:
        if name is not None and name not in found:
            found[name] = Cohort(name=name)
    broken: set[CohortName] = set()
    for name in found:
        seen: list[CohortName] = []
        current: CohortName | None = name
        while current is not None and current not in seen and current not in broken:
            seen.append(current)
            current = found[current].parent
        if current is not None and (current in seen or current in broken):
            broken.update(seen)
    return found, broken


def _build_node(
    i: int,
    *,
    names: list[tuple[bool, str]],
    parents: list[int],
    children: list[list[int]],
    groups: list[tuple[ResourceGroup, ...]],
    built: dict[int, QuotaNode],
) -> None:
    """Build node `i` after its children: subtree quota, local quota, height."""
    for child in children[i]:
        _build_node(
            child, names=names, parents=parents, children=children, groups=groups, built=built
        )
    is_cq, name = names[i]
    nominal, borrowing, lending = _quotas(groups[i])
    subtree = dict(nominal)
    height = min(len(children[i]), 1)
    for child in children[i]:
        c = built[child]
        for fr, q in c.subtree_quota.items():
            subtree[fr] = subtree.get(fr, 0) + q - c.local_quota.get(fr, 0)
        if not c.is_cluster_queue:
            height = max(height, c.height + 1)
    built[i] = QuotaNode(
        name=name,
        is_cluster_queue=is_cq,
        parent=parents[i],
        children=tuple(children[i]),
        nominal=nominal,
        borrowing_limit=borrowing,
        lending_limit=lending,
        subtree_quota=subtree,
        local_quota={fr: max(0, subtree.get(fr, 0) - limit) for fr, limit in lending.items()},
        height=0 if is_cq else height,
    )


def _build_tree(
    cohorts: Mapping[CohortName, Cohort], cluster_queues: Mapping[ClusterQueueName, ClusterQueue]
) -> QuotaTree:
    names: list[tuple[bool, str]] = [(False, n) for n in sorted(cohorts)]
    names += [(True, n) for n in sorted(cluster_queues)]
    index = {key: i for i, key in enumerate(names)}
    parents: list[int] = []
    groups: list[tuple[ResourceGroup, ...]] = []
    for is_cq, name in names:
        owner: ClusterQueue | Cohort = (
            cluster_queues[ClusterQueueName(name)] if is_cq else cohorts[CohortName(name)]
        )
        parent_name = owner.cohort if isinstance(owner, ClusterQueue) else owner.parent
        parents.append(NO_PARENT if parent_name is None else index[(False, parent_name)])
        groups.append(owner.resource_groups)
    children: list[list[int]] = [[] for _ in names]
    for i, parent_id in enumerate(parents):
        if parent_id != NO_PARENT:
            children[parent_id].append(i)
    built: dict[int, QuotaNode] = {}
    for i, parent_id in enumerate(parents):
        if parent_id == NO_PARENT:
            _build_node(
                i, names=names, parents=parents, children=children, groups=groups, built=built
            )
    return QuotaTree(
        nodes=tuple(built[i] for i in range(len(names))),
        cluster_queues={ClusterQueueName(n): index[(True, n)] for is_cq, n in names if is_cq},
        cohorts={CohortName(n): index[(False, n)] for is_cq, n in names if not is_cq},
    )


def candidate_key(a: AdmittedWorkload) -> tuple[bool, int, float, str, str]:
    """Kueue's CandidatesOrdering between ClusterQueues' candidates: already evicted first,
    then lower priority, then most recently admitted."""
    return (not a.evicted, a.workload.priority, -a.reserved_at, a.workload.uid, a.key)


def queue_candidate_key(
    lq_usage: Mapping[LocalQueueKey, float], a: AdmittedWorkload
) -> tuple[bool, float, int, float, str, str]:
    """Kueue's CandidatesOrdering within one ClusterQueue: already evicted first, then (under
    Admission Fair Sharing) the LocalQueue that used more, then `candidate_key`'s order."""
    usage = lq_usage.get(a.workload.local_queue, 0.0) if lq_usage else 0.0
    return (not a.evicted, -usage, a.workload.priority, -a.reserved_at, a.workload.uid, a.key)


def admission_usage(admitted: AdmittedWorkload) -> dict[FlavorResource, int]:
    return usage_of(admitted.admission)


def usage_of(admission: Admission) -> dict[FlavorResource, int]:
    """Quota an admission uses, by flavor and resource."""
    usage: dict[FlavorResource, int] = {}
    for ps in admission.pod_sets:
        flavors = dict(ps.flavors)
        for resource, total in ps.resource_usage:
            flavor = flavors.get(resource)
            if flavor is not None and total:
                fr = (flavor, resource)
                usage[fr] = usage.get(fr, 0) + total
    return usage


def _inactive_reason(
    cq: ClusterQueue, flavors: Mapping[FlavorName, ResourceFlavor], broken: set[CohortName]
) -> str | None:
    if cq.inactive_reason is not None:
        return cq.inactive_reason
    if cq.stop_policy is not StopPolicy.NONE:
        return "Stopped"
    if cq.cohort is not None and cq.cohort in broken:
        return "CohortCycle"
    for group in cq.resource_groups:
        for fq in group.flavors:
            if fq.flavor not in flavors:
                return "FlavorNotFound"
    return None


def _charge(
    tree: QuotaTree,
    admitted: Mapping[WorkloadKey, AdmittedWorkload],
    known: Mapping[WorkloadKey, Mapping[FlavorResource, int]],
) -> tuple[list[dict[FlavorResource, int]], dict[WorkloadKey, Mapping[FlavorResource, int]]]:
    """Usage per tree node (bubbled up as Kueue does) and per workload (`known` holds the
    caller's memo of `admission_usage` for some). Bubbling a queue's total at once gives the
    same usage as charging its workloads one by one."""
    per_workload: dict[WorkloadKey, Mapping[FlavorResource, int]] = {}
    per_cq: dict[ClusterQueueName, dict[FlavorResource, int]] = {}
    for key, a in admitted.items():
        memo = known.get(key)
        per_workload[key] = wl_usage = memo if memo is not None else admission_usage(a)
        total = per_cq.setdefault(a.cluster_queue, {})
        for fr, value in wl_usage.items():
            total[fr] = total.get(fr, 0) + value
    return charge_tree(tree, per_cq), per_workload


@dataclass(frozen=True, slots=True, kw_only=True)
class Structure:
    """The part of a snapshot that depends only on the queue objects."""

    flavors: Mapping[FlavorName, ResourceFlavor]
    cluster_queues: Mapping[ClusterQueueName, ClusterQueue]
    cohorts: Mapping[CohortName, Cohort]
    local_queues: Mapping[LocalQueueKey, LocalQueue]
    tree: QuotaTree
    inactive: Mapping[ClusterQueueName, str]
    group_of: Mapping[ClusterQueueName, Mapping[ResourceName, ResourceGroup]]
    draining: bool
    """Some ClusterQueue or LocalQueue is set to HoldAndDrain (see cycle.drain)."""
    backfill_queues: tuple[ClusterQueueName, ...] = ()
    """The ClusterQueues with backfill on (`ClusterQueue.backfill`), by name."""


def build_structure(
    *,
    flavors: Iterable[ResourceFlavor] = (),
    cluster_queues: Iterable[ClusterQueue] = (),
    cohorts: Iterable[Cohort] = (),
    local_queues: Iterable[LocalQueue] = (),
) -> Structure:
    flavor_map = {f.name: f for f in flavors}
    cq_map = {cq.name: cq for cq in cluster_queues}
    lq_map = {lq.key: lq for lq in local_queues}
    cohort_map, broken = _resolve_cohorts(cohorts, cq_map.values())
    inactive = {
        name: reason
        for name, cq in cq_map.items()
        if (reason := _inactive_reason(cq, flavor_map, broken)) is not None
    }
    tree_cqs = {n: cq for n, cq in cq_map.items() if cq.cohort not in broken}
    tree = _build_tree({n: c for n, c in cohort_map.items() if n not in broken}, tree_cqs)
    draining = any(cq.stop_policy is StopPolicy.HOLD_AND_DRAIN for cq in cq_map.values()) or any(
        lq.stop_policy is StopPolicy.HOLD_AND_DRAIN for lq in lq_map.values()
    )
    return Structure(
        flavors=flavor_map,
        cluster_queues=cq_map,
        cohorts=cohort_map,
        local_queues=lq_map,
        tree=tree,
        inactive=inactive,
        group_of={
            name: {r: g for g in cq.resource_groups for r in g.covered_resources}
            for name, cq in cq_map.items()
        },
        draining=draining,
        backfill_queues=tuple(sorted(n for n, cq in cq_map.items() if cq.backfill is not None)),
    )


def charge_tree(
    tree: QuotaTree, per_cq: Mapping[ClusterQueueName, Mapping[FlavorResource, int]]
) -> list[dict[FlavorResource, int]]:
    """Usage per tree node from the total usage of each ClusterQueue (queues not in the
    tree are skipped), bubbled up as Kueue does."""
    usage: list[dict[FlavorResource, int]] = [{} for _ in tree.nodes]
    writer = _ListWriter(usage)
    nodes = sorted((n, cq) for cq in per_cq if (n := tree.cluster_queues.get(cq)) is not None)
    for node, cq in nodes:
        for fr, value in per_cq[cq].items():
            add_usage(tree, writer, node, fr, value)
    return usage


def over_nominal(
    tree: QuotaTree, usage: Sequence[Mapping[FlavorResource, int]]
) -> dict[tuple[int, FlavorResource], tuple[int, ...]]:
    """Per cohort node and flavor/resource: its children using more than their own quota."""
    over: dict[tuple[int, FlavorResource], list[int]] = {}
    for n, node in enumerate(tree.nodes):
        if node.parent != NO_PARENT:
            for fr, used in usage[n].items():
                if used > node.subtree_quota.get(fr, 0):
                    over.setdefault((node.parent, fr), []).append(n)
    return {k: tuple(v) for k, v in over.items()}


def assemble(
    structure: Structure,
    *,
    admitted: Mapping[WorkloadKey, AdmittedWorkload],
    workload_usage: Mapping[WorkloadKey, Mapping[FlavorResource, int]],
    usage: tuple[Mapping[FlavorResource, int], ...],
    workloads_by_cq: Mapping[ClusterQueueName, tuple[WorkloadKey, ...]],
    deactivated: tuple[WorkloadKey, ...],
    evicted: frozenset[WorkloadKey],
    fair_sharing: FairSharing | None,
    over: Mapping[tuple[int, FlavorResource], tuple[int, ...]] | None = None,
    cq_memo: Mapping[ClusterQueueName, dict[object, object]] | None = None,
    lq_usage: Mapping[LocalQueueKey, float] | None = None,
) -> Snapshot:
    """A snapshot of a structure and the admitted workloads charged to its tree (`usage`:
    per node, `workload_usage`: per workload, as `build_snapshot` computes them; `over`:
    `over_nominal(structure.tree, usage)` when the caller has it; `cq_memo`: see Snapshot,
    fresh memos when not given). The caller must not change any of these mappings
    afterwards."""
    return Snapshot(
        flavors=structure.flavors,
        cluster_queues=structure.cluster_queues,
        cohorts=structure.cohorts,
        local_queues=structure.local_queues,
        admitted=admitted,
        fair_sharing=fair_sharing,
        tree=structure.tree,
        base_usage=usage,
        workload_usage=workload_usage,
        workloads_by_cq=workloads_by_cq,
        inactive=structure.inactive,
        group_of=structure.group_of,
        over_nominal=over_nominal(structure.tree, usage) if over is None else over,
        draining=structure.draining,
        backfill_queues=structure.backfill_queues,
        deactivated=deactivated,
        evicted=evicted,
        cq_memo={cq: {} for cq in workloads_by_cq} if cq_memo is None else cq_memo,
        lq_usage={} if lq_usage is None else lq_usage,
    )


def build_snapshot(
    *,
    flavors: Iterable[ResourceFlavor] = (),
    cluster_queues: Iterable[ClusterQueue] = (),
    cohorts: Iterable[Cohort] = (),
    local_queues: Iterable[LocalQueue] = (),
    admitted: Iterable[AdmittedWorkload] = (),
    fair_sharing: FairSharing | None = None,
    usage_of: Mapping[WorkloadKey, Mapping[FlavorResource, int]] | None = None,
    lq_usage: Mapping[LocalQueueKey, float] | None = None,
) -> Snapshot:
    """The engine's view of one instant. `usage_of` may give `admission_usage` of admitted
    workloads already computed (a memo of the caller's; it must agree with their admission)."""
    structure = build_structure(
        flavors=flavors, cluster_queues=cluster_queues, cohorts=cohorts, local_queues=local_queues
    )
    admitted_map = {a.key: a for a in admitted}
    usage, workload_usage = _charge(structure.tree, admitted_map, usage_of or {})
    by_cq: dict[ClusterQueueName, list[WorkloadKey]] = {}
    for key in sorted(admitted_map):
        by_cq.setdefault(admitted_map[key].cluster_queue, []).append(key)
    return assemble(
        structure,
        admitted=admitted_map,
        workload_usage=workload_usage,
        usage=tuple(usage),
        workloads_by_cq={k: tuple(v) for k, v in by_cq.items()},
        deactivated=tuple(sorted(k for k, a in admitted_map.items() if not a.workload.active)),
        evicted=frozenset(k for k, a in admitted_map.items() if a.evicted),
        fair_sharing=fair_sharing,
        lq_usage=lq_usage,
    )
