"""Read models of the core Kubernetes objects atoll looks at: Jobs, Pods, Nodes, PriorityClasses
and Namespaces, plus the Taint and Toleration types Kueue's ResourceFlavor embeds.

Pod templates and the pod spec are `PreservingModel`s: a Workload stores the Job's template and
atoll writes it back when it stops a Job, so fields atoll does not model (volumes, env,
commands, ...) must survive. Only the fields atoll reasons about are typed.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import StringConstraints

from atoll.api.meta import (
    ApiModel,
    Condition,
    Int32,
    KubeObject,
    ObjectMeta,
    PreservingModel,
    StrEnum,
    Time,
)
from atoll.api.quantity import Quantity

ResourceList = dict[str, Quantity]
"""Quantities by resource name (`cpu`, `memory`, `nvidia.com/gpu`, ...)."""


class TaintEffect(StrEnum):
    """What happens to pods that do not tolerate a taint."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Taint(ApiModel):
    """A node taint."""

    key: Annotated[str, StringConstraints(max_length=317)]
    """The taint key (a qualified name)."""
    value: Annotated[str, StringConstraints(max_length=63)] | None = None
    """The taint value."""
    effect: Annotated[str, StringConstraints(max_length=32)]
    """NoSchedule, PreferNoSchedule or NoExecute."""
    time_added: Time | None = None
    """When a NoExecute taint was added."""


class Toleration(ApiModel):
    """A pod toleration of node taints."""

    key: str | None = None
    """The taint key it applies to; empty with operator Exists matches every key."""
    operator: str | None = None
    """Equal (the default) or Exists."""
    value: str | None = None
    """The taint value to match when the operator is Equal."""
    effect: str | None = None
    """The taint effect to match; empty matches all effects."""
    toleration_seconds: int | None = None
    """How long a NoExecute taint is tolerated; unset means forever."""

    def tolerates(self, taint: Taint) -> bool:
        """Whether this toleration tolerates `taint` (core/v1 ToleratesTaint)."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        if not self.key:
            return False
        return (self.value or "") == (taint.value or "")


class ResourceClaimRef(ApiModel):
    """A container's reference to one of the pod's resource claims."""

    name: str
    """Name of the pod-level resource claim."""
    request: str | None = None
    """One request of the claim; empty means the whole claim."""


class ResourceRequirements(PreservingModel):
    """Compute resources of a container."""

    requests: ResourceList | None = None
    """Minimum resources the container needs."""
    limits: ResourceList | None = None
    """Maximum resources the container may use."""
    claims: tuple[ResourceClaimRef, ...] | None = None
    """DRA claims the container uses."""


class Container(PreservingModel):
    """A container of a pod (only its name, image and resources are typed)."""

    name: str
    """Name of the container."""
    image: str | None = None
    """Container image."""
    resources: ResourceRequirements | None = None
    """Compute resources."""


class PodResourceClaim(ApiModel):
    """A pod-level DRA claim: by name, or generated from a template."""

    name: str
    """Name of the claim inside the pod."""
    resource_claim_name: str | None = None
    """An existing ResourceClaim in the pod's namespace."""
    resource_claim_template_name: str | None = None
    """A ResourceClaimTemplate to generate a claim from."""


class NodeSelectorRequirement(ApiModel):
    """A node selector requirement."""

    key: str
    """The label or field key."""
    operator: str
    """In, NotIn, Exists, DoesNotExist, Gt or Lt."""
    values: tuple[str, ...] | None = None
    """Values of the requirement."""


class NodeSelectorTerm(ApiModel):
    """One term of a node selector; its requirements are ANDed."""

    match_expressions: tuple[NodeSelectorRequirement, ...] | None = None
    """Requirements on node labels."""
    match_fields: tuple[NodeSelectorRequirement, ...] | None = None
    """Requirements on node fields."""


class NodeSelector(ApiModel):
    """A node selector; its terms are ORed."""

    node_selector_terms: tuple[NodeSelectorTerm, ...] = ()
    """The terms."""


