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
    ConstraintKind,
    DeviceAllocation,
    DeviceId,
    NodeDevices,
    RequestAlternative,
    allocate,
    device_count,
    device_matches,
    group_sizes,
)
from atoll.engine.inventory import (
    GangPodSet,
    Inventory,
    NodeInventory,
    PlacementPolicy,
    is_accelerator,
    take_from_islands,
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
    island_free: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Free units per NVLink island of nodes placement changed."""

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

    def islands(self, node: NodeInventory) -> tuple[int, ...]:
        """Free units per island now (empty when the node publishes none)."""
        if node.islands is None:
            return ()
        return self.island_free.get(node.name, node.islands.free)

    def take(
        self,
        node: NodeInventory,
        requests: Sequence[tuple[str, int]],
        devices: Sequence[DeviceAllocation],
    ) -> int | None:
        """Takes a pod's requests and devices; returns the NVLink island its counted GPUs
        came from (None: the node has no islands, or no one island held them)."""
        free = self.free.setdefault(node.name, dict(node.free))
        island = None
        for r, q in requests:
            free[r] = free.get(r, 0) - q
            if node.islands is not None and r == node.islands.resource and q > 0:
                self.island_free[node.name], island = take_from_islands(self.islands(node), q)
        used = [a.device for a in devices if not a.admin_access]
        if used:
            self.taken.setdefault(node.name, set()).update(used)
        return island


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
    changed = w.free.get(node.name)
    free = node.free if changed is None else changed
    for r, q in ps.requests:
        if q > 0:
            fit = min(fit, free.get(r, 0) // q)
            if fit <= 0:
                return 0
    if PODS in node.allocatable and all(r != PODS for r, _ in ps.requests):
        fit = min(fit, free.get(PODS, 0))
    if ps.island_resource is not None:
        fit = min(fit, island_pods(w, node, ps))
    return max(fit, 0)


def island_request(ps: GangPodSet) -> int:
    """Units of the pod set's island resource one pod asks for."""
    return sum(q for r, q in ps.requests if r == ps.island_resource)


def island_pods(w: Working, node: NodeInventory, ps: GangPodSet) -> int:
    """Pods whose island resource each fit inside one free island of the node (0 when the
    node publishes no islands for that resource)."""
    per_pod = island_request(ps)
    if per_pod <= 0:
        return ps.count
    if node.islands is None or node.islands.resource != ps.island_resource:
        return 0
    return sum(f // per_pod for f in w.islands(node))


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
                bits.append(tuple([device_matches(alt, d) for d in devices.free]))
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


def _simple(claims: Sequence[Claim]) -> tuple[RequestAlternative, str | None] | None:
    """One claim, one ExactCount request, at most one matchAttribute: the count of pods is
    then arithmetic (what the repeated search would find, without searching)."""
    if len(claims) != 1 or len(claims[0].requests) != 1:
        return None
    claim = claims[0]
    alts = claim.requests[0].alternatives
    if len(alts) != 1 or alts[0].all_devices or alts[0].admin_access or len(claim.constraints) > 1:
        return None
    if not claim.constraints:
        return alts[0], None
    c = claim.constraints[0]
    if c.kind is not ConstraintKind.MATCH or not c.covers(alts[0].name):
        return None
    return alts[0], c.attribute


def device_pods(w: Working, devices: NodeDevices, ps_index: int, ps: GangPodSet, limit: int) -> int:
    """How many pods' claims (up to `limit`) the devices can serve, as the search would."""
    simple = _simple(ps.claims)
    if simple is not None:
        alt, attribute = simple
        candidates = [d for d in devices.free if device_matches(alt, d)]
        if attribute is None:
            return min(limit, len(candidates) // alt.count)
        sizes = group_sizes(candidates, attribute).values()
        return min(limit, sum(n // alt.count for n in sizes))
    if len(devices.free) < device_count(ps.claims) and not _has_special(ps.claims):
        return 0
    island = w.inventory.island_attribute
    sig = _signature(ps_index, ps, devices, island)
    if sig is None:
        return _device_fit(devices, ps.claims, limit, island, w.best_fit)
    key = (sig, limit)
    got = w.memo.get(key)
    if got is None:
        got = _device_fit(devices, ps.claims, limit, island, w.best_fit)
        w.memo[key] = got
    return got


def pods_fit(
    w: Working, node: NodeInventory, ps_index: int, ps: GangPodSet, known: dict[str, int]
) -> int:
    """How many pods of `ps` (up to its count) fit on `node` now. `known` is the snapshot's
    memo of device answers for this pod set on untouched nodes."""
    fit = _resource_fit(w, node, ps, ps.count)
    if fit == 0 or not ps.claims:
        return fit
    if w.taken.get(node.name):
        return device_pods(w, w.devices(node), ps_index, ps, fit)
    got = known.get(node.name)
    if got is None:
        got = device_pods(w, node.devices, ps_index, ps, ps.count)
        known[node.name] = got
    return min(fit, got)


def _has_special(claims: Sequence[Claim]) -> bool:
    return any(
        a.all_devices or a.admin_access for c in claims for r in c.requests for a in r.alternatives
    )


def _weight(w: Working, node: NodeInventory) -> int:
    """Free devices plus free extended resources (GPUs): smaller is tighter."""
    if node.name not in w.free and node.name not in w.taken:
        return node.weight
    changed = w.free.get(node.name)
    free = node.free if changed is None else changed
    return len(w.devices(node).free) + sum(
        free.get(r, 0) for r in node.allocatable if is_accelerator(r)
    )


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
    known = w.inventory.memo.setdefault(("pods", ps.claims, ps.count, w.policy), {})
    for node in w.inventory.nodes:
        if within is not None and node.name not in within:
            continue
        if not eligible(node, ps):
            continue
        ok.append(node)
        path = (node.name,) if levels is None else topo.node_path(levels, node.labels, node.name)
        if path is None:
            continue
        cap = pods_fit(w, node, ps_index, ps, known)
        if cap > 0:
            out.append(topo.Entry(path=path, node=node.name, cap=cap, weight=_weight(w, node)))
    return out, ok
