"""All-or-nothing, deterministic, best-fit placement of a gang on the inventory.

Mirrors Kueue's topology-aware scheduling (pkg/cache/scheduler/tas_flavor_snapshot.go,
`FindTopologyAssignmentsForWorkload`: required / preferred / unconstrained requests and
podset slices, BestFit over domains) and adds what Kueue leaves open (kueue#10548): DRA
device feasibility per node inside the topology decision (atoll.engine.nodefit). Pod sets
are placed in order on one working copy of the inventory; the first that does not fit makes
the whole gang a NoFit, so nothing is ever partly placed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from atoll.engine import topology as topo
from atoll.engine.devices import DeviceSelectorError, allocate
from atoll.engine.inventory import (
    Gang,
    GangPodSet,
    Inventory,
    NoFit,
    NoFitReason,
    Placement,
    PlacementPolicy,
    PlacementResult,
    PodPlacement,
    PodSetPlacement,
    TopologyMode,
)
from atoll.engine.nodefit import Working, entries, pod_requests
from atoll.engine.placementreasons import no_fit


def place(
    inventory: Inventory,
    gang: Gang,
    *,
    within: frozenset[str] | None = None,
    policy: PlacementPolicy = PlacementPolicy.BEST_FIT,
) -> PlacementResult:
    """Every pod of every pod set on a node (and devices), or why not.

    `within` restricts placement to these nodes (used by topology-aware preemption). Pod
    sets of one podset group are placed together, in one domain (`_place_group`)."""
    w = Working(inventory=inventory, policy=policy)
    done: dict[int, PodSetPlacement] = {}
    groups = pod_set_groups(gang)
    for i, ps in enumerate(gang.pod_sets):
        if i in done:
            continue
        members = groups.get(ps.topology.group if ps.topology else None, (i,))
        try:
            got = (
                _place_group(w, gang, members, within)
                if len(members) > 1
                else _place_pod_set(w, gang, i, ps, within)
            )
        except DeviceSelectorError as e:
            return NoFit(
                gang=gang.key,
                pod_set=ps.name,
                reason=NoFitReason.SELECTOR_ERROR,
                message=f"pod set {ps.name}: device selector failed: {e}",
            )
        if isinstance(got, NoFit):
            return got
        if isinstance(got, PodSetPlacement):
            done[i] = got
        else:
            done.update(got)
    return Placement(gang=gang.key, pod_sets=tuple(done[i] for i in range(len(gang.pod_sets))))


def pod_set_groups(gang: Gang) -> dict[str | None, tuple[int, ...]]:
    """Indices of the pod sets of each podset group (Kueue's podSetGroupName), in order."""
    out: dict[str | None, tuple[int, ...]] = {}
    for i, ps in enumerate(gang.pod_sets):
        if ps.topology is not None and ps.topology.group is not None:
            out[ps.topology.group] = (*out.get(ps.topology.group, ()), i)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """How a pod set's request reads against its Topology."""

    levels: tuple[str, ...] | None
    """None: no topology, nodes alone."""
    depth: int | None
    """Index of the required / preferred level; None: anywhere."""
    mode: TopologyMode
    units: topo.Units
    need: int
    """Units to place: pods, or slices (the last one may be short)."""
    short: int = 0
    """Pods the last slice lacks when the pod set's count is no multiple of the slice size
    (a requeued pod set whose done pods are no longer counted, or a count Kueue also
    accepts): it is placed as a whole slice, then that many of its pods are left out."""


def plan(inventory: Inventory, ps: GangPodSet) -> Plan | str:
    """The plan, or what is wrong with the request."""
    t = ps.topology
    if t is None:
        return Plan(
            levels=None,
            depth=None,
            mode=TopologyMode.UNCONSTRAINED,
            units=topo.Units(),
            need=ps.count,
        )
    levels = inventory.topologies.get(t.topology)
    if levels is None:
        return f"topology {t.topology} not found"
    depth = None
    if t.level is not None and t.mode is not TopologyMode.UNCONSTRAINED:
        if t.level not in levels:
            return f"level {t.level} is not in topology {t.topology}"
        depth = levels.index(t.level)
    units = topo.Units()
    if t.slice_level is not None:
        size = t.slice_size or 0
        if t.slice_level not in levels or size < 1:
            return f"slice level {t.slice_level} of size {size} is invalid"
        sd = levels.index(t.slice_level)
        if depth is not None and sd < depth:
            return f"slice level {t.slice_level} is above level {t.level}"
        units = topo.Units(slice_depth=sd, size=size)
    mode = t.mode if t.slice_level is None else TopologyMode.REQUIRED
    if depth is None and mode is TopologyMode.REQUIRED:
        mode = TopologyMode.PREFERRED  # slices only: anywhere, each slice in its domain
    need = -(-ps.count // units.size)
    short = need * units.size - ps.count
    return Plan(levels=levels, depth=depth, mode=mode, units=units, need=need, short=short)


_MODES = {
    PlacementPolicy.BEST_FIT: (topo.SplitMode.LEAST_FREE, topo.SplitMode.BEST_FIT),
    PlacementPolicy.FIRST_FIT: (topo.SplitMode.FIRST_FIT, topo.SplitMode.FIRST_FIT),
    PlacementPolicy.SPREAD: (topo.SplitMode.MOST_FREE, topo.SplitMode.MOST_FREE),
}
"""Per policy: how nodes are filled without a topology, and how domains are chosen."""


def _split(
    p: Plan, ents: list[topo.Entry], policy: PlacementPolicy
) -> tuple[list[tuple[str, int]], int | None] | None:
    """Pods per node and the depth of the single domain that holds them all."""
    flat_mode, mode = _MODES[policy]
    if p.levels is None or (p.mode is TopologyMode.UNCONSTRAINED and p.units.slice_depth is None):
        flat = [topo.Entry(path=(e.node,), node=e.node, cap=e.cap, weight=e.weight) for e in ents]
        got = topo.split(flat, -1, p.need, p.units, flat_mode)
        return None if got is None else (got, None)
    bottom = p.depth if p.depth is not None else -1
    top = bottom if p.mode is TopologyMode.REQUIRED else 0
    for depth in range(bottom, top - 1, -1):
        pick = topo.tightest(ents, depth, p.need, p.units, mode)
        if pick is not None:
            got = topo.split(pick[1], depth, p.need, p.units, mode)
            if got is not None:
                return got, depth
    if p.mode is TopologyMode.REQUIRED and p.depth is not None:
        return None
    got = topo.split(ents, -1, p.need, p.units, mode)
    return None if got is None else (got, None)


def _place_pod_set(
    w: Working, gang: Gang, index: int, ps: GangPodSet, within: frozenset[str] | None
) -> PodSetPlacement | NoFit:
    p = _plan_or_no_fit(w, gang, ps)
    if isinstance(p, NoFit):
        return p
    return _place_planned(w, gang, index, ps, p, within=within)


def _plan_or_no_fit(w: Working, gang: Gang, ps: GangPodSet) -> Plan | NoFit:
    p = plan(w.inventory, ps)
    if isinstance(p, str):
        reason = (
            NoFitReason.UNKNOWN_TOPOLOGY
            if p.startswith("topology ")
            else NoFitReason.INVALID_REQUEST
        )
        return NoFit(
            gang=gang.key, pod_set=ps.name, reason=reason, message=f"pod set {ps.name}: {p}"
        )
    return p


def _place_planned(
    w: Working, gang: Gang, index: int, ps: GangPodSet, p: Plan, *, within: frozenset[str] | None
) -> PodSetPlacement | NoFit:
    if ps.count == 0:
        return PodSetPlacement(name=ps.name, pods=())
    ents, ok = entries(w, index, _padded(ps, p), p.levels, within)
    got = _split(p, ents, w.policy)
    if got is None:
        return no_fit(w, gang=gang, ps=ps, p=p, ents=ents, ok=ok)
    pairs, depth = got
    if p.short:
        pairs = _short_last_slice(pairs, ents, p)
    return _materialize(w, ps=ps, p=p, ents=ents, pairs=pairs, depth=depth)


def _padded(ps: GangPodSet, p: Plan) -> GangPodSet:
    """The pod set as its nodes are counted: with a short last slice, as if it were whole."""
    return dataclasses.replace(ps, count=ps.count + p.short) if p.short else ps


def _short_last_slice(
    pairs: list[tuple[str, int]], ents: Sequence[topo.Entry], p: Plan
) -> list[tuple[str, int]]:
    """`pairs` (pods per node of whole slices) less the `p.short` pods the last slice lacks,
    taken from one slice domain (the last by path), so every slice, the short one too, stays
    in one domain of the slice level."""
    assert p.units.slice_depth is not None
    cut = p.units.slice_depth + 1
    paths = {e.node: e.path for e in ents}
    last = max(paths[node][:cut] for node, _ in pairs)
    out = list(pairs)
    rest = p.short
    for i in range(len(out) - 1, -1, -1):
        node, n = out[i]
        if rest == 0 or paths[node][:cut] != last:
            continue
        take = min(n, rest)
        out[i] = (node, n - take)
        rest -= take
    assert rest == 0, "a slice domain holds at least one whole slice"
    return [(node, n) for node, n in out if n]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Group:
    """The pod sets of one podset group of a gang, with their plans."""

    gang: Gang
    members: tuple[int, ...]
    plans: tuple[Plan, ...]
    within: frozenset[str] | None

    @property
    def sets(self) -> list[GangPodSet]:
        return [self.gang.pod_sets[i] for i in self.members]

    def names(self) -> str:
        sets = self.sets
        group = sets[0].topology.group if sets[0].topology else None
        return f"{', '.join(ps.name for ps in sets)} (podset group {group})"


def _place_group(
    w: Working, gang: Gang, members: tuple[int, ...], within: frozenset[str] | None
) -> dict[int, PodSetPlacement] | NoFit:
    """Kueue's podset group (a leader and its workers, pkg/cache/scheduler
    tas_flavor_snapshot.go `findLeaderAndWorkers`): every member in one domain of their shared
    required / preferred level, the tightest domain that holds them all. A preferred group
    widens level by level and, when no domain holds it whole, is placed member by member."""
    plans: list[Plan] = []
    for i in members:
        p = _plan_or_no_fit(w, gang, gang.pod_sets[i])
        if isinstance(p, NoFit):
            return p
        plans.append(p)
    g = _Group(gang=gang, members=members, plans=tuple(plans), within=within)
    sets = g.sets
    asks = {
        (ps.topology.topology, ps.topology.mode, ps.topology.level) for ps in sets if ps.topology
    }
    if len(asks) > 1:
        return NoFit(
            gang=gang.key,
            pod_set=sets[0].name,
            reason=NoFitReason.INVALID_REQUEST,
            message=f"pod sets {g.names()}: a podset group must ask for one level of one topology"
            " (the same level, and flavors of the same Topology)",
        )
    first = plans[0]
    if first.depth is not None and any(ps.count for ps in sets):
        top = first.depth if first.mode is TopologyMode.REQUIRED else 0
        for depth in range(first.depth, top - 1, -1):
            got = _group_in_domain(w, g, depth)
            if got is not None:
                return got
        if first.mode is TopologyMode.REQUIRED:
            return _group_no_fit(w, g)
    out: dict[int, PodSetPlacement] = {}
    for i, ps, p in zip(members, sets, plans, strict=True):
        placed = _place_planned(w, gang, i, ps, p, within=within)
        if isinstance(placed, NoFit):
            return placed
        out[i] = placed
    return out


def _domains(w: Working, g: _Group, depth: int) -> list[tuple[topo.Path, frozenset[str]]]:
    """Domains at `depth` where each member alone fits, with their nodes, in the order the
    policy tries them: by the capacity left for the largest member (tightest first)."""
    fits: dict[topo.Path, list[topo.Entry]] | None = None
    rank: dict[topo.Path, tuple[int, int]] = {}
    counts = [ps.count for ps in g.sets]
    largest = max(range(len(counts)), key=lambda k: (counts[k], -k))
    for k, (i, p) in enumerate(zip(g.members, g.plans, strict=True)):
        ps = g.gang.pod_sets[i]
        if ps.count == 0:
            continue
        ents, _ = entries(w, i, _padded(ps, p), p.levels, g.within)
        here: dict[topo.Path, list[topo.Entry]] = {}
        for key, domain in topo.group(ents, depth).items():
            cap = topo.capacity(domain, depth, p.units)
            if cap < p.need or (fits is not None and key not in fits):
                continue
            here[key] = domain + (fits[key] if fits is not None else [])
            if k == largest:
                rank[key] = (cap, sum(e.weight for e in domain))
        fits = here
    sign = {PlacementPolicy.BEST_FIT: 1, PlacementPolicy.SPREAD: -1}.get(w.policy, 0)
    order = sorted(fits or {}, key=lambda key: (sign * rank[key][0], sign * rank[key][1], key))
    return [(key, frozenset(e.node for e in (fits or {})[key])) for key in order]


def _group_in_domain(w: Working, g: _Group, depth: int) -> dict[int, PodSetPlacement] | None:
    """The members placed together in the first domain at `depth` that holds them all (each
    member required at that depth inside it); None when no domain does."""
    for _key, nodes in _domains(w, g, depth):
        trial = _copy(w)
        out: dict[int, PodSetPlacement] = {}
        for i, p in zip(g.members, g.plans, strict=True):
            forced = dataclasses.replace(p, depth=depth, mode=TopologyMode.REQUIRED)
            placed = _place_planned(trial, g.gang, i, g.gang.pod_sets[i], forced, within=nodes)
            if isinstance(placed, NoFit):
                break
            out[i] = placed
        else:
            w.free, w.taken, w.island_free = trial.free, trial.taken, trial.island_free
            return out
    return None


def _group_no_fit(w: Working, g: _Group) -> NoFit:
    """Why a required group has no domain: a member that does not fit even alone, or the
    group as a whole."""
    sets = g.sets
    for i, ps, p in zip(g.members, sets, g.plans, strict=True):
        alone = _place_planned(_copy(w), g.gang, i, ps, p, within=g.within)
        if isinstance(alone, NoFit):
            return alone
    level = sets[0].topology.level if sets[0].topology else None
    return NoFit(
        gang=g.gang.key,
        pod_set=max(sets, key=lambda ps: ps.count).name,
        reason=NoFitReason.NO_DOMAIN,
        message=f"pod sets {g.names()}: each fits in a {level} domain, but no one"
        f" {level} domain holds them together",
        needed=sum(ps.count for ps in sets),
        level=level,
    )


def _copy(w: Working) -> Working:
    return Working(
        inventory=w.inventory,
        free={k: dict(v) for k, v in w.free.items()},
        taken={k: set(v) for k, v in w.taken.items()},
        memo=w.memo,
        policy=w.policy,
        island_free=dict(w.island_free),
    )


def _materialize(
    w: Working,
    *,
    ps: GangPodSet,
    p: Plan,
    ents: Sequence[topo.Entry],
    pairs: list[tuple[str, int]],
    depth: int | None,
) -> PodSetPlacement:
    paths = {e.node: e.path for e in ents}
    pods: list[PodPlacement] = []
    island = w.inventory.island_attribute
    for node_name, n in sorted(pairs, key=lambda nn: paths[nn[0]]):
        node = w.inventory.by_name[node_name]
        reqs = pod_requests(ps, node)
        for _ in range(n):
            devices = allocate(ps.claims, w.devices(node), island, best_fit=w.best_fit)
            if devices is None:  # the capacity search said this fits
                raise AssertionError(f"pod set {ps.name}: node {node_name} lost its fit")
            gpu_island = w.take(node, reqs, devices)
            pods.append(
                PodPlacement(
                    pod_set=ps.name,
                    index=len(pods),
                    node=node_name,
                    requests=reqs,
                    devices=devices,
                    island=gpu_island,
                )
            )
    return _result(w, ps=ps, p=p, paths=paths, pods=pods, depth=depth)


def _result(
    w: Working,
    *,
    ps: GangPodSet,
    p: Plan,
    paths: dict[str, topo.Path],
    pods: list[PodPlacement],
    depth: int | None,
) -> PodSetPlacement:
    if p.levels is None or ps.topology is None:
        return PodSetPlacement(name=ps.name, pods=tuple(pods))
    levels = topo.assignment_levels(p.levels)
    counts: dict[tuple[str, ...], int] = {}
    for pod in pods:
        path = paths[pod.node]
        if levels == (topo.HOSTNAME_LABEL,):
            labels = w.inventory.by_name[pod.node].labels
            values: tuple[str, ...] = (labels.get(topo.HOSTNAME_LABEL, pod.node),)
        else:
            values = path[: len(levels)]
        counts[values] = counts.get(values, 0) + 1
    first = paths[pods[0].node] if pods else ()
    return PodSetPlacement(
        name=ps.name,
        pods=tuple(pods),
        topology=ps.topology.topology,
        level=None if depth is None else p.levels[depth],
        domain=() if depth is None else first[: depth + 1],
        assignment_levels=levels,
        assignment=tuple(counts.items()),
    )
