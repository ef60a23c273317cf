"""The TrainJob integration's rules (Kubeflow Trainer v2.0): a TrainJob's Workload, whose pod
sets come from its runtime's JobSet template, when it is finished, active and ready, and the
pod spec overrides that start and stop it. Pure functions over `atoll.api` models.

Mirrors Kueue's TrainJob adapter as paired with Trainer v2.0: one pod set per replicated job of
the runtime's template (a TrainingRuntime in the TrainJob's namespace or a
ClusterTrainingRuntime, by `spec.runtimeRef`). The trainer step's job (labelled
`trainer.kubeflow.org/trainjob-ancestor-step: trainer`) counts `spec.trainer.numNodes`, else
the runtime's `mlPolicy.numNodes`, and `spec.trainer.resourcesPerNode` replaces the resources
of its `node` container; any other job counts replicas × parallelism. The TrainJob's own
`spec.podSpecOverrides` (those before the admission's) change the pod templates first, as
Trainer v2.0 builds the JobSet (pkg/runtime/core/trainingruntime.go, mergePodSpecOverrides):
each override, in order, is merged into the pod spec of every replicated job its `targetJobs`
names. Starting appends one
`spec.podSpecOverrides` entry per pod set (node selector, tolerations, scheduling gates) and
records the index of the first in `kueue.x-k8s.io/trainjob-override-idx`; stopping cuts the
list back there. Trainer v2.0's webhook refuses a job named in the `targetJobs` of two
overrides, so a job the user's own overrides target is taken out of them and its admission
override carries the user's fields for it too; the user's list as it was is then recorded in
`atoll.dev/trainjob-user-overrides` and put back at stop. The succeeded Jobs its status
reports give their pods' quota back while it runs, by the JobSet rule (reclaimable pods).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from atoll.api.core import PodSpec, PodTemplateSpec, PriorityClass
from atoll.api.jobset import JobSet, ReplicatedJob
from atoll.api.priority import WorkloadPriorityClass
from atoll.api.trainjob import (
    ANCESTOR_LABEL,
    CLUSTER_RUNTIME_KIND,
    GROUP,
    NODE_CONTAINER,
    OVERRIDE_IDX_ANNOTATION,
    RUNTIME_KIND,
    TRAINER_STEP,
    USER_OVERRIDES_ANNOTATION,
    TrainingRuntimeSpec,
    TrainJob,
)
from atoll.api.workload import PodSet, ReclaimablePod, Workload
from atoll.control import jobframework as jf
from atoll.control import jobset as js

__all__ = ["GROUP", "build_workload", "finished", "pod_sets", "runtime_key"]


def runtime_key(trainjob: TrainJob) -> tuple[str, str]:
    """(kind, cache key) of the runtime the TrainJob names: `name` for a
    ClusterTrainingRuntime (the default kind), `namespace/name` for a TrainingRuntime."""
    ref = trainjob.spec.runtime_ref
    kind = ref.kind or CLUSTER_RUNTIME_KIND
    if kind == RUNTIME_KIND:
        return kind, f"{trainjob.namespace or ''}/{ref.name}"
    return kind, ref.name


def _is_trainer(rj: ReplicatedJob) -> bool:
    labels = (rj.template.metadata.labels if rj.template.metadata else None) or {}
    return labels.get(ANCESTOR_LABEL) == TRAINER_STEP


def _trainer_template(trainjob: TrainJob, template: PodTemplateSpec) -> PodTemplateSpec:
    resources = trainjob.spec.trainer.resources_per_node if trainjob.spec.trainer else None
    if resources is None:
        return template
    containers = tuple(
        c.model_copy(update={"resources": resources}) if c.name == NODE_CONTAINER else c
        for c in template.spec.containers
    )
    return template.model_copy(
        update={"spec": template.spec.model_copy(update={"containers": containers})}
    )


_MERGE_KEYS = {"volumes": "name", "schedulingGates": "name"}
"""Override lists merged into the pod spec's by key (the pod spec's strategic merge keys);
`tolerations` replaces the list, as a strategic merge of a PodSpec does."""
_CONTAINER_MERGE_KEYS = {"env": "name", "volumeMounts": "mountPath"}


def _merged_list(
    current: Sequence[Mapping[str, Any]], patch: Sequence[Mapping[str, Any]], key: str
) -> list[dict[str, Any]]:
    out = [dict(item) for item in current]
    for item in patch:
        at = next((i for i, old in enumerate(out) if old.get(key) == item.get(key)), None)
        if at is None:
            out.append(dict(item))
        else:
            out[at] = {**out[at], **item}
    return out


def _merged_containers(
    current: Sequence[Mapping[str, Any]], patch: Sequence[Mapping[str, Any]], *, add: bool
) -> list[dict[str, Any]]:
    """The containers with each override's env and volume mounts merged in, by name; one
    not there yet is added with `add` (merging overrides), else skipped (an override of a
    container the runtime lacks is refused by Trainer's webhook)."""
    out = [dict(c) for c in current]
    for over in patch:
        container = next((c for c in out if c.get("name") == over.get("name")), None)
        if container is None:
            if add:
                out.append(dict(over))
            continue
        for field, key in _CONTAINER_MERGE_KEYS.items():
            if over.get(field):
                container[field] = _merged_list(container.get(field) or (), over[field], key)
    return out


def _targets(override: Mapping[str, Any], job: str) -> bool:
    return any(t.get("name") == job for t in override.get("targetJobs") or ())


def _merge(
    spec: dict[str, Any], overrides: Sequence[Mapping[str, Any]], job: str, *, add: bool
) -> bool:
    """Merge every override targeting `job` into `spec` (a pod spec or an override, in JSON
    form), in order; whether one did."""
    changed = False
    for over in overrides:
        if not _targets(over, job):
            continue
        changed = True
        if over.get("serviceAccountName") is not None:
            spec["serviceAccountName"] = over["serviceAccountName"]
        if over.get("nodeSelector"):
            spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **over["nodeSelector"]}
        if over.get("tolerations"):
            spec["tolerations"] = list(over["tolerations"])
        for field, key in _MERGE_KEYS.items():
            if over.get(field):
                spec[field] = _merged_list(spec.get(field) or (), over[field], key)
        for field in ("containers", "initContainers"):
            if over.get(field):
                spec[field] = _merged_containers(spec.get(field) or (), over[field], add=add)
    return changed


