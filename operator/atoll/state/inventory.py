"""The live placement inventory: Nodes, pods atoll does not hold, Topologies, DRA objects and
the ledger of gangs atoll admitted; `snapshot()` gives the engine's immutable Inventory.

Mirrors how kube-scheduler counts (NodeInfo: allocatable minus the requests of bound,
non-terminal pods) and how the DRA allocator reads ResourceSlices (structured/allocator.go:
only the highest generation of a pool, a pool with fewer slices than `resourceSliceCount`
is incomplete and never allocated from) and allocated devices (`status.allocation` of every
ResourceClaim). Pods of a gang held in the ledger are not counted again: the ledger holds the
whole gang's placement until it is released. Devices are the union of allocations and ledger
holds (conservative while the scheduler's own device choice may differ from the plan).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from atoll.api.core import Node, NodeSelector, Pod
from atoll.api.labels import WORKLOAD_ANNOTATION
from atoll.api.resource import Device as ApiDevice
from atoll.api.resource import DeviceClass, ResourceClaim, ResourceSlice
from atoll.api.topology import Topology
from atoll.engine import model as m
from atoll.engine.devices import Device, DeviceId, NodeDevices, Version
from atoll.engine.inventory import Inventory, NodeInventory, Placement
from atoll.engine.matching import requirement_matches
from atoll.state.convert import amount, pod_requests

_TERMINAL = frozenset({"Succeeded", "Failed"})
_DEVICE_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True, kw_only=True)
class _PodUse:
    node: str
    requests: Mapping[str, int]
    gang: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Pool:
    """The newest generation of one pool."""

    generation: int
    complete: bool
    slices: tuple[str, ...]


def device_from_api(driver: str, pool: str, generation: int, dev: ApiDevice) -> Device:
    """The engine Device: attribute and capacity names fully qualified, capacity in milli."""
    attrs: dict[str, int | bool | str | Version] = {}
    for name, a in (dev.attributes or {}).items():
        key = name if "/" in name else f"{driver}/{name}"
        if a.version_value is not None:
            attrs[key] = Version(a.version_value)
        elif a.value is not None:
            attrs[key] = a.value
    capacity = {
        (name if "/" in name else f"{driver}/{name}"): c.value.milli
        for name, c in (dev.capacity or {}).items()
    }
    taints = tuple(
        m.Taint(key=t.key, value=t.value or "", effect=m.TaintEffect(t.effect))
        for t in dev.taints or ()
        if t.effect in _DEVICE_TAINT_EFFECTS
    )
    return Device(
        id=DeviceId(f"{driver}/{pool}/{dev.name}"),
        driver=driver,
        pool=pool,
        name=dev.name,
        generation=generation,
        attributes=attrs,
        capacity=capacity,
        taints=taints,
    )


def node_selector_matches(selector: NodeSelector, node: Node) -> bool:
    """core/v1 NodeSelector: terms ORed, requirements ANDed; matchFields on metadata.name."""
    labels = node.metadata.labels or {}
    for term in selector.node_selector_terms:
        ok = all(
            requirement_matches(
                m.SelectorRequirement(
                    key=r.key, operator=m.SelectorOperator(r.operator), values=r.values or ()
                ),
                labels,
            )
            for r in term.match_expressions or ()
        )
        ok = ok and all(
            requirement_matches(
                m.SelectorRequirement(
                    key=r.key, operator=m.SelectorOperator(r.operator), values=r.values or ()
                ),
                {"metadata.name": node.name},
            )
            for r in term.match_fields or ()
        )
        if ok and (term.match_expressions or term.match_fields):
            return True
    return False


def _reaches(spec_slice: ResourceSlice, dev: ApiDevice, node: Node) -> bool:
    spec = spec_slice.spec
    if spec.per_device_node_selection:
        return bool(dev.all_nodes) or dev.node_name == node.name
    if spec.node_name is not None:
        return spec.node_name == node.name
    if spec.all_nodes:
        return True
    return spec.node_selector is not None and node_selector_matches(spec.node_selector, node)


def _schedulable(node: Node) -> bool:
    if node.spec.unschedulable:
        return False
    for c in node.status.conditions or ():
        if c.type == "Ready":
            return c.status == "True"
    return True


def _allocated(claim: ResourceClaim) -> frozenset[DeviceId]:
    alloc = claim.status.allocation
    if alloc is None or alloc.devices is None:
        return frozenset()
    return frozenset(
        DeviceId(f"{r.driver}/{r.pool}/{r.device}") for r in alloc.devices.results or ()
    )


class ClusterInventory:
    """Mutable, synchronous; fed by watch handlers, read through `snapshot()`."""

    def __init__(self, *, island_attribute: str | None = None) -> None:
        self.island_attribute = island_attribute
        self._nodes: dict[str, Node] = {}
        self._pods: dict[tuple[str, str], _PodUse] = {}
        self._topologies: dict[str, tuple[str, ...]] = {}
        self._classes: dict[str, DeviceClass] = {}
        self._slices: dict[str, ResourceSlice] = {}
        self._slice_devices: dict[str, tuple[tuple[ApiDevice, Device], ...]] = {}
        self._claims: dict[tuple[str, str], frozenset[DeviceId]] = {}
        self._ledger: dict[str, Placement] = {}
        self._snapshot: Inventory | None = None

    # --- watch input -------------------------------------------------------------------
    def upsert_node(self, node: Node) -> None:
        self._nodes[node.name] = node
        self._snapshot = None

    def delete_node(self, name: str) -> None:
        self._nodes.pop(name, None)
        self._snapshot = None

    def upsert_pod(self, pod: Pod) -> None:
        key = (pod.namespace or "", pod.name)
        node = pod.spec.node_name
        if not node or pod.status.phase in _TERMINAL or pod.metadata.deletion_timestamp:
            self.delete_pod(*key)
            return
        wl = (pod.metadata.annotations or {}).get(WORKLOAD_ANNOTATION)
        self._pods[key] = _PodUse(
            node=node,
            requests=pod_requests(pod.spec),
            gang=f"{key[0]}/{wl}" if wl else None,
        )
        self._snapshot = None

    def delete_pod(self, namespace: str, name: str) -> None:
        if self._pods.pop((namespace, name), None) is not None:
            self._snapshot = None

    def upsert_topology(self, topology: Topology) -> None:
        self._topologies[topology.name] = tuple(lv.node_label for lv in topology.spec.levels)
        self._snapshot = None

    def delete_topology(self, name: str) -> None:
        self._topologies.pop(name, None)
        self._snapshot = None

    def upsert_device_class(self, dc: DeviceClass) -> None:
        self._classes[dc.name] = dc

    def delete_device_class(self, name: str) -> None:
        self._classes.pop(name, None)

    def device_class(self, name: str) -> DeviceClass | None:
        return self._classes.get(name)

    def upsert_slice(self, rs: ResourceSlice) -> None:
        spec = rs.spec
        self._slices[rs.name] = rs
        self._slice_devices[rs.name] = tuple(
            (d, device_from_api(spec.driver, spec.pool.name, spec.pool.generation, d))
            for d in spec.devices or ()
        )
        self._snapshot = None

    def delete_slice(self, name: str) -> None:
        self._slices.pop(name, None)
        self._slice_devices.pop(name, None)
        self._snapshot = None

    def upsert_claim(self, claim: ResourceClaim) -> None:
        self._claims[(claim.namespace or "", claim.name)] = _allocated(claim)
        self._snapshot = None

    def delete_claim(self, namespace: str, name: str) -> None:
        if self._claims.pop((namespace, name), None) is not None:
            self._snapshot = None

    # --- the ledger ----------------------------------------------------------------------
    def hold(self, placement: Placement) -> None:
        """Reserve an admitted gang's placement until `release` (its pods are not counted)."""
        self._ledger[placement.gang] = placement
        self._snapshot = None

    def release(self, gang: str) -> None:
        if self._ledger.pop(gang, None) is not None:
            self._snapshot = None

    def held(self) -> Mapping[str, Placement]:
        return dict(self._ledger)

    # --- output --------------------------------------------------------------------------
    def snapshot(self) -> Inventory:
        """The engine inventory (cached until something changes)."""
        if self._snapshot is None:
            self._snapshot = self._build()
        return self._snapshot

    def device_generations(self) -> dict[str, int]:
        """Device id → generation of every current device (to prune CEL caches)."""
        return {d.id: d.generation for devs in self._slice_devices.values() for _, d in devs}

    def _pools(self) -> dict[tuple[str, str], _Pool]:
        by_pool: dict[tuple[str, str], list[ResourceSlice]] = {}
        for rs in self._slices.values():
            by_pool.setdefault((rs.spec.driver, rs.spec.pool.name), []).append(rs)
        pools: dict[tuple[str, str], _Pool] = {}
        for key, slices in by_pool.items():
            gen = max(rs.spec.pool.generation for rs in slices)
            newest = [rs for rs in slices if rs.spec.pool.generation == gen]
            want = max(rs.spec.pool.resource_slice_count for rs in newest)
            pools[key] = _Pool(
                generation=gen,
                complete=len(newest) >= want,
                slices=tuple(sorted(rs.name for rs in newest)),
            )
        return pools

    def _usage(self) -> dict[str, dict[str, int]]:
        used: dict[str, dict[str, int]] = {}
        for use in self._pods.values():
            if use.gang is not None and use.gang in self._ledger:
                continue
            node = used.setdefault(use.node, {})
            for r, q in use.requests.items():
                node[r] = node.get(r, 0) + q
            node["pods"] = node.get("pods", 0) + 1
        for placement in self._ledger.values():
            for pod in placement.pods:
                node = used.setdefault(pod.node, {})
                for r, q in pod.requests:
                    node[r] = node.get(r, 0) + q
        return used

    def _busy(self) -> frozenset[DeviceId]:
        busy: set[DeviceId] = set()
        for ids in self._claims.values():
            busy |= ids
        for placement in self._ledger.values():
            busy.update(a.device for p in placement.pods for a in p.devices if not a.admin_access)
        return frozenset(busy)

    def _slices_by_node(
        self, pools: Mapping[tuple[str, str], _Pool]
    ) -> tuple[dict[str, list[tuple[_Pool, str]]], list[tuple[_Pool, str]]]:
        """Current slices of node-local pools by node, and the others, in pool order."""
        local: dict[str, list[tuple[_Pool, str]]] = {}
        network: list[tuple[_Pool, str]] = []
        for _key, pool in sorted(pools.items()):
            for name in pool.slices:
                node = self._slices[name].spec.node_name
                if node is not None:
                    local.setdefault(node, []).append((pool, name))
                else:
                    network.append((pool, name))
        return local, network

    def _node_devices(
        self, node: Node, slices: Iterable[tuple[_Pool, str]], busy: frozenset[DeviceId]
    ) -> NodeDevices:
        reachable: list[Device] = []
        incomplete = False
        for pool, name in slices:
            rs = self._slices[name]
            devs = [d for api, d in self._slice_devices[name] if _reaches(rs, api, node)]
            if not devs:
                continue
            if not pool.complete:
                incomplete = True
                continue
            reachable.extend(devs)
        if not reachable and not incomplete:
            return NodeDevices(free=(), busy=frozenset(), all=())
        return NodeDevices(
            free=tuple(d for d in reachable if d.id not in busy),
            busy=frozenset(d.id for d in reachable if d.id in busy),
            all=tuple(reachable),
            incomplete=incomplete,
        )

    def _build(self) -> Inventory:
        local, network = self._slices_by_node(self._pools())
        used = self._usage()
        busy = self._busy()
        nodes = []
        for name in sorted(self._nodes):
            node = self._nodes[name]
            alloc = {
                r: amount(r, q)
                for r, q in (node.status.allocatable or node.status.capacity or {}).items()
            }
            use = used.get(name, {})
            nodes.append(
                NodeInventory(
                    name=name,
                    labels=dict(node.metadata.labels or {}),
                    allocatable=alloc,
                    free={r: alloc.get(r, 0) - use.get(r, 0) for r in alloc.keys() | use.keys()},
                    taints=tuple(_taints(node)),
                    schedulable=_schedulable(node),
                    devices=self._node_devices(node, [*local.get(name, ()), *network], busy),
                )
            )
        return Inventory(
            nodes=tuple(nodes),
            topologies=dict(self._topologies),
            island_attribute=self.island_attribute,
        )


def _taints(node: Node) -> Iterable[m.Taint]:
    for t in node.spec.taints or ():
        if t.effect in ("NoSchedule", "NoExecute", "PreferNoSchedule"):
            yield m.Taint(key=t.key, value=t.value or "", effect=m.TaintEffect(t.effect))
