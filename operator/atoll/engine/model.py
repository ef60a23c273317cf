"""The engine's input: immutable snapshot types for Kueue's kinds.

Mirrors the parts of Kueue's `apis/kueue/v1beta2` types that scheduling reads, in the shape
that `pkg/cache/scheduler` keeps them (ClusterQueueSnapshot, CohortSnapshot, workload.Info).

Quantities are exact integers: `cpu` in milli-units, memory and storage in bytes, every other
resource (GPUs, `pods`, extended resources) in whole units. Times are float seconds on any
clock the caller chooses; the engine only compares them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import NewType

ClusterQueueName = NewType("ClusterQueueName", str)
CohortName = NewType("CohortName", str)
FlavorName = NewType("FlavorName", str)
ResourceName = NewType("ResourceName", str)
PodSetName = NewType("PodSetName", str)
WorkloadKey = NewType("WorkloadKey", str)
"""`namespace/name` of a Workload."""
LocalQueueKey = NewType("LocalQueueKey", str)
"""`namespace/name` of a LocalQueue."""

FlavorResource = tuple[FlavorName, ResourceName]
Labels = frozenset[tuple[str, str]]
"""Label key/value pairs (a node's, a namespace's, a pod's nodeSelector)."""

PODS = ResourceName("pods")
CPU = ResourceName("cpu")


class QueueingStrategy(Enum):
    STRICT_FIFO = "StrictFIFO"
    BEST_EFFORT_FIFO = "BestEffortFIFO"


class StopPolicy(Enum):
    NONE = "None"
    HOLD = "Hold"
    HOLD_AND_DRAIN = "HoldAndDrain"


class WithinClusterQueue(Enum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"


class ReclaimWithinCohort(Enum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class BorrowWithinCohortPolicy(Enum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"


class FungibilityPolicy(Enum):
    MAY_STOP_SEARCH = "MayStopSearch"
    TRY_NEXT_FLAVOR = "TryNextFlavor"


class FungibilityPreference(Enum):
    BORROWING_OVER_PREEMPTION = "BorrowingOverPreemption"
    PREEMPTION_OVER_BORROWING = "PreemptionOverBorrowing"


class TaintEffect(Enum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class TolerationOperator(Enum):
    EQUAL = "Equal"
    EXISTS = "Exists"


class SelectorOperator(Enum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


class FairSharingStrategy(Enum):
    LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
    LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceQuota:
    resource: ResourceName
    nominal: int
    borrowing_limit: int | None = None
    """None: may borrow without limit (when in a cohort)."""
    lending_limit: int | None = None
    """None: lends all of its unused nominal quota to the cohort."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FlavorQuotas:
    flavor: FlavorName
    resources: tuple[ResourceQuota, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceGroup:
    covered_resources: tuple[ResourceName, ...]
    flavors: tuple[FlavorQuotas, ...]
    """In the ClusterQueue's order: flavor assignment tries them in this order."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BorrowWithinCohort:
    policy: BorrowWithinCohortPolicy = BorrowWithinCohortPolicy.NEVER
    max_priority_threshold: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PreemptionPolicy:
    within_cluster_queue: WithinClusterQueue = WithinClusterQueue.NEVER
    reclaim_within_cohort: ReclaimWithinCohort = ReclaimWithinCohort.NEVER
    borrow_within_cohort: BorrowWithinCohort = BorrowWithinCohort()


@dataclass(frozen=True, slots=True, kw_only=True)
class FlavorFungibility:
    when_can_borrow: FungibilityPolicy = FungibilityPolicy.MAY_STOP_SEARCH
    when_can_preempt: FungibilityPolicy = FungibilityPolicy.TRY_NEXT_FLAVOR
    preference: FungibilityPreference | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SelectorRequirement:
    key: str
    operator: SelectorOperator
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class LabelSelector:
    """A metav1.LabelSelector; the empty selector matches everything."""

    match_labels: Labels = frozenset()
    match_expressions: tuple[SelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSelectorTerm:
    """One term of requiredDuringSchedulingIgnoredDuringExecution (terms are ORed)."""

    match_expressions: tuple[SelectorRequirement, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Taint:
    key: str
    value: str = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE


@dataclass(frozen=True, slots=True, kw_only=True)
class Toleration:
    key: str = ""
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: str = ""
    effect: TaintEffect | None = None
    """None tolerates every effect."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceFlavor:
    name: FlavorName
    node_labels: Labels = frozenset()
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    topology_name: str | None = None
    """Its Topology (Kueue's topology-aware scheduling): a gang assigned this flavor must
    also be placed on its nodes, or the flavor is refused (`engine.topologyflavors`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Backfill:
    """atoll's reservation and backfill for one ClusterQueue (the annotation
    `atoll.dev/backfill: "true"`; no Kueue equivalent): see `engine.backfill`."""

    grace_seconds: float = 15.0
    """Added to a guaranteed end (maximum execution time, active deadline): the time the
    Job's pods take to stop once it is reached."""
    min_wait_seconds: float = 0.0
    """The head of the queue takes a reservation only once it has waited this long."""
    max_hold_seconds: float | None = None
    """How long one workload may hold a reservation (None: until it is admitted)."""
    reserve_after_seconds: float | None = None
    """Besides the head, every workload of the queue that has waited at least this long
    (since its queue-order timestamp) takes a reservation too, in queue order, up to
    `engine.backfill.MAX_HOLDERS` per queue (None: the head only)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterQueue:
    name: ClusterQueueName
    cohort: CohortName | None = None
    resource_groups: tuple[ResourceGroup, ...] = ()
    preemption: PreemptionPolicy = PreemptionPolicy()
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    flavor_fungibility: FlavorFungibility = FlavorFungibility()
    stop_policy: StopPolicy = StopPolicy.NONE
    namespace_selector: LabelSelector | None = None
    """None admits nothing (Kueue's default); `LabelSelector()` admits every namespace."""
    fair_weight_milli: int = 1000
    inactive_reason: str | None = None
    """Set by the caller when the ClusterQueue is inactive for a reason the engine can't see
    (missing admission check, terminating); missing flavors and stop policies are detected."""
    backfill: Backfill | None = None
    """Reservation and backfill on (atoll's own); None: exactly Kueue's behaviour."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Cohort:
    name: CohortName
    parent: CohortName | None = None
    resource_groups: tuple[ResourceGroup, ...] = ()
    """Extra quota shared by the subtree, on top of its members' quotas."""
    fair_weight_milli: int = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalQueue:
    namespace: str
    name: str
    cluster_queue: ClusterQueueName
    stop_policy: StopPolicy = StopPolicy.NONE

    @property
    def key(self) -> LocalQueueKey:
        return LocalQueueKey(f"{self.namespace}/{self.name}")


@dataclass(frozen=True, slots=True, kw_only=True)
class PodSet:
    name: PodSetName = PodSetName("main")
    count: int = 1
    requests: tuple[tuple[ResourceName, int], ...] = ()
    """Per-pod requests (containers, init containers, overhead already folded in)."""
    min_count: int | None = None
    """Partial admission: the smallest count the Job accepts."""
    node_selector: Labels = frozenset()
    required_affinity: tuple[NodeSelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    placement: tuple[str, ...] = ()
    """What placement reads from the pod set beyond the fields above (its topology request,
    atoll's NVLink-island annotation, its resource claims), in a canonical form: two pod sets
    with equal fields are placed alike on one inventory. Empty when it reads nothing more."""
    group: str | None = None
    """Kueue's podset group (`podSetGroupName`): pod sets of one group get the same flavors
    (engine/flavors.py) and are placed in one topology domain."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    namespace: str
    name: str
    queue_name: str
    """The LocalQueue (in the Workload's namespace)."""
    pod_sets: tuple[PodSet, ...]
    priority: int = 0
    queued_at: float = 0.0
    """Queue-order timestamp: creation, or eviction when requeued after a timeout."""
    namespace_labels: Labels = frozenset()
    uid: str = ""
    active: bool = True
    misconfigured: str | None = None
    """Why the workload cannot be charged to any queue as written (`Misconfigured`, written as
    Kueue's `Inadmissible`, e.g. DRA devices that cannot be counted), or None."""
    sticky: bool = False
    """It issued preemptions from the head of a BestEffortFIFO queue and is not admitted
    yet: it stays at the head, ahead of the workloads it was picked over (Kueue's sticky
    preemptor), and goes first in its cycle (`ordering.cycle_key`), so that the quota its
    victims free is not handed back to them nor taken by another queue's head."""
    run_limit: float | None = None
    """Seconds it can run at most once admitted, guaranteed by something that stops it
    (`maximumExecutionTimeSeconds`, the Job's `activeDeadlineSeconds`): the smallest."""
    run_hint: float | None = None
    """Seconds it is expected to run (`atoll.dev/run-duration`): an estimate, not a bound."""
    key: WorkloadKey = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", WorkloadKey(f"{self.namespace}/{self.name}"))

    @property
    def local_queue(self) -> LocalQueueKey:
        return LocalQueueKey(f"{self.namespace}/{self.queue_name}")


@dataclass(frozen=True, slots=True, kw_only=True)
class PodSetAssignment:
    name: PodSetName
    count: int
    flavors: tuple[tuple[ResourceName, FlavorName], ...]
    resource_usage: tuple[tuple[ResourceName, int], ...]
    """Totals for all `count` pods."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Admission:
    cluster_queue: ClusterQueueName
    pod_sets: tuple[PodSetAssignment, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmittedWorkload:
    """A Workload holding quota (QuotaReserved), with the admission it was given."""

    workload: Workload
    admission: Admission
    reserved_at: float = 0.0
    evicted: bool = False
    """Already marked for eviction, quota not yet released."""

    @property
    def key(self) -> WorkloadKey:
        return self.workload.key

    @property
    def cluster_queue(self) -> ClusterQueueName:
        return self.admission.cluster_queue


@dataclass(frozen=True, slots=True, kw_only=True)
class FairSharing:
    """Kueue's Configuration `fairSharing`; its presence enables fair sharing."""

    preemption_strategies: tuple[FairSharingStrategy, ...] = (
        FairSharingStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
        FairSharingStrategy.LESS_THAN_INITIAL_SHARE,
    )