def recorded_user_overrides(annotations: Mapping[str, str] | None) -> list[dict[str, Any]] | None:
    """The user's overrides recorded at start (None: none recorded, or unreadable)."""
    raw = (annotations or {}).get(USER_OVERRIDES_ANNOTATION)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, list) or not all(isinstance(o, dict) for o in value):
        return None
    return value


def user_overrides(trainjob: TrainJob) -> tuple[Mapping[str, Any], ...]:
    """The TrainJob's own pod spec overrides: as recorded at start, else all of them but the
    admission's (from the recorded index on)."""
    recorded = recorded_user_overrides(trainjob.metadata.annotations)
    if recorded is not None:
        return tuple(recorded)
    current = trainjob.spec.pod_spec_overrides or ()
    index = override_index(trainjob)
    return tuple(current[:index] if index is not None else current)


def overridden(
    template: PodTemplateSpec, job: str, overrides: Sequence[Mapping[str, Any]]
) -> PodTemplateSpec:
    """The pod template of replicated job `job` with every override targeting it merged in,
    in order: `nodeSelector` merged by key, `tolerations` and `serviceAccountName` replaced,
    `volumes` and `schedulingGates` merged by name, and each named container's (and init
    container's) `env` and `volumeMounts` merged (Trainer v2.0's `PodSpecOverride` fields;
    it has no metadata, so no labels, and no resources)."""
    spec = template.spec.to_dict()
    if not _merge(spec, overrides, job, add=False):
        return template
    return template.model_copy(update={"spec": PodSpec.model_validate(spec)})


