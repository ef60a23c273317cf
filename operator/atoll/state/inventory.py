"""The live placement inventory: Nodes, pods atoll does not hold, Topologies, DRA objects and
the ledger of gangs atoll admitted; `snapshot()` gives the engine's immutable Inventory.

Mirrors how kube-scheduler counts (NodeInfo: allocatable minus the requests of bound,
non-terminal pods) and how the DRA allocator reads ResourceSlices (structured/allocator.go:
only the highest generation of a pool, a pool with fewer slices than `resourceSliceCount`
is incomplete and never allocated from) and allocated devices (`status.allocation` of every
ResourceClaim). A gang held in the ledger counts, until it is released, as its pods that are
placed (bound and running, with their claims seen allocated) plus the planned pods that are
not placed: each placed pod takes the place of one planned pod (one on its node if any); a
finished pod gives its place back to the plan (its Job may start another pod).
kube-scheduler's node and device choice may differ from the plan (pods of gangs without a
topology assignment are not pinned; its allocator picks devices in listing order), so what a
placed pod really uses is counted once, from its pod and claims, never beside its plan. A
planned pod whose devices were taken by another pod's allocation holds as many others (in one
island when its plan was one island): on its node if it has room, else where a pod placed
off its plan left room (`_replace`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from atoll.api.core import Node, NodeSelector, Pod
from atoll.api.islands import IslandsFormatError, NodeIslands
from atoll.api.labels import WORKLOAD_ANNOTATION
from atoll.api.resource import Device as ApiDevice
from atoll.api.resource import DeviceClass, ResourceClaim, ResourceSlice
from atoll.api.topology import Topology
from atoll.engine import model as m
from atoll.engine.devices import Device, DeviceId, NodeDevices, Version
from atoll.engine.inventory import Inventory, Islands, NodeInventory, Placement, PodPlacement
from atoll.engine.matching import requirement_matches
from atoll.state.convert import amount, pod_requests
from atoll.state.islands import GPU_RESOURCE, free_islands, published_islands, with_islands

_TERMINAL = frozenset({"Succeeded", "Failed"})
_DEVICE_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True, kw_only=True)
class _PodUse:
    node: str
    requests: Mapping[str, int]
    gang: str | None
    claims: tuple[tuple[str, str] | None, ...] = ()
    """The pod's ResourceClaims (`(namespace, name)`; None: not generated yet)."""


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
        self._islands: dict[str, NodeIslands | IslandsFormatError] = {}
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
        islands = published_islands(node)
        if islands is None:
            self._islands.pop(node.name, None)
        else:
            self._islands[node.name] = islands
        self._snapshot = None

    def node_labels(self, name: str) -> dict[str, str] | None:
        """The labels of the node `name`, None for a node not seen."""
        node = self._nodes.get(name)
        return None if node is None else dict(node.metadata.labels or {})

    def delete_node(self, name: str) -> None:
        self._nodes.pop(name, None)
        self._islands.pop(name, None)
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
            claims=_claim_keys(pod),
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

    def ledger(self) -> Mapping[str, Placement]:
        """The ledger's placements by gang, read-only and not copied (valid until it
        changes)."""
        return MappingProxyType(self._ledger)

    def holds(self, gang: str) -> bool:
        return gang in self._ledger

    def forget_gang(self, gang: str) -> None:
        """Drop the placement and the pods of the gang `namespace/workload` (what-if it
        finished)."""
        self.release(gang)
        for key in [k for k, use in self._pods.items() if use.gang == gang]:
            del self._pods[key]
            self._snapshot = None

    def fork(self) -> ClusterInventory:
        """A copy whose objects and ledger can change without touching this one."""
        copy = ClusterInventory(island_attribute=self.island_attribute)
        for name, value in vars(self).items():
            setattr(copy, name, dict(value) if isinstance(value, dict) else value)
        return copy

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

    def _placed(self, use: _PodUse) -> bool:
        """Bound, and every claim of it seen allocated: it counts as itself from now on."""
        return all(c is not None and self._claims.get(c) for c in use.claims)

    def _unplaced(self) -> tuple[dict[str, list[PodPlacement]], set[tuple[str, str]], list[str]]:
        """Per held gang, its planned pods not placed yet; the held gangs' placed pods; and
        the nodes of planned pods whose place a pod placed on another node took."""
        placed: dict[str, list[tuple[str, tuple[str, str]]]] = {}
        counted: set[tuple[str, str]] = set()
        for key, use in self._pods.items():
            if use.gang in self._ledger and self._placed(use):
                placed.setdefault(use.gang, []).append((use.node, key))
                counted.add(key)
        left = {}
        vacated: list[str] = []
        for gang in sorted(self._ledger):
            left[gang], moved = _take_places(self._ledger[gang].pods, sorted(placed.get(gang, ())))
            vacated.extend(moved)
        return left, counted, vacated

    def _usage(
        self, unplaced: Mapping[str, Sequence[PodPlacement]], counted: set[tuple[str, str]]
    ) -> tuple[dict[str, dict[str, int]], dict[str, list[tuple[int, int | None]]]]:
        """Requests per node, and per node the GPU pods (GPUs, planned island or None)."""
        used: dict[str, dict[str, int]] = {}
        gpu_pods: dict[str, list[tuple[int, int | None]]] = {}
        for key, use in self._pods.items():
            if use.gang is not None and use.gang in self._ledger and key not in counted:
                continue  # its gang's plan holds its place
            node = used.setdefault(use.node, {})
            for r, q in use.requests.items():
                node[r] = node.get(r, 0) + q
            node["pods"] = node.get("pods", 0) + 1
            if use.requests.get(GPU_RESOURCE, 0) > 0:
                gpu_pods.setdefault(use.node, []).append((use.requests[GPU_RESOURCE], None))
        for pods in unplaced.values():
            for pod in pods:
                node = used.setdefault(pod.node, {})
                for r, q in pod.requests:
                    node[r] = node.get(r, 0) + q
                gpus = sum(q for r, q in pod.requests if r == GPU_RESOURCE)
                if gpus > 0:
                    gpu_pods.setdefault(pod.node, []).append((gpus, pod.island))
        return used, gpu_pods

    def _busy(
        self,
        unplaced: Mapping[str, Sequence[PodPlacement]],
        reachable: Mapping[str, Sequence[Device]],
        vacated: Sequence[str],
    ) -> frozenset[DeviceId]:
        """Allocated devices, then the planned devices of unplaced pods (gang by gang, in
        order); planned devices someone else's allocation took are replaced (`_replace`)."""
        busy: set[DeviceId] = set()
        for ids in self._claims.values():
            busy |= ids
        for gang in sorted(unplaced):
            for pod in unplaced[gang]:
                planned = [a.device for a in pod.devices if not a.admin_access]
                if busy.isdisjoint(planned):
                    busy.update(planned)
                    continue
                nodes = _unique(
                    [pod.node, *vacated, *(p.node for p in unplaced[gang]), *sorted(reachable)]
                )
                got = _replace(planned, nodes, reachable, busy, self.island_attribute)
                busy.update(planned if got is None else got)
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

    def _reachable(
        self, node: Node, slices: Iterable[tuple[_Pool, str]]
    ) -> tuple[list[Device], bool]:
        """Devices of complete pools the node reaches, and whether an incomplete one is."""
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
        doc = self._islands.get(node.name)
        if self.island_attribute and isinstance(doc, NodeIslands):
            reachable = with_islands(doc, reachable, self.island_attribute)
        return reachable, incomplete

    @staticmethod
    def _node_devices(
        reachable: Sequence[Device], incomplete: bool, busy: frozenset[DeviceId]
    ) -> NodeDevices:
        if not reachable and not incomplete:
            return NodeDevices(free=(), busy=frozenset(), all=())
        return NodeDevices(
            free=tuple(d for d in reachable if d.id not in busy),
            busy=frozenset(d.id for d in reachable if d.id in busy),
            all=tuple(reachable),
            incomplete=incomplete,
        )

    def _islands_of(
        self, name: str, alloc: Mapping[str, int], gpu_pods: Sequence[tuple[int, int | None]]
    ) -> Islands | None:
        doc = self._islands.get(name)
        if not isinstance(doc, NodeIslands) or alloc.get(GPU_RESOURCE, 0) <= 0:
            return None
        return free_islands(doc, gpu_pods)

    def published_islands(self) -> Mapping[str, NodeIslands | IslandsFormatError]:
        """Per node, the islands it publishes or what is wrong with its annotation."""
        return dict(self._islands)

    def _build(self) -> Inventory:
        local, network = self._slices_by_node(self._pools())
        unplaced, counted, vacated = self._unplaced()
        used, gpu_pods = self._usage(unplaced, counted)
        devices = {
            name: self._reachable(node, [*local.get(name, ()), *network])
            for name, node in self._nodes.items()
        }
        busy = self._busy(unplaced, {name: d for name, (d, _) in devices.items()}, vacated)
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
                    devices=self._node_devices(*devices[name], busy),
                    islands=self._islands_of(name, alloc, gpu_pods.get(name, ())),
                )
            )
        return Inventory(
            nodes=tuple(nodes),
            topologies=dict(self._topologies),
            island_attribute=self.island_attribute,
        )


