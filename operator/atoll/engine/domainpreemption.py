"""Topology-aware preemption: free one domain, with whole gangs, as few and as low as possible.

When a gang whose pod set requires a topology level fits its quota but no domain of that
level has room, evicting victims scattered over the cluster frees nothing usable. This picks,
for each domain of the required level, the victims running there (lowest priority first, in
the caller's order within a priority, as Kueue's candidate ordering in
pkg/scheduler/preemption), adds them until the gang fits inside that domain, then drops every
victim it can do without (Kueue's "fill back" minimisation); the domain whose victim set has
the lowest top priority, then the fewest victims, then the fewest pods wins. Which gangs may
be victims at all is `allowed_victims` (the ClusterQueue's preemption policy, a first
version of Kueue's: see there); the hint of a pending message ("would fit after workload X
finishes") is the same search over every running gang, all priorities alike. What placement
then tells the gang is built here too: a Preempt with the domain nominated for it, waiting
for the victims already leaving (WaitingForPreemptedWorkloads), or the hints of a pending
message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from atoll.engine import quota
from atoll.engine import topology as topo
from atoll.engine.candidates import candidate_order, satisfies_policy
from atoll.engine.decisions import (
    Admit,
    Pending,
    PendingReason,
    Preempt,
    PreemptionReason,
    Requeue,
)
from atoll.engine.decisions import Victim as DecisionVictim
from atoll.engine.devices import DeviceId, NodeDevices
from atoll.engine.inventory import (
    Gang,
    Inventory,
    Islands,
    NodeInventory,
    NoFit,
    Placement,
    PodPlacement,
    TopologyMode,
    give_to_islands,
    take_from_islands,
)
from atoll.engine.model import (
    AdmittedWorkload,
    BorrowWithinCohortPolicy,
    ClusterQueueName,
    ReclaimWithinCohort,
    WithinClusterQueue,
    Workload,
    WorkloadKey,
)
from atoll.engine.placement import place
from atoll.engine.snapshot import Snapshot


@dataclass(frozen=True, slots=True, kw_only=True)
class Victim:
    key: str
    priority: int
    placement: Placement
    """Where its pods are (requests and devices), as the ledger holds it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DomainPreemption:
    level: str
    domain: tuple[str, ...]
    victims: tuple[str, ...]
    placement: Placement
    """Where the gang goes once the victims are gone."""


def _shift_islands(node: NodeInventory, pods: list[PodPlacement], release: bool) -> Islands | None:
    isl = node.islands
    if isl is None:
        return None
    free = isl.free
    for pod in pods:
        q = sum(n for r, n in pod.requests if r == isl.resource)
        if q > 0:
            free = (
                give_to_islands(isl, free, q, pod.island)
                if release
                else take_from_islands(free, q)[0]
            )
    return replace(isl, free=free)


def _shift_node(
    node: NodeInventory,
    pods: list[PodPlacement],
    devices: set[DeviceId],
    *,
    release: bool,
) -> NodeInventory:
    """The node with these pods' requests and devices given back (`release`) or taken."""
    sign = 1 if release else -1
    free = dict(node.free)
    for pod in pods:
        for r, q in pod.requests:
            free[r] = free.get(r, 0) + sign * q
    islands = _shift_islands(node, pods, release)
    d = node.devices
    if not devices:
        return replace(node, free=free, islands=islands)
    busy = d.busy - devices if release else d.busy | {x.id for x in d.all if x.id in devices}
    shifted = NodeDevices(
        free=tuple(x for x in d.all if x.id not in busy),
        busy=busy,
        all=d.all,
        incomplete=d.incomplete,
    )
    return replace(node, free=free, devices=shifted, islands=islands)


def _by_node(
    placements: Iterable[Placement],
) -> tuple[dict[str, list[PodPlacement]], dict[str, set[DeviceId]]]:
    pods: dict[str, list[PodPlacement]] = {}
    devices: dict[str, set[DeviceId]] = {}
    for placement in placements:
        for pod in placement.pods:
            pods.setdefault(pod.node, []).append(pod)
            devices.setdefault(pod.node, set()).update(
                a.device for a in pod.devices if not a.admin_access
            )
    return pods, devices