def pod_sets(trainjob: TrainJob, runtime: TrainingRuntimeSpec) -> tuple[PodSet, ...]:
    """One pod set per replicated job of the runtime's JobSet template, named after it, with
    the TrainJob's own overrides applied."""
    out = []
    overrides = user_overrides(trainjob)
    for rj in runtime.template.spec.replicated_jobs:
        template = overridden(rj.template.spec.template, rj.name, overrides)
        count = js.pod_count(rj)
        if _is_trainer(rj):
            template = _trainer_template(trainjob, template)
            nodes = trainjob.spec.trainer.num_nodes if trainjob.spec.trainer else None
            if nodes is None and runtime.ml_policy is not None:
                nodes = runtime.ml_policy.num_nodes
            count = nodes if nodes is not None else count
        out.append(
            PodSet(
                name=rj.name,
                template=jf.workload_template(template),
                count=count,
                topology_request=jf.topology_request(template),
            )
        )
    return tuple(out)


def missing_runtime(trainjob: TrainJob) -> jf.ComposeError:
    """The error of a TrainJob whose runtime atoll has not seen (it waits for it)."""
    kind, key = runtime_key(trainjob)
    return jf.ComposeError(
        "ErrWorkloadCompose",
        f"spec.runtimeRef: {kind} {key!r} not found; the TrainJob waits for it",
    )


def build_workload(
    trainjob: TrainJob,
    runtime: TrainingRuntimeSpec | None,
    workload_classes: Mapping[str, WorkloadPriorityClass],
    priority_classes: Mapping[str, PriorityClass],
) -> Workload:
    """The Workload Kueue creates for the TrainJob (`trainjob-<name>-<hash>`). Raises
    jf.ComposeError when it cannot have one (its runtime is missing or has no jobs)."""
    if runtime is None:
        raise missing_runtime(trainjob)
    sets = pod_sets(trainjob, runtime)
    if not sets:
        raise jf.ComposeError(
            "ErrWorkloadCompose",
            "spec.runtimeRef: the runtime's spec.template.spec.replicatedJobs is empty",
        )
    priority = jf.owner_priority(
        trainjob.metadata.labels or {}, None, workload_classes, priority_classes
    )
    return jf.owned_workload(trainjob, sets, priority, group=GROUP)


def finished(trainjob: TrainJob) -> tuple[bool, str, str]:
    """(finished, reason Succeeded|Failed, message) from the Complete/Failed conditions."""
    return jf.finished_from(trainjob.status.conditions, "Complete", "TrainJob")


def child_jobset(trainjob: TrainJob, jobsets: Mapping[str, JobSet]) -> JobSet | None:
    """The JobSet Trainer made for the TrainJob (same namespace and name, controlled by it),
    if known."""
    found = jobsets.get(f"{trainjob.namespace}/{trainjob.name}")
    if found is None or not trainjob.metadata.uid:
        return None
    owned = any(
        ref.uid == trainjob.metadata.uid and ref.controller
        for ref in found.metadata.owner_references or ()
    )
    return found if owned else None


def active_jobs(trainjob: TrainJob) -> int:
    """Jobs of its JobSet still active (quota is held until none is left)."""
    return sum(s.active for s in trainjob.status.jobs_status or ())


def pods_ready(trainjob: TrainJob, runtime: TrainingRuntimeSpec) -> bool:
    """Every Job of its JobSet is ready or succeeded, by the statuses the TrainJob reports
    (Kueue's rule, the JobSet's): the JobSet Trainer makes has its runtime's replicated jobs,
    the trainer step one Job."""
    jobs = sum(
        1 if _is_trainer(rj) else rj.replicas for rj in runtime.template.spec.replicated_jobs
    )
    return js.all_ready(jobs, trainjob.status.jobs_status)


def reclaimable_pods(
    trainjob: TrainJob, runtime: TrainingRuntimeSpec
) -> tuple[ReclaimablePod, ...]:
    """The pods whose quota can go back while the TrainJob runs (Kueue's, as for the JobSet
    Trainer makes): for each replicated job of its runtime with succeeded Jobs in the
    TrainJob's status, their pods (pods per Job; the trainer step is one Job of all its
    nodes)."""
    replicated = (
        # Trainer makes the trainer step one Job of all its nodes (replicas 1)
        (rj.name, 1, ps.count)
        if _is_trainer(rj)
        else (rj.name, rj.replicas, js.pods_per_replica(rj))
        for rj, ps in zip(
            runtime.template.spec.replicated_jobs, pod_sets(trainjob, runtime), strict=True
        )
    )
    return js.reclaimable_from(replicated, trainjob.status.jobs_status)


