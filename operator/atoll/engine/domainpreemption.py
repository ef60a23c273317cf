"""Topology-aware preemption: free one domain, with whole gangs, as few and as low as possible.

When a gang whose pod set requires a topology level fits its quota but no domain of that
level has room, evicting victims scattered over the cluster frees nothing usable. This picks,
for each domain of the required level, the victims running there (lowest priority first, in
the caller's order within a priority, as Kueue's candidate ordering in
pkg/scheduler/preemption), adds them until the gang fits inside that domain, then drops every
victim it can do without (Kueue's "fill back" minimisation); the domain whose victim set has
the lowest top priority, then the fewest victims, then the fewest pods wins. Which gangs may
be victims at all (the ClusterQueue's preemption policy) is the caller's decision.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from atoll.engine import topology as topo
from atoll.engine.devices import DeviceId, NodeDevices
from atoll.engine.inventory import (
    Gang,
    Inventory,
    NodeInventory,
    Placement,
    TopologyMode,
)
from atoll.engine.placement import place


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


def _release_node(
    node: NodeInventory, pods: list[tuple[tuple[str, int], ...]], devices: set[DeviceId]
) -> NodeInventory:
    free = dict(node.free)
    for requests in pods:
        for r, q in requests:
            free[r] = free.get(r, 0) + q
    d = node.devices
    busy = d.busy - devices
    back = (
        NodeDevices(
            free=tuple(x for x in d.all if x.id not in busy),
            busy=busy,
            all=d.all,
            incomplete=d.incomplete,
        )
        if devices
        else d
    )
    return replace(node, free=free, devices=back)


def release(inventory: Inventory, placements: Iterable[Placement]) -> Inventory:
    """The inventory with these placements' pods and devices given back."""
    pods: dict[str, list[tuple[tuple[str, int], ...]]] = {}
    devices: dict[str, set[DeviceId]] = {}
    for placement in placements:
        for pod in placement.pods:
            pods.setdefault(pod.node, []).append(pod.requests)
            devices.setdefault(pod.node, set()).update(
                a.device for a in pod.devices if not a.admin_access
            )
    nodes = tuple(
        _release_node(n, pods[n.name], devices[n.name]) if n.name in pods else n
        for n in inventory.nodes
    )
    return Inventory(
        nodes=nodes, topologies=inventory.topologies, island_attribute=inventory.island_attribute
    )


def _required_level(inventory: Inventory, gang: Gang) -> tuple[str, tuple[str, ...]] | None:
    for ps in gang.pod_sets:
        t = ps.topology
        if t is not None and t.mode is TopologyMode.REQUIRED and t.level is not None:
            levels = inventory.topologies.get(t.topology)
            if levels is not None and t.level in levels:
                return t.level, levels
    return None


def _domains(
    inventory: Inventory, levels: Sequence[str], depth: int
) -> dict[topo.Path, frozenset[str]]:
    out: dict[topo.Path, set[str]] = {}
    for n in inventory.nodes:
        path = topo.node_path(levels, n.labels, n.name)
        if path is not None:
            out.setdefault(path[: depth + 1], set()).add(n.name)
    return {k: frozenset(v) for k, v in sorted(out.items())}


def _fits(
    inventory: Inventory, gang: Gang, victims: Sequence[Victim], within: frozenset[str]
) -> Placement | None:
    got = place(release(inventory, (v.placement for v in victims)), gang, within=within)
    return got if isinstance(got, Placement) else None


def _minimal(
    inventory: Inventory, gang: Gang, candidates: Sequence[Victim], within: frozenset[str]
) -> tuple[list[Victim], Placement] | None:
    if _fits(inventory, gang, candidates, within) is None:
        return None
    chosen: list[Victim] = []
    found: Placement | None = None
    for v in candidates:
        chosen.append(v)
        found = _fits(inventory, gang, chosen, within)
        if found is not None:
            break
    assert found is not None  # all candidates together fit
    for v in reversed(chosen[:-1]):
        fewer = [c for c in chosen if c is not v]
        got = _fits(inventory, gang, fewer, within)
        if got is not None:
            chosen, found = fewer, got
    return chosen, found


def preempt_in_one_domain(
    inventory: Inventory, gang: Gang, victims: Sequence[Victim]
) -> DomainPreemption | None:
    """The victims to evict so that `gang` fits in one domain of its required level, or None
    when no single domain can be freed (or the gang requires no level)."""
    required = _required_level(inventory, gang)
    if required is None:
        return None
    level, levels = required
    depth = levels.index(level)
    best: tuple[tuple[int, int, int, topo.Path], DomainPreemption] | None = None
    for domain, members in _domains(inventory, levels, depth).items():
        here = [v for v in victims if any(p.node in members for p in v.placement.pods)]
        here.sort(key=lambda v: v.priority)  # stable: the caller's order within a priority
        got = _minimal(inventory, gang, here, members)
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
