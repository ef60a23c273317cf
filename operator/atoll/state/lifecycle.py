"""The Workload lifecycle: every status change around an admitted or pending Workload, with
Kueue's conditions, reasons and messages. One definition for the operator and the simulator.

Each change is a pure *mutation*, `Workload → WorkloadStatus | None` (None: nothing to
write, the Workload is already past it), so that the operator can hand it to its
read-modify-write of the status (`control/ports.WorkloadStore.update_workload_status`) and the
simulator can apply it to its copy at once (`applied`). Time is an argument (`now`), never
read here. The rules:

- `admit`: QuotaReserved and Admitted with the admission (with admission checks, Admitted
  only once every check is Ready: `checks_synced`; a Retry evicts: `check_retry`); an
  earlier Evicted/Preempted turns False ("Previously: …").
- `pending`: QuotaReserved=False with Kueue's reason for the engine's (`written_reason`:
  `Pending`, or `Inadmissible` when the Workload's queue or devices keep it out) and the
  engine's message (Admitted=False, NoReservation); an unchanged message writes nothing.
- `evict`: Evicted=True (and Preempted=True with the preemption reason), counted in
  `schedulingStats.evictions` by Kueue's reason and cause (`eviction_labels`); the quota
  stays held until no pod of the gang is active. A deactivation drops DeactivationTarget.
- `release`: the quota released after an eviction (QuotaReserved=False Pending,
  admission cleared, time admitted added to the past execution time); requeued at once
  (`requeues_at_once`), after the requeue backoff (`backoff`, PodsReadyTimeout), or on the
  reconciler's next pass (`requeue`, BackoffFinished).
- `requeue`: the backoff is over (Requeued=True, BackoffFinished, requeueAt cleared).
- `deactivation_target` / `requeuing_limit_exceeded`: past `backoffLimitCount` PodsReady
  timeouts, or the maximum execution time, the Workload is deactivated.
- `finish`: Finished=True (Succeeded, Failed, OwnerNotFound, FailedToStart).

Mirrors Kueue's pkg/workload (admission.go `SetQuotaReservation`, evict.go,
conditions.go, `UnsetQuotaReservationWithCondition`, `SetRequeuedCondition`),
pkg/controller/core/workload_controller.go (requeue backoff, `RequeuingLimitExceeded`) and
pkg/scheduler/preemption (`preemptionMessage`, `HumanReadablePreemptionReasons`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping

from atoll.api.admissioncheck import CheckState
from atoll.api.clusterqueue import ClusterQueue
from atoll.api.cohort import Cohort
from atoll.api.meta import Condition, ConditionStatus
from atoll.api.topologyassignment import TopologyAssignment
from atoll.api.workload import (
    Admission,
    PodSetAssignment,
    ReclaimablePod,
    RequeueState,
    Workload,
    WorkloadStatus,
)
from atoll.engine import decisions as d
from atoll.state import admissionchecks as ac
from atoll.state import convert
from atoll.state import workloads as wls

Mutation = Callable[[Workload], WorkloadStatus | None]
"""A status change: the new status of the Workload given, None when there is nothing to
write."""

HUMAN_PREEMPTION_REASONS = {
    d.PreemptionReason.IN_CLUSTER_QUEUE: "prioritization in the ClusterQueue",
    d.PreemptionReason.IN_COHORT_RECLAMATION: "reclamation within the cohort",
    d.PreemptionReason.IN_COHORT_FAIR_SHARING: "Fair Sharing within the cohort",
    d.PreemptionReason.IN_COHORT_RECLAIM_WHILE_BORROWING: (
        "reclamation within the cohort while borrowing"
    ),
}
NO_RESERVATION = "NoReservation"
NO_RESERVATION_MESSAGE = "The workload has no reservation"
NO_RESERVATION_UNSATISFIED_CHECKS = "NoReservationUnsatisfiedChecks"
NO_RESERVATION_UNSATISFIED_MESSAGE = "The workload has no reservation and not all checks ready"
PENDING = "Pending"
"""Kueue's QuotaReserved=False reason of a Workload its scheduler tried and left pending
(pkg/scheduler `requeueAndUpdate`; also its Warning Event's reason), and of one whose quota
was released after an eviction."""
INADMISSIBLE = "Inadmissible"
"""Kueue's QuotaReserved=False reason (`WorkloadInadmissible`) of a Workload its workload
controller keeps out of the queues: a missing or stopped LocalQueue, a missing or inactive
ClusterQueue, devices that cannot be counted."""
WRITTEN_REASONS: Mapping[d.PendingReason, str] = {
    d.PendingReason.PENDING_EVALUATION: PENDING,
    d.PendingReason.WAITING_FOR_QUOTA: PENDING,
    d.PendingReason.EXCEEDS_MAX_QUOTA: PENDING,
    d.PendingReason.NO_MATCHING_FLAVOR: PENDING,
    d.PendingReason.WAITING_FOR_PREEMPTED_WORKLOADS: PENDING,
    d.PendingReason.TOPOLOGY_PLACEMENT_FAILED: PENDING,
    d.PendingReason.NAMESPACE_MISMATCH: PENDING,
    d.PendingReason.MISCONFIGURED: INADMISSIBLE,
    d.PendingReason.SUSPENDED: INADMISSIBLE,
    d.PendingReason.DEACTIVATED: INADMISSIBLE,
}
"""atoll's reason for a pending Workload → the reason Kueue writes for it, so that what
matches Kueue's conditions and Events (dashboards, alerts) matches atoll's."""
PENDING_EVALUATION_MESSAGE = "The workload is pending evaluation"
PODS_READY_TIMEOUT = "PodsReadyTimeout"
WAIT_FOR_START = "WaitForStart"
WAIT_FOR_RECOVERY = "WaitForRecovery"
DEACTIVATED_DUE_TO = "DeactivatedDueTo"
"""Prefix of the Evicted reason of a deactivation with a cause (`DeactivatedDueTo<cause>`)."""
PREEMPTED = "Preempted"
OUTSIDE_ASSIGNMENT = "PodOutsideTopologyAssignment"
"""Eviction reason of a gang with a pod running outside its topology assignment."""
REQUEUED_AT_ONCE = frozenset({PREEMPTED, "NodeFailures", OUTSIDE_ASSIGNMENT})
"""Eviction reasons after which the Workload is requeued as soon as its quota is released
(Kueue's `SetRequeuedCondition(..., true)`); after the others, Requeued stays False until
the reconciler's next pass (or, after a PodsReady timeout, the end of the backoff)."""
REQUEUING_LIMIT_EXCEEDED = "RequeuingLimitExceeded"
REQUEUING_LIMIT_EXCEEDED_MESSAGE = "exceeding the maximum number of re-queuing retries"
MAXIMUM_EXECUTION_TIME_EXCEEDED = "MaximumExecutionTimeExceeded"
MAXIMUM_EXECUTION_TIME_EXCEEDED_MESSAGE = "exceeding the maximum execution time"
BACKOFF_FINISHED = "BackoffFinished"
BACKOFF_FINISHED_MESSAGE = "The workload backoff was finished"
OWNER_NOT_FOUND = "OwnerNotFound"
OWNER_NOT_FOUND_MESSAGE = "The workload's owner no longer exists"


def applied(wl: Workload, mutate: Mutation) -> Workload:
    """`wl` with the change made (unchanged when the change writes nothing)."""
    status = mutate(wl)
    return wl if status is None else wl.model_copy(update={"status": status})


# -- admission ----------------------------------------------------------------------------
def api_admission(
    cluster_queue: str,
    pod_sets: tuple[d.PodSetAdmission, ...],
    topology: Mapping[str, TopologyAssignment] | None = None,
) -> Admission:
    return Admission(
        cluster_queue=cluster_queue,
        pod_set_assignments=tuple(
            PodSetAssignment(
                name=ps.name,
                flavors={str(r): str(f) for r, f in ps.flavors},
                resource_usage={str(r): convert.quantity(r, v) for r, v in ps.resource_usage},
                count=ps.count,
                topology_assignment=(topology or {}).get(str(ps.name)),
            )
            for ps in pod_sets
        ),
    )


def admit(
    decision: d.Admit,
    now: dt.datetime,
    topology: Mapping[str, TopologyAssignment] | None = None,
    checks: tuple[str, ...] = (),
) -> Mutation:
    """QuotaReserved with the admission, and Admitted with it unless the ClusterQueue names
    admission `checks` for the Workload's flavors: then one Pending state per check (a
    state already there is kept) and Admitted=False (UnsatisfiedChecks) until every check is
    Ready (`checks_synced`)."""

    def mutate(wl: Workload) -> WorkloadStatus | None:
        if wls.has_quota(wl) or wls.is_finished(wl) or wls.is_deleting(wl):
            return None
        cq = str(decision.cluster_queue)
        conds = wl.status.conditions or ()
        conds = wls.with_condition(
            conds,
            wls.QUOTA_RESERVED,
            status=True,
            reason="QuotaReserved",
            message=f"Quota reserved in ClusterQueue {cq}",
            now=now,
        )
        states = ac.synced(ac.states(wl), checks, now) if checks else ()
        ready = all(s.state is CheckState.READY for s in states)
        conds = wls.with_condition(
            conds,
            wls.ADMITTED,
            status=ready,
            reason="Admitted" if ready else ac.UNSATISFIED,
            message="The workload is admitted" if ready else ac.UNSATISFIED_MESSAGE,
            now=now,
        )
        for type_ in (wls.EVICTED, wls.PREEMPTED):
            old = wls.condition(wl, type_)
            if old is not None and old.status.value == "True":
                conds = wls.with_condition(
                    conds,
                    type_,
                    status=False,
                    reason="QuotaReserved",
                    message=f"Previously: {old.message}",
                    now=now,
                )
        return wls.status_with(
            wl,
            conditions=conds,
            admission=api_admission(cq, decision.pod_sets, topology),
            resource_requests=None,
            admission_checks=states or None,
        )

    return mutate


def checks_synced(wanted: tuple[str, ...], now: dt.datetime) -> Mutation:
    """A Workload holding quota, not admitted yet: its check states made those of the
    `wanted` checks (its ClusterQueue's for its flavors, which may have changed since its
    reservation: a new check Pending, a dropped one gone), and Admitted=True once every one
    is Ready (Kueue's `reconcileSyncAdmissionChecks`, `SyncAdmittedCondition`); nothing to
    write otherwise."""

    def mutate(w: Workload) -> WorkloadStatus | None:
        if (
            not wls.has_quota(w)
            or wls.is_admitted(w)
            or wls.is_evicted(w)
            or wls.is_finished(w)
            or ac.retrying(w)
        ):
            return None
        states = ac.synced(ac.states(w), wanted, now)
        ready = all(s.state is CheckState.READY for s in states)
        if states == ac.states(w) and not ready:
            return None
        conds = w.status.conditions or ()
        if ready:
            conds = wls.with_condition(
                conds,
                wls.ADMITTED,
                status=True,
                reason="Admitted",
                message="The workload is admitted",
                now=now,
            )
        return wls.status_with(w, conditions=conds, admission_checks=states or None)

    return mutate


def checks_reset(now: dt.datetime) -> Mutation:
    """A Workload without quota whose check was set Retry: its checks back to Pending, so
    that it can be reserved again (Kueue evicts it, which resets them)."""

    def mutate(w: Workload) -> WorkloadStatus | None:
        if wls.has_quota(w) or not ac.retrying(w) or wls.is_finished(w):
            return None
        return wls.status_with(w, admission_checks=ac.reset(ac.states(w), now) or None)

    return mutate


def check_retry(now: dt.datetime) -> Mutation:
    """A check of a Workload holding quota set Retry: Evicted (reason `AdmissionCheck`), the
    checks reset to Pending by the eviction, and the requeue held until the latest time a
    Retry check's `requeueAfterSeconds` asks for (Kueue's `reconcileCheckBasedEviction`,
    `NeedsRequeueAtUpdate`)."""

    def mutate(w: Workload) -> WorkloadStatus | None:
        if not ac.retrying(w):
            return None
        at = ac.retry_at(w)
        status = evict(ac.EVICTED_BY_CHECK, ac.RETRY_MESSAGE, now)(w)
        if status is None or at is None or at <= now:
            return status
        rs = status.requeue_state or RequeueState()
        return status.model_copy(update={"requeue_state": rs.model_copy(update={"requeue_at": at})})

    return mutate


def rejected_message(names: tuple[str, ...]) -> str:
    """Kueue's DeactivationTarget message for rejected checks."""
    return f"Admission check(s): {','.join(names)}, were rejected"


def without_reservation(
    conditions: tuple[Condition, ...],
    reason: str,
    message: str,
    now: dt.datetime,
    *,
    checks_ready: bool = True,
) -> tuple[Condition, ...]:
    """QuotaReserved=False with `reason` and Admitted=False: NoReservation, or
    NoReservationUnsatisfiedChecks while an admission check of the Workload is not Ready
    (Kueue's `SyncAdmittedCondition`)."""
    conds = wls.with_condition(
        conditions, wls.QUOTA_RESERVED, status=False, reason=reason, message=message, now=now
    )
    return wls.with_condition(
        conds,
        wls.ADMITTED,
        status=False,
        reason=NO_RESERVATION if checks_ready else NO_RESERVATION_UNSATISFIED_CHECKS,
        message=NO_RESERVATION_MESSAGE if checks_ready else NO_RESERVATION_UNSATISFIED_MESSAGE,
        now=now,
    )


def written_reason(reason: d.PendingReason) -> str:
    """The reason written for a Workload the engine leaves pending for `reason`, on its
    QuotaReserved=False condition and its Warning Event: Kueue's `Pending`, or
    `Inadmissible` (`WRITTEN_REASONS`). The engine's own reason stays in `atoll explain`."""
    return WRITTEN_REASONS[reason]


def pending(reason: d.PendingReason, message: str, now: dt.datetime) -> Mutation:
    """QuotaReserved=False with Kueue's reason for the engine's `reason` (`written_reason`)
    and the engine's message; an unchanged status writes nothing."""
    written = written_reason(reason)

    def mutate(wl: Workload) -> WorkloadStatus | None:
        if wls.has_quota(wl) or wls.is_finished(wl):
            return None
        current = wls.condition(wl, wls.QUOTA_RESERVED)
        admitted = wls.condition(wl, wls.ADMITTED)
        if (
            current is not None
            and current.reason == written
            and current.message == wls.truncate(message)
            and admitted is not None
        ):
            return None
        conds = without_reservation(
            wl.status.conditions or (), written, message, now, checks_ready=ac.all_ready(wl)
        )
        return wls.status_with(wl, conditions=conds)

    return mutate


# -- eviction -----------------------------------------------------------------------------
def cohort_path(
    cluster_queues: Mapping[str, ClusterQueue], cohorts: Mapping[str, Cohort], cq: str
) -> str:
    """`/root-cohort/…/cohort/cq`: where a ClusterQueue sits in its cohort tree."""
    parts = [cq]
    obj = cluster_queues.get(cq)
    cohort = obj.spec.cohort_name if obj else None
    seen: set[str] = set()
    while cohort and cohort not in seen:
        seen.add(cohort)
        parts.append(cohort)
        parent = cohorts.get(cohort)
        cohort = parent.spec.parent_name if parent else None
    return "/" + "/".join(reversed(parts))


def preemption_message(
    preemptor: Workload | None, reason: d.PreemptionReason, preemptor_path: str, victim_path: str
) -> str:
    uid = preemptor.metadata.uid if preemptor else "unknown"
    job_uid = ((preemptor.metadata.labels or {}) if preemptor else {}).get(
        "kueue.x-k8s.io/job-uid", "UNKNOWN"
    )
    return (
        f"Preempted to accommodate a workload (UID: {uid}, JobUID: {job_uid}) due to "
        f"{HUMAN_PREEMPTION_REASONS[reason]}; preemptor path: {preemptor_path}; "
        f"preemptee path: {victim_path}"
    )


def pods_ready_timeout_message(key: str) -> str:
    """The Evicted message of a gang whose pods were not all ready in time."""
    return f"Exceeded the PodsReady timeout {key}"


def eviction_cause(wl: Workload | None, reason: str, message: str) -> tuple[str, str]:
    """A deactivation with a cause (the Workload's DeactivationTarget condition: the
    requeuing limit, the maximum execution time) is reported as Kueue does:
    `DeactivatedDueTo<cause>`, "<message> due to <cause's message>"."""
    if reason == d.EvictionReason.DEACTIVATED.value and wl is not None:
        cause = wls.condition(wl, wls.DEACTIVATION_TARGET)
        if cause is not None and cause.status.value == "True":
            return f"{DEACTIVATED_DUE_TO}{cause.reason}", f"{message} due to {cause.message}"
    return reason, message


def eviction_labels(wl: Workload, reason: str) -> tuple[str, str]:
    """Kueue's `reason` and `underlying_cause` of an eviction with Evicted reason `reason`,
    as its metrics and `status.schedulingStats` name them: a deactivation with a cause is
    `Deactivated` with that cause; a PodsReady timeout is `WaitForStart` when the gang never
    had a PodsReady condition or its reason is `WaitForStart` or `PodsReady`, and
    `WaitForRecovery` when waiting for recovery (Kueue's rule for the timeout it applies);
    the others no cause."""
    if reason.startswith(DEACTIVATED_DUE_TO):
        return d.EvictionReason.DEACTIVATED.value, reason.removeprefix(DEACTIVATED_DUE_TO)
    if reason == PODS_READY_TIMEOUT:
        ready = wls.condition(wl, wls.PODS_READY)
        if ready is None or ready.reason in (WAIT_FOR_START, "PodsReady"):
            return reason, WAIT_FOR_START
        if ready.status == ConditionStatus.FALSE and ready.reason == WAIT_FOR_RECOVERY:
            return reason, WAIT_FOR_RECOVERY
    return reason, ""


def evict(
    reason: str, message: str, now: dt.datetime, *, preempted_reason: str | None = None
) -> Mutation:
    """Evicted=True (and Preempted=True for a preemption), and the eviction counted in
    `status.schedulingStats` (`eviction_labels`); quota is released later, when the gang
    has no active pod (`release`)."""

    def mutate(wl: Workload) -> WorkloadStatus | None:
        if not wls.has_quota(wl) or wls.is_evicted(wl) or wls.is_finished(wl):
            return None
        stats = wls.with_eviction_counted(wl, *eviction_labels(wl, reason))
        conds = wls.with_condition(
            wl.status.conditions or (),
            wls.EVICTED,
            status=True,
            reason=reason,
            message=message,
            now=now,
        )
        if reason.startswith(DEACTIVATED_DUE_TO):
            # the deactivation is applied: Kueue removes its transient target condition
            conds = tuple(c for c in conds if c.type != wls.DEACTIVATION_TARGET)
        if preempted_reason is not None:
            conds = wls.with_condition(
                conds,
                wls.PREEMPTED,
                status=True,
                reason=preempted_reason,
                message=message,
                now=now,
            )
        checks = ac.reset(ac.states(wl), now) or None  # Kueue's `resetChecksOnEviction`
        return wls.status_with(
            wl, conditions=conds, scheduling_stats=stats, admission_checks=checks
        )

    return mutate


def requeues_at_once(reason: str) -> bool:
    """Whether a Workload evicted for `reason` is requeued as soon as its quota is released."""
    return reason in REQUEUED_AT_ONCE


def backoff(wl: Workload, now: dt.datetime, base: float, cap: float) -> RequeueState:
    """The requeue state after one more PodsReady timeout: its count, and when the Workload
    may be admitted again (`wls.backoff_delay`: base·2^(n−1), capped, without Kueue's random
    jitter)."""
    count = wls.requeue_count(wl)
    delay = wls.backoff_delay(count, base, cap)
    return RequeueState(count=count, requeue_at=now + dt.timedelta(seconds=delay))


def release(now: dt.datetime, *, backoff: RequeueState | None = None) -> Mutation:
    """The quota of an evicted Workload released (no pod of its gang is active any more):
    QuotaReserved=False (Pending, with the eviction's message, as Kueue), Admitted=False,
    the admission cleared, the time admitted added up, and Requeued with the eviction's
    reason: True for the reasons that requeue at once, else False (with `backoff` after a
    PodsReady timeout)."""

    def mutate(w: Workload) -> WorkloadStatus | None:
        if not wls.has_quota(w):
            return None
        evicted = wls.condition(w, wls.EVICTED)
        reason = evicted.reason if evicted else "Pending"
        # Kueue's reconciler writes the eviction's message (jobframework, on release)
        message = evicted.message if evicted and evicted.message else PENDING_EVALUATION_MESSAGE
        conds = without_reservation(
            w.status.conditions or (), PENDING, message, now, checks_ready=ac.all_ready(w)
        )
        conds = wls.with_condition(
            conds,
            wls.REQUEUED,
            status=requeues_at_once(reason),
            reason=reason,
            message=evicted.message if evicted else "",
            now=now,
        )
        changes: dict[str, object] = {
            "conditions": conds,
            "admission": None,
            "accumulated_past_execution_time_seconds": wls.past_execution_time(w, evicted, reason),
        }
        if backoff is not None:
            changes["requeue_state"] = backoff
        return wls.status_with(w, **changes)

    return mutate


def release_unmatched(message: str, now: dt.datetime) -> Mutation:
    """The quota of a Workload that no longer matches its owner released, so that it queues
    again for what the owner now asks (QuotaReserved=False Pending `message`)."""

    def mutate(w: Workload) -> WorkloadStatus | None:
        if not wls.has_quota(w):
            return None
        conds = without_reservation(w.status.conditions or (), PENDING, message, now)
        # a new ask: its admission checks start over (Kueue makes a new Workload)
        return wls.status_with(w, conditions=conds, admission=None, admission_checks=None)

    return mutate


def requeue(now: dt.datetime) -> Mutation:
    """Requeued=True (BackoffFinished) and requeueAt cleared: the Workload queues again."""

    def mutate(w: Workload) -> WorkloadStatus | None:
        if not wls.is_false(w, wls.REQUEUED):
            return None
        conds = wls.with_condition(
            w.status.conditions or (),
            wls.REQUEUED,
            status=True,
            reason=BACKOFF_FINISHED,
            message=BACKOFF_FINISHED_MESSAGE,
            now=now,
        )
        rs = w.status.requeue_state
        return wls.status_with(
            w,
            conditions=conds,
            requeue_state=rs.model_copy(update={"requeue_at": None}) if rs else None,
        )

    return mutate


# -- deactivation and the end ---------------------------------------------------------------
def requeuing_limit_exceeded(wl: Workload, limit: int | None) -> bool:
    """Whether an active Workload was requeued after more PodsReady timeouts than
    `backoffLimitCount` allows (then it is deactivated instead)."""
    count = (wl.status.requeue_state.count if wl.status.requeue_state else None) or 0
    return limit is not None and count > limit and wl.spec.active


def set_condition(
    type_: str, status: bool, reason: str, message: str, now: dt.datetime
) -> Mutation:
    """One condition set, the rest of the status unchanged."""

    def mutate(w: Workload) -> WorkloadStatus | None:
        return wls.status_with(
            w,
            conditions=wls.with_condition(
                w.status.conditions or (),
                type_,
                status=status,
                reason=reason,
                message=message,
                now=now,
            ),
        )

    return mutate


def reclaimable(pods: tuple[ReclaimablePod, ...]) -> Mutation:
    """`status.reclaimablePods` set to `pods` of the Workload's pod sets (another name is
    left out: Kueue's validation refuses it), each count at most its pod set's (a count
    from the Job's status may outlive a smaller pod set); nothing to write when the counts
    by pod set already read so (Kueue's)."""

    def mutate(w: Workload) -> WorkloadStatus | None:
        sizes = {ps.name: ps.count for ps in w.spec.pod_sets}
        limited = tuple(
            p if p.count <= sizes[p.name] else p.model_copy(update={"count": sizes[p.name]})
            for p in pods
            if p.name in sizes
        )
        if wls.reclaimable_counts(limited) == wls.reclaimable_counts(w.status.reclaimable_pods):
            return None
        return wls.status_with(w, reclaimable_pods=limited or None)

    return mutate


def deactivation_target(reason: str, message: str, now: dt.datetime) -> Mutation:
    """DeactivationTarget=True with the cause; `spec.active: false` follows, and the
    scheduler evicts the Workload with reason `DeactivatedDueTo<cause>` if it holds quota."""
    return set_condition(wls.DEACTIVATION_TARGET, True, reason, message, now)


def deactivated(wl: Workload) -> Workload:
    """`spec.active: false`."""
    return wl.model_copy(update={"spec": wl.spec.model_copy(update={"active": False})})


def pods_ready_timeout(now: dt.datetime) -> Mutation:
    """Evicted=True (PodsReadyTimeout): the admitted gang's pods were not all ready in time."""

    def mutate(w: Workload) -> WorkloadStatus | None:
        if wls.is_evicted(w) or not wls.has_quota(w):
            return None
        return evict(PODS_READY_TIMEOUT, pods_ready_timeout_message(wls.wl_key(w)), now)(w)

    return mutate


def finish(reason: str, message: str, now: dt.datetime) -> Mutation:
    """Finished=True (Succeeded, Failed, OwnerNotFound, FailedToStart), once."""
    finished = set_condition(wls.FINISHED, True, reason, message, now)

    def mutate(w: Workload) -> WorkloadStatus | None:
        return None if wls.is_finished(w) else finished(w)

    return mutate


WAITING_FOR_REPLACEMENT_PODS = "WaitingForReplacementPods"
PODS_FAILED = "PodsFailed"
PODS_FAILED_MESSAGE = "Some Failed pods need replacement"
NO_REPLACEMENT_MESSAGE = "No pods need replacement"


def replacement_pods(wl: Workload, absent: int, now: dt.datetime) -> Mutation | None:
    """The `WaitingForReplacementPods` condition of a pod group's Workload, when it changes:
    True while `absent` pods of its pod sets have no runnable pod (with the eviction's reason
    and message while it is evicted, else `PodsFailed`), False (`PodsReady`) once none is
    absent; never set on a Workload that never missed a pod. None: nothing to write."""
    current = wls.condition(wl, WAITING_FOR_REPLACEMENT_PODS)
    if absent <= 0:
        if current is None or current.status == ConditionStatus.FALSE:
            return None
        return set_condition(
            WAITING_FOR_REPLACEMENT_PODS, False, "PodsReady", NO_REPLACEMENT_MESSAGE, now
        )
    evicted = wls.condition(wl, wls.EVICTED)
    if evicted is not None and evicted.status == ConditionStatus.TRUE:
        reason, message = evicted.reason, evicted.message
    elif current is not None and current.status == ConditionStatus.TRUE:
        return None  # already waiting: keeps the reason it was set with
    else:
        reason, message = PODS_FAILED, PODS_FAILED_MESSAGE
    if (
        current is not None
        and current.status == ConditionStatus.TRUE
        and (current.reason, current.message) == (reason, message)
    ):
        return None
    return set_condition(WAITING_FOR_REPLACEMENT_PODS, True, reason, message, now)
