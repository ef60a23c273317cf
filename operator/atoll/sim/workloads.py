"""The simulator's Workloads: built from a scenario's Jobs, and their status transitions.

The live operator builds Workloads in `control/jobframework` and writes statuses through
`control/admission` and `control/jobs`; the sim layer may not import `control`, so this
module holds the minimal equivalent the simulator needs (one podSet per Job, Kueue's
priority resolution, the QuotaReserved / Admitted / Evicted / Requeued / Finished
transitions), on the same `atoll.api` models and the same `atoll.state.workloads`
condition helpers, so that the cache sees exactly what it would see live.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping

from atoll.api import labels as keys
from atoll.api.core import Job, PriorityClass
from atoll.api.meta import ObjectMeta, OwnerReference
from atoll.api.priority import WorkloadPriorityClass
from atoll.api.workload import (
    MAIN_POD_SET,
    Admission,
    PodSet,
    PodSetAssignment,
    PodSetTopologyRequest,
    RequeueState,
    Workload,
    WorkloadSpec,
)
from atoll.engine import decisions as d
from atoll.state import convert, tas
from atoll.state import workloads as wls

EPOCH = 1_767_225_600.0
"""Wall-clock time of simulation second 0 (2026-01-01T00:00:00Z), for object timestamps."""
_UID_NAMESPACE = uuid.UUID("6c1d0b4e-5f0a-4f5e-9a57-61746f6c6c21")


def at(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(EPOCH + t, dt.UTC)


def pod_count(job: Job) -> int:
    """Pods of the gang: min(parallelism, completions), parallelism defaulting to 1."""
    parallelism = job.spec.parallelism if job.spec.parallelism is not None else 1
    completions = job.spec.completions
    return parallelism if completions is None else min(parallelism, completions)


def priority(
    job: Job,
    workload_classes: Mapping[str, WorkloadPriorityClass],
    priority_classes: Mapping[str, PriorityClass],
) -> int:
    """Kueue's order: WorkloadPriorityClass label, the pods' PriorityClass, the global
    default PriorityClass, else 0 (unknown class names count as 0 in the simulator)."""
    wpc = (job.metadata.labels or {}).get(keys.PRIORITY_CLASS_LABEL)
    if wpc:
        return workload_classes[wpc].value if wpc in workload_classes else 0
    pc = job.spec.template.spec.priority_class_name
    if pc:
        return priority_classes[pc].value if pc in priority_classes else 0
    defaults = sorted(p.value for p in priority_classes.values() if p.global_default)
    return defaults[0] if defaults else 0


def _topology_request(job: Job) -> PodSetTopologyRequest | None:
    """The pods' topology annotations, as the operator reads them; conflicting ones are
    ignored here (the operator rejects such a Job; a scenario is checked when loaded)."""
    try:
        return tas.podset_topology_request(job.spec.template)
    except tas.TopologyAnnotationError:
        return None


def _max_exec_seconds(job: Job) -> int | None:
    """Kueue's `kueue.x-k8s.io/max-exec-time-seconds` label, as the Job integration reads it."""
    raw = (job.metadata.labels or {}).get(keys.MAX_EXEC_TIME_SECONDS_LABEL)
    return int(raw) if raw and raw.isdigit() and int(raw) > 0 else None


def build_workload(job: Job, *, value: int, created: float) -> Workload:
    """The Workload of a Job created at sim time `created` (one podSet, `main`)."""
    name = job.metadata.name or ""
    uid = str(uuid.uuid5(_UID_NAMESPACE, f"{job.namespace}/{name}"))
    count = pod_count(job)
    raw_min = (job.metadata.annotations or {}).get(keys.JOB_MIN_PARALLELISM_ANNOTATION)
    min_count = int(raw_min) if raw_min and raw_min.isdigit() and 0 < int(raw_min) < count else None
    owner = OwnerReference(api_version="batch/v1", kind="Job", name=name, uid=uid, controller=True)
    return Workload(
        metadata=ObjectMeta(
            name=f"job-{name}",
            namespace=job.metadata.namespace,
            uid=uid,
            creation_timestamp=at(created),
            labels={keys.JOB_UID_LABEL: uid},
            owner_references=(owner,),
        ),
        spec=WorkloadSpec(
            pod_sets=(
                PodSet(
                    name=MAIN_POD_SET,
                    template=job.spec.template,
                    count=count,
                    min_count=min_count,
                    topology_request=_topology_request(job),
                ),
            ),
            queue_name=(job.metadata.labels or {}).get(keys.QUEUE_NAME_LABEL),
            priority=value,
            maximum_execution_time_seconds=_max_exec_seconds(job),
        ),
    )


