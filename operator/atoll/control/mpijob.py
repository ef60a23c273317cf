"""The MPIJob integration's rules: an MPIJob's Workload (a `launcher` and a `worker` pod set),
when it is finished, active and ready, and when it no longer matches its Workload. Pure
functions over `atoll.api` models.

Mirrors Kueue's pkg/controller/jobs/mpijob: the pod sets are the replica types present, the
launcher first, named in lower case, each counting its `replicas` (default 1; with
`runLauncherAsWorker` the launcher is still one pod of its own pod set); the priority class is
the run policy's, else the launcher's pods', else the workers'; the MPIJob is finished when its
Succeeded or Failed condition is True, active while a replica type has an active pod, and its
pods are ready once its Running condition is True.
"""

from __future__ import annotations

from collections.abc import Mapping

from atoll.api.core import PodTemplateSpec, PriorityClass
from atoll.api.mpijob import GROUP, REPLICA_TYPES, MPIJob
from atoll.api.priority import WorkloadPriorityClass
from atoll.api.workload import PodSet, Workload
from atoll.control import jobframework as jf

__all__ = ["GROUP", "build_workload", "finished", "pod_sets", "replica_types"]


def replica_types(mpijob: MPIJob) -> tuple[str, ...]:
    """The replica types the MPIJob has, launcher first."""
    specs = mpijob.spec.mpi_replica_specs
    return tuple(t for t in REPLICA_TYPES if t in specs)


def pod_set_name(replica_type: str) -> str:
    """`Launcher` → `launcher` (Kueue's pod-set reference is the lower-cased type)."""
    return replica_type.lower()


def templates(mpijob: MPIJob) -> dict[str, PodTemplateSpec]:
    """Each replica type's pod template, by pod-set name."""
    specs = mpijob.spec.mpi_replica_specs
    return {pod_set_name(t): specs[t].template for t in replica_types(mpijob)}


def pod_sets(mpijob: MPIJob) -> tuple[PodSet, ...]:
    """One pod set per replica type: `launcher` then `worker`."""
    specs = mpijob.spec.mpi_replica_specs
    return tuple(
        PodSet(
            name=pod_set_name(t),
            template=jf.workload_template(specs[t].template),
            count=specs[t].replicas if specs[t].replicas is not None else 1,
            topology_request=jf.topology_request(specs[t].template),
        )
        for t in replica_types(mpijob)
    )


def _priority_class(mpijob: MPIJob) -> tuple[str | None, str]:
    policy = mpijob.spec.run_policy.scheduling_policy
    if policy is not None and policy.priority_class:
        return policy.priority_class, "spec.runPolicy.schedulingPolicy.priorityClass"
    for t in REPLICA_TYPES:
        spec = mpijob.spec.mpi_replica_specs.get(t)
        if spec is not None and spec.template.spec.priority_class_name:
            where = f"spec.mpiReplicaSpecs[{t}].template.spec.priorityClassName"
            return spec.template.spec.priority_class_name, where
    return None, ""


def build_workload(
    mpijob: MPIJob,
    workload_classes: Mapping[str, WorkloadPriorityClass],
    priority_classes: Mapping[str, PriorityClass],
) -> Workload:
    """The Workload Kueue creates for the MPIJob (`mpijob-<name>-<hash>`). Raises
    jf.ComposeError when it cannot have one."""
    if not replica_types(mpijob):
        raise jf.ComposeError("ErrWorkloadCompose", "spec.mpiReplicaSpecs: Required value")
    pod_class, where = _priority_class(mpijob)
    priority = jf.owner_priority(
        mpijob.metadata.labels or {}, pod_class, workload_classes, priority_classes, field=where
    )
    return jf.owned_workload(mpijob, pod_sets(mpijob), priority, group=GROUP)


def finished(mpijob: MPIJob) -> tuple[bool, str, str]:
    """(finished, reason Succeeded|Failed, message) from the Succeeded/Failed conditions."""
    return jf.finished_from(mpijob.status.conditions, "Succeeded", "MPIJob")


def active_pods(mpijob: MPIJob) -> int:
    """Pods still active, over every replica type (quota is held until none is left)."""
    return sum(s.active for s in (mpijob.status.replica_statuses or {}).values())


def pods_ready(mpijob: MPIJob) -> bool:
    """The Running condition is True (Kueue's `PodsReady` for MPIJobs)."""
    return any(c.type == "Running" and c.status == "True" for c in mpijob.status.conditions or ())


def workload_mismatch(mpijob: MPIJob, wl: Workload) -> str | None:
    """Why the MPIJob no longer matches its Workload: its replica types, their pod counts or
    their containers' resources changed (Kueue's `EquivalentToWorkload`)."""
    return jf.pod_sets_mismatch(mpijob, pod_sets(mpijob), wl, "replica type")


def carries_admission(mpijob: MPIJob) -> bool:
    """Whether a replica type's pod template still carries the workload annotation."""
    return jf.templates_carry_admission(templates(mpijob).values())