def _claim_keys(pod: Pod) -> tuple[tuple[str, str] | None, ...]:
    """The pod's ResourceClaims: named ones, and those generated from templates as its status
    reports them (None until then)."""
    ns = pod.namespace or ""
    generated = {s.name: s for s in pod.status.resource_claim_statuses or ()}
    out: list[tuple[str, str] | None] = []
    for prc in pod.spec.resource_claims or ():
        if prc.resource_claim_name:
            out.append((ns, prc.resource_claim_name))
            continue
        st = generated.get(prc.name)
        if st is None:
            out.append(None)
        elif st.resource_claim_name:  # unset: the claim was not needed
            out.append((ns, st.resource_claim_name))
    return tuple(out)


def _take_places(
    planned: Sequence[PodPlacement], placed: Sequence[tuple[str, tuple[str, str]]]
) -> tuple[list[PodPlacement], list[str]]:
    """The planned pods left once each placed pod (node, key) took the place of one: a
    planned pod on its node if any, else the last one (the pod went elsewhere: that planned
    node is returned as vacated)."""
    left = list(planned)
    vacated = []
    for node, _ in placed:
        if not left:
            break
        i = next((k for k, p in enumerate(left) if p.node == node), None)
        if i is None:
            i = len(left) - 1
            vacated.append(left[i].node)
        del left[i]
    return left, vacated