def workload_mismatch(
    trainjob: TrainJob, runtime: TrainingRuntimeSpec | None, wl: Workload
) -> str | None:
    """Why the TrainJob no longer matches its Workload (its runtime's jobs, their pod counts
    or resources changed); a runtime gone since admission is no mismatch."""
    if runtime is None:
        return None
    return jf.pod_sets_mismatch(trainjob, pod_sets(trainjob, runtime), wl, "replicated job")


def override_index(trainjob: TrainJob) -> int | None:
    """The index of the first override the admission appended, if it is recorded."""
    raw = (trainjob.metadata.annotations or {}).get(OVERRIDE_IDX_ANNOTATION)
    return int(raw) if raw is not None and raw.isdigit() else None


def carries_admission(trainjob: TrainJob) -> bool:
    """Whether the admission's overrides are still recorded on the TrainJob."""
    return override_index(trainjob) is not None


def admission_overrides(plans: Mapping[str, jf.TemplateStart]) -> list[dict[str, Any]]:
    """One pod spec override per admitted pod set, targeting the replicated job of its name."""
    out = []
    for name, plan in plans.items():
        override: dict[str, Any] = {"targetJobs": [{"name": name}]}
        if plan.node_selector:
            override["nodeSelector"] = dict(plan.node_selector)
        if plan.tolerations:
            override["tolerations"] = [t.to_dict() for t in plan.tolerations]
        if plan.scheduling_gates:
            override["schedulingGates"] = [{"name": g} for g in plan.scheduling_gates]
        out.append(override)
    return out


def started_overrides(
    current: Sequence[Mapping[str, Any]],
    index: int | None,
    added: Sequence[Mapping[str, Any]],
    recorded: Sequence[Mapping[str, Any]] | None = None,
) -> tuple[list[dict[str, Any]], int, list[dict[str, Any]] | None]:
    """(the overrides after a start, the index to record, the user's overrides to record):
    the user's own overrides (`recorded` at an earlier start, else those before a stale
    recorded index) without the admitted jobs in their `targetJobs`, followed by the
    admission's, each carrying first the user's fields for its job (Trainer v2.0 refuses a
    job named by two overrides). The user's list is to be recorded when it was changed."""
    if recorded is None:
        recorded = current[:index] if index is not None else current
    users = [dict(o) for o in recorded]
    admitted = {t.get("name") for o in added for t in o.get("targetJobs") or ()}
    kept = []
    for over in users:
        targets = [t for t in over.get("targetJobs") or () if t.get("name") not in admitted]
        if len(targets) == len(over.get("targetJobs") or ()):
            kept.append(over)
        elif targets:
            kept.append({**over, "targetJobs": targets})
    ours = []
    for admission in added:
        job = str((admission.get("targetJobs") or [{}])[0].get("name", ""))
        carried: dict[str, Any] = {}
        _merge(carried, users, job, add=True)
        ours.append(_with_admission(carried, admission))
    return [*kept, *ours], len(kept), users if kept != users else None


def _with_admission(users: dict[str, Any], admission: Mapping[str, Any]) -> dict[str, Any]:
    """One override of a job: the user's fields for it, then the admission's (its node
    selector merged in, its tolerations (the user's among them) and gates in their place)."""
    out = {"targetJobs": admission["targetJobs"], **users}
    if admission.get("nodeSelector"):
        out["nodeSelector"] = {**(users.get("nodeSelector") or {}), **admission["nodeSelector"]}
    if admission.get("tolerations"):
        out["tolerations"] = admission["tolerations"]
    if admission.get("schedulingGates"):
        gates = users.get("schedulingGates") or ()
        out["schedulingGates"] = _merged_list(gates, admission["schedulingGates"], "name")
    return out


def stopped_overrides(
    current: Sequence[Mapping[str, Any]],
    index: int | None,
    recorded: Sequence[Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The overrides after a stop: the user's as recorded at start, else cut back to the
    recorded index (none recorded: as is)."""
    if recorded is not None:
        return [dict(o) for o in recorded]
    return [dict(o) for o in (current[:index] if index is not None else current)]
