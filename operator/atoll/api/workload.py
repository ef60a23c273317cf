"""Workload (kueue.x-k8s.io/v1beta2): the unit of admission, one per Job.

Mirrors apis/kueue/v1beta2/workload_types.go. A podSet's `template` is a whole PodTemplateSpec:
the CRD preserves it without a schema and the model keeps every field of it, so a Job's
template can be restored exactly from its Workload.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Final

from pydantic import ConfigDict, Field, StringConstraints

from atoll.api.admissioncheck import CheckState
from atoll.api.clusterqueue import (
    API_VERSION,
    AdmissionCheckName,
    ClusterQueueName,
    Conditions,
    FlavorName,
)
from atoll.api.core import PodTemplateSpec, ResourceList
from atoll.api.meta import (
    ATOMIC,
    DNS1123_LABEL,
    INTERNED,
    ApiModel,
    DnsSubdomain,
    Int32,
    KubeObject,
    StrEnum,
    Time,
    cel,
    list_map,
    validations,
)
from atoll.api.resourceflavor import Tolerations
from atoll.api.topologyassignment import DelayedTopologyRequestState, TopologyAssignment

MAIN_POD_SET: Final = "main"

PodSetName = Annotated[str, StringConstraints(max_length=63, pattern=DNS1123_LABEL), INTERNED]


class WorkloadConditionType(StrEnum):
    """Condition types of a Workload."""

    QUOTA_RESERVED = "QuotaReserved"
    ADMITTED = "Admitted"
    EVICTED = "Evicted"
    PREEMPTED = "Preempted"
    REQUEUED = "Requeued"
    PODS_READY = "PodsReady"
    FINISHED = "Finished"
    DEACTIVATION_TARGET = "DeactivationTarget"


class PriorityClassGroup(StrEnum):
    """API group of the class a Workload's priority comes from."""

    KUEUE = "kueue.x-k8s.io"
    SCHEDULING = "scheduling.k8s.io"


class PriorityClassKind(StrEnum):
    """Kind of the class a Workload's priority comes from."""

    WORKLOAD_PRIORITY_CLASS = "WorkloadPriorityClass"
    PRIORITY_CLASS = "PriorityClass"


class PriorityClassRef(ApiModel):
    """The class a Workload's priority was taken from."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.group != 'scheduling.k8s.io' || self.kind == 'PriorityClass'",
                "only the PriorityClass kind is allowed for the scheduling.k8s.io group",
            ),
            cel(
                "self.group != 'kueue.x-k8s.io' || self.kind == 'WorkloadPriorityClass'",
                "only the WorkloadPriorityClass kind is allowed for the kueue.x-k8s.io group",
            ),
        )
    )

    group: PriorityClassGroup
    """kueue.x-k8s.io or scheduling.k8s.io."""
    kind: PriorityClassKind
    """WorkloadPriorityClass or PriorityClass."""
    name: Annotated[str, StringConstraints(min_length=1, max_length=253), INTERNED]
    """Name of the class."""


class PodsetSliceRequiredTopologyConstraint(ApiModel):
    """One level of a multi-level slice request."""

    topology: Annotated[str, StringConstraints(min_length=1, max_length=63)]
    """The topology level each slice must fit in."""
    size: Annotated[Int32, Field(ge=1)]
    """Pods per slice."""


class PodSetTopologyRequest(ApiModel):
    """Where the pods of a podSet must or should be placed in the topology."""

    required: Annotated[str, StringConstraints(max_length=63)] | None = None
    """Level (node label) within one domain of which all pods must run."""
    preferred: Annotated[str, StringConstraints(max_length=63)] | None = None
    """Level within one domain of which the pods should run, widening level by level."""
    unconstrained: bool | None = None
    """Topology-aware placement without a compactness requirement."""
    pod_index_label: Annotated[str, StringConstraints(max_length=317)] | None = None
    """Pod label holding the pod's index in the podSet."""
    sub_group_index_label: Annotated[str, StringConstraints(max_length=317)] | None = None
    """Pod label holding the index of the pod's replica group."""
    sub_group_count: Annotated[Int32, Field(ge=0)] | None = None
    """Number of replica groups."""
    pod_set_group_name: Annotated[str, StringConstraints(max_length=256)] | None = None
    """PodSets with the same group name are placed in the same domain."""
    pod_set_slice_required_topology: Annotated[str, StringConstraints(max_length=63)] | None = None
    """Level within one domain of which each slice of the podSet must run."""
    pod_set_slice_size: Annotated[Int32, Field(ge=1)] | None = None
    """Pods per slice."""
    podset_slice_required_topology_constraints: (
        Annotated[
            tuple[PodsetSliceRequiredTopologyConstraint, ...],
            Field(max_length=3, json_schema_extra=ATOMIC),
        ]
        | None
    ) = None
    """Slices within slices, one level each (at most 3)."""