def _shift(inventory: Inventory, placements: Iterable[Placement], *, release: bool) -> Inventory:
    pods, devices = _by_node(placements)
    if not pods:
        return inventory
    nodes = tuple(
        _shift_node(n, pods[n.name], devices[n.name], release=release) if n.name in pods else n
        for n in inventory.nodes
    )
    return Inventory(
        nodes=nodes, topologies=inventory.topologies, island_attribute=inventory.island_attribute
    )


def release(inventory: Inventory, placements: Iterable[Placement]) -> Inventory:
    """The inventory with these placements' pods and devices given back."""
    return _shift(inventory, placements, release=True)


def reserve(inventory: Inventory, placements: Iterable[Placement]) -> Inventory:
    """The inventory with these placements' pods and devices taken (a domain promised to a
    preemptor while its victims leave: free amounts may go negative while both count)."""
    return _shift(inventory, placements, release=False)


def required_level(inventory: Inventory, gang: Gang) -> tuple[str, tuple[str, ...]] | None:
    """The first level a pod set of the gang requires (and its Topology's levels)."""
    for ps in gang.pod_sets:
        t = ps.topology
        if t is not None and t.mode is TopologyMode.REQUIRED and t.level is not None:
            levels = inventory.topologies.get(t.topology)
            if levels is not None and t.level in levels:
                return t.level, levels
    return None


def _domains(
    inventory: Inventory, levels: Sequence[str], depth: int
) -> tuple[dict[topo.Path, tuple[NodeInventory, ...]], dict[str, topo.Path]]:
    """The nodes of each domain of the level, and each node's domain."""
    out: dict[topo.Path, list[NodeInventory]] = {}
    where: dict[str, topo.Path] = {}
    for n in inventory.nodes:
        path = topo.node_path(levels, n.labels, n.name)
        if path is not None:
            out.setdefault(path[: depth + 1], []).append(n)
            where[n.name] = path[: depth + 1]
    return {k: tuple(v) for k, v in sorted(out.items())}, where


def _fits(inventory: Inventory, gang: Gang, victims: Sequence[Victim]) -> Placement | None:
    got = place(release(inventory, (v.placement for v in victims)), gang)
    return got if isinstance(got, Placement) else None


def _minimal(
    inventory: Inventory, gang: Gang, candidates: Sequence[Victim]
) -> tuple[list[Victim], Placement] | None:
    if _fits(inventory, gang, candidates) is None:
        return None
    chosen: list[Victim] = []
    found: Placement | None = None
    for v in candidates:
        chosen.append(v)
        found = _fits(inventory, gang, chosen)
        if found is not None:
            break
    assert found is not None  # all candidates together fit
    for v in reversed(chosen[:-1]):
        fewer = [c for c in chosen if c is not v]
        got = _fits(inventory, gang, fewer)
        if got is not None:
            chosen, found = fewer, got
    return chosen, found


def preempt_in_one_domain(
    inventory: Inventory, gang: Gang, victims: Sequence[Victim]
) -> DomainPreemption | None:
    """The victims to evict so that `gang` fits in one domain of its required level, or None
    when no single domain can be freed (or the gang requires no level)."""
    required = required_level(inventory, gang)
    if required is None:
        return None
    level, levels = required
    depth = levels.index(level)
    best: tuple[tuple[int, int, int, topo.Path], DomainPreemption] | None = None
    domains, where = _domains(inventory, levels, depth)
    by_domain: dict[topo.Path, list[Victim]] = {}
    for v in victims:
        for path in dict.fromkeys(where[p.node] for p in v.placement.pods if p.node in where):
            by_domain.setdefault(path, []).append(v)
    for domain, members in domains.items():
        here = by_domain.get(domain)
        if not here:
            continue  # the gang does not fit anywhere as things are: nothing to free here
        here.sort(key=lambda v: v.priority)  # stable: the caller's order within a priority
        if best is not None and here[0].priority > best[0][0]:
            continue  # its cheapest victim already outranks the best domain's dearest
        # The domain's nodes alone: placing inside it never looks at the rest.
        sub = Inventory(
            nodes=members,
            topologies=inventory.topologies,
            island_attribute=inventory.island_attribute,
        )
        got = _minimal(sub, gang, here)
        if got is None:
            continue
        chosen, placement = got
        score = (
            max((v.priority for v in chosen), default=-(2**63)),
            len(chosen),
            sum(len(v.placement.pods) for v in chosen),
            domain,
        )
        if best is None or score < best[0]:
            best = (
                score,
                DomainPreemption(
                    level=level,
                    domain=domain,
                    victims=tuple(v.key for v in chosen),
                    placement=placement,
                ),
            )
    return None if best is None else best[1]


