"""The engine's output: one decision per workload considered, as plain values.

Reasons are Kueue's: QuotaReserved=False reasons of apis/kueue/v1beta2/workload_types.go,
preemption reasons of pkg/scheduler/preemption, eviction reasons of pkg/workload/evict.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from atoll.engine.model import (
    ClusterQueueName,
    FlavorName,
    PodSetName,
    ResourceName,
    WorkloadKey,
)


class PendingReason(Enum):
    """atoll's own classification of why a Workload stays pending (most severe quota reason
    last), shown by `atoll explain`, `atoll what-if` and the simulator's tables. These are not
    Kueue's reasons: the reason written to the Workload's QuotaReserved=False condition and
    its Warning Event is Kueue's, `Pending` or `Inadmissible`
    (`atoll.state.lifecycle.written_reason`), with the message as it is here."""

    PENDING_EVALUATION = "PendingEvaluation"
    WAITING_FOR_QUOTA = "WaitingForQuota"
    EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
    NO_MATCHING_FLAVOR = "NoMatchingFlavor"
    WAITING_FOR_PREEMPTED_WORKLOADS = "WaitingForPreemptedWorkloads"
    TOPOLOGY_PLACEMENT_FAILED = "TopologyPlacementFailed"
    """Quota fits but the gang cannot be placed inside its topology or on free devices."""
    NAMESPACE_MISMATCH = "NamespaceMismatch"
    """The ClusterQueue's namespaceSelector does not select the Workload's namespace."""
    MISCONFIGURED = "Misconfigured"
    """Its LocalQueue or ClusterQueue is missing, or its devices cannot be counted or built."""
    SUSPENDED = "Suspended"
    """Its LocalQueue is stopped or its ClusterQueue inactive."""
    DEACTIVATED = "Deactivated"
    """`spec.active: false` (the operator's cache queues no such Workload)."""


class PreemptionReason(Enum):
    IN_CLUSTER_QUEUE = "InClusterQueue"
    IN_COHORT_RECLAMATION = "InCohortReclamation"
    IN_COHORT_FAIR_SHARING = "InCohortFairSharing"
    IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"


class EvictionReason(Enum):
    CLUSTER_QUEUE_STOPPED = "ClusterQueueStopped"
    LOCAL_QUEUE_STOPPED = "LocalQueueStopped"
    DEACTIVATED = "Deactivated"


class Requeue(Enum):
    """What the queue should do with a workload that stays pending (Kueue's
    ClusterQueue.RequeueIfNotPresent): back into the heap at once, or parked as
    inadmissible until a cluster event (quota freed, a queue or flavor changed)."""

    IMMEDIATE = "Immediate"
    INADMISSIBLE = "Inadmissible"


@dataclass(frozen=True, slots=True, kw_only=True)
class PodSetAdmission:
    name: PodSetName
    count: int
    flavors: tuple[tuple[ResourceName, FlavorName], ...]
    resource_usage: tuple[tuple[ResourceName, int], ...]
    """Totals for all `count` pods; Kueue's podSetAssignments[].resourceUsage."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Shortfall:
    """The numbers behind a pending message, for one flavor and resource."""

    flavor: FlavorName
    resource: ResourceName
    needed: int
    """Requested by this pod set plus earlier pod sets of the workload on this flavor."""
    available: int
    """Unused quota the ClusterQueue can use now, borrowing included."""
    maximum: int
    """The most the ClusterQueue could ever use (nominal + what it may borrow)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Admit:
    workload: WorkloadKey
    cluster_queue: ClusterQueueName
    pod_sets: tuple[PodSetAdmission, ...]
    """Every pod set of the workload, in its order: admission is all or nothing."""
    borrowing: bool
    borrow_level: int = 0
    """Height of the cohort subtree the workload borrows from (0: within nominal)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Victim:
    workload: WorkloadKey
    cluster_queue: ClusterQueueName
    reason: PreemptionReason


@dataclass(frozen=True, slots=True, kw_only=True)
class Preempt:
    """Evict `victims` (whole workloads); the preemptor stays pending
    (WaitingForPreemptedWorkloads) and is retried once their quota is released. Victims
    already being evicted (AdmittedWorkload.evicted) may be named again: evicting is
    idempotent, as in Kueue's IssuePreemptions."""

    workload: WorkloadKey
    cluster_queue: ClusterQueueName
    victims: tuple[Victim, ...]
    pod_sets: tuple[PodSetAdmission, ...]
    """The assignment the preemption makes room for."""
    message: str
    requeue: Requeue = Requeue.IMMEDIATE


@dataclass(frozen=True, slots=True, kw_only=True)
class Pending:
    workload: WorkloadKey
    cluster_queue: ClusterQueueName | None
    reason: PendingReason
    message: str
    requeue: Requeue
    shortfalls: tuple[Shortfall, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Evict:
    """Evict an admitted workload whole (HoldAndDrain, deactivation)."""

    workload: WorkloadKey
    cluster_queue: ClusterQueueName
    reason: EvictionReason
    message: str


Decision = Admit | Preempt | Pending | Evict