class PodSchedulingGate(ApiModel):
    """A gate that keeps a pod out of scheduling while present."""

    name: str
    """Name of the gate."""


class PodSpec(PreservingModel):
    """The pod spec fields atoll reads; other fields are kept as they are."""

    containers: tuple[Container, ...] = ()
    """Containers of the pod."""
    init_containers: tuple[Container, ...] | None = None
    """Init containers; restartable ones (sidecars) run alongside the main containers."""
    node_selector: dict[str, str] | None = None
    """Node labels the pod requires."""
    affinity: dict[str, Any] | None = None
    """Node and pod (anti-)affinity, kept in its raw form."""
    tolerations: tuple[Toleration, ...] | None = None
    """Tolerations of node taints."""
    scheduling_gates: tuple[PodSchedulingGate, ...] | None = None
    """Gates that keep the pod unscheduled while present."""
    priority_class_name: str | None = None
    """Name of the PriorityClass of the pod."""
    priority: int | None = None
    """Priority value resolved by the API server."""
    resource_claims: tuple[PodResourceClaim, ...] | None = None
    """DRA claims of the pod."""
    node_name: str | None = None
    """Node the pod is bound to."""
    overhead: ResourceList | None = None
    """Resources charged for the pod sandbox."""


class PodTemplateMeta(PreservingModel):
    """Labels and annotations of a pod template."""

    labels: dict[str, str] | None = None
    """Labels of the pods."""
    annotations: dict[str, str] | None = None
    """Annotations of the pods."""


class PodTemplateSpec(PreservingModel):
    """A pod template: metadata and a pod spec."""

    metadata: PodTemplateMeta | None = None
    """Labels and annotations of the pods."""
    spec: PodSpec = PodSpec()
    """The pod spec."""


class PodCondition(ApiModel):
    """A pod condition (Ready, PodScheduled, ...)."""

    type: str
    """Type of the condition."""
    status: str
    """True, False or Unknown."""
    reason: str | None = None
    """Reason of the last transition."""
    message: str | None = None
    """Details of the last transition."""


class PodResourceClaimStatus(ApiModel):
    """The ResourceClaim generated for one of a pod's claims."""

    name: str
    """Name of the claim inside the pod."""
    resource_claim_name: str | None = None
    """Name of the generated ResourceClaim; unset when none is needed."""


class PodStatus(ApiModel):
    """The pod status fields atoll reads."""

    phase: str | None = None
    """Pending, Running, Succeeded, Failed or Unknown."""
    message: str | None = None
    """Why the pod is in its phase (the kubelet's words)."""
    conditions: tuple[PodCondition, ...] | None = None
    """Current conditions of the pod."""
    resource_claim_statuses: tuple[PodResourceClaimStatus, ...] | None = None
    """Generated ResourceClaims of the pod."""


class Pod(KubeObject):
    """A core/v1 Pod."""

    API_VERSION: ClassVar[str] = "v1"
    KIND: ClassVar[str] = "Pod"

    spec: PodSpec = PodSpec()
    """The pod spec."""
    status: PodStatus = PodStatus()
    """The pod status."""


class JobSpec(ApiModel):
    """The batch/v1 Job spec fields atoll reads and writes."""

    parallelism: Int32 | None = None
    """Pods running at once; the gang size."""
    completions: Int32 | None = None
    """Successful pods needed; unset means parallelism."""
    completion_mode: str | None = None
    """NonIndexed or Indexed."""
    suspend: bool | None = None
    """Whether the Job controller creates no pods."""
    backoff_limit: Int32 | None = None
    """Retries before the Job is failed."""
    active_deadline_seconds: int | None = None
    """Run time limit of the Job."""
    managed_by: str | None = None
    """Controller that manages the Job, if not the built-in one."""
    template: PodTemplateSpec = PodTemplateSpec()
    """Template of the Job's pods."""