@dataclass(frozen=True, slots=True, kw_only=True)
class Allowed:
    """An admitted workload the preemptor's ClusterQueue policy lets it evict, and why."""

    admitted: AdmittedWorkload
    reason: PreemptionReason


def _over_nominal(snapshot: Snapshot, a: AdmittedWorkload) -> bool:
    tree = snapshot.tree
    node = tree.cluster_queues.get(a.cluster_queue)
    if node is None:
        return False
    frs = snapshot.workload_usage.get(a.key, {}).keys()
    return not quota.within_nominal(tree, snapshot.base_usage, node, frs)


def _same_cohort(snapshot: Snapshot, a: ClusterQueueName, b: ClusterQueueName) -> bool:
    tree = snapshot.tree
    na, nb = tree.cluster_queues.get(a), tree.cluster_queues.get(b)
    if na is None or nb is None or tree.nodes[na].parent == quota.NO_PARENT:
        return False
    return tree.root(na) == tree.root(nb)


def _reason(
    snapshot: Snapshot,
    preemptor: Workload,
    cq: ClusterQueueName,
    borrowing: bool,
    a: AdmittedWorkload,
) -> PreemptionReason | None:
    policy = snapshot.cluster_queues[cq].preemption
    if a.cluster_queue == cq:
        within = policy.within_cluster_queue
        if within is not WithinClusterQueue.NEVER and satisfies_policy(
            preemptor, a.workload, within
        ):
            return PreemptionReason.IN_CLUSTER_QUEUE
        return None
    reclaim = policy.reclaim_within_cohort
    if (
        reclaim is ReclaimWithinCohort.NEVER
        or not _same_cohort(snapshot, cq, a.cluster_queue)
        or not _over_nominal(snapshot, a)
        or not satisfies_policy(preemptor, a.workload, reclaim)
    ):
        return None
    if not borrowing:
        return PreemptionReason.IN_COHORT_RECLAMATION
    bwc = policy.borrow_within_cohort
    if bwc.policy is BorrowWithinCohortPolicy.NEVER or a.workload.priority >= preemptor.priority:
        return None
    limit = bwc.max_priority_threshold
    if limit is not None and a.workload.priority > limit:
        return None
    return PreemptionReason.IN_COHORT_RECLAIM_WHILE_BORROWING


def allowed_victims(
    snapshot: Snapshot, preemptor: Workload, cq: ClusterQueueName, *, borrowing: bool
) -> list[Allowed]:
    """Admitted workloads (not already being evicted) the ClusterQueue's policy lets the
    preemptor evict to free a domain, in Kueue's candidate order. A first version of Kueue's
    rules, without quota accounting (the preemptor's quota already fits):

    - its own ClusterQueue: as `withinClusterQueue` allows (LowerPriority,
      LowerOrNewerEqualPriority; Never: none);
    - other ClusterQueues of its cohort tree that use more than their nominal quota in a
      resource of the candidate: as `reclaimWithinCohort` allows; when the preemptor itself
      borrows, only lower priorities as `borrowWithinCohort` allows (up to its threshold).
    """
    if cq not in snapshot.cluster_queues:
        return []
    out = []
    for a in snapshot.admitted.values():
        if a.evicted or a.key == preemptor.key:
            continue
        reason = _reason(snapshot, preemptor, cq, borrowing, a)
        if reason is not None:
            out.append(Allowed(admitted=a, reason=reason))
    # by priority (`preempt_in_one_domain` takes the lowest first in each domain): Admission
    # Fair Sharing's usage, which Kueue compares within one ClusterQueue only, is not used
    out.sort(key=lambda x: candidate_order(x.admitted, cq))
    return out


