"""The engine's view of the cluster for placement, and a gang as placement sees it.

Built by atoll.state.inventory from Nodes, Pods, Topologies and the DRA objects; immutable here.
Amounts are exact integers (milli-cpu, bytes, counts), as in atoll.engine.model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from atoll.engine.devices import Claim, DeviceAllocation, NodeDevices
from atoll.engine.model import Labels, NodeSelectorTerm, Taint, Toleration

NO_DEVICES = NodeDevices(free=(), busy=frozenset(), all=())
_NOT_ACCELERATORS = frozenset({"cpu", "memory", "pods", "ephemeral-storage"})


def is_accelerator(resource: str) -> bool:
    """An extended resource (e.g. `nvidia.com/gpu`), not cpu, memory, pods or storage."""
    return resource not in _NOT_ACCELERATORS and not resource.startswith("hugepages-")


@dataclass(frozen=True, slots=True, kw_only=True)
class Islands:
    """A node's NVLink islands for a counted resource (device-plugin GPUs, `nvidia.com/gpu`),
    as `atoll topology discover` published them, and how many units of each are free."""

    resource: str
    sizes: tuple[int, ...]
    free: tuple[int, ...]
    """Per island, in the order of `sizes`."""


def take_from_islands(free: tuple[int, ...], amount: int) -> tuple[tuple[int, ...], int | None]:
    """`free` after a pod takes `amount` units, and the island that gave them all (None when
    none could). All from the island with the fewest free units that holds them (best fit, so
    large islands stay whole, as NVIDIA's device plugin prefers NVLinked GPUs for one pod);
    otherwise from the islands with the fewest free units first."""
    fits = [i for i, f in enumerate(free) if f >= amount]
    out = list(free)
    if fits:
        best = min(fits, key=lambda i: (free[i], i))
        out[best] -= amount
        return tuple(out), best
    for i in sorted(range(len(out)), key=lambda i: (out[i], i)):
        got = min(out[i], amount)
        out[i] -= got
        amount -= got
    return tuple(out), None


def give_to_islands(
    islands: Islands, free: tuple[int, ...], amount: int, island: int | None
) -> tuple[int, ...]:
    """`free` after a pod gives back `amount` units: to its island when known, else to the
    islands missing the most units first."""
    out = list(free)
    order = [island] if island is not None else []
    order += sorted(range(len(out)), key=lambda i: (out[i] - islands.sizes[i], i))
    for i in order:
        got = min(islands.sizes[i] - out[i], amount)
        out[i] += got
        amount -= got
    return tuple(out)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class NodeInventory:
    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]
    free: Mapping[str, int]
    """Allocatable minus the requests of counted pods and of gangs held in the ledger."""
    taints: tuple[Taint, ...] = ()
    schedulable: bool = True
    """False when cordoned or not Ready."""
    devices: NodeDevices = NO_DEVICES
    islands: Islands | None = None
    """NVLink islands of a counted GPU resource; None: not published for this node."""
    weight: int = field(init=False)
    """Free devices plus free extended resources (GPUs): best fit's tie-break, smaller is
    tighter."""

    def __post_init__(self) -> None:
        extended = sum(self.free.get(r, 0) for r in self.allocatable if is_accelerator(r))
        object.__setattr__(self, "weight", len(self.devices.free) + extended)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Inventory:
    nodes: tuple[NodeInventory, ...]
    """In name order."""
    topologies: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Topology name → node labels of its levels, widest first."""
    island_attribute: str | None = None
    """Device attribute naming an NVLink island (best-fit groups devices by it)."""
    by_name: Mapping[str, NodeInventory] = field(init=False)
    memo: dict[object, dict[str, int]] = field(init=False, repr=False, compare=False)
    """Answers of pure functions of this snapshot (pods of a pod set's claims that fit on each
    node's free devices), kept so that a cycle placing many gangs on one snapshot reuses
    them. Never read for a node a placement has changed."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {n.name: n for n in self.nodes})
        object.__setattr__(self, "memo", {})


class PlacementPolicy(Enum):
    BEST_FIT = "BestFit"
    """Tightest domains and islands first, so that large ones stay whole (atoll's default)."""
    FIRST_FIT = "FirstFit"
    """Nodes, domains and devices in listing order (a baseline for measurements)."""
    SPREAD = "Spread"
    """Most free nodes and domains first, devices in listing order: what kube-scheduler's
    default scoring (NodeResourcesFit LeastAllocated) and DRA allocator do (a baseline)."""


class TopologyMode(Enum):
    REQUIRED = "required"
    PREFERRED = "preferred"
    UNCONSTRAINED = "unconstrained"


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologyRequest:
    """Kueue's PodSetTopologyRequest, resolved against the flavor's Topology."""

    topology: str
    """Name of the Topology (the ResourceFlavor's topologyName)."""
    mode: TopologyMode
    level: str | None = None
    """Node label of the required or preferred level."""
    slice_level: str | None = None
    slice_size: int | None = None
    group: str | None = None
    """Kueue's podSetGroupName: pod sets of a gang with the same group share one domain of
    their required / preferred level (a leader with its workers)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GangPodSet:
    name: str
    count: int
    requests: tuple[tuple[str, int], ...] = ()
    """Per pod (the `pods` resource is added by placement when nodes report it)."""
    node_selector: Labels = frozenset()
    required_affinity: tuple[NodeSelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    claims: tuple[Claim, ...] = ()
    """Per pod: one claim per ResourceClaimTemplate the pod references."""
    topology: TopologyRequest | None = None
    island_resource: str | None = None
    """Each pod's request of this resource must sit inside one NVLink island of its node."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Gang:
    key: str
    """`namespace/name` of the Workload."""
    pod_sets: tuple[GangPodSet, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class PodPlacement:
    pod_set: str
    index: int
    """Rank inside the pod set: consecutive ranks share the smallest domains."""
    node: str
    requests: tuple[tuple[str, int], ...]
    devices: tuple[DeviceAllocation, ...] = ()
    island: int | None = None
    """The NVLink island (index in the node's `Islands`) its counted GPUs were taken from."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PodSetPlacement:
    name: str
    pods: tuple[PodPlacement, ...]
    topology: str | None = None
    level: str | None = None
    """The level whose single domain holds every pod; None when spread or untopological."""
    domain: tuple[str, ...] = ()
    """Values of the levels down to `level` (empty when spread)."""
    assignment_levels: tuple[str, ...] = ()
    """Levels of Kueue's topologyAssignment (hostname only when it is a level)."""
    assignment: tuple[tuple[tuple[str, ...], int], ...] = ()
    """(values per assignment level, pods) per lowest-level domain, in path order."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    gang: str
    pod_sets: tuple[PodSetPlacement, ...]

    @property
    def pods(self) -> tuple[PodPlacement, ...]:
        return tuple(p for ps in self.pod_sets for p in ps.pods)


class NoFitReason(Enum):
    UNKNOWN_TOPOLOGY = "UnknownTopology"
    INVALID_REQUEST = "InvalidTopologyRequest"
    NO_ELIGIBLE_NODE = "NoEligibleNode"
    NO_DOMAIN = "NoDomainFits"
    """Required topology: capacity exists but not inside one domain."""
    INSUFFICIENT = "InsufficientCapacity"
    SELECTOR_ERROR = "DeviceSelectorError"


@dataclass(frozen=True, slots=True, kw_only=True)
class NoFit:
    gang: str
    pod_set: str
    reason: NoFitReason
    message: str
    needed: int = 0
    """Pods (or slices) the pod set needs in one domain, or in all."""
    available: int = 0
    """Room in the largest domain of the level (or in all eligible nodes)."""
    level: str | None = None
    largest_domain: tuple[str, ...] = ()
    devices_per_pod: int = 0
    largest_island: int = 0
    """Most free devices sharing one island (or matchAttribute) value on an eligible node."""
    largest_island_node: str | None = None
    fits_unconstrained: bool = False
    """Would fit now as preferred instead of required."""


PlacementResult = Placement | NoFit
