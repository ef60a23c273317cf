"""What a Workload status write means for the `kueue_*` workload families: one place that
reads the Workload as written (its conditions, admission, `schedulingStats`) and calls the
`Metrics` methods with Kueue's labels, for the scheduler and the Job reconciler alike.

Mirrors Kueue's pkg/workload (`Evict` → `reportEvictedWorkload`,
`workloadsWithPodsReadyToEvictedTime`, `QueuedWaitTime`), the job reconciler's PodsReady
metrics and the workload controller's `reportFinishedWorkload`.
"""

from __future__ import annotations

from atoll.api.meta import ConditionStatus
from atoll.api.workload import Workload
from atoll.control.metrics import LocalQueueRef, Metrics
from atoll.state import lifecycle as lc
from atoll.state import workloads as wls


def priority_class(wl: Workload) -> str:
    """The `priority_class` label: `spec.priorityClassRef.name`, or empty."""
    ref = wl.spec.priority_class_ref
    return ref.name if ref else ""


def local_queue(wl: Workload) -> LocalQueueRef:
    """The LocalQueue of the `kueue_local_queue_*` labels."""
    return LocalQueueRef(wl.namespace or "", wl.spec.queue_name or "")


def queued_wait(wl: Workload, at: float) -> float:
    """Seconds from creation, or the last `Requeued` change, to `at` (Kueue's
    `QueuedWaitTime`)."""
    requeued = wls.condition(wl, wls.REQUEUED)
    since = requeued.last_transition_time.timestamp() if requeued else wls.created_at(wl)
    return max(0.0, at - since)


def report_admitted(metrics: Metrics | None, wl: Workload, waited: float) -> None:
    """Quota reserved, and Admitted when the same write admitted it (no admission checks
    to wait for): counted per ClusterQueue and LocalQueue."""
    adm = wl.status.admission
    if metrics is None or adm is None:
        return
    pc, lq = priority_class(wl), local_queue(wl)
    metrics.quota_reserved(adm.cluster_queue, waited, priority_class=pc, local_queue=lq)
    if wls.is_admitted(wl):
        metrics.workload_admitted(adm.cluster_queue, waited, priority_class=pc, local_queue=lq)


def report_checks_passed(metrics: Metrics | None, wl: Workload, now: float) -> None:
    """`wl` was just written Admitted after its admission checks: counted as admitted, with
    its wait since it was queued."""
    adm = wl.status.admission
    if metrics is None or adm is None:
        return
    pc, lq = priority_class(wl), local_queue(wl)
    waited = queued_wait(wl, now)
    reserved = wls.condition(wl, wls.QUOTA_RESERVED)
    checks = now - reserved.last_transition_time.timestamp() if reserved else 0.0
    metrics.workload_admitted(
        adm.cluster_queue,
        waited,
        priority_class=pc,
        local_queue=lq,
        checks_seconds=max(0.0, checks),
    )


def report_eviction(metrics: Metrics | None, wl: Workload) -> None:
    """`wl` was just written with `Evicted=True`: counted with Kueue's reason and cause
    (`lc.eviction_labels`), once more in `…_once_total` if it is the Workload's first
    eviction for them (`status.schedulingStats`), with the time since `PodsReady=True` of a
    gang that was running."""
    evicted = wls.condition(wl, wls.EVICTED)
    adm = wl.status.admission
    if metrics is None or evicted is None or adm is None:
        return
    reason, cause = lc.eviction_labels(wl, evicted.reason)
    ready = wls.condition(wl, wls.PODS_READY)
    running = None
    if ready is not None and ready.status == ConditionStatus.TRUE:
        running = (evicted.last_transition_time - ready.last_transition_time).total_seconds()
    metrics.workload_evicted(
        adm.cluster_queue,
        reason,
        underlying_cause=cause,
        priority_class=priority_class(wl),
        first_eviction=wls.eviction_count(wl, reason, cause) == 1,
        local_queue=local_queue(wl),
        pods_ready_seconds=running,
    )


def report_ready(metrics: Metrics | None, wl: Workload) -> None:
    """`wl` was just written with `PodsReady=True`: the time since it was queued and since
    it was admitted, per ClusterQueue and LocalQueue."""
    ready = wls.condition(wl, wls.PODS_READY)
    admitted = wls.condition(wl, wls.ADMITTED)
    adm = wl.status.admission
    if metrics is None or ready is None or admitted is None or adm is None:
        return
    at = ready.last_transition_time.timestamp()
    metrics.pods_ready(
        adm.cluster_queue,
        queued_seconds=queued_wait(wl, at),
        admitted_seconds=at - admitted.last_transition_time.timestamp(),
        priority_class=priority_class(wl),
        local_queue=local_queue(wl),
    )


def report_finished(metrics: Metrics | None, wl: Workload) -> None:
    """`wl` was just written with `Finished=True`: counted per ClusterQueue and LocalQueue,
    with the time it ran admitted (`wls.execution_time`, when it ran). A Workload without
    an admission (finished while pending, or its owner gone) is counted too, with
    ClusterQueue "", as Kueue's `reportFinishedWorkload` does."""
    if metrics is None:
        return
    adm = wl.status.admission
    metrics.workload_finished(
        adm.cluster_queue if adm is not None else "",
        execution_seconds=wls.execution_time(wl),
        priority_class=priority_class(wl),
        local_queue=local_queue(wl),
    )
