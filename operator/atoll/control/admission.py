"""How engine decisions become Workload status changes: the admission, conditions and
messages Kueue writes. Pure functions that build `StatusMutation`s for the ports.

Mirrors Kueue's pkg/workload (admission.go `SetQuotaReservation`, evict.go, conditions.go)
and pkg/scheduler/preemption (`preemptionMessage`, `HumanReadablePreemptionReasons`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping

from atoll.api.meta import Condition
from atoll.api.quantity import Quantity
from atoll.api.topologyassignment import TopologyAssignment
from atoll.api.workload import Admission, PodSetAssignment, Workload, WorkloadStatus
from atoll.engine import decisions as d
from atoll.state import workloads as wls

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

Now = Callable[[], dt.datetime]


def quantity(resource: str, amount: int) -> Quantity:
    return Quantity.from_milli(amount) if resource == "cpu" else Quantity.from_units(amount)


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
                resource_usage={str(r): quantity(r, v) for r, v in ps.resource_usage},
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
) -> Callable[[Workload], WorkloadStatus | None]:
    """QuotaReserved and Admitted together (no admission checks), with the admission."""

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
        conds = wls.with_condition(
            conds,
            wls.ADMITTED,
            status=True,
            reason="Admitted",
            message="The workload is admitted",
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
        )

    return mutate


def without_reservation(
    conditions: tuple[Condition, ...], reason: str, message: str, now: dt.datetime
) -> tuple[Condition, ...]:
    """QuotaReserved=False with `reason` and Admitted=False (NoReservation)."""
    conds = wls.with_condition(
        conditions, wls.QUOTA_RESERVED, status=False, reason=reason, message=message, now=now
    )
    return wls.with_condition(
        conds,
        wls.ADMITTED,
        status=False,
        reason=NO_RESERVATION,
        message=NO_RESERVATION_MESSAGE,
        now=now,
    )


def pending(
    reason: str, message: str, now: dt.datetime
) -> Callable[[Workload], WorkloadStatus | None]:
    """QuotaReserved=False with Kueue's reason and message; unchanged status writes nothing."""

    def mutate(wl: Workload) -> WorkloadStatus | None:
        if wls.has_quota(wl) or wls.is_finished(wl):
            return None
        current = wls.condition(wl, wls.QUOTA_RESERVED)
        admitted = wls.condition(wl, wls.ADMITTED)
        if (
            current is not None
            and current.reason == reason
            and current.message == wls.truncate(message)
            and admitted is not None
        ):
            return None
        conds = without_reservation(wl.status.conditions or (), reason, message, now)
        return wls.status_with(wl, conditions=conds)

    return mutate


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


def evict(
    reason: str, message: str, now: dt.datetime, *, preempted_reason: str | None = None
) -> Callable[[Workload], WorkloadStatus | None]:
    """Evicted=True (and Preempted=True for a preemption); quota is released later, when the
    Job has no active pod."""

    def mutate(wl: Workload) -> WorkloadStatus | None:
        if not wls.has_quota(wl) or wls.is_evicted(wl) or wls.is_finished(wl):
            return None
        conds = wls.with_condition(
            wl.status.conditions or (),
            wls.EVICTED,
            status=True,
            reason=reason,
            message=message,
            now=now,
        )
        if reason.startswith("DeactivatedDueTo"):
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
        return wls.status_with(wl, conditions=conds)

    return mutate
