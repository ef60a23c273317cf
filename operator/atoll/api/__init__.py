"""Pydantic models of the Kueue kinds and of the Kubernetes objects atoll reads.

Parse a raw object with `Model.from_dict(raw)` (or `parse_object(raw)` to pick the model from
its apiVersion and kind); write one with `obj.to_dict()` (camelCase, only modelled fields that
are set). Quantities are `Quantity` values holding exact milli-units. `crdgen.generate()` gives
the CRDs. The layer knows nothing about scheduling.
"""

from atoll.api.admissioncheck import AdmissionCheck, CheckState
from atoll.api.clusterqueue import (
    ClusterQueue,
    ClusterQueueSpec,
    ClusterQueueStatus,
    FairSharing,
    FlavorFungibility,
    FlavorQuotas,
    QueueingStrategy,
    ResourceGroup,
    ResourceQuota,
    StopPolicy,
)
from atoll.api.cohort import Cohort, CohortSpec
from atoll.api.core import Job, Namespace, Node, Pod, PodTemplateSpec, PriorityClass, ResourceList
from atoll.api.kinds import KUEUE_KINDS, UnknownKindError, parse_object
from atoll.api.localqueue import LocalQueue, LocalQueueSpec
from atoll.api.meta import Condition, LabelSelector, ObjectMeta
from atoll.api.priority import WorkloadPriorityClass
from atoll.api.quantity import Quantity, QuantityError, format_quantity, parse_quantity
from atoll.api.resource import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from atoll.api.resourceflavor import ResourceFlavor, ResourceFlavorSpec
from atoll.api.topology import Topology, TopologyLevel
from atoll.api.workload import Admission, PodSet, PodSetAssignment, Workload, WorkloadSpec

__all__ = [
    "KUEUE_KINDS",
    "Admission",
    "AdmissionCheck",
    "CheckState",
    "ClusterQueue",
    "ClusterQueueSpec",
    "ClusterQueueStatus",
    "Cohort",
    "CohortSpec",
    "Condition",
    "DeviceClass",
    "FairSharing",
    "FlavorFungibility",
    "FlavorQuotas",
    "Job",
    "LabelSelector",
    "LocalQueue",
    "LocalQueueSpec",
    "Namespace",
    "Node",
    "ObjectMeta",
    "Pod",
    "PodSet",
    "PodSetAssignment",
    "PodTemplateSpec",
    "PriorityClass",
    "Quantity",
    "QuantityError",
    "QueueingStrategy",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "ResourceFlavor",
    "ResourceFlavorSpec",
    "ResourceGroup",
    "ResourceList",
    "ResourceQuota",
    "ResourceSlice",
    "StopPolicy",
    "Topology",
    "TopologyLevel",
    "UnknownKindError",
    "Workload",
    "WorkloadPriorityClass",
    "WorkloadSpec",
    "format_quantity",
    "parse_object",
    "parse_quantity",
]
