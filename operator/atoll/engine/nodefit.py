"""How many pods of a pod set fit on each node: resources, eligibility and DRA devices.

Mirrors the per-node part of Kueue's TAS capacity (pkg/cache/scheduler/tas_flavor_snapshot.go,
`fillInCounts`: free capacity divided by the per-pod request) and the scheduler's NodeAffinity,
TaintToleration and DynamicResources filters. Device fit is answered by repeating the
allocator search of atoll.engine.devices, memoized per node layout so that alike nodes of a
large cluster cost one search.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from atoll.engine import topology as topo
from atoll.engine.devices import (
    Claim,
    DeviceAllocation,
    DeviceId,
    NodeDevices,
    allocate,
    device_count,
)
from atoll.engine.inventory import (
    GangPodSet,
    Inventory,
    NodeInventory,
    PlacementPolicy,
)
from atoll.engine.matching import requirement_matches, untolerated_taint

PODS = "pods"


@dataclass(slots=True)
class Working:
    """The inventory as placement consumes it: copies only of what changed."""

    inventory: Inventory
    free: dict[str, dict[str, int]] = field(default_factory=dict)
    taken: dict[str, set[DeviceId]] = field(default_factory=dict)
    memo: dict[object, int] = field(default_factory=dict)
    policy: PlacementPolicy = PlacementPolicy.BEST_FIT

    @property
    def best_fit(self) -> bool:
        return self.policy is PlacementPolicy.BEST_FIT

    def amount(self, node: NodeInventory, resource: str) -> int:
        changed = self.free.get(node.name)
        src = changed if changed is not None else node.free
        return src.get(resource, 0)

    def devices(self, node: NodeInventory) -> NodeDevices:
        taken = self.taken.get(node.name)
        if not taken:
            return node.devices
        d = node.devices
        return NodeDevices(
            free=tuple(x for x in d.free if x.id not in taken),
            busy=d.busy | taken,
            all=d.all,
            incomplete=d.incomplete,
        )

    def take(
        self,
        node: NodeInventory,
        requests: Sequence[tuple[str, int]],
        devices: Sequence[DeviceAllocation],
    ) -> None:
        free = self.free.setdefault(node.name, dict(node.free))
        for r, q in requests:
            free[r] = free.get(r, 0) - q
        used = [a.device for a in devices if not a.admin_access]
        if used:
            self.taken.setdefault(node.name, set()).update(used)


def pod_requests(ps: GangPodSet, node: NodeInventory) -> tuple[tuple[str, int], ...]:
    if PODS in node.allocatable and all(r != PODS for r, _ in ps.requests):
        return (*ps.requests, (PODS, 1))
    return ps.requests


def eligible(node: NodeInventory, ps: GangPodSet) -> bool:
    """Schedulable, matches the nodeSelector and required affinity, tolerates the taints."""
    if not node.schedulable:
        return False
    labels = node.labels
    for key, value in ps.node_selector:
        if labels.get(key) != value:
            return False
    if ps.required_affinity and not any(
        all(requirement_matches(r, labels) for r in t.match_expressions)
        for t in ps.required_affinity
    ):
        return False
    return untolerated_taint(node.taints, ps.tolerations) is None


def _resource_fit(w: Working, node: NodeInventory, ps: GangPodSet, limit: int) -> int:
    fit = limit
    for r, q in pod_requests(ps, node):
        if q > 0:
            fit = min(fit, w.amount(node, r) // q)
            if fit <= 0:
                return 0
    return fit


def _signature(ps_index: int, ps: GangPodSet, devices: NodeDevices, island: str | None) -> object:
    """What the device search depends on, with attribute values renamed by first appearance,
    so that nodes laid out alike share one answer. None: not memoizable."""
    bits: list[object] = [ps_index]
    attrs = {island} if island else set()
    for claim in ps.claims:
        attrs.update(c.attribute for c in claim.constraints)
        for req in claim.requests:
            for alt in req.alternatives:
                if alt.all_devices or alt.admin_access:
                    return None
                bits.append(
                    tuple(all(m(d) for m in alt.matchers) and not d.taints for d in devices.free)
                )
    for a in sorted(a for a in attrs if a):
        seen: dict[object, int] = {}
        bits.append(
            tuple(
                -1
                if (v := d.attributes.get(a)) is None
                else seen.setdefault((type(v), v), len(seen))
                for d in devices.free
            )
        )
    return tuple(bits)


def _device_fit(
    devices: NodeDevices,
    claims: Sequence[Claim],
    limit: int,
    island: str | None,
    best_fit: bool,
) -> int:
    n = 0
    while n < limit:
        got = allocate(claims, devices, island, best_fit=best_fit)
        if got is None:
            break
        n += 1
        used = {a.device for a in got if not a.admin_access}
        if not used:
            return limit
        devices = NodeDevices(
            free=tuple(d for d in devices.free if d.id not in used),
            busy=devices.busy | used,
            all=devices.all,
            incomplete=devices.incomplete,
        )
    return n


def pods_fit(w: Working, node: NodeInventory, ps_index: int, ps: GangPodSet, limit: int) -> int:
    """How many pods of `ps` (up to `limit`) fit on `node` now."""
    fit = _resource_fit(w, node, ps, limit)
    if fit == 0 or not ps.claims:
        return fit
    devices = w.devices(node)
    if len(devices.free) < device_count(ps.claims) and not _has_special(ps.claims):
        return 0
    island = w.inventory.island_attribute
    sig = _signature(ps_index, ps, devices, island)
    if sig is None:
        return _device_fit(devices, ps.claims, fit, island, w.best_fit)
    key = (sig, fit)
    got = w.memo.get(key)
    if got is None:
        got = _device_fit(devices, ps.claims, fit, island, w.best_fit)
        w.memo[key] = got
    return got


def _has_special(claims: Sequence[Claim]) -> bool:
    return any(
        a.all_devices or a.admin_access for c in claims for r in c.requests for a in r.alternatives
    )


_NOT_ACCELERATORS = frozenset({"cpu", "memory", "pods", "ephemeral-storage"})


def _weight(w: Working, node: NodeInventory) -> int:
    """Free devices plus free extended resources (GPUs): smaller is tighter."""
    extended = sum(
        w.amount(node, r)
        for r in node.allocatable
        if r not in _NOT_ACCELERATORS and not r.startswith("hugepages-")
    )
    return len(w.devices(node).free) + extended


def entries(
    w: Working,
    ps_index: int,
    ps: GangPodSet,
    levels: Sequence[str] | None,
    within: frozenset[str] | None,
) -> tuple[list[topo.Entry], list[NodeInventory]]:
    """Nodes with room for at least one pod (path in `levels`; None: the node alone), and
    every eligible node."""
    out = []
    ok = []
    for node in w.inventory.nodes:
        if within is not None and node.name not in within:
            continue
        if not eligible(node, ps):
            continue
        ok.append(node)
        path = (node.name,) if levels is None else topo.node_path(levels, node.labels, node.name)
        if path is None:
            continue
        cap = pods_fit(w, node, ps_index, ps, ps.count)
        if cap > 0:
            out.append(topo.Entry(path=path, node=node.name, cap=cap, weight=_weight(w, node)))
    return out, ok