class JobCondition(ApiModel):
    """A Job condition (Complete, Failed, Suspended, ...)."""

    type: str
    """Type of the condition."""
    status: str
    """True, False or Unknown."""
    reason: str | None = None
    """Reason of the last transition."""
    message: str | None = None
    """Details of the last transition."""


class UncountedTerminatedPods(ApiModel):
    """UIDs of finished pods not yet counted in the Job status."""

    succeeded: tuple[str, ...] | None = None
    """Succeeded pods."""
    failed: tuple[str, ...] | None = None
    """Failed pods."""


class JobStatus(ApiModel):
    """The batch/v1 Job status fields atoll reads."""

    active: int | None = None
    """Pods that are pending or running."""
    ready: int | None = None
    """Active pods with the Ready condition."""
    succeeded: int | None = None
    """Pods that succeeded."""
    failed: int | None = None
    """Pods that failed."""
    start_time: Time | None = None
    """When the Job controller started the Job."""
    completion_time: Time | None = None
    """When the Job completed."""
    conditions: tuple[JobCondition, ...] | None = None
    """Current conditions of the Job."""
    uncounted_terminated_pods: UncountedTerminatedPods | None = None
    """Finished pods not yet counted."""
    completed_indexes: str | None = None
    """Indexed Jobs: the indexes that succeeded, as intervals (`1,3-5`)."""
    failed_indexes: str | None = None
    """Indexed Jobs with a backoff limit per index: the indexes that failed for good."""


class Job(KubeObject):
    """A batch/v1 Job."""

    API_VERSION: ClassVar[str] = "batch/v1"
    KIND: ClassVar[str] = "Job"

    spec: JobSpec = JobSpec()
    """The Job spec."""
    status: JobStatus = JobStatus()
    """The Job status."""


class NodeSpec(ApiModel):
    """The node spec fields atoll reads."""

    taints: tuple[Taint, ...] | None = None
    """Taints of the node."""
    unschedulable: bool | None = None
    """Whether the node is cordoned."""


class NodeStatus(ApiModel):
    """The node status fields atoll reads."""

    capacity: ResourceList | None = None
    """Total resources of the node."""
    allocatable: ResourceList | None = None
    """Resources available to pods."""
    conditions: tuple[PodCondition, ...] | None = None
    """Node conditions (Ready, ...)."""


class Node(KubeObject):
    """A core/v1 Node."""

    API_VERSION: ClassVar[str] = "v1"
    KIND: ClassVar[str] = "Node"

    spec: NodeSpec = NodeSpec()
    """The node spec."""
    status: NodeStatus = NodeStatus()
    """The node status."""


class PriorityClass(KubeObject):
    """A scheduling.k8s.io/v1 PriorityClass."""

    API_VERSION: ClassVar[str] = "scheduling.k8s.io/v1"
    KIND: ClassVar[str] = "PriorityClass"

    value: Int32
    """Priority of pods using this class."""
    global_default: bool | None = None
    """Whether pods without a class get this one."""
    preemption_policy: str | None = None
    """PreemptLowerPriority (default) or Never."""
    description: str | None = None
    """When to use this class."""


class Namespace(KubeObject):
    """A core/v1 Namespace (its labels select ClusterQueues)."""

    API_VERSION: ClassVar[str] = "v1"
    KIND: ClassVar[str] = "Namespace"


__all__ = [
    "Condition",
    "Container",
    "Job",
    "JobCondition",
    "JobSpec",
    "JobStatus",
    "Namespace",
    "Node",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "NodeSpec",
    "NodeStatus",
    "ObjectMeta",
    "Pod",
    "PodCondition",
    "PodResourceClaim",
    "PodResourceClaimStatus",
    "PodSchedulingGate",
    "PodSpec",
    "PodStatus",
    "PodTemplateMeta",
    "PodTemplateSpec",
    "PriorityClass",
    "ResourceClaimRef",
    "ResourceList",
    "ResourceRequirements",
    "Taint",
    "TaintEffect",
    "Toleration",
    "UncountedTerminatedPods",
]
