"""What a Workload's status says (pending, reserved, admitted, evicted, finished) and how its
conditions change. Pure functions over `atoll.api` models.

Mirrors Kueue's pkg/workload (workload.go `Status`, conditions.go, admissionchecks.go
`SyncAdmittedCondition`); the conditions are listed in docs/architecture.md.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from atoll.api.meta import Condition, ConditionStatus
from atoll.api.workload import (
    ReclaimablePod,
    SchedulingStats,
    Workload,
    WorkloadConditionType,
    WorkloadSchedulingStatsEviction,
    WorkloadStatus,
)

QUOTA_RESERVED = WorkloadConditionType.QUOTA_RESERVED.value
ADMITTED = WorkloadConditionType.ADMITTED.value
EVICTED = WorkloadConditionType.EVICTED.value
DEACTIVATION_TARGET = WorkloadConditionType.DEACTIVATION_TARGET.value
PREEMPTED = WorkloadConditionType.PREEMPTED.value
REQUEUED = WorkloadConditionType.REQUEUED.value
PODS_READY = WorkloadConditionType.PODS_READY.value
FINISHED = WorkloadConditionType.FINISHED.value

MAX_MESSAGE = 32768


def key_of(namespace: str | None, name: str) -> str:
    return f"{namespace or ''}/{name}"


def wl_key(wl: Workload) -> str:
    return key_of(wl.namespace, wl.name)


def owner_job_key(wl: Workload) -> str | None:
    """`namespace/name` of the batch/v1 Job that owns `wl` (None: no Job owns it)."""
    for ref in wl.metadata.owner_references or ():
        if ref.kind == "Job":
            return key_of(wl.namespace, ref.name)
    return None


def condition(wl: Workload, type_: str) -> Condition | None:
    for c in wl.status.conditions or ():
        if c.type == type_:
            return c
    return None


def is_true(wl: Workload, type_: str) -> bool:
    c = condition(wl, type_)
    return c is not None and c.status == ConditionStatus.TRUE


def is_false(wl: Workload, type_: str) -> bool:
    c = condition(wl, type_)
    return c is not None and c.status == ConditionStatus.FALSE


def is_finished(wl: Workload) -> bool:
    return is_true(wl, FINISHED)


def has_quota(wl: Workload) -> bool:
    """QuotaReserved=True with an admission: the Workload holds quota (the ledger)."""
    return is_true(wl, QUOTA_RESERVED) and wl.status.admission is not None


def is_admitted(wl: Workload) -> bool:
    return is_true(wl, ADMITTED) and has_quota(wl)


def is_evicted(wl: Workload) -> bool:
    return is_true(wl, EVICTED)


def past_execution_time(wl: Workload, evicted: Condition | None, reason: str) -> int | None:
    """`accumulatedPastExecutionTimeSeconds` once the quota is released (the operator's
    Job reconciler, and the simulator): the time admitted until `evicted` is added, unless
    the Workload was deactivated (a reactivated Workload starts afresh). Kept with or
    without `maximumExecutionTimeSeconds`, as Kueue does: `kueue_execution_time_seconds`
    reads it too (`execution_time`)."""
    past = wl.status.accumulated_past_execution_time_seconds
    if reason.startswith("Deactivated") or reason == "InactiveWorkload":
        return None
    admitted = condition(wl, ADMITTED)
    if admitted is None or admitted.status.value != "True":
        return past
    end = evicted.last_transition_time if evicted is not None else admitted.last_transition_time
    ran = max(0, int((end - admitted.last_transition_time).total_seconds()))
    return (past or 0) + ran


def execution_time(wl: Workload) -> float | None:
    """A finished Workload's execution time (`kueue_execution_time_seconds`): the time
    admitted in earlier admissions (`accumulatedPastExecutionTimeSeconds`) plus the last one,
    from Admitted to Finished. None when it never ran admitted, or is not finished."""
    finished = condition(wl, FINISHED)
    if finished is None or finished.status != ConditionStatus.TRUE:
        return None
    past = wl.status.accumulated_past_execution_time_seconds
    admitted = condition(wl, ADMITTED)
    if admitted is None or admitted.status != ConditionStatus.TRUE:
        return None if past is None else float(past)
    ran = (finished.last_transition_time - admitted.last_transition_time).total_seconds()
    return (past or 0) + max(0.0, ran)


def eviction_count(wl: Workload, reason: str, underlying_cause: str) -> int:
    """How often the Workload was evicted for `reason` and `underlying_cause`
    (`status.schedulingStats.evictions`)."""
    stats = wl.status.scheduling_stats
    for e in (stats.evictions if stats else None) or ():
        if (e.reason, e.underlying_cause) == (reason, underlying_cause):
            return e.count
    return 0


def with_eviction_counted(wl: Workload, reason: str, underlying_cause: str) -> SchedulingStats:
    """`status.schedulingStats` with one more eviction for `reason` and `underlying_cause`
    (Kueue counts each pair; the first one is what `kueue_evicted_workloads_once_total`
    counts)."""
    stats = wl.status.scheduling_stats or SchedulingStats()
    count = eviction_count(wl, reason, underlying_cause) + 1
    entry = WorkloadSchedulingStatsEviction(
        reason=reason, underlying_cause=underlying_cause, count=count
    )
    others = tuple(
        e
        for e in stats.evictions or ()
        if (e.reason, e.underlying_cause) != (reason, underlying_cause)
    )
    return stats.model_copy(update={"evictions": (*others, entry)})


def execution_time_left(wl: Workload, now: float) -> float | None:
    """Kueue's `spec.maximumExecutionTimeSeconds` rule: the seconds the Workload may still
    run (its limit, less the time admitted now and in earlier admissions,
    `accumulatedPastExecutionTimeSeconds`); None without a limit or while not admitted. At
    zero or below the Workload is deactivated (the operator's Job reconciler, and the
    simulator at that instant)."""
    limit = wl.spec.maximum_execution_time_seconds
    admitted = condition(wl, ADMITTED)
    if limit is None or admitted is None or admitted.status.value != "True":
        return None
    past = wl.status.accumulated_past_execution_time_seconds or 0
    return limit - past - (now - admitted.last_transition_time.timestamp())


def is_deleting(wl: Workload) -> bool:
    return wl.metadata.deletion_timestamp is not None


def created_at(wl: Workload) -> float:
    ts = wl.metadata.creation_timestamp
    return ts.timestamp() if ts is not None else 0.0


def requeue_at(wl: Workload) -> float | None:
    rs = wl.status.requeue_state
    if rs is None or rs.requeue_at is None:
        return None
    return rs.requeue_at.timestamp()


def queue_order_time(wl: Workload) -> float:
    """Kueue's queue-order timestamp: the eviction time after a PodsReady timeout
    (requeuingStrategy.timestamp Eviction, the default) or an admission check's Retry
    (reason `AdmissionCheck`), else creation."""
    evicted = condition(wl, EVICTED)
    if evicted is not None and evicted.reason in ("PodsReadyTimeout", "AdmissionCheck"):
        return evicted.last_transition_time.timestamp()
    return created_at(wl)


def truncate(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."


def with_condition(
    conditions: Iterable[Condition],
    type_: str,
    *,
    status: bool,
    reason: str,
    message: str,
    now: dt.datetime,
    generation: int | None = None,
) -> tuple[Condition, ...]:
    """Set one condition (lastTransitionTime moves only when the status changes)."""
    wanted = ConditionStatus.TRUE if status else ConditionStatus.FALSE
    out: list[Condition] = []
    found = False
    for c in conditions:
        if c.type != type_:
            out.append(c)
            continue
        found = True
        moved = c.status != wanted
        out.append(
            Condition(
                type=type_,
                status=wanted,
                reason=reason,
                message=truncate(message),
                last_transition_time=now if moved else c.last_transition_time,
                observed_generation=generation,
            )
        )
    if not found:
        out.append(
            Condition(
                type=type_,
                status=wanted,
                reason=reason,
                message=truncate(message),
                last_transition_time=now,
                observed_generation=generation,
            )
        )
    return tuple(out)


def dt_now() -> dt.datetime:
    """The current time, whole seconds (conditions carry second resolution)."""
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def status_with(wl: Workload, **changes: object) -> WorkloadStatus:
    return wl.status.model_copy(update=changes)


def reclaimable_counts(pods: Iterable[ReclaimablePod] | None) -> dict[str, int]:
    """Pod set name → its reclaimable pods (`status.reclaimablePods`; none: empty)."""
    return {str(p.name): p.count for p in pods or ()}


def counts_after_reclaim(wl: Workload) -> dict[str, int]:
    """Pod set name → its pods left to run: its count less its reclaimable pods, never below
    0 (Kueue's `podSetsCountsAfterReclaim`)."""
    done = reclaimable_counts(wl.status.reclaimable_pods if wl.status else None)
    return {ps.name: ps.count - min(done.get(ps.name, 0), ps.count) for ps in wl.spec.pod_sets}


def requeue_count(wl: Workload) -> int:
    """How many times the Workload was requeued after a PodsReady timeout, this one included."""
    return ((wl.status.requeue_state.count if wl.status.requeue_state else None) or 0) + 1


def backoff_delay(count: int, base: float, cap: float) -> float:
    """Kueue's requeue backoff after the `count`-th PodsReady timeout: base·2^(count−1),
    capped (without Kueue's random jitter). The doubling stops once the cap is reached, so
    that a gang that times out forever never overflows a float."""
    delay = base
    for _ in range(count - 1):
        if delay >= cap:
            break
        delay *= 2
    return min(delay, cap)
