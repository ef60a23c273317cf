"""Read model of an MPIJob (`kubeflow.org/v2beta1`, mpi-operator): the fields atoll reads to
admit it as one gang of two pod sets, the launcher and the workers. atoll never writes these
models back: starting and stopping an MPIJob patches its raw object (`atoll.kube.writers`), so
fields atoll does not model survive.
"""

from __future__ import annotations

from typing import ClassVar, Final

from pydantic import Field

from atoll.api.core import JobCondition, PodTemplateSpec
from atoll.api.meta import ApiModel, Int32, KubeObject

GROUP: Final = "kubeflow.org"
VERSION: Final = "v2beta1"
PLURAL: Final = "mpijobs"
LAUNCHER: Final = "Launcher"
WORKER: Final = "Worker"
REPLICA_TYPES: Final = (LAUNCHER, WORKER)
"""The replica types, in pod-set order (Kueue's: launcher first)."""
JOB_NAME_LABEL: Final = "training.kubeflow.org/job-name"
"""Label mpi-operator puts on the launcher's and the workers' pods."""
REPLICA_TYPE_LABEL: Final = "training.kubeflow.org/job-role"
"""`launcher` or `worker` on the pods mpi-operator creates."""
REPLICA_INDEX_LABEL: Final = "training.kubeflow.org/replica-index"
"""The pod's index among its replica type (TAS's pod index label)."""


class ReplicaSpec(ApiModel):
    """The pods of one replica type."""

    replicas: Int32 | None = None
    """How many pods (default 1)."""
    template: PodTemplateSpec = PodTemplateSpec()
    """Their pod template; the pod set's template."""


class SchedulingPolicy(ApiModel):
    """Gang-scheduling hints of the run policy (atoll reads only the priority class)."""

    priority_class: str | None = None
    """PriorityClass of the MPIJob; wins over the pod templates' priorityClassName."""


class RunPolicy(ApiModel):
    """How the MPIJob runs."""

    suspend: bool | None = None
    """Whether mpi-operator keeps the launcher Job suspended and deletes the worker pods."""
    scheduling_policy: SchedulingPolicy | None = None
    """Gang-scheduling hints."""


class MPIJobSpec(ApiModel):
    """The MPIJob spec fields atoll reads."""

    mpi_replica_specs: dict[str, ReplicaSpec] = Field(default_factory=dict)
    """The `Launcher` and `Worker` replica specs."""
    run_policy: RunPolicy = RunPolicy()
    """Suspension and scheduling policy."""
    run_launcher_as_worker: bool | None = None
    """Whether the launcher also runs MPI ranks (it is still one pod of its own pod set)."""


class ReplicaStatus(ApiModel):
    """Pod counts of one replica type."""

    active: Int32 = 0
    """Pods pending or running."""
    succeeded: Int32 = 0
    """Pods that succeeded."""
    failed: Int32 = 0
    """Pods that failed."""


class MPIJobStatus(ApiModel):
    """The MPIJob status fields atoll reads."""

    conditions: tuple[JobCondition, ...] | None = None
    """Created, Running, Restarting, Suspended, Succeeded, Failed."""
    replica_statuses: dict[str, ReplicaStatus] | None = None
    """Pod counts by replica type."""


class MPIJob(KubeObject):
    """An MPIJob."""

    API_VERSION: ClassVar[str] = f"{GROUP}/{VERSION}"
    KIND: ClassVar[str] = "MPIJob"

    spec: MPIJobSpec = MPIJobSpec()
    """The MPIJob spec."""
    status: MPIJobStatus = MPIJobStatus()
    """The MPIJob status."""
