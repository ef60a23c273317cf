"""Why a pod set does not fit, with numbers: what it needs, the largest free domain and
island. What would change the answer ("would fit after workload X finishes", "would fit now
as preferred instead of required") needs more placements than this one: it is
`atoll.engine.domainpreemption.hints`, which tries them.

Kueue's TAS reports "topology ... doesn't allow to fit any of N pod(s)"
(pkg/cache/scheduler/tas_flavor_snapshot.go); atoll says how far off the best domain is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from atoll.engine import topology as topo
from atoll.engine.devices import ConstraintKind, device_count, device_matches, group_sizes
from atoll.engine.inventory import Gang, GangPodSet, NodeInventory, NoFit, NoFitReason, TopologyMode
from atoll.engine.nodefit import Working, island_request

if TYPE_CHECKING:
    from atoll.engine.placement import Plan


def _island_attribute(w: Working, ps: GangPodSet) -> str | None:
    for claim in ps.claims:
        for c in claim.constraints:
            if c.kind is ConstraintKind.MATCH:
                return c.attribute
    return w.inventory.island_attribute


def largest_island(
    w: Working, ps: GangPodSet, nodes: Sequence[NodeInventory]
) -> tuple[int, str | None]:
    """Most free devices (matching the pod's first request) sharing one island value on one
    node; without an island attribute, most free matching devices on one node."""
    alt = next((r.alternatives[0] for c in ps.claims for r in c.requests), None)
    if alt is None:
        return 0, None
    attribute = _island_attribute(w, ps)
    known = w.inventory.memo.setdefault(("island", alt, attribute), {})
    best: tuple[int, str | None] = (0, None)
    for node in nodes:
        size = None if w.taken.get(node.name) else known.get(node.name)
        if size is None:
            free = [d for d in w.devices(node).free if device_matches(alt, d)]
            size = max(group_sizes(free, attribute).values(), default=0) if attribute else len(free)
            if not w.taken.get(node.name):
                known[node.name] = size
        if size > best[0]:
            best = (size, node.name)
    return best


def largest_gpu_island(w: Working, nodes: Sequence[NodeInventory]) -> tuple[int, str | None]:
    """Most free units in one published NVLink island of an eligible node."""
    best: tuple[int, str | None] = (0, None)
    for node in nodes:
        size = max(w.islands(node), default=0)
        if size > best[0]:
            best = (size, node.name)
    return best


def _gpu_island_tail(
    w: Working, ps: GangPodSet, ok: Sequence[NodeInventory]
) -> tuple[str, int, str | None]:
    per_pod = island_request(ps)
    if ps.island_resource is None or per_pod <= 0:
        return "", 0, None
    if not any(n.islands is not None for n in ok):
        return (
            f"; each pod needs {per_pod} {ps.island_resource} in one NVLink island and no"
            " eligible node publishes its islands (atoll topology discover --publish)",
            0,
            None,
        )
    size, node = largest_gpu_island(w, ok)
    at = f" ({node})" if node else ""
    tail = (
        f"; each pod needs {per_pod} {ps.island_resource} in one NVLink island, the largest"
        f" free island has {size}{at}"
    )
    return tail, size, node


def _units(p: Plan) -> str:
    if p.units.slice_depth is None:
        return "pods"
    last = f" (the last one of {p.units.size - p.short})" if p.short else ""
    return f"slices of {p.units.size} pods{last}"


def _island_tail(w: Working, ps: GangPodSet, island: int, node: str | None) -> str:
    per_pod = device_count(ps.claims)
    if not per_pod:
        return ""
    attr = _island_attribute(w, ps)
    where = f" sharing {attr}" if attr else ""
    at = f" ({node})" if node else ""
    return f"; each pod needs {per_pod} device(s){where}, the largest free island has {island}{at}"


def no_fit(
    w: Working,
    *,
    gang: Gang,
    ps: GangPodSet,
    p: Plan,
    ents: list[topo.Entry],
    ok: list[NodeInventory],
) -> NoFit:
    if not ok:
        return NoFit(
            gang=gang.key,
            pod_set=ps.name,
            reason=NoFitReason.NO_ELIGIBLE_NODE,
            needed=p.need,
            message=f"pod set {ps.name}: no schedulable node matches its node selector,"
            " affinity and tolerations",
        )
    total = topo.capacity(ents, -1, p.units)
    island, island_node = largest_island(w, ps, ok)
    tail = _island_tail(w, ps, island, island_node)
    gpu_tail, gpu_island, gpu_node = _gpu_island_tail(w, ps, ok)
    if gpu_tail:
        tail, island, island_node = tail + gpu_tail, gpu_island, gpu_node
    base = NoFit(
        gang=gang.key,
        pod_set=ps.name,
        reason=NoFitReason.INSUFFICIENT,
        message="",
        needed=p.need,
        devices_per_pod=device_count(ps.claims),
        largest_island=island,
        largest_island_node=island_node,
    )
    level = p.levels[p.depth] if p.levels and p.depth is not None else None
    if p.mode is TopologyMode.REQUIRED and level is not None and total >= p.need:
        assert p.depth is not None
        key, room = topo.largest(ents, p.depth, p.units)
        where = f" ({key[-1]})" if key else ""
        return replace(
            base,
            reason=NoFitReason.NO_DOMAIN,
            available=room,
            level=level,
            largest_domain=key,
            fits_unconstrained=True,
            message=f"pod set {ps.name} needs {p.need} {_units(p)} in one {level}; the largest"
            f" has room for {room}{where}{tail}",
        )
    return replace(
        base,
        available=total,
        level=level,
        message=f"pod set {ps.name} needs {p.need} {_units(p)}; {len(ok)} eligible node(s)"
        f" have room for {total}{tail}",
    )
