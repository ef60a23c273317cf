"""The ports through which the control layer changes the cluster; `atoll.kube` implements them
with kubernetes_asyncio, tests with fakes. Every method is idempotent and retries conflicts."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from atoll.api.clusterqueue import ClusterQueueStatus
from atoll.api.core import Job, PodTemplateSpec
from atoll.api.localqueue import LocalQueueStatus
from atoll.api.meta import KubeObject, OwnerReference
from atoll.api.workload import Workload, WorkloadSpec, WorkloadStatus
from atoll.control.jobframework import JobStart, TemplateStart


class NotFoundError(LookupError):
    """The object to change no longer exists."""


class ApiError(RuntimeError):
    """The API server refused a request; `message` is its own explanation."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


StatusMutation = Callable[[Workload], WorkloadStatus | None]
"""Given the freshest Workload, the status to write (None: nothing to change)."""


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """What an Event is about."""

    kind: str
    api_version: str
    namespace: str
    name: str
    uid: str

    @classmethod
    def of(cls, obj: KubeObject, kind: str, api_version: str) -> ObjectRef:
        """The reference to `obj` (its namespace, name and uid) as a `kind`."""
        return cls(kind, api_version, obj.namespace or "", obj.name, obj.metadata.uid or "")


class WorkloadStore(Protocol):
    async def create_workload(self, wl: Workload) -> Workload: ...

    async def update_workload_status(
        self, key: str, mutate: StatusMutation, *, confirm_unchanged: bool = False
    ) -> Workload | None:
        """Read the Workload, apply `mutate`, write the status with the read resourceVersion;
        on a conflict read again and retry. None when `mutate` changed nothing; with
        `confirm_unchanged`, only when it changes nothing on the server's current version."""
        ...

    async def update_workload_spec(self, key: str, spec: WorkloadSpec) -> Workload:
        """Replace the spec fields atoll models (others are kept), retrying conflicts. Kueue's
        CRD keeps `queueName` immutable while quota is reserved: release it first."""
        ...

    async def remove_workload_finalizer(self, key: str, finalizer: str) -> None: ...

    async def delete_workload(self, key: str) -> None:
        """Delete the Workload (gone already is fine)."""

    async def deactivate_workload(self, key: str) -> None:
        """Set `spec.active: false` (Kueue's deactivation after too many requeues)."""
        ...


class JobStore(Protocol):
    async def start_job(self, key: str, plan: JobStart, seen: Job | None = None) -> None:
        """Unsuspend the Job and merge the admission into its pod template (one patch; `seen`,
        the Job as last seen, spares reading it first)."""
        ...

    async def stop_job(self, key: str, template: PodTemplateSpec, parallelism: int | None) -> None:
        """Suspend the Job, then restore its pod template (and parallelism) exactly."""
        ...

    async def suspend_job(self, key: str) -> None: ...


class JobSetStore(Protocol):
    async def start_jobset(self, key: str, plans: Mapping[str, TemplateStart]) -> None:
        """Unsuspend the JobSet and merge each replicated job's admission (by name) into its
        pod template (one write)."""
        ...

    async def stop_jobset(self, key: str, templates: Mapping[str, PodTemplateSpec]) -> None:
        """Suspend the JobSet and restore each replicated job's pod template exactly."""
        ...

    async def suspend_jobset(self, key: str) -> None: ...


class MPIJobStore(Protocol):
    async def start_mpijob(self, key: str, plans: Mapping[str, TemplateStart]) -> None:
        """Unsuspend the MPIJob (`spec.runPolicy.suspend`) and merge each replica type's
        admission (by replica type: Launcher, Worker) into its pod template (one write)."""
        ...

    async def stop_mpijob(self, key: str, templates: Mapping[str, PodTemplateSpec]) -> None:
        """Suspend the MPIJob and restore each replica type's pod template exactly."""
        ...

    async def suspend_mpijob(self, key: str) -> None: ...


class TrainJobStore(Protocol):
    async def start_trainjob(self, key: str, overrides: Sequence[Mapping[str, Any]]) -> None:
        """Append the admission's pod spec overrides (after those before a stale recorded
        index) and record their index while the TrainJob is still suspended, then unsuspend
        it (two writes: Trainer refuses override changes of a TrainJob not suspended)."""
        ...

    async def stop_trainjob(self, key: str) -> None:
        """Suspend the TrainJob, then cut its pod spec overrides back to the recorded index."""
        ...

    async def suspend_trainjob(self, key: str) -> None: ...


class PodGroupStore(Protocol):
    async def start_pod(self, key: str, plan: TemplateStart) -> None:
        """Merge the admission into the gated pod (labels, annotations, nodeSelector,
        tolerations) and set its scheduling gates to `plan.scheduling_gates`."""
        ...

    async def delete_pod(self, key: str) -> None:
        """Delete a pod that its controller recreates (a LeaderWorkerSet group's, to stop
        the group); a pod already gone is no error."""
        ...

    async def mark_termination_target(self, key: str, reason: str, message: str) -> None:
        """Set the pod's `TerminationTarget` condition (True, `reason`, `message`) before it
        is deleted to stop its group; a pod already gone is no error."""
        ...

    async def emit(self, ref: ObjectRef, type_: str, reason: str, message: str) -> None:
        """Record an Event (about a pod, or a group's Workload)."""
        ...

    async def remove_pod_finalizer(self, key: str, finalizer: str) -> None:
        """Remove `finalizer` from the pod (gone already, or without it, is no error)."""
        ...

    async def add_workload_owners(self, key: str, owners: Sequence[OwnerReference]) -> None:
        """Add the owner references the Workload `key` lacks (a pod group's replacement
        pods); a Workload already gone is no error."""
        ...


class QueueStatusStore(Protocol):
    async def write_cluster_queue_status(self, name: str, status: ClusterQueueStatus) -> None: ...

    async def write_local_queue_status(
        self, key: str, status: LocalQueueStatus, before: LocalQueueStatus | None = None
    ) -> None:
        """Write `status`; `before`: the status it replaces (keys it no longer has are
        removed, as in a map such as `admissionFairSharingStatus.consumedResources`)."""
        ...


class EventSink(Protocol):
    async def emit(self, ref: ObjectRef, type_: str, reason: str, message: str) -> None: ...
