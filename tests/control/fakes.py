"""In-memory fakes of the control layer's ports (no mocks): they keep Workloads and Jobs as
the API server would and record what was written."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from atoll.api.clusterqueue import ClusterQueueStatus
from atoll.api.core import Job, PodTemplateSpec
from atoll.api.jobset import JobSet
from atoll.api.localqueue import LocalQueueStatus
from atoll.api.meta import OwnerReference
from atoll.api.mpijob import MPIJob
from atoll.api.workload import Workload, WorkloadSpec
from atoll.control.jobframework import JobStart, TemplateStart
from atoll.control.ports import NotFoundError, ObjectRef, StatusMutation
from atoll.state import workloads as wls
from atoll.state.cache import Cache

_versions = itertools.count(1)


def _bump(wl: Workload) -> Workload:
    meta = wl.metadata.model_copy(update={"resource_version": str(next(_versions))})
    return wl.model_copy(update={"metadata": meta})


@dataclass
class FakeCluster:
    workloads: dict[str, Workload] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)
    started: list[tuple[str, JobStart]] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    """(object, reason, message) of every Event emitted, in order."""
    warnings: list[tuple[str, str, str]] = field(default_factory=list)
    """The same, of the Events of type Warning only."""
    fail_status_writes: bool = False
    clock: Callable[[], float] | None = None
    """When set, a created Workload gets `creationTimestamp` from it, as the API server sets
    it (else it keeps the one it was given)."""

    async def create_workload(self, wl: Workload) -> Workload:
        if self.clock is not None:
            at = dt.datetime.fromtimestamp(self.clock(), dt.UTC)
            wl = wl.model_copy(
                update={"metadata": wl.metadata.model_copy(update={"creation_timestamp": at})}
            )
        created = _bump(wl)
        self.workloads[wls.wl_key(wl)] = created
        return created

    async def update_workload_status(
        self, key: str, mutate: StatusMutation, *, confirm_unchanged: bool = False
    ) -> Workload | None:
        del confirm_unchanged  # the fake's copy is the server's
        if key not in self.workloads:
            raise NotFoundError(key)
        if self.fail_status_writes:
            raise RuntimeError("API server unavailable")
        status = mutate(self.workloads[key])
        if status is None:
            return None
        written = _bump(self.workloads[key].model_copy(update={"status": status}))
        self.workloads[key] = written
        return written

    async def update_workload_spec(self, key: str, spec: WorkloadSpec) -> Workload:
        if key not in self.workloads:
            raise NotFoundError(key)
        written = _bump(self.workloads[key].model_copy(update={"spec": spec}))
        self.workloads[key] = written
        return written

    async def remove_workload_finalizer(self, key: str, finalizer: str) -> None:
        wl = self.workloads[key]
        fins = tuple(f for f in wl.metadata.finalizers or () if f != finalizer)
        self.workloads[key] = _bump(
            wl.model_copy(update={"metadata": wl.metadata.model_copy(update={"finalizers": fins})})
        )

    async def delete_workload(self, key: str) -> None:
        self.workloads.pop(key, None)

    async def deactivate_workload(self, key: str) -> None:
        wl = self.workloads[key]
        self.workloads[key] = _bump(
            wl.model_copy(update={"spec": wl.spec.model_copy(update={"active": False})})
        )

    async def start_job(self, key: str, plan: JobStart, seen: Job | None = None) -> None:
        self.started.append((key, plan))
        job = self.jobs[key]
        self.jobs[key] = job.model_copy(
            update={"spec": job.spec.model_copy(update={"suspend": False})}
        )

    async def stop_job(self, key: str, template: PodTemplateSpec, parallelism: int | None) -> None:
        self.stopped.append(key)
        await self.suspend_job(key)

    async def suspend_job(self, key: str) -> None:
        job = self.jobs[key]
        self.jobs[key] = job.model_copy(
            update={"spec": job.spec.model_copy(update={"suspend": True})}
        )

    async def write_cluster_queue_status(self, name: str, status: ClusterQueueStatus) -> None:
        self.events.append(("ClusterQueue", name, "status"))

    async def write_local_queue_status(
        self, key: str, status: LocalQueueStatus, before: LocalQueueStatus | None = None
    ) -> None:
        self.events.append(("LocalQueue", key, "status"))

    async def emit(self, ref: ObjectRef, type_: str, reason: str, message: str) -> None:
        event = (f"{ref.kind}/{ref.namespace}/{ref.name}", reason, message)
        self.events.append(event)
        if type_ == "Warning":
            self.warnings.append(event)


@dataclass
class FakePods(FakeCluster):
    """FakeCluster with the plain-pod port: what was ungated, marked, deleted, released (finalizer
    removed) and which owners were added to which Workload (the Workload updated too)."""

    ungated: list[tuple[str, TemplateStart]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    marked: list[tuple[str, str, str]] = field(default_factory=list)
    """Pods given the TerminationTarget condition: (key, reason, message)."""
    released: list[str] = field(default_factory=list)
    owners_added: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)

    async def start_pod(self, key: str, plan: TemplateStart) -> None:
        self.ungated.append((key, plan))

    async def delete_pod(self, key: str) -> None:
        self.deleted.append(key)

    async def mark_termination_target(self, key: str, reason: str, message: str) -> None:
        self.marked.append((key, reason, message))

    async def remove_pod_finalizer(self, key: str, finalizer: str) -> None:
        del finalizer
        self.released.append(key)

    async def add_workload_owners(self, key: str, owners: Sequence[OwnerReference]) -> None:
        self.owners_added.append((key, tuple(o.name for o in owners)))
        wl = self.workloads.get(key)
        if wl is None:
            return
        refs = (*(wl.metadata.owner_references or ()), *owners)
        meta = wl.metadata.model_copy(update={"owner_references": refs})
        self.workloads[key] = wl.model_copy(update={"metadata": meta})


@dataclass
class FakeOwners(FakeCluster):
    """FakeCluster with the JobSet and MPIJob ports: the objects by key, and what was started
    (the admission merged per pod template) and stopped (the templates restored)."""

    jobsets: dict[str, JobSet] = field(default_factory=dict)
    mpijobs: dict[str, MPIJob] = field(default_factory=dict)
    starts: list[tuple[str, Mapping[str, TemplateStart]]] = field(default_factory=list)
    stops: list[tuple[str, Mapping[str, PodTemplateSpec]]] = field(default_factory=list)

    def _suspend(self, key: str, value: bool) -> None:
        if key in self.jobsets:
            js = self.jobsets[key]
            self.jobsets[key] = js.model_copy(
                update={"spec": js.spec.model_copy(update={"suspend": value})}
            )
            return
        mpi = self.mpijobs[key]
        policy = mpi.spec.run_policy.model_copy(update={"suspend": value})
        self.mpijobs[key] = mpi.model_copy(
            update={"spec": mpi.spec.model_copy(update={"run_policy": policy})}
        )

    async def _start(self, key: str, plans: Mapping[str, TemplateStart]) -> None:
        self.starts.append((key, plans))
        self._suspend(key, False)

    async def _stop(self, key: str, templates: Mapping[str, PodTemplateSpec]) -> None:
        self.stops.append((key, templates))
        self._suspend(key, True)

    async def _suspend_only(self, key: str) -> None:
        self._suspend(key, True)

    start_jobset = start_mpijob = _start
    stop_jobset = stop_mpijob = _stop
    suspend_jobset = suspend_mpijob = _suspend_only

    trainjob_writes: list[tuple[str, str, Sequence[Mapping[str, Any]]]] = field(
        default_factory=list
    )
    """TrainJob writes: (key, start|stop|suspend, the overrides a start appends)."""

    async def start_trainjob(self, key: str, overrides: Sequence[Mapping[str, Any]]) -> None:
        self.trainjob_writes.append((key, "start", overrides))

    async def stop_trainjob(self, key: str) -> None:
        self.trainjob_writes.append((key, "stop", ()))

    async def suspend_trainjob(self, key: str) -> None:
        self.trainjob_writes.append((key, "suspend", ()))

    def sync(self, cache: Cache) -> None:
        """Copy the objects and Workloads into the controller's cache, as the watches do."""
        for obj in self.jobsets.values():
            cache.set_jobset(obj)
        cache.mpijobs.update(self.mpijobs)
        for wl in self.workloads.values():
            cache.set_workload(wl)