class PodSet(ApiModel):
    """A group of identical pods of a Workload."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.minCount) || self.minCount <= self.count",
                "minCount should be positive and less or equal to count",
                field_path=".minCount",
            )
        )
    )

    name: PodSetName = MAIN_POD_SET
    """Name of the podSet, unique in the Workload."""
    template: Annotated[
        PodTemplateSpec, Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    ]
    """The pod template, kept whole."""
    count: Annotated[Int32, Field(ge=0)] = 1
    """Number of pods."""
    min_count: Annotated[Int32, Field(ge=1)] | None = None
    """Smallest number of pods the podSet may be admitted with (partial admission)."""
    topology_request: PodSetTopologyRequest | None = None
    """Topology placement request."""


class PreemptionGate(ApiModel):
    """A gate that keeps a Workload from preempting while closed."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=63)]
    """Name of the gate."""


class WorkloadSpec(ApiModel):
    """The desired state of a Workload."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.priorityClassRef) || has(self.priority)",
                "priority should not be nil when priorityClassRef is set",
                field_path=".priority",
            )
        )
    )

    pod_sets: Annotated[
        tuple[PodSet, ...], Field(min_length=1, max_length=18, json_schema_extra=list_map("name"))
    ]
    """The podSets of the gang (1 to 18), admitted all together."""
    queue_name: DnsSubdomain | None = None
    """The LocalQueue the Workload is submitted to."""
    priority_class_ref: PriorityClassRef | None = None
    """Where the priority came from."""
    priority: Int32 | None = None
    """Priority of the Workload; higher is more important."""
    active: bool = True
    """False evicts the Workload and keeps it from being admitted."""
    maximum_execution_time_seconds: Annotated[Int32, Field(ge=1)] | None = None
    """Run time after which the Workload is deactivated."""
    preemption_gates: (
        Annotated[
            tuple[PreemptionGate, ...], Field(max_length=8, json_schema_extra=list_map("name"))
        ]
        | None
    ) = None
    """Gates that keep the Workload from preempting."""


class PodSetAssignment(ApiModel):
    """The flavors and quota a podSet was admitted with."""

    name: PodSetName = MAIN_POD_SET
    """Name of the podSet."""
    flavors: dict[str, FlavorName] | None = None
    """Flavor assigned to each resource."""
    resource_usage: ResourceList | None = None
    """Quota charged for all pods of the podSet, per resource."""
    count: Annotated[Int32, Field(ge=0)] | None = None
    """Number of pods admitted (may be below the podSet's count with partial admission)."""
    topology_assignment: TopologyAssignment | None = None
    """Topology domains of the pods."""
    delayed_topology_request: DelayedTopologyRequestState | None = None
    """Whether the topology assignment is still to be computed."""


class Admission(ApiModel):
    """Where and with what a Workload was admitted."""

    cluster_queue: ClusterQueueName
    """The ClusterQueue that reserved quota."""
    pod_set_assignments: Annotated[
        tuple[PodSetAssignment, ...], Field(max_length=18, json_schema_extra=list_map("name"))
    ]
    """One assignment per podSet."""


class RequeueState(ApiModel):
    """Backoff state of a requeued Workload."""

    count: Annotated[Int32, Field(ge=0)] | None = None
    """Times the Workload was requeued after a pods-ready timeout."""
    requeue_at: Time | None = None
    """When the Workload becomes eligible again."""


class ReclaimablePod(ApiModel):
    """Pods of a podSet that finished and whose quota can be released."""

    name: PodSetName
    """Name of the podSet."""
    count: Annotated[Int32, Field(ge=0)]
    """Number of reclaimable pods."""


class PodSetUpdate(ApiModel):
    """Changes an AdmissionCheck asks for on the pods of a podSet."""

    name: PodSetName
    """Name of the podSet."""
    labels: dict[str, str] | None = None
    """Labels to add."""
    annotations: dict[str, str] | None = None
    """Annotations to add."""
    node_selector: dict[str, str] | None = None
    """Node selector entries to add."""
    tolerations: Tolerations | None = None
    """Tolerations to add."""


class AdmissionCheckState(ApiModel):
    """State of one AdmissionCheck for this Workload."""

    name: AdmissionCheckName
    """Name of the AdmissionCheck."""
    state: CheckState
    """Pending, Ready, Retry or Rejected."""
    last_transition_time: Time
    """When the state last changed."""
    message: Annotated[str, StringConstraints(max_length=32768)]
    """Details of the state."""
    requeue_after_seconds: Annotated[Int32, Field(ge=0)] | None = None
    """Delay before a Retry is attempted."""
    retry_count: Annotated[Int32, Field(ge=0)] | None = None
    """Retries so far."""
    pod_set_updates: (
        Annotated[tuple[PodSetUpdate, ...], Field(max_length=18, json_schema_extra=ATOMIC)] | None
    ) = None
    """Changes to apply to the pods when the Job starts."""


class PodSetRequest(ApiModel):
    """Resources requested by all pods of a podSet."""

    name: PodSetName
    """Name of the podSet."""
    resources: ResourceList | None = None
    """Total requests of the podSet, per resource."""


class WorkloadSchedulingStatsEviction(ApiModel):
    """How often the Workload was evicted for a reason."""

    reason: Annotated[str, StringConstraints(max_length=316)]
    """The eviction reason."""
    underlying_cause: Annotated[str, StringConstraints(max_length=316)]
    """The cause behind the reason, or empty."""
    count: Annotated[Int32, Field(ge=0)]
    """Number of evictions."""


class SchedulingStats(ApiModel):
    """Scheduling statistics of a Workload."""

    evictions: (
        Annotated[
            tuple[WorkloadSchedulingStatsEviction, ...],
            Field(max_length=256, json_schema_extra=list_map("reason", "underlyingCause")),
        ]
        | None
    ) = None
    """Evictions by reason and cause."""


class UnhealthyNode(ApiModel):
    """A node the Workload's pods must be moved off."""

    name: Annotated[str, StringConstraints(max_length=63)]
    """Name of the node."""


class PreemptionGatePosition(StrEnum):
    """Whether a preemption gate blocks."""

    CLOSED = "Closed"
    OPEN = "Open"


class PreemptionGateState(ApiModel):
    """Current position of a preemption gate."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=63)]
    """Name of the gate."""
    position: PreemptionGatePosition
    """Closed or Open."""
    last_transition_time: Time
    """When the position last changed."""


class WorkloadStatus(ApiModel):
    """The observed state of a Workload."""

    conditions: Conditions | None = None
    """Latest observations: QuotaReserved, Admitted, Evicted, Finished, ..."""
    admission: Admission | None = None
    """Where and with what the Workload was admitted."""
    requeue_state: RequeueState | None = None
    """Backoff state after eviction."""
    reclaimable_pods: (
        Annotated[
            tuple[ReclaimablePod, ...], Field(max_length=18, json_schema_extra=list_map("name"))
        ]
        | None
    ) = None
    """Finished pods whose quota can be released."""
    admission_checks: (
        Annotated[
            tuple[AdmissionCheckState, ...], Field(max_length=8, json_schema_extra=list_map("name"))
        ]
        | None
    ) = None
    """States of the AdmissionChecks."""
    resource_requests: (
        Annotated[
            tuple[PodSetRequest, ...], Field(max_length=18, json_schema_extra=list_map("name"))
        ]
        | None
    ) = None
    """Total requests per podSet while pending."""
    accumulated_past_execution_time_seconds: Int32 | None = None
    """Run time before the last eviction."""
    scheduling_stats: SchedulingStats | None = None
    """Eviction statistics."""
    nominated_cluster_names: (
        Annotated[
            tuple[Annotated[str, StringConstraints(max_length=256)], ...],
            Field(max_length=20, json_schema_extra=ATOMIC),
        ]
        | None
    ) = None
    """MultiKueue worker clusters considered."""
    cluster_name: Annotated[str, StringConstraints(max_length=256)] | None = None
    """MultiKueue worker cluster chosen."""
    unhealthy_nodes: (
        Annotated[
            tuple[UnhealthyNode, ...], Field(max_length=8, json_schema_extra=list_map("name"))
        ]
        | None
    ) = None
    """Nodes to move the pods off."""
    preemption_gates: (
        Annotated[
            tuple[PreemptionGateState, ...], Field(max_length=8, json_schema_extra=list_map("name"))
        ]
        | None
    ) = None
    """Positions of the preemption gates."""


def _condition_true(obj: str, condition: str) -> str:
    """CEL: `obj` has the condition `condition` with status True."""
    return (
        f"(has({obj}.status) && has({obj}.status.conditions) && {obj}.status.conditions"
        f".exists(c, c.type == '{condition}' && c.status == 'True'))"
    )


def _reserved(obj: str) -> str:
    return _condition_true(obj, "QuotaReserved")


def _admitted(obj: str) -> str:
    return _condition_true(obj, "Admitted")


class Workload(KubeObject):
    """The unit of admission: the podSets of one Job, admitted all or nothing."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "Workload"

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                f"{_reserved('self')} && has(self.status.admission)"
                " ? size(self.spec.podSets) == size(self.status.admission.podSetAssignments)"
                " : true",
                "podSetAssignments must have the same number of podSets as the spec",
            ),
            cel(
                f"({_reserved('oldSelf')} && {_reserved('self')})"
                " ? (has(oldSelf.spec.queueName) == has(self.spec.queueName)"
                " && (!has(oldSelf.spec.queueName)"
                " || oldSelf.spec.queueName == self.spec.queueName)) : true",
                "queueName is immutable while workload quota reserved",
            ),
            cel(
                f"{_reserved('oldSelf')}"
                " ? has(oldSelf.spec.priorityClassRef) == has(self.spec.priorityClassRef)"
                " : true",
                "priorityClassRef is immutable while workload quota reserved",
            ),
            cel(
                f"({_reserved('oldSelf')} && has(oldSelf.spec.priorityClassRef)"
                " && has(self.spec.priorityClassRef))"
                " ? oldSelf.spec.priorityClassRef.group == self.spec.priorityClassRef.group"
                " && oldSelf.spec.priorityClassRef.kind == self.spec.priorityClassRef.kind"
                " : true",
                "priorityClassRef.group and priorityClassRef.kind are immutable while"
                " workload quota reserved",
            ),
            cel(
                f"({_reserved('oldSelf')} && has(oldSelf.spec.priorityClassRef)"
                " && has(self.spec.priorityClassRef)"
                " && self.spec.priorityClassRef.group == 'scheduling.k8s.io')"
                " ? oldSelf.spec.priorityClassRef.name == self.spec.priorityClassRef.name : true",
                "priorityClassRef.name is immutable for scheduling.k8s.io/priorityclass while"
                " workload quota reserved",
            ),
            cel(
                f"({_admitted('oldSelf')} && {_admitted('self')})"
                " ? (has(oldSelf.spec.maximumExecutionTimeSeconds)"
                " ? oldSelf.spec.maximumExecutionTimeSeconds : 0)"
                " == (has(self.spec.maximumExecutionTimeSeconds)"
                " ? self.spec.maximumExecutionTimeSeconds : 0) : true",
                "maximumExecutionTimeSeconds is immutable while workload quota reserved",
            ),
        )
    )

    spec: WorkloadSpec
    """The desired state."""
    status: WorkloadStatus = WorkloadStatus()
    """The observed state."""

    def condition(self, type_: str) -> bool:
        """Whether the condition `type_` is True."""
        return any(c.type == type_ and c.status == "True" for c in self.status.conditions or ())
