"""LocalQueue (kueue.x-k8s.io/v1beta2): the namespaced queue users submit Jobs to.

Mirrors apis/kueue/v1beta2/localqueue_types.go.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Final

from pydantic import Field

from atoll.api.clusterqueue import (
    API_VERSION,
    ClusterQueueName,
    Conditions,
    FairSharing,
    FlavorName,
    StopPolicy,
)
from atoll.api.core import ResourceList
from atoll.api.meta import ApiModel, Int32, Int64, KubeObject, ResourceName, Time, cel, list_map
from atoll.api.quantity import Quantity

DEFAULT_LOCAL_QUEUE: Final = "default"
"""The LocalQueue a new object without a queue name is sent to when its namespace has one of
this name (Kueue's LocalQueue defaulting, always on since Kueue v0.17)."""


class LocalQueueSpec(ApiModel):
    """The desired state of a LocalQueue."""

    cluster_queue: (
        Annotated[
            ClusterQueueName,
            Field(
                json_schema_extra={
                    "x-kubernetes-validations": [cel("self == oldSelf", "field is immutable")]
                }
            ),
        ]
        | None
    ) = None
    """The ClusterQueue that backs this queue; cannot be changed."""
    stop_policy: StopPolicy = StopPolicy.NONE
    """None; Hold: submit nothing new; HoldAndDrain: also evict admitted workloads."""
    fair_sharing: FairSharing | None = None
    """Weight of the queue under Admission Fair Sharing."""


class LocalQueueResourceUsage(ApiModel):
    """Usage of one resource."""

    name: ResourceName
    """The resource."""
    total: Quantity | None = None
    """Quota in use."""


class LocalQueueFlavorUsage(ApiModel):
    """Usage of the resources of one flavor."""

    name: FlavorName
    """The flavor."""
    resources: Annotated[
        tuple[LocalQueueResourceUsage, ...],
        Field(max_length=64, json_schema_extra=list_map("name")),
    ]
    """Usage per resource."""


class LocalQueueAdmissionFairSharingStatus(ApiModel):
    """Decayed resource consumption used by Admission Fair Sharing."""

    consumed_resources: ResourceList
    """Aggregated usage with decay applied."""
    last_update: Time
    """When consumedResources was last updated."""


class LocalQueueFairSharingStatus(ApiModel):
    """Fair-sharing state of a LocalQueue."""

    weighted_share: Int64
    """The queue's weighted share."""
    admission_fair_sharing_status: LocalQueueAdmissionFairSharingStatus | None = None
    """Admission Fair Sharing state."""


LocalQueueFlavorUsages = Annotated[
    tuple[LocalQueueFlavorUsage, ...], Field(max_length=64, json_schema_extra=list_map("name"))
]


class LocalQueueStatus(ApiModel):
    """The observed state of a LocalQueue."""

    conditions: Conditions | None = None
    """Latest observations; type Active tells whether the queue accepts workloads."""
    pending_workloads: Int32 = 0
    """Workloads not yet admitted."""
    reserving_workloads: Int32 = 0
    """Workloads holding a quota reservation."""
    admitted_workloads: Int32 = 0
    """Admitted workloads that have not finished."""
    flavors_reservation: LocalQueueFlavorUsages | None = None
    """Quota reserved per flavor."""
    flavors_usage: LocalQueueFlavorUsages | None = None
    """Quota used per flavor by admitted workloads."""
    fair_sharing: LocalQueueFairSharingStatus | None = None
    """Fair-sharing state."""


class LocalQueue(KubeObject):
    """A namespaced queue that feeds one ClusterQueue."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "LocalQueue"

    spec: LocalQueueSpec = LocalQueueSpec()
    """The desired state."""
    status: LocalQueueStatus = LocalQueueStatus()
    """The observed state."""
