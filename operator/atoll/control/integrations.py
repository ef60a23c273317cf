"""The job framework: one adapter per managed kind, and the kinds atoll runs.

An `Integration` says, for one kind (batch/v1 Job, JobSet, MPIJob, pod groups, LeaderWorkerSet
groups), how to read its pod sets into a Workload, whether it is suspended, finished or active,
how ready its pods are, and how to start it (unsuspend, with each admitted pod set's flavors
merged into its pod template), stop it
(suspend, templates restored from the Workload) and suspend it. `control.jobs.JobController`
runs Kueue's reconcile loop (`ReconcileGenericJob`) over any of them, so every kind gets the
same Workload lifecycle. Mirrors Kueue's `jobframework.GenericJob` and its integrations
registry (framework names of `integrations.frameworks`).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Final, Generic, Protocol, TypeVar

from atoll.api import labels as keys
from atoll.api.core import Job, Pod, PodTemplateMeta, PodTemplateSpec
from atoll.api.jobset import JobSet
from atoll.api.meta import KubeObject, OwnerReference
from atoll.api.mpijob import MPIJob
from atoll.api.resourceflavor import ResourceFlavor
from atoll.api.trainjob import CLUSTER_RUNTIME_KIND, TrainingRuntimeSpec, TrainJob
from atoll.api.workload import PodSetAssignment, ReclaimablePod, Workload
from atoll.control import jobframework as jf
from atoll.control import jobset as js
from atoll.control import leaderworkerset as lws
from atoll.control import mpijob as mpi
from atoll.control import podgroups as pg
from atoll.control import trainjob as tj
from atoll.control.ports import (
    JobSetStore,
    JobStore,
    MPIJobStore,
    ObjectRef,
    PodGroupStore,
    TrainJobStore,
)
from atoll.control.scheduler import workload_ref
from atoll.state import workloads as wls
from atoll.state.cache import Cache

BATCH_JOB: Final = "batch/job"
JOBSET: Final = "jobset.x-k8s.io/jobset"
MPIJOB: Final = "kubeflow.org/mpijob"
TRAINJOB: Final = "trainer.kubeflow.org/trainjob"
POD: Final = "pod"
LEADERWORKERSET: Final = lws.FRAMEWORK

J = TypeVar("J", bound=KubeObject)


class Integration(ABC, Generic[J]):
    """How atoll manages one kind (Kueue's GenericJob, for a kind rather than an object)."""

    framework: str
    """Kueue's framework name (`integrations.frameworks`)."""
    model: type[J]
    group: str
    """API group of the kind (part of the Workload name's hash)."""
    owns_jobs: bool = False
    """Whether its controller creates batch/v1 Jobs it controls (they are left to it)."""
    deletes_orphans: bool = False
    """Whether the Workload of a part that is gone is deleted rather than finished (the
    groups of a LeaderWorkerSet, which come back under the same Workload name)."""

    @property
    def kind(self) -> str:
        return self.model.KIND

    def ref(self, obj: J) -> ObjectRef:
        return ObjectRef.of(obj, self.model.KIND, self.model.API_VERSION)

    @abstractmethod
    def objects(self, cache: Cache) -> Mapping[str, J]:
        """The cached objects of the kind, by `namespace/name`."""

    def get(self, cache: Cache, key: str) -> J | None:
        return self.objects(cache).get(key)

    def keys(self, cache: Cache) -> list[str]:
        return list(self.objects(cache))

    def workloads(self, cache: Cache, key: str) -> list[Workload]:
        """The Workloads that name `key` as their owner (the current one and stale ones)."""
        return cache.workloads_of_job(key, kind=self.kind)

    def owns(self, obj: J, wl: Workload) -> bool:
        """Whether `wl` is the Workload of this very object (its controller owner's uid)."""
        return any(
            r.kind == self.kind and r.controller and r.uid == obj.metadata.uid
            for r in wl.metadata.owner_references or ()
        )

    def owned_elsewhere(self, obj: J) -> bool:
        """Whether another managed kind owns the object (then that kind's Workload covers it)."""
        del obj
        return False

    @abstractmethod
    def suspend_flag(self, obj: J) -> bool:
        """`spec.suspend`."""

    def suspended(self, obj: J) -> bool:
        """Suspended, and not half-way through a stop (Kueue's stopping annotation)."""
        stopping = (obj.metadata.annotations or {}).get(keys.STOPPING_ANNOTATION) == "true"
        return self.suspend_flag(obj) and not stopping

    def startable(self, obj: J) -> bool:
        """Whether starting the suspended object does anything now (a LeaderWorkerSet group
        without gated pods has nothing to ungate yet)."""
        del obj
        return True

    def partly_started(self, obj: J) -> bool:
        """Whether a running object also has parts that wait to be started (a
        LeaderWorkerSet group's pods recreated gated while the others run)."""
        del obj
        return False

    @abstractmethod
    def finished(self, obj: J) -> tuple[bool, str, str]:
        """(finished, reason Succeeded|Failed, message)."""

    @abstractmethod
    def active_pods(self, obj: J) -> int:
        """How many of its pods (or child Jobs) are still active (> 0: quota stays held)."""

    def reclaimable(self, obj: J, cache: Cache) -> tuple[ReclaimablePod, ...] | None:
        """Its pods that are done for good while it runs, whose quota can be released
        (Kueue's `ReclaimablePods`); None: the kind does not report them."""
        del obj, cache
        return None

    @abstractmethod
    def ready(self, obj: J, wl: Workload) -> bool:
        """Whether all admitted pods are ready or succeeded (waitForPodsReady)."""

    @abstractmethod
    def compose(self, obj: J, cache: Cache) -> Workload:
        """The Workload Kueue would create; raises jf.ComposeError."""

    @abstractmethod
    def mismatch(self, obj: J, wl: Workload) -> str | None:
        """Why the object no longer matches its Workload (None when it does)."""

    @abstractmethod
    def carries_admission(self, obj: J) -> bool:
        """Whether a pod template still carries what starting it injected."""

    @abstractmethod
    async def start(self, obj: J, wl: Workload, flavors: Mapping[str, ResourceFlavor]) -> None:
        """Unsuspend with the admission merged in; raises jf.StartConflictError."""

    @abstractmethod
    async def stop(self, obj: J, wl: Workload) -> None:
        """Suspend and restore the pod templates from the Workload."""

    @abstractmethod
    async def suspend(self, obj: J) -> None:
        """Suspend (a running object that has no Workload yet)."""

    async def align(self, obj: J, wl: Workload | None) -> tuple[J, int | None]:
        """Bring the object's members in line with its Workload (`wl`; None: the one about
        to be made) before anything else reads them; returns the object as the Workload
        counts it and how many of its members the Workload misses (None: the kind never
        misses members, its controller makes them). Pod groups: excess pods deleted, replaced
        pods released, replacement pods added as owners."""
        del wl
        return obj, None

    async def finalize(self, obj: J) -> None:
        """Release what keeps the object's members for the Workload (pod finalizers); called
        once the Workload is finished or deleted, or the object is being deleted."""
        del obj


def _flavors(
    assignment: PodSetAssignment, flavors: Mapping[str, ResourceFlavor]
) -> list[ResourceFlavor]:
    names = sorted(set((assignment.flavors or {}).values()))
    return [flavors[f] for f in names if f in flavors]


def _owned_by(obj: KubeObject, owners: tuple[tuple[str, str], ...]) -> bool:
    """Whether a controller owner of `obj` is of one of `owners` (apiVersion prefix, kind)."""
    return any(
        ref.controller and ref.kind == kind and ref.api_version.startswith(prefix)
        for ref in obj.metadata.owner_references or ()
        for prefix, kind in owners
    )


def _key(obj: KubeObject) -> str:
    return f"{obj.namespace or ''}/{obj.name}"


def _pod_ref(pod: Pod) -> ObjectRef:
    return ObjectRef.of(pod, "Pod", "v1")


class JobIntegration(Integration[Job]):
    """batch/v1 Job: one pod set `main`; partial admission through parallelism."""

    framework = BATCH_JOB
    model = Job
    group = "batch"

    def __init__(self, store: JobStore, *, owners: tuple[tuple[str, str], ...] = ()) -> None:
        self.store = store
        self.owners = owners
        """(apiVersion prefix, kind) of managed kinds whose Jobs belong to their owner."""

    def objects(self, cache: Cache) -> Mapping[str, Job]:
        return cache.jobs

    def owned_elsewhere(self, obj: Job) -> bool:
        return _owned_by(obj, self.owners)

    def suspend_flag(self, obj: Job) -> bool:
        return bool(obj.spec.suspend)

    def finished(self, obj: Job) -> tuple[bool, str, str]:
        return jf.job_finished(obj)

    def active_pods(self, obj: Job) -> int:
        return jf.active_pods(obj)

    def reclaimable(self, obj: Job, cache: Cache) -> tuple[ReclaimablePod, ...]:
        return jf.reclaimable_pods(obj, cache.succeeded_pods.get(obj.metadata.uid or "", ()))

    def ready(self, obj: Job, wl: Workload) -> bool:
        del wl  # Kueue's PodsReady of a Job: its own pod count (a partial admission's is set)
        uncounted = obj.status.uncounted_terminated_pods
        done = (obj.status.succeeded or 0) + len((uncounted.succeeded if uncounted else None) or ())
        return (obj.status.ready or 0) + done >= jf.pod_count(obj)

    def compose(self, obj: Job, cache: Cache) -> Workload:
        priority = jf.resolve_priority(obj, cache.workload_classes, cache.priority_classes)
        return jf.build_workload(obj, priority)

    def mismatch(self, obj: Job, wl: Workload) -> str | None:
        adm = wl.status.admission if wls.has_quota(wl) else None
        count = adm.pod_set_assignments[0].count if adm and adm.pod_set_assignments else None
        return jf.workload_mismatch(obj, wl, admitted_count=count)

    def carries_admission(self, obj: Job) -> bool:
        return jf.carries_admission(obj)

    async def start(self, obj: Job, wl: Workload, flavors: Mapping[str, ResourceFlavor]) -> None:
        adm = wl.status.admission
        assert adm is not None
        assignment = adm.pod_set_assignments[0]
        plan = jf.start_plan(
            obj,
            workload=wl.name,
            cluster_queue=adm.cluster_queue,
            local_queue=wl.spec.queue_name or "",
            flavors=_flavors(assignment, flavors),
            # the admitted count is the Job's parallelism only for a partial admission: a
            # requeued Job admitted for its pods left runs with its own (Kueue's)
            admitted_count=(
                assignment.count
                if wl.spec.pod_sets[0].min_count is not None and assignment.count
                else wl.spec.pod_sets[0].count
            ),
            topology=assignment.topology_assignment is not None,
            updates=jf.check_updates(wl, str(assignment.name)),
        )
        await self.store.start_job(_key(obj), plan, obj)

    async def stop(self, obj: Job, wl: Workload) -> None:
        pod_set = wl.spec.pod_sets[0]
        partial = pod_set.min_count is not None
        await self.store.stop_job(_key(obj), pod_set.template, pod_set.count if partial else None)

    async def suspend(self, obj: Job) -> None:
        await self.store.suspend_job(_key(obj))


class JobSetIntegration(Integration[JobSet]):
    """JobSet: one pod set per replicated job, admitted together."""

    framework = JOBSET
    model = JobSet
    group = js.GROUP
    owns_jobs = True

    def __init__(self, store: JobSetStore, *, owners: tuple[tuple[str, str], ...] = ()) -> None:
        self.store = store
        self.owners = owners
        """(apiVersion prefix, kind) of managed kinds whose JobSets belong to their owner
        (TrainJob)."""

    def objects(self, cache: Cache) -> Mapping[str, JobSet]:
        return cache.jobsets

    def owned_elsewhere(self, obj: JobSet) -> bool:
        return _owned_by(obj, self.owners)

    def suspend_flag(self, obj: JobSet) -> bool:
        return bool(obj.spec.suspend)

    def finished(self, obj: JobSet) -> tuple[bool, str, str]:
        return js.finished(obj)

    def active_pods(self, obj: JobSet) -> int:
        return js.active_jobs(obj)

    def reclaimable(self, obj: JobSet, cache: Cache) -> tuple[ReclaimablePod, ...]:
        del cache
        return js.reclaimable_pods(obj)

    def ready(self, obj: JobSet, wl: Workload) -> bool:
        del wl
        return js.pods_ready(obj)

    def compose(self, obj: JobSet, cache: Cache) -> Workload:
        return js.build_workload(obj, cache.workload_classes, cache.priority_classes)

    def mismatch(self, obj: JobSet, wl: Workload) -> str | None:
        return js.workload_mismatch(obj, wl)

    def carries_admission(self, obj: JobSet) -> bool:
        return js.carries_admission(obj)

    async def start(self, obj: JobSet, wl: Workload, flavors: Mapping[str, ResourceFlavor]) -> None:
        adm = wl.status.admission
        assert adm is not None
        by_name = {str(a.name): a for a in adm.pod_set_assignments}
        plans: dict[str, jf.TemplateStart] = {}
        for rj in obj.spec.replicated_jobs:
            assignment = by_name.get(rj.name)
            plans[rj.name] = jf.template_start(
                rj.template.spec.template,
                pod_set=rj.name,
                workload=wl.name,
                cluster_queue=adm.cluster_queue,
                local_queue=wl.spec.queue_name or "",
                flavors=_flavors(assignment, flavors) if assignment else [],
                topology=assignment is not None and assignment.topology_assignment is not None,
                updates=jf.check_updates(wl, rj.name),
            )
        await self.store.start_jobset(_key(obj), plans)

    async def stop(self, obj: JobSet, wl: Workload) -> None:
        templates: dict[str, PodTemplateSpec] = {
            str(ps.name): ps.template for ps in wl.spec.pod_sets
        }
        await self.store.stop_jobset(_key(obj), templates)

    async def suspend(self, obj: JobSet) -> None:
        await self.store.suspend_jobset(_key(obj))


class MPIJobIntegration(Integration[MPIJob]):
    """MPIJob (mpi-operator): a `launcher` and a `worker` pod set, admitted together. Its
    launcher runs as a batch/v1 Job the MPIJob controls, its workers as bare pods."""

    framework = MPIJOB
    model = MPIJob
    group = mpi.GROUP
    owns_jobs = True

    def __init__(self, store: MPIJobStore) -> None:
        self.store = store

    def objects(self, cache: Cache) -> Mapping[str, MPIJob]:
        return cache.mpijobs

    def suspend_flag(self, obj: MPIJob) -> bool:
        return bool(obj.spec.run_policy.suspend)

    def finished(self, obj: MPIJob) -> tuple[bool, str, str]:
        return mpi.finished(obj)

    def active_pods(self, obj: MPIJob) -> int:
        return mpi.active_pods(obj)

    def ready(self, obj: MPIJob, wl: Workload) -> bool:
        del wl
        return mpi.pods_ready(obj)

    def compose(self, obj: MPIJob, cache: Cache) -> Workload:
        return mpi.build_workload(obj, cache.workload_classes, cache.priority_classes)

    def mismatch(self, obj: MPIJob, wl: Workload) -> str | None:
        return mpi.workload_mismatch(obj, wl)

    def carries_admission(self, obj: MPIJob) -> bool:
        return mpi.carries_admission(obj)

    async def start(self, obj: MPIJob, wl: Workload, flavors: Mapping[str, ResourceFlavor]) -> None:
        adm = wl.status.admission
        assert adm is not None
        by_name = {str(a.name): a for a in adm.pod_set_assignments}
        plans: dict[str, jf.TemplateStart] = {}
        for replica_type in mpi.replica_types(obj):
            name = mpi.pod_set_name(replica_type)
            assignment = by_name.get(name)
            plans[replica_type] = jf.template_start(
                obj.spec.mpi_replica_specs[replica_type].template,
                pod_set=name,
                workload=wl.name,
                cluster_queue=adm.cluster_queue,
                local_queue=wl.spec.queue_name or "",
                flavors=_flavors(assignment, flavors) if assignment else [],
                topology=assignment is not None and assignment.topology_assignment is not None,
                updates=jf.check_updates(wl, name),
            )
        await self.store.start_mpijob(_key(obj), plans)

    async def stop(self, obj: MPIJob, wl: Workload) -> None:
        by_name = {str(ps.name): ps.template for ps in wl.spec.pod_sets}
        templates = {
            t: by_name[mpi.pod_set_name(t)]
            for t in mpi.replica_types(obj)
            if mpi.pod_set_name(t) in by_name
        }
        await self.store.stop_mpijob(_key(obj), templates)

    async def suspend(self, obj: MPIJob) -> None:
        await self.store.suspend_mpijob(_key(obj))


class TrainJobIntegration(Integration[TrainJob]):
    """TrainJob (Kubeflow Trainer v2.0): one pod set per replicated job of its runtime's JobSet
    template, admitted together; started by appending one pod spec override per pod set. Its
    JobSet (and that JobSet's Jobs) belong to it."""

    framework = TRAINJOB
    model = TrainJob
    group = tj.GROUP
    owns_jobs = True

    def __init__(self, store: TrainJobStore, cache: Cache | None = None) -> None:
        self.store = store
        self.cache = cache
        """Where the runtimes are (a TrainJob's pod sets to compare with its Workload); None:
        a changed runtime is not noticed."""

    def objects(self, cache: Cache) -> Mapping[str, TrainJob]:
        return cache.trainjobs

    @staticmethod
    def runtime(obj: TrainJob, cache: Cache) -> TrainingRuntimeSpec | None:
        """The spec of the runtime the TrainJob names, if atoll has it."""
        kind, key = tj.runtime_key(obj)
        table = (
            cache.cluster_training_runtimes
            if kind == CLUSTER_RUNTIME_KIND
            else cache.training_runtimes
        )
        found = table.get(key)
        return found.spec if found is not None else None

    def suspend_flag(self, obj: TrainJob) -> bool:
        return bool(obj.spec.suspend)

    def finished(self, obj: TrainJob) -> tuple[bool, str, str]:
        return tj.finished(obj)

    def child(self, obj: TrainJob, cache: Cache | None = None) -> JobSet | None:
        """The JobSet Trainer made for it, if seen. Its status is read first: Trainer v2.0
        reports none of it in the TrainJob's. Kueue's first TrainJob integration read the
        JobSet for PodsReady and reclaimable pods; today's reads `status.jobsStatus` (Trainer
        v2.2 fills it), which is read here when the JobSet is not known. Its active Jobs from the
        JobSet are atoll's own: Kueue reads them from `status.jobsStatus` only, so to it a
        v2.0 TrainJob is never active (its quota goes back before its pods are gone)."""
        cache = cache if cache is not None else self.cache
        return tj.child_jobset(obj, cache.trainjob_jobsets) if cache is not None else None

    def active_pods(self, obj: TrainJob) -> int:
        child = self.child(obj)
        return js.active_jobs(child) if child is not None else tj.active_jobs(obj)

    def reclaimable(self, obj: TrainJob, cache: Cache) -> tuple[ReclaimablePod, ...] | None:
        child = self.child(obj, cache)
        if child is not None:
            return js.reclaimable_pods(child)
        runtime = self.runtime(obj, cache)
        return tj.reclaimable_pods(obj, runtime) if runtime is not None else None

    def ready(self, obj: TrainJob, wl: Workload) -> bool:
        del wl
        child = self.child(obj)
        if child is not None:
            return js.pods_ready(child)
        runtime = self.runtime(obj, self.cache) if self.cache is not None else None
        return runtime is not None and tj.pods_ready(obj, runtime)

    def compose(self, obj: TrainJob, cache: Cache) -> Workload:
        return tj.build_workload(
            obj, self.runtime(obj, cache), cache.workload_classes, cache.priority_classes
        )

    def mismatch(self, obj: TrainJob, wl: Workload) -> str | None:
        runtime = self.runtime(obj, self.cache) if self.cache is not None else None
        return tj.workload_mismatch(obj, runtime, wl)

    def carries_admission(self, obj: TrainJob) -> bool:
        return tj.carries_admission(obj)

    async def start(
        self, obj: TrainJob, wl: Workload, flavors: Mapping[str, ResourceFlavor]
    ) -> None:
        adm = wl.status.admission
        assert adm is not None
        by_name = {str(a.name): a for a in adm.pod_set_assignments}
        plans: dict[str, jf.TemplateStart] = {}
        for ps in wl.spec.pod_sets:
            assignment = by_name.get(str(ps.name))
            plans[str(ps.name)] = jf.template_start(
                ps.template,
                pod_set=str(ps.name),
                workload=wl.name,
                cluster_queue=adm.cluster_queue,
                local_queue=wl.spec.queue_name or "",
                flavors=_flavors(assignment, flavors) if assignment else [],
                topology=assignment is not None and assignment.topology_assignment is not None,
                updates=jf.check_updates(wl, str(ps.name)),
            )
        await self.store.start_trainjob(_key(obj), tj.admission_overrides(plans))

    async def stop(self, obj: TrainJob, wl: Workload) -> None:
        del wl
        await self.store.stop_trainjob(_key(obj))

    async def suspend(self, obj: TrainJob) -> None:
        await self.store.suspend_trainjob(_key(obj))


class PodGroupIntegration(Integration[pg.PodGroup]):
    """Plain pods (Kueue's `pod` framework): pod groups and single pods, gated at creation
    and ungated together once admitted. A pod cannot be suspended: a group is stopped (its
    Workload evicted, preempted, deactivated or deleted) by deleting its running pods, as
    Kueue does, so that its quota is released at once; whoever made the pods makes them
    again (gated) to queue the group once more."""

    framework = POD
    model = pg.PodGroup
    group = ""

    def __init__(self, store: PodGroupStore) -> None:
        self.store = store

    @property
    def kind(self) -> str:
        return "Pod"

    def ref(self, obj: pg.PodGroup) -> ObjectRef:
        """The group's first pod (Events about the group go there)."""
        if obj.pods:
            return _pod_ref(obj.pods[0])
        return ObjectRef("Pod", "v1", namespace=obj.namespace or "", name=obj.name, uid="")

    def objects(self, cache: Cache) -> Mapping[str, pg.PodGroup]:
        return {k: g for k in cache.pod_groups if (g := self.get(cache, k)) is not None}

    def get(self, cache: Cache, key: str) -> pg.PodGroup | None:
        return pg.group_of(key, cache.pod_groups.get(key, {}))

    def keys(self, cache: Cache) -> list[str]:
        return list(cache.pod_groups)

    def workloads(self, cache: Cache, key: str) -> list[Workload]:
        ns, _, name = key.partition("/")
        found = [w for w in cache.workloads_of_job(key, kind="Pod")]
        grouped = cache.workloads.get(key)
        if grouped is not None and grouped not in found:
            ann = grouped.metadata.annotations or {}
            pods_own = all(r.kind == "Pod" for r in grouped.metadata.owner_references or ())
            if (
                ann.get(keys.IS_GROUP_WORKLOAD_ANNOTATION) == "true"
                and grouped.namespace == ns
                and pods_own
            ):
                found.append(grouped)
        del name
        return found

    def owns(self, obj: pg.PodGroup, wl: Workload) -> bool:
        return pg.owns(obj, wl)

    def suspend_flag(self, obj: pg.PodGroup) -> bool:
        return bool(pg.gated_pods(obj)) or not any(pg.live(p) for p in obj.pods)

    def suspended(self, obj: pg.PodGroup) -> bool:
        return self.suspend_flag(obj)

    def finished(self, obj: pg.PodGroup) -> tuple[bool, str, str]:
        return pg.finished(obj)

    def active_pods(self, obj: pg.PodGroup) -> int:
        return pg.active_pods(obj)

    def reclaimable(self, obj: pg.PodGroup, cache: Cache) -> tuple[ReclaimablePod, ...]:
        del cache
        return pg.reclaimable_pods(obj)

    def ready(self, obj: pg.PodGroup, wl: Workload) -> bool:
        del wl
        return pg.ready(obj)

    def compose(self, obj: pg.PodGroup, cache: Cache) -> Workload:
        return pg.build_workload(obj, cache.workload_classes, cache.priority_classes)

    def mismatch(self, obj: pg.PodGroup, wl: Workload) -> str | None:
        del obj, wl
        return None  # a pod's resources cannot change

    def carries_admission(self, obj: pg.PodGroup) -> bool:
        del obj
        return False

    async def start(
        self, obj: pg.PodGroup, wl: Workload, flavors: Mapping[str, ResourceFlavor]
    ) -> None:
        """Ungate the group's gated pods, each with its pod set's admission merged in; a pod
        set admitted with a topology assignment keeps its pods' topology gate, which the
        ungater removes pod by pod (`pg.start_gates`)."""
        adm = wl.status.admission
        assert adm is not None
        by_name = {str(a.name): a for a in adm.pod_set_assignments}
        plans = []
        for pod in pg.gated_pods(obj):
            name = self.pod_set_name(obj, pod)
            assignment = by_name.get(name)
            plan = jf.template_start(
                self.pod_template(obj, pod, wl),
                pod_set=name,
                workload=wl.name,
                cluster_queue=adm.cluster_queue,
                local_queue=wl.spec.queue_name or "",
                flavors=_flavors(assignment, flavors) if assignment else [],
                updates=jf.check_updates(wl, name),
            )
            topology = assignment is not None and assignment.topology_assignment is not None
            gates = pg.start_gates(plan.scheduling_gates, topology=topology)
            plans.append((_key(pod), dataclasses.replace(plan, scheduling_gates=gates)))
        for key, plan in plans:  # every plan first: a conflict starts no pod of the group
            await self.store.start_pod(key, plan)

    def pod_set_name(self, obj: pg.PodGroup, pod: Pod) -> str:
        return pg.pod_set_name(obj, pod)

    def pod_template(self, obj: pg.PodGroup, pod: Pod, wl: Workload) -> PodTemplateSpec:
        """The pod as the template its start merges the admission into."""
        del obj, wl
        return pg.template_of(pod)

    async def stop(self, obj: pg.PodGroup, wl: Workload) -> None:
        """Delete the group's running pods (Kueue's Stop of a pod group): a running pod can
        be neither suspended nor gated again. Pods still gated, ended or already being
        deleted are left as they are."""
        await self.delete_running(obj, wl)

    async def suspend(self, obj: pg.PodGroup) -> None:
        del obj  # a running pod cannot be gated again; it runs unadmitted until it ends

    async def delete_running(self, obj: pg.PodGroup, wl: Workload | None) -> None:
        """Delete the group's running pods, each after it gets the `TerminationTarget`
        condition saying why (`pg.termination_target`), as Kueue marks them."""
        reason, message = pg.termination_target(wl)
        for pod in pg.running_pods(obj):
            await self.store.mark_termination_target(_key(pod), reason, message)
            await self.store.delete_pod(_key(pod))

    async def align(self, obj: pg.PodGroup, wl: Workload | None) -> tuple[pg.PodGroup, int | None]:
        """Match the pods to the Workload (`pg.members`): the Workload gains the kept pods
        it lacks as owners, excess pods lose their finalizer and are deleted, ended pods that
        no longer count lose their finalizer. Returns the group as the Workload counts it."""
        if not obj.grouped:
            return obj, None
        found = pg.members(obj, wl)
        if wl is not None:
            if not found.kept:
                return obj, None  # no pod of the Workload's roles: left as it is
            owners = {r.uid for r in wl.metadata.owner_references or ()}
            lacking = [
                OwnerReference(api_version="v1", kind="Pod", name=p.name, uid=p.metadata.uid or "")
                for p in found.kept
                if p.metadata.uid and p.metadata.uid not in owners
            ]
            if lacking:
                await self.store.add_workload_owners(wls.wl_key(wl), lacking)
                await self.store.emit(
                    workload_ref(wl),
                    "Normal",
                    "OwnerReferencesAdded",
                    f"{len(lacking)} pod(s) of group {obj.name} now own this Workload: "
                    + ", ".join(r.name for r in lacking),
                )
        for pod in found.excess:
            await self._release(pod)
            if pod.metadata.deletion_timestamp is None:
                await self.store.delete_pod(_key(pod))
                await self.store.emit(
                    _pod_ref(pod),
                    "Normal",
                    "ExcessPodDeleted",
                    f"Deleted: pod group {obj.name} already has every pod its "
                    f"{pg.role_hash(pod)} pod set counts",
                )
        for pod in found.released:
            await self._release(pod)
        kept = pg.with_pods(obj, found.kept) if found.kept else obj
        return kept, (found.absent if wl is not None else None)

    async def finalize(self, obj: pg.PodGroup) -> None:
        for pod in obj.pods:
            await self._release(pod)

    async def _release(self, pod: Pod) -> None:
        if pg.finalized(pod):
            await self.store.remove_pod_finalizer(_key(pod), keys.POD_FINALIZER)


class LeaderWorkerSetIntegration(PodGroupIntegration):
    """LeaderWorkerSet: each replica group is a pod group with its own Workload, made from
    the LWS spec (so it queues before its pods exist), admitted whole and ungated together
    (the `pod` integration's start). A group is stopped by deleting its running pods, which
    the LWS controller recreates, gated again by the pod webhook (Kueue deletes them too)."""

    framework = LEADERWORKERSET
    model = lws.ReplicaGroup  # type: ignore[assignment]
    group = lws.GROUP
    deletes_orphans = True

    async def align(self, obj: pg.PodGroup, wl: Workload | None) -> tuple[pg.PodGroup, int | None]:
        """The LWS controller keeps a group's pods (it recreates them); nothing to match."""
        del wl
        return obj, None

    @property
    def kind(self) -> str:
        return lws.LeaderWorkerSet.KIND

    def ref(self, obj: pg.PodGroup) -> ObjectRef:
        assert isinstance(obj, lws.ReplicaGroup)
        return ObjectRef.of(obj.lws, lws.LeaderWorkerSet.KIND, lws.LeaderWorkerSet.API_VERSION)

    def objects(self, cache: Cache) -> Mapping[str, pg.PodGroup]:
        return {k: g for k in self.keys(cache) if (g := self.get(cache, k)) is not None}

    def get(self, cache: Cache, key: str) -> pg.PodGroup | None:
        split = lws.split_key(key)
        if split is None:
            return None
        owner = cache.leaderworkersets.get(split[0])
        if owner is None or split[1] >= lws.replicas(owner):
            return None  # a group scaled away: its Workload is an orphan
        return lws.group_of(owner, split[1], cache.lws_pods.get(key, {}))

    def keys(self, cache: Cache) -> list[str]:
        return [
            lws.group_key(obj.namespace, obj.name, i)
            for obj in cache.leaderworkersets.values()
            for i in range(lws.replicas(obj))
        ]

    def workloads(self, cache: Cache, key: str) -> list[Workload]:
        split = lws.split_key(key)
        if split is None:
            return []
        return [
            w
            for w in cache.workloads_of_job(split[0], kind=lws.LeaderWorkerSet.KIND)
            if lws.workload_group_key(w) == key
        ]

    def owns(self, obj: pg.PodGroup, wl: Workload) -> bool:
        assert isinstance(obj, lws.ReplicaGroup)
        return lws.owns(obj, wl)

    def suspend_flag(self, obj: pg.PodGroup) -> bool:
        """No pod of the group runs (gated pods beside running ones are ungated by
        `partly_started`)."""
        return pg.active_pods(obj) == 0

    def startable(self, obj: pg.PodGroup) -> bool:
        return bool(pg.gated_pods(obj))

    def partly_started(self, obj: pg.PodGroup) -> bool:
        return pg.active_pods(obj) > 0 and bool(pg.gated_pods(obj))

    def finished(self, obj: pg.PodGroup) -> tuple[bool, str, str]:
        del obj
        return False, "", ""  # a serving group: the LWS controller replaces ended pods

    def compose(self, obj: pg.PodGroup, cache: Cache) -> Workload:
        assert isinstance(obj, lws.ReplicaGroup)
        return lws.build_workload(obj, cache.workload_classes, cache.priority_classes)

    def pod_set_name(self, obj: pg.PodGroup, pod: Pod) -> str:
        assert isinstance(obj, lws.ReplicaGroup)
        return lws.pod_set_name(obj, pod)

    def pod_template(self, obj: pg.PodGroup, pod: Pod, wl: Workload) -> PodTemplateSpec:
        """The pod, with Kueue's pod-group labels and annotations naming its Workload."""
        assert isinstance(obj, lws.ReplicaGroup)
        template = pg.template_of(pod)
        meta = template.metadata or PodTemplateMeta()
        labels = {**(meta.labels or {}), **lws.pod_labels(obj, wl)}
        annotations = {**(meta.annotations or {}), **lws.pod_annotations(obj, pod)}
        update = {"labels": labels, "annotations": annotations}
        return template.model_copy(update={"metadata": meta.model_copy(update=update)})

    async def stop(self, obj: pg.PodGroup, wl: Workload) -> None:
        await self.delete_running(obj, wl)

    async def suspend(self, obj: pg.PodGroup) -> None:
        """Delete the group's running pods (the LWS controller recreates them gated)."""
        await self.delete_running(obj, None)


class Stores(JobStore, JobSetStore, MPIJobStore, TrainJobStore, PodGroupStore, Protocol):
    """A writer of every managed kind."""


def enabled(
    frameworks: tuple[str, ...], store: Stores, *, cache: Cache | None = None
) -> list[Integration[KubeObject]]:
    """The integrations `integrations.frameworks` enables, among those atoll runs. A Job
    controlled by an object of an enabled kind that owns Jobs (JobSet, MPIJob) is left to that
    kind's Workload."""
    out: list[Integration[KubeObject]] = []
    trainjobs = TRAINJOB in frameworks
    if JOBSET in frameworks:
        jobset_owners = ((f"{tj.GROUP}/", TrainJob.KIND),) if trainjobs else ()
        out.append(JobSetIntegration(store, owners=jobset_owners))  # type: ignore[arg-type]
    if MPIJOB in frameworks:
        out.append(MPIJobIntegration(store))  # type: ignore[arg-type]
    if trainjobs:
        out.append(TrainJobIntegration(store, cache))  # type: ignore[arg-type]
    if POD in frameworks:
        out.append(PodGroupIntegration(store))  # type: ignore[arg-type]
    if LEADERWORKERSET in frameworks:
        out.append(LeaderWorkerSetIntegration(store))  # type: ignore[arg-type]
    owners = tuple((f"{kind.group}/", kind.kind) for kind in out if kind.owns_jobs)
    if BATCH_JOB in frameworks:
        out.insert(0, JobIntegration(store, owners=owners))  # type: ignore[arg-type]
    return out