def _unique(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))


def _replace(
    planned: Sequence[DeviceId],
    nodes: Sequence[str],
    reachable: Mapping[str, Sequence[Device]],
    busy: set[DeviceId],
    island: str | None,
) -> list[DeviceId] | None:
    """As many free devices as planned, on the first of `nodes` that has them: the planned
    node (its free planned devices first), then nodes that placed pods moved away from (a pod
    of a gang that is not pinned goes where the scheduler finds room: most likely the room its
    displacer left), the gang's other planned nodes, any node. In one island when the plan
    was one island of several devices; first fit, in listing order, as the scheduler's
    allocator picks. None when no node has enough."""
    node = nodes[0]
    by_id = {d.id: d for d in reachable.get(node, ())}
    values = {by_id[i].attributes.get(island) for i in planned if i in by_id} if island else set()
    group = island if len(planned) > 1 and len(values) == 1 and None not in values else None
    keep = [i for i in planned if i in by_id and i not in busy]
    for name in nodes:
        free = [d for d in reachable.get(name, ()) if d.id not in busy]
        got = _pick(free, len(planned), group, keep if name == node else [])
        if got is not None:
            return got
    return None


def _pick(
    free: Sequence[Device], want: int, group: str | None, keep: Sequence[DeviceId]
) -> list[DeviceId] | None:
    if group is not None:
        groups: dict[object, list[Device]] = {}
        for d in free:
            v = d.attributes.get(group)
            if v is not None:
                groups.setdefault((type(v), v), []).append(d)
        same = next((g for g in groups.values() if len(g) >= want), None)
        return None if same is None else [d.id for d in same[:want]]
    others = [d.id for d in free if d.id not in keep]
    if len(keep) + len(others) < want:
        return None
    return [*keep, *others[: want - len(keep)]]


def _taints(node: Node) -> Iterable[m.Taint]:
    for t in node.spec.taints or ():
        if t.effect in ("NoSchedule", "NoExecute", "PreferNoSchedule"):
            yield m.Taint(key=t.key, value=t.value or "", effect=m.TaintEffect(t.effect))