def admitted(wl: Workload, decision: d.Admit, t: float) -> Workload:
    """QuotaReserved and Admitted (no admission checks), with the admission."""
    now = at(t)
    cq = str(decision.cluster_queue)
    conds = wls.with_condition(
        wl.status.conditions or (),
        wls.QUOTA_RESERVED,
        status=True,
        reason="QuotaReserved",
        message=f"Quota reserved in ClusterQueue {cq}",
        now=now,
    )
    conds = wls.with_condition(
        conds, wls.ADMITTED, status=True, reason="Admitted", message="admitted", now=now
    )
    for type_ in (wls.EVICTED, wls.PREEMPTED):
        if wls.is_true(wl, type_):
            conds = wls.with_condition(
                conds, type_, status=False, reason="QuotaReserved", message="readmitted", now=now
            )
    admission = Admission(
        cluster_queue=cq,
        pod_set_assignments=tuple(
            PodSetAssignment(
                name=ps.name,
                flavors={str(r): str(f) for r, f in ps.flavors},
                resource_usage={str(r): convert.quantity(r, v) for r, v in ps.resource_usage},
                count=ps.count,
            )
            for ps in decision.pod_sets
        ),
    )
    status = wls.status_with(wl, conditions=conds, admission=admission)
    return wl.model_copy(update={"status": status})


def released(
    wl: Workload, reason: str, message: str, t: float, *, backoff: RequeueState | None
) -> Workload:
    """Evicted (and Preempted) then, the pods being gone at once in the simulator, the quota
    released: requeued now, or after `backoff` (PodsReadyTimeout)."""
    now = at(t)
    conds = wls.with_condition(
        wl.status.conditions or (),
        wls.EVICTED,
        status=True,
        reason=reason,
        message=message,
        now=now,
    )
    if reason == "Preempted":
        conds = wls.with_condition(
            conds, wls.PREEMPTED, status=True, reason=reason, message=message, now=now
        )
    conds = wls.with_condition(
        conds,
        wls.QUOTA_RESERVED,
        status=False,
        reason="PendingEvaluation",
        message="The workload is pending evaluation",
        now=now,
    )
    conds = wls.with_condition(
        conds, wls.ADMITTED, status=False, reason="NoReservation", message="no reservation", now=now
    )
    conds = wls.with_condition(
        conds, wls.REQUEUED, status=backoff is None, reason=reason, message=message, now=now
    )
    evicted = next(c for c in conds if c.type == wls.EVICTED)
    changes: dict[str, object] = {
        "conditions": conds,
        "admission": None,
        "accumulated_past_execution_time_seconds": wls.past_execution_time(wl, evicted, reason),
    }
    if backoff is not None:
        changes["requeue_state"] = backoff
    return wl.model_copy(update={"status": wls.status_with(wl, **changes)})


def out_of_time(wl: Workload, t: float) -> Workload:
    """Deactivated for exceeding its maximum execution time, as the operator's Job
    reconciler does it (DeactivationTarget, then `spec.active: false`): the next step
    evicts it and it is not requeued."""
    conds = wls.with_condition(
        wl.status.conditions or (),
        wls.DEACTIVATION_TARGET,
        status=True,
        reason=wls.OUT_OF_TIME[0],
        message=wls.OUT_OF_TIME[1],
        now=at(t),
    )
    return wl.model_copy(
        update={
            "status": wls.status_with(wl, conditions=conds),
            "spec": wl.spec.model_copy(update={"active": False}),
        }
    )


def backoff_finished(wl: Workload, t: float) -> Workload:
    conds = wls.with_condition(
        wl.status.conditions or (),
        wls.REQUEUED,
        status=True,
        reason="BackoffFinished",
        message="The workload backoff was finished",
        now=at(t),
    )
    rs = wl.status.requeue_state
    status = wls.status_with(
        wl,
        conditions=conds,
        requeue_state=rs.model_copy(update={"requeue_at": None}) if rs else None,
    )
    return wl.model_copy(update={"status": status})


def next_backoff(wl: Workload, t: float, base: float, cap: float) -> RequeueState:
    """Kueue's requeue backoff after the n-th PodsReady timeout (`wls.backoff_delay`; no
    random jitter, so that runs are deterministic)."""
    count = wls.requeue_count(wl)
    delay = wls.backoff_delay(count, base, cap)
    return RequeueState(count=count, requeue_at=at(t + delay))