# -- what placement tells a gang: wait, preempt in one domain, or what would change it ------
_NAMED = 3
"""Workloads named in a "would fit after" hint; more are counted."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Nomination:
    """A domain promised to a preemptor while its victims leave."""

    placement: Placement
    """Where the preemptor goes once they are gone (reserved against everyone else)."""
    victims: frozenset[str]
    level: str
    domain: tuple[str, ...]


def _relaxed(gang: Gang) -> Gang:
    """The gang with every required topology level only preferred."""
    pod_sets = tuple(
        replace(ps, topology=replace(ps.topology, mode=TopologyMode.PREFERRED))
        if ps.topology is not None and ps.topology.mode is TopologyMode.REQUIRED
        else ps
        for ps in gang.pod_sets
    )
    return replace(gang, pod_sets=pod_sets)


def _names(keys: Sequence[str]) -> str:
    if len(keys) == 1:
        return f"workload {keys[0]} finishes"
    shown = ", ".join(keys[:_NAMED])
    more = f" and {len(keys) - _NAMED} more" if len(keys) > _NAMED else ""
    return f"workloads {shown}{more} finish"


def _where(level: str, domain: tuple[str, ...]) -> str:
    return f"{level} {domain[-1]}" if domain else level


def _domain_of(placement: Placement) -> tuple[str, tuple[str, ...]]:
    for ps in placement.pod_sets:
        if ps.level is not None:
            return ps.level, ps.domain
    return "", ()


def wait_for_leaving(
    admit: Admit, gang: Gang, result: NoFit, freed: Inventory, leaving: Mapping[str, Placement]
) -> tuple[Nomination, Pending] | None:
    """When gangs already being evicted make room once gone (`freed`: the inventory without
    them), the preemptor waits for them and keeps the domain, preempting nothing more."""
    later = place(freed, gang)
    if not isinstance(later, Placement):
        return None
    nodes = {p.node for p in later.pods}
    victims = frozenset(k for k, p in leaving.items() if any(pod.node in nodes for pod in p.pods))
    level, domain = _domain_of(later)
    nomination = Nomination(placement=later, victims=victims, level=level, domain=domain)
    pending = Pending(
        workload=admit.workload,
        cluster_queue=admit.cluster_queue,
        reason=PendingReason.WAITING_FOR_PREEMPTED_WORKLOADS,
        message=f"{result.message}. Waiting for {len(victims)} preempted workload(s) to"
        f" leave {_where(level, domain)}",
        requeue=Requeue.IMMEDIATE,
    )
    return nomination, pending


def preemption(
    admit: Admit, result: NoFit, got: DomainPreemption, allowed: Mapping[str, Allowed]
) -> tuple[Nomination, Preempt]:
    """The Preempt that frees `got`'s domain for the gang, and the domain nominated for it."""
    nomination = Nomination(
        placement=got.placement, victims=frozenset(got.victims), level=got.level, domain=got.domain
    )
    victims = tuple(
        DecisionVictim(
            workload=WorkloadKey(v),
            cluster_queue=allowed[v].admitted.cluster_queue,
            reason=allowed[v].reason,
        )
        for v in got.victims
    )
    decision = Preempt(
        workload=admit.workload,
        cluster_queue=admit.cluster_queue,
        victims=victims,
        pod_sets=admit.pod_sets,
        message=f"{result.message}. Pending the preemption of {len(victims)} workload(s)"
        f" in {_where(got.level, got.domain)}",
    )
    return nomination, decision


def hints(
    gang: Gang, inventory: Inventory, freed: Inventory, running: Mapping[str, Placement]
) -> str:
    """What would change a pending gang's answer, whatever the preemption policy says: the
    fewest running gangs of one domain whose end makes room, and whether it fits now as
    preferred instead of required."""
    out = ""
    after = preempt_in_one_domain(
        freed, gang, [Victim(key=k, priority=0, placement=p) for k, p in running.items()]
    )
    if after is not None:
        out += f"; would fit after {_names(after.victims)}"
    if isinstance(place(inventory, _relaxed(gang)), Placement):
        out += "; would fit now as preferred instead of required"
    return out
