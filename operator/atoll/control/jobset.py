"""The JobSet integration's rules: a JobSet's Workload (one pod set per replicated job), when it
is finished, active and ready, and when it no longer matches its Workload. Pure functions over
`atoll.api` models.

Mirrors Kueue's pkg/controller/jobs/jobset/jobset_controller.go: a replicated job's pod count is
`replicas × min(parallelism, completions)` (parallelism defaulting to 1); the JobSet is finished
when its Completed or Failed condition is True; it is active while a child Job is active; its
pods are ready when every child Job is ready or succeeded; a replicated job's succeeded Jobs
give back their pods' quota while the JobSet runs (its reclaimable pods).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from atoll.api.core import PriorityClass
from atoll.api.jobset import GROUP, JobSet, ReplicatedJob, ReplicatedJobStatus
from atoll.api.priority import WorkloadPriorityClass
from atoll.api.workload import PodSet, ReclaimablePod, Workload
from atoll.control import jobframework as jf

__all__ = ["GROUP", "build_workload", "finished", "pod_count", "pod_sets"]


def pods_per_replica(rj: ReplicatedJob) -> int:
    spec = rj.template.spec
    parallelism = spec.parallelism if spec.parallelism is not None else 1
    completions = spec.completions if spec.completions is not None else parallelism
    return min(parallelism, completions)


def pod_count(rj: ReplicatedJob) -> int:
    """Pods of the replicated job's pod set: replicas × pods per Job."""
    return rj.replicas * pods_per_replica(rj)


def pod_sets(jobset: JobSet) -> tuple[PodSet, ...]:
    """One pod set per replicated job, named after it, in order."""
    return tuple(
        PodSet(
            name=rj.name,
            template=jf.workload_template(rj.template.spec.template),
            count=pod_count(rj),
            topology_request=jf.topology_request(rj.template.spec.template),
        )
        for rj in jobset.spec.replicated_jobs
    )


def build_workload(
    jobset: JobSet,
    workload_classes: Mapping[str, WorkloadPriorityClass],
    priority_classes: Mapping[str, PriorityClass],
) -> Workload:
    """The Workload Kueue creates for the JobSet (`jobset-<name>-<hash>`). Raises
    jf.ComposeError when it cannot have one."""
    if not jobset.spec.replicated_jobs:
        raise jf.ComposeError("ErrWorkloadCompose", "spec.replicatedJobs: Required value")
    pod_class, where = None, ""
    for i, rj in enumerate(jobset.spec.replicated_jobs):
        name = rj.template.spec.template.spec.priority_class_name
        if name:
            pod_class = name
            where = f"spec.replicatedJobs[{i}].template.spec.template.spec.priorityClassName"
            break
    priority = jf.owner_priority(
        jobset.metadata.labels or {},
        pod_class,
        workload_classes,
        priority_classes,
        field=where,
    )
    return jf.owned_workload(jobset, pod_sets(jobset), priority, group=GROUP)


def finished(jobset: JobSet) -> tuple[bool, str, str]:
    """(finished, reason Succeeded|Failed, message) from the Completed/Failed conditions."""
    return jf.finished_from(jobset.status.conditions, "Completed", "JobSet")


def active_jobs(jobset: JobSet) -> int:
    """Child Jobs with an active pod (quota is released only when none is left)."""
    return sum(s.active for s in jobset.status.replicated_jobs_status or ())


def pods_ready(jobset: JobSet) -> bool:
    """Every child Job is ready or succeeded (Kueue's `PodsReady` for JobSets)."""
    return all_ready(
        sum(rj.replicas for rj in jobset.spec.replicated_jobs),
        jobset.status.replicated_jobs_status,
    )


def all_ready(jobs: int, statuses: Iterable[ReplicatedJobStatus] | None) -> bool:
    """Whether the statuses count `jobs` Jobs ready or succeeded (a JobSet's, or a
    TrainJob's, which reports its JobSet's)."""
    return sum(s.ready + s.succeeded for s in statuses or ()) >= jobs


def reclaimable_pods(jobset: JobSet) -> tuple[ReclaimablePod, ...]:
    """The pods whose quota can go back while the JobSet runs (Kueue's `ReclaimablePods` of
    JobSets): for each replicated job with succeeded Jobs (no more than its replicas), their
    pods, `succeeded × pods per replica`, in the order of the replicated jobs."""
    return reclaimable_from(
        ((rj.name, rj.replicas, pods_per_replica(rj)) for rj in jobset.spec.replicated_jobs),
        jobset.status.replicated_jobs_status,
    )


def reclaimable_from(
    replicated: Iterable[tuple[str, int, int]], statuses: Iterable[ReplicatedJobStatus] | None
) -> tuple[ReclaimablePod, ...]:
    """Kueue's rule for a JobSet's reclaimable pods, over its replicated jobs as (name,
    replicas, pods per replica) and their statuses (a JobSet's, or a TrainJob's, which
    reports its JobSet's)."""
    succeeded = {s.name: s.succeeded for s in statuses or ()}
    return tuple(
        ReclaimablePod(name=name, count=done * per_replica)
        for name, replicas, per_replica in replicated
        if 0 < (done := succeeded.get(name, 0)) <= replicas
    )


def carries_admission(jobset: JobSet) -> bool:
    """Whether a replicated job's pod template still carries the workload annotation."""
    return jf.templates_carry_admission(
        rj.template.spec.template for rj in jobset.spec.replicated_jobs
    )


def workload_mismatch(jobset: JobSet, wl: Workload) -> str | None:
    """Why the JobSet no longer matches its Workload: its replicated jobs, their pod counts
    or their containers' resources changed (Kueue's `EquivalentToWorkload`)."""
    return jf.pod_sets_mismatch(jobset, pod_sets(jobset), wl, "replicated job")
