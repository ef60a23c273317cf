"""Which model reads which object: a registry by (apiVersion, kind)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from atoll.api.admissioncheck import AdmissionCheck
from atoll.api.clusterqueue import ClusterQueue
from atoll.api.cohort import Cohort
from atoll.api.core import Job, Namespace, Node, Pod, PriorityClass
from atoll.api.jobset import JobSet
from atoll.api.leaderworkerset import LeaderWorkerSet
from atoll.api.localqueue import LocalQueue
from atoll.api.meta import KubeObject
from atoll.api.mpijob import MPIJob
from atoll.api.priority import WorkloadPriorityClass
from atoll.api.resource import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from atoll.api.resourceflavor import ResourceFlavor
from atoll.api.topology import Topology
from atoll.api.trainjob import ClusterTrainingRuntime, TrainingRuntime, TrainJob
from atoll.api.workload import Workload

KUEUE_KINDS: Final[tuple[type[KubeObject], ...]] = (
    ClusterQueue,
    LocalQueue,
    ResourceFlavor,
    Cohort,
    Topology,
    WorkloadPriorityClass,
    AdmissionCheck,
    Workload,
)
"""The kueue.x-k8s.io/v1beta2 kinds atoll serves."""

READ_KINDS: Final[tuple[type[KubeObject], ...]] = (
    Job,
    JobSet,
    MPIJob,
    TrainJob,
    TrainingRuntime,
    ClusterTrainingRuntime,
    LeaderWorkerSet,
    Pod,
    Node,
    PriorityClass,
    Namespace,
    DeviceClass,
    ResourceSlice,
    ResourceClaim,
    ResourceClaimTemplate,
)
"""The Kubernetes kinds atoll only reads."""

MODELS: Final[Mapping[tuple[str, str], type[KubeObject]]] = {
    (model.API_VERSION, model.KIND): model for model in (*KUEUE_KINDS, *READ_KINDS)
}


class UnknownKindError(ValueError):
    """An object whose apiVersion and kind atoll has no model for."""


def parse_object(raw: Mapping[str, Any]) -> KubeObject:
    """Parse a raw object into the model its apiVersion and kind name."""
    key = (str(raw.get("apiVersion", "")), str(raw.get("kind", "")))
    model = MODELS.get(key)
    if model is None:
        raise UnknownKindError(f"no model for apiVersion={key[0]!r} kind={key[1]!r}")
    return model.model_validate(raw)
