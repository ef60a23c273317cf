"""Prometheus metrics with Kueue's names, labels and buckets, plus `atoll_` metrics of our own.

Mirrors pkg/metrics/metrics.go (Kueue v0.20 development line): the `kueue_*` families below keep
Kueue's names, label names, label order and histogram buckets, and mean what they mean in Kueue,
so that Kueue's dashboards and alerts work unchanged. Every `kueue_*` series carries the label
`replica_role` (`leader`, `follower` or `standalone`), as Kueue's do. Gauges report the current
role at scrape time, so a role change moves them; counters and histograms keep the role they were
counted under.

`Metrics` writes to the `CollectorRegistry` it is given (never the global one), so each test
and each simulated operator gets its own. The scheduling loop and the effects call its small
typed methods; nothing else touches prometheus_client.

Optional families, as in Kueue's configuration: the per-flavor quota and usage gauges
(`kueue_cluster_queue_resource_usage`, `…_resource_reservation`, `…_nominal_quota`,
`…_borrowing_limit`, `…_lending_limit`) exist only with `cluster_queue_resources=True`
(`metrics.enableClusterQueueResources`), and the `kueue_local_queue_*` families only with
`local_queue_metrics=True` (`metrics.localQueueMetrics.enable`, on by default in Kueue).
When a family is off its methods do nothing.
"""

from __future__ import annotations

import enum
import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class ReplicaRole(enum.StrEnum):
    """Value of the `replica_role` label."""

    LEADER = "leader"
    FOLLOWER = "follower"
    STANDALONE = "standalone"


class AdmissionResult(enum.StrEnum):
    """Outcome of one admission attempt (one scheduling cycle)."""

    SUCCESS = "success"
    """At least one workload was admitted."""
    INADMISSIBLE = "inadmissible"
    """No workload was admitted."""


class ClusterQueueStatus(enum.StrEnum):
    """Value of the `status` label of `kueue_cluster_queue_status`."""

    PENDING = "pending"
    ACTIVE = "active"
    TERMINATING = "terminating"


class PendingStatus(enum.StrEnum):
    """Value of the `status` label of `kueue_pending_workloads`."""

    ACTIVE = "active"
    """Pending workloads that the scheduler will try (heads of the queue and behind them)."""
    INADMISSIBLE = "inadmissible"
    """Pending workloads parked until something changes that could make them fit."""


def exponential_buckets(count: int) -> tuple[float, ...]:
    """Kueue's wait-time buckets: 1, then 2.5 doubling, `count` buckets in all."""
    return (1.0, *(2.5 * 2**i for i in range(count - 1)))


GO_DEFAULT_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Go client's default buckets (Python's differ), for Kueue histograms that use the default."""
LONG_WAIT_BUCKETS: Final = exponential_buckets(16)
"""Buckets of `kueue_admission_wait_time_seconds` and `kueue_execution_time_seconds` (not a
Kueue v0.17 family: the name Kueue gives it in its later releases)."""
WAIT_BUCKETS: Final = exponential_buckets(14)
"""Buckets of Kueue's other wait-time histograms."""

_ROLE: Final = "replica_role"
_CQ: Final = ("cluster_queue",)
_CQ_PRIORITY: Final = ("cluster_queue", "priority_class")
_CQ_RESOURCE: Final = ("cohort", "cluster_queue", "flavor", "resource")
_LQ: Final = ("name", "namespace")
_LQ_PRIORITY: Final = ("name", "namespace", "priority_class")


@dataclass(frozen=True, slots=True)
class LocalQueueRef:
    """A LocalQueue, for the `kueue_local_queue_*` families (labels `name`, `namespace`)."""

    namespace: str
    name: str


class _GaugeFamily(Collector):
    """A gauge family whose values atoll sets; the replica role (if any) is added when scraped.

    prometheus_client's Gauge cannot share a registry with a Counter of the same base name
    (`kueue_finished_workloads` next to `kueue_finished_workloads_total`), and its role label
    would be frozen at set time; a small collector has neither problem.
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        labels: tuple[str, ...],
        role: Callable[[], str] | None,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = labels
        self._role = role
        self._values: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()

    def set(self, values: tuple[str, ...], value: float) -> None:
        with self._lock:
            self._values[values] = value

    def remove_where(self, **match: str) -> None:
        if not all(k in self.labels for k in match):
            return  # this family is not labelled by what is forgotten
        positions = [(self.labels.index(k), v) for k, v in match.items()]
        with self._lock:
            for key in [k for k in self._values if all(k[i] == v for i, v in positions)]:
                del self._values[key]

    def describe(self) -> Iterable[Metric]:
        return []  # no registry-level name check: see the class docstring

    def collect(self) -> Iterable[Metric]:
        role = () if self._role is None else (self._role(),)
        names = [*self.labels, _ROLE] if role else list(self.labels)
        family = GaugeMetricFamily(self.name, self.documentation, labels=names)
        with self._lock:
            items = sorted(self._values.items())
        for values, value in items:
            family.add_metric([*values, *role], value)
        yield family


class _Tracked:
    """A Counter or Histogram plus the label values it has seen, so they can be forgotten.
    `with_role`: the last label is `replica_role` (Kueue's families; not atoll's own)."""

    def __init__(
        self, metric: Counter | Histogram, labels: tuple[str, ...], *, with_role: bool = True
    ) -> None:
        self.metric = metric
        self.labels = labels
        self._with_role = with_role
        self._seen: set[tuple[str, ...]] = set()

    def child(self, values: tuple[str, ...], role: str) -> Counter | Histogram:
        key = (*values, role) if self._with_role else values
        self._seen.add(key)
        return self.metric.labels(*key)

    def remove_where(self, **match: str) -> None:
        if not all(k in self.labels for k in match):
            return  # this family is not labelled by what is forgotten
        positions = [(self.labels.index(k), v) for k, v in match.items()]
        for key in [k for k in self._seen if all(k[i] == v for i, v in positions)]:
            self.metric.remove(*key)
            self._seen.discard(key)


class Metrics:
    """The operator's metrics, registered in an injected registry.

    Label arguments are plain strings; `priority_class` is the Workload's
    `spec.priorityClassRef.name` or `""`, `cohort` is `""` for a ClusterQueue without one.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        role: ReplicaRole = ReplicaRole.STANDALONE,
        cluster_queue_resources: bool = True,
        local_queue_metrics: bool = True,
        version: str = "",
    ) -> None:
        self._registry = registry
        self._role = role
        self._cluster_queue_resources = cluster_queue_resources
        self._local_queue_metrics = local_queue_metrics
        self._counters: list[_Tracked] = []
        self._gauges: list[_GaugeFamily] = []

        self._lq_gauges: dict[str, _GaugeFamily] = {}
        self._lq_counters: dict[str, _Tracked] = {}
        self._resource_gauges: dict[str, _GaugeFamily] = {}
        self._define_workload_metrics()
        self._define_cluster_queue_metrics()
        if local_queue_metrics:
            self._define_local_queue_metrics()
        self._define_atoll_metrics(version)

    def _define_workload_metrics(self) -> None:
        """Kueue's admission-cycle and per-ClusterQueue workload families."""
        # -- admission cycle
        self._attempts = self._counter(
            "kueue_admission_attempts_total",
            "Admission attempts (scheduling cycles); result=success if one admitted a workload.",
            ("result",),
        )
        self._attempt_duration = self._histogram(
            "kueue_admission_attempt_duration_seconds",
            "Duration of an admission attempt, by result.",
            ("result",),
            GO_DEFAULT_BUCKETS,
        )
        # -- per ClusterQueue workload counts
        self._pending = self._gauge(
            "kueue_pending_workloads",
            "Pending workloads per cluster_queue and status (active or inadmissible).",
            ("cluster_queue", "status"),
        )
        self._reserving_active = self._gauge(
            "kueue_reserving_active_workloads",
            "Workloads reserving quota, per cluster_queue.",
            _CQ,
        )
        self._admitted_active = self._gauge(
            "kueue_admitted_active_workloads",
            "Admitted workloads that are active (not finished), per cluster_queue.",
            _CQ,
        )
        self._finished = self._gauge(
            "kueue_finished_workloads",
            "Finished workloads, per cluster_queue.",
            _CQ,
        )
        self._quota_reserved = self._counter(
            "kueue_quota_reserved_workloads_total",
            "Workloads that got a quota reservation, per cluster_queue.",
            _CQ_PRIORITY,
        )
        self._quota_reserved_wait = self._histogram(
            "kueue_quota_reserved_wait_time_seconds",
            "Time from creation or last requeue to quota reservation, per cluster_queue.",
            _CQ_PRIORITY,
            WAIT_BUCKETS,
        )
        self._admitted = self._counter(
            "kueue_admitted_workloads_total",
            "Workloads admitted (Admitted became True), per cluster_queue.",
            _CQ_PRIORITY,
        )
        self._admission_wait = self._histogram(
            "kueue_admission_wait_time_seconds",
            "Time from creation or last requeue to admission, per cluster_queue.",
            _CQ_PRIORITY,
            LONG_WAIT_BUCKETS,
        )
        self._checks_wait = self._histogram(
            "kueue_admission_checks_wait_time_seconds",
            "Time from quota reservation to admission (the admission checks), per cluster_queue.",
            _CQ_PRIORITY,
            WAIT_BUCKETS,
        )
        self._ready_wait = self._histogram(
            "kueue_ready_wait_time_seconds",
            "Time from creation or last requeue until PodsReady, per cluster_queue.",
            _CQ_PRIORITY,
            WAIT_BUCKETS,
        )
        self._admitted_until_ready = self._histogram(
            "kueue_admitted_until_ready_wait_time_seconds",
            "Time from admission until PodsReady, per cluster_queue.",
            _CQ_PRIORITY,
            WAIT_BUCKETS,
        )
        self._evicted = self._counter(
            "kueue_evicted_workloads_total",
            "Evicted workloads per cluster_queue, eviction reason and underlying cause.",
            ("cluster_queue", "reason", "underlying_cause", "priority_class"),
        )
        self._evicted_once = self._counter(
            "kueue_evicted_workloads_once_total",
            "Workloads evicted at least once, per cluster_queue, reason and underlying cause.",
            ("cluster_queue", "reason", "underlying_cause", "priority_class"),
        )
        self._preempted = self._counter(
            "kueue_preempted_workloads_total",
            "Workloads preempted, per preempting_cluster_queue and preemption reason.",
            ("preempting_cluster_queue", "reason"),
        )
        self._pods_ready_to_evicted = self._histogram(
            "kueue_pods_ready_to_evicted_time_seconds",
            "Time from PodsReady=True to the eviction of a running workload, per cluster_queue.",
            ("cluster_queue", "reason", "underlying_cause"),
            WAIT_BUCKETS,
        )
        self._eviction_latency = self._histogram(
            "kueue_workload_eviction_latency_seconds",
            "Time from Evicted=True until the quota is released, per cluster_queue.",
            ("cluster_queue", "reason"),
            WAIT_BUCKETS,
        )
        self._finished_total = self._counter(
            "kueue_finished_workloads_total",
            "Workloads that finished, per cluster_queue.",
            _CQ_PRIORITY,
        )
        self._execution_time = self._histogram(
            "kueue_execution_time_seconds",
            "Time a finished workload ran admitted (all its admissions), per cluster_queue.",
            _CQ_PRIORITY,
            LONG_WAIT_BUCKETS,
        )

    def _define_cluster_queue_metrics(self) -> None:
        """Kueue's ClusterQueue state and (optional) resource families."""
        # -- ClusterQueue state
        self._cq_status = self._gauge(
            "kueue_cluster_queue_status",
            "1 for the cluster_queue's current status (pending, active, terminating), else 0.",
            ("cluster_queue", "status"),
        )
        self._cq_info = self._gauge(
            "kueue_cluster_queue_info",
            "ClusterQueue hierarchy: value 1, labelled with its parent and root cohorts.",
            ("cluster_queue", "parent_cohort", "root_cohort"),
        )
        self._resource_pending = self._gauge(
            "kueue_cluster_queue_resource_pending",
            "Resources requested by the cluster_queue's pending workloads.",
            ("cluster_queue", "resource"),
        )
        self._weighted_share = self._gauge(
            "kueue_cluster_queue_weighted_share",
            "Fair-sharing weighted share of the cluster_queue (usage above nominal / weight).",
            ("cluster_queue", "cohort"),
        )
        if self._cluster_queue_resources:
            for name, help_text in (
                ("resource_usage", "Resource usage of the cluster_queue, per flavor."),
                ("resource_reservation", "Resource reservations of the cluster_queue."),
                ("nominal_quota", "Nominal quota of the cluster_queue, per flavor."),
                ("borrowing_limit", "Borrowing limit of the cluster_queue (+Inf when unset)."),
                ("lending_limit", "Lending limit of the cluster_queue (+Inf when unset)."),
            ):
                self._resource_gauges[name] = self._gauge(
                    f"kueue_cluster_queue_{name}", help_text, _CQ_RESOURCE
                )

    def _define_local_queue_metrics(self) -> None:
        """Kueue's `kueue_local_queue_*` families."""
        # -- LocalQueue families
        self._lq_gauges["pending"] = self._gauge(
            "kueue_local_queue_pending_workloads",
            "Pending workloads per local queue and status.",
            (*_LQ, "status"),
        )
        self._lq_gauges["reserving"] = self._gauge(
            "kueue_local_queue_reserving_active_workloads",
            "Workloads reserving quota, per local queue.",
            _LQ,
        )
        self._lq_gauges["admitted"] = self._gauge(
            "kueue_local_queue_admitted_active_workloads",
            "Admitted active workloads, per local queue.",
            _LQ,
        )
        self._lq_gauges["status"] = self._gauge(
            "kueue_local_queue_status",
            "1 for the local queue's Active condition status (True, False, Unknown), else 0.",
            (*_LQ, "active"),
        )
        self._lq_counters["quota_reserved"] = self._counter(
            "kueue_local_queue_quota_reserved_workloads_total",
            "Workloads that got a quota reservation, per local queue.",
            _LQ_PRIORITY,
        )
        self._lq_counters["admitted"] = self._counter(
            "kueue_local_queue_admitted_workloads_total",
            "Workloads admitted, per local queue.",
            _LQ_PRIORITY,
        )
        self._lq_counters["evicted"] = self._counter(
            "kueue_local_queue_evicted_workloads_total",
            "Evicted workloads per local queue, reason and underlying cause.",
            (*_LQ, "reason", "underlying_cause", "priority_class"),
        )
        self._lq_counters["finished"] = self._counter(
            "kueue_local_queue_finished_workloads_total",
            "Workloads that finished, per local queue.",
            _LQ_PRIORITY,
        )
        self._lq_counters["admission_wait"] = self._histogram(
            "kueue_local_queue_admission_wait_time_seconds",
            "Time from creation or last requeue to admission, per local queue.",
            _LQ_PRIORITY,
            WAIT_BUCKETS,
        )
        self._lq_counters["quota_reserved_wait"] = self._histogram(
            "kueue_local_queue_quota_reserved_wait_time_seconds",
            "Time from creation or last requeue to quota reservation, per local queue.",
            _LQ_PRIORITY,
            WAIT_BUCKETS,
        )
        self._lq_counters["checks_wait"] = self._histogram(
            "kueue_local_queue_admission_checks_wait_time_seconds",
            "Time from quota reservation to admission (the admission checks), per local queue.",
            _LQ_PRIORITY,
            WAIT_BUCKETS,
        )
        self._lq_counters["ready_wait"] = self._histogram(
            "kueue_local_queue_ready_wait_time_seconds",
            "Time from creation or last requeue until PodsReady, per local queue.",
            _LQ_PRIORITY,
            WAIT_BUCKETS,
        )
        self._lq_counters["admitted_until_ready"] = self._histogram(
            "kueue_local_queue_admitted_until_ready_wait_time_seconds",
            "Time from admission until PodsReady, per local queue.",
            _LQ_PRIORITY,
            WAIT_BUCKETS,
        )

    def _define_atoll_metrics(self, version: str) -> None:
        """atoll's own families: no replica_role, they describe this process."""
        # -- atoll's own (no replica_role: they describe this process)
        self._cycle_duration = Histogram(
            "atoll_scheduling_cycle_duration_seconds",
            "Duration of one scheduling cycle: snapshot, engine, assume (not the API writes).",
            buckets=GO_DEFAULT_BUCKETS,
            registry=self._registry,
        )
        self._cycle_heads = Histogram(
            "atoll_scheduling_cycle_heads",
            "Queue heads considered in one scheduling cycle.",
            buckets=(0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
            registry=self._registry,
        )
        self._unadmitted_jobs = Counter(
            "atoll_unadmitted_jobs_stopped_total",
            "Managed Jobs found running without an admitted Workload (created while no "
            "operator ran, or unsuspended by hand) and suspended.",
            registry=self._registry,
        )
        self._unadmitted_pods = Counter(
            "atoll_unadmitted_pods_stopped_total",
            "Active pods of those Jobs when they were suspended.",
            registry=self._registry,
        )
        self._api_requests = Counter(
            "atoll_api_requests_total",
            "Requests atoll's writer made to the API server, by verb, result (the HTTP "
            "status, or error) and resource (such as workloads/status).",
            ("verb", "result", "resource"),
            registry=self._registry,
        )
        self._api_duration = Histogram(
            "atoll_api_request_duration_seconds",
            "Latency of atoll's requests to the API server, by verb.",
            ("verb",),
            buckets=GO_DEFAULT_BUCKETS,
            registry=self._registry,
        )
        self._partial_gangs = _GaugeFamily(
            "atoll_gangs_partially_running",
            "Admitted gangs whose pods are not all ready yet (Workload PodsReady=False): "
            "starting, or waiting to recover; a gang stuck here is evicted after the "
            "waitForPodsReady timeout.",
            (),
            None,
        )
        self._backfill_reserved = _GaugeFamily(
            "atoll_backfill_reserved_quota",
            "Quota reserved for the waiting holders of a backfill ClusterQueue "
            "(atoll.dev/backfill), summed, by flavor and resource (cpu in cores).",
            ("cluster_queue", "flavor", "resource"),
            None,
        )
        self._backfill_start = _GaugeFamily(
            "atoll_backfill_reservation_start_seconds",
            "When the earliest reservation of a backfill ClusterQueue starts (Unix time).",
            ("cluster_queue",),
            None,
        )
        self._backfilled = self._own_counter(
            "atoll_backfill_admissions_total",
            "Workloads admitted while a reservation of their cohort tree was in force "
            "(backfilled: ending before it starts, or using what it does not need).",
        )
        self._slips = self._own_counter(
            "atoll_backfill_reservation_slips_total",
            "Reservations whose start moved later (a run-duration hint was exceeded).",
        )
        self._leader = _GaugeFamily(
            "atoll_leader", "1 when this replica holds the leader lease, else 0.", (), None
        )
        self._info = _GaugeFamily(
            "atoll_build_info", "Value 1, labelled with atoll's version.", ("version",), None
        )
        for family in (
            self._partial_gangs,
            self._leader,
            self._info,
            self._backfill_reserved,
            self._backfill_start,
        ):
            self._registry.register(family)
        self._info.set((version,), 1)
        self._leader.set((), 1 if self._role is ReplicaRole.LEADER else 0)

    # ------------------------------------------------------------------ construction helpers

    def _counter(self, name: str, documentation: str, labels: tuple[str, ...]) -> _Tracked:
        metric = Counter(name, documentation, (*labels, _ROLE), registry=self._registry)
        tracked = _Tracked(metric, labels)
        self._counters.append(tracked)
        return tracked

    def _histogram(
        self,
        name: str,
        documentation: str,
        labels: tuple[str, ...],
        buckets: tuple[float, ...],
    ) -> _Tracked:
        metric = Histogram(
            name, documentation, (*labels, _ROLE), buckets=buckets, registry=self._registry
        )
        tracked = _Tracked(metric, labels)
        self._counters.append(tracked)
        return tracked

    def _own_counter(self, name: str, documentation: str) -> _Tracked:
        """An atoll counter per cluster_queue (no replica_role), forgotten with the queue."""
        metric = Counter(name, documentation, _CQ, registry=self._registry)
        tracked = _Tracked(metric, _CQ, with_role=False)
        self._counters.append(tracked)
        return tracked

    def _gauge(self, name: str, documentation: str, labels: tuple[str, ...]) -> _GaugeFamily:
        family = _GaugeFamily(name, documentation, labels, lambda: self._role.value)
        self._registry.register(family)
        self._gauges.append(family)
        return family

    def _inc(self, tracked: _Tracked, *values: str) -> None:
        child = tracked.child(values, self._role.value)
        assert isinstance(child, Counter)
        child.inc()

    def _observe(self, tracked: _Tracked, seconds: float, *values: str) -> None:
        child = tracked.child(values, self._role.value)
        assert isinstance(child, Histogram)
        child.observe(max(seconds, 0.0))

    # ------------------------------------------------------------------ role

    @property
    def role(self) -> ReplicaRole:
        """The current value of the `replica_role` label."""
        return self._role

    def set_role(self, role: ReplicaRole) -> None:
        """Leader election changed this replica's role; gauges report it from now on."""
        self._role = role
        self._leader.set((), 1 if role is ReplicaRole.LEADER else 0)

    # ------------------------------------------------------------------ scheduling cycle

    def admission_attempt(self, result: AdmissionResult, seconds: float) -> None:
        """One admission attempt ended: `success` if it admitted at least one workload."""
        self._inc(self._attempts, str(result))
        self._observe(self._attempt_duration, seconds, str(result))

    def scheduling_cycle(self, seconds: float, *, heads: int) -> None:
        """One scheduling cycle took `seconds` and considered `heads` queue heads."""
        self._cycle_duration.observe(max(seconds, 0.0))
        self._cycle_heads.observe(heads)

    # ------------------------------------------------------------------ workload lifecycle

    def quota_reserved(
        self,
        cluster_queue: str,
        wait_seconds: float,
        *,
        priority_class: str = "",
        local_queue: LocalQueueRef | None = None,
    ) -> None:
        """A workload got a quota reservation `wait_seconds` after creation or last requeue."""
        self._inc(self._quota_reserved, cluster_queue, priority_class)
        self._observe(self._quota_reserved_wait, wait_seconds, cluster_queue, priority_class)
        if local_queue is not None and self._local_queue_metrics:
            lq = (local_queue.name, local_queue.namespace, priority_class)
            self._inc(self._lq_counters["quota_reserved"], *lq)
            self._observe(self._lq_counters["quota_reserved_wait"], wait_seconds, *lq)

    def workload_admitted(
        self,
        cluster_queue: str,
        wait_seconds: float,
        *,
        priority_class: str = "",
        local_queue: LocalQueueRef | None = None,
        checks_seconds: float = 0.0,
    ) -> None:
        """A workload's `Admitted` became True `wait_seconds` after creation or last requeue
        and `checks_seconds` after its quota reservation (0 without admission checks, as
        Kueue's scheduler reports it)."""
        self._inc(self._admitted, cluster_queue, priority_class)
        self._observe(self._admission_wait, wait_seconds, cluster_queue, priority_class)
        self._observe(self._checks_wait, checks_seconds, cluster_queue, priority_class)
        if local_queue is not None and self._local_queue_metrics:
            lq = (local_queue.name, local_queue.namespace, priority_class)
            self._inc(self._lq_counters["admitted"], *lq)
            self._observe(self._lq_counters["admission_wait"], wait_seconds, *lq)
            self._observe(self._lq_counters["checks_wait"], checks_seconds, *lq)

    def workload_evicted(
        self,
        cluster_queue: str,
        reason: str,
        *,
        underlying_cause: str = "",
        priority_class: str = "",
        first_eviction: bool = False,
        local_queue: LocalQueueRef | None = None,
        pods_ready_seconds: float | None = None,
    ) -> None:
        """A workload got `Evicted=True` with `reason` (Kueue's eviction reasons).

        `first_eviction` counts it in `kueue_evicted_workloads_once_total` too (the first
        eviction of this workload for this reason and cause); `pods_ready_seconds`, the
        time from `PodsReady=True` to the eviction of a workload that was running, goes to
        `kueue_pods_ready_to_evicted_time_seconds`.
        """
        labels = (cluster_queue, reason, underlying_cause, priority_class)
        self._inc(self._evicted, *labels)
        if first_eviction:
            self._inc(self._evicted_once, *labels)
        if pods_ready_seconds is not None:
            self._observe(
                self._pods_ready_to_evicted,
                pods_ready_seconds,
                cluster_queue,
                reason,
                underlying_cause,
            )
        if local_queue is not None and self._local_queue_metrics:
            self._inc(
                self._lq_counters["evicted"],
                local_queue.name,
                local_queue.namespace,
                reason,
                underlying_cause,
                priority_class,
            )

    def workload_preempted(self, preempting_cluster_queue: str, reason: str) -> None:
        """A workload was preempted for one in `preempting_cluster_queue`.

        `reason` is the `Preempted` condition reason: `InClusterQueue`, `InCohortReclamation`,
        `InCohortFairSharing` or `InCohortReclaimWhileBorrowing`.
        """
        self._inc(self._preempted, preempting_cluster_queue, reason)

    def pods_ready(
        self,
        cluster_queue: str,
        *,
        queued_seconds: float,
        admitted_seconds: float,
        priority_class: str = "",
        local_queue: LocalQueueRef | None = None,
    ) -> None:
        """All pods of a workload became ready: times since queued and since admitted, per
        ClusterQueue and LocalQueue."""
        self._observe(self._ready_wait, queued_seconds, cluster_queue, priority_class)
        self._observe(self._admitted_until_ready, admitted_seconds, cluster_queue, priority_class)
        if local_queue is not None and self._local_queue_metrics:
            lq = (local_queue.name, local_queue.namespace, priority_class)
            self._observe(self._lq_counters["ready_wait"], queued_seconds, *lq)
            self._observe(self._lq_counters["admitted_until_ready"], admitted_seconds, *lq)

    def quota_released(self, cluster_queue: str, reason: str, *, seconds: float) -> None:
        """An evicted workload released its quota `seconds` after `Evicted` became True."""
        self._observe(self._eviction_latency, seconds, cluster_queue, reason)

    def workload_finished(
        self,
        cluster_queue: str,
        *,
        execution_seconds: float | None = None,
        priority_class: str = "",
        local_queue: LocalQueueRef | None = None,
    ) -> None:
        """A workload finished (`cluster_queue` "" when it had no admission); it ran
        admitted `execution_seconds` in all (`state.workloads.execution_time`), if at all."""
        self._inc(self._finished_total, cluster_queue, priority_class)
        if execution_seconds is not None:
            self._observe(self._execution_time, execution_seconds, cluster_queue, priority_class)
        if local_queue is not None and self._local_queue_metrics:
            self._inc(
                self._lq_counters["finished"],
                local_queue.name,
                local_queue.namespace,
                priority_class,
            )

    # ------------------------------------------------------------------ backfill

    def set_reservations(
        self, reservations: Iterable[tuple[str, float, Iterable[tuple[str, str, float]]]]
    ) -> None:
        """The reservations in force: (cluster queue, start, (flavor, resource, amount)).
        A queue with several (`atoll.dev/backfill-reserve-after`) shows their sum and the
        earliest start."""
        for family in (self._backfill_reserved, self._backfill_start):
            family.remove_where()
        starts: dict[str, float] = {}
        amounts: dict[tuple[str, str, str], float] = {}
        for cq, start, usage in reservations:
            starts[cq] = min(start, starts.get(cq, start))
            for flavor, resource, amount in usage:
                amounts[cq, flavor, resource] = amounts.get((cq, flavor, resource), 0.0) + amount
        for cq, start in starts.items():
            self._backfill_start.set((cq,), start)
        for labels, amount in amounts.items():
            self._backfill_reserved.set(labels, amount)

    def backfilled(self, cluster_queue: str) -> None:
        self._inc(self._backfilled, cluster_queue)

    def reservation_slipped(self, cluster_queue: str) -> None:
        self._inc(self._slips, cluster_queue)

    # ------------------------------------------------------------------ ClusterQueue gauges

    def set_pending(self, cluster_queue: str, active: int, inadmissible: int) -> None:
        """Pending workloads of a ClusterQueue: in the active queue and parked."""
        self._pending.set((cluster_queue, PendingStatus.ACTIVE.value), active)
        self._pending.set((cluster_queue, PendingStatus.INADMISSIBLE.value), inadmissible)

    def set_reserving_active(self, cluster_queue: str, count: int) -> None:
        """Workloads holding a quota reservation in a ClusterQueue."""
        self._reserving_active.set((cluster_queue,), count)

    def set_admitted_active(self, cluster_queue: str, count: int) -> None:
        """Admitted, unfinished workloads of a ClusterQueue."""
        self._admitted_active.set((cluster_queue,), count)

    def set_finished(self, cluster_queue: str, count: int) -> None:
        """Finished workloads (still present) of a ClusterQueue."""
        self._finished.set((cluster_queue,), count)

    def set_cluster_queue_status(self, cluster_queue: str, status: ClusterQueueStatus) -> None:
        """A ClusterQueue's status: 1 on the current one, 0 on the others."""
        for each in ClusterQueueStatus:
            self._cq_status.set((cluster_queue, each.value), 1 if each == status else 0)

    def set_cluster_queue_info(
        self, cluster_queue: str, *, parent_cohort: str, root_cohort: str
    ) -> None:
        """Where a ClusterQueue sits in the cohort tree (replaces the previous placement)."""
        self._cq_info.remove_where(cluster_queue=cluster_queue)
        self._cq_info.set((cluster_queue, parent_cohort, root_cohort), 1)

    def set_resource_pending(self, cluster_queue: str, resource: str, value: float) -> None:
        """Total `resource` requested by a ClusterQueue's pending workloads."""
        self._resource_pending.set((cluster_queue, resource), value)

    def set_weighted_share(self, cluster_queue: str, cohort: str, value: float) -> None:
        """A ClusterQueue's fair-sharing weighted share."""
        self._weighted_share.set((cluster_queue, cohort), value)

    def set_quota(
        self,
        cohort: str,
        cluster_queue: str,
        flavor: str,
        resource: str,
        *,
        nominal: float,
        borrowing_limit: float | None = None,
        lending_limit: float | None = None,
    ) -> None:
        """A ClusterQueue's quota of one resource in one flavor (unset limits report +Inf)."""
        if not self._cluster_queue_resources:
            return
        labels = (cohort, cluster_queue, flavor, resource)
        self._resource_gauges["nominal_quota"].set(labels, nominal)
        self._resource_gauges["borrowing_limit"].set(
            labels, math.inf if borrowing_limit is None else borrowing_limit
        )
        self._resource_gauges["lending_limit"].set(
            labels, math.inf if lending_limit is None else lending_limit
        )

    def set_usage(
        self, cohort: str, cluster_queue: str, flavor: str, resource: str, value: float
    ) -> None:
        """A ClusterQueue's usage (by admitted workloads) of one resource in one flavor."""
        if self._cluster_queue_resources:
            labels = (cohort, cluster_queue, flavor, resource)
            self._resource_gauges["resource_usage"].set(labels, value)

    def set_reservation(
        self, cohort: str, cluster_queue: str, flavor: str, resource: str, value: float
    ) -> None:
        """A ClusterQueue's reservations (quota reserved, admitted or not) of one resource."""
        if self._cluster_queue_resources:
            labels = (cohort, cluster_queue, flavor, resource)
            self._resource_gauges["resource_reservation"].set(labels, value)

    def forget_cluster_queue(self, cluster_queue: str) -> None:
        """A ClusterQueue was deleted: drop every series labelled with it."""
        for family in self._gauges:
            family.remove_where(cluster_queue=cluster_queue)
        for tracked in self._counters:
            tracked.remove_where(cluster_queue=cluster_queue)
        self._preempted.remove_where(preempting_cluster_queue=cluster_queue)
        for family in (self._backfill_reserved, self._backfill_start):
            family.remove_where(cluster_queue=cluster_queue)

    # ------------------------------------------------------------------ LocalQueue gauges

    def set_local_queue_pending(
        self, local_queue: LocalQueueRef, *, active: int, inadmissible: int
    ) -> None:
        """Pending workloads of a LocalQueue, by status."""
        if not self._local_queue_metrics:
            return
        lq = (local_queue.name, local_queue.namespace)
        self._lq_gauges["pending"].set((*lq, PendingStatus.ACTIVE.value), active)
        self._lq_gauges["pending"].set((*lq, PendingStatus.INADMISSIBLE.value), inadmissible)

    def set_local_queue_counts(
        self, local_queue: LocalQueueRef, *, reserving: int, admitted: int
    ) -> None:
        """Workloads of a LocalQueue holding a reservation, and admitted ones still active."""
        if not self._local_queue_metrics:
            return
        lq = (local_queue.name, local_queue.namespace)
        self._lq_gauges["reserving"].set(lq, reserving)
        self._lq_gauges["admitted"].set(lq, admitted)

    def set_local_queue_status(self, local_queue: LocalQueueRef, active: str) -> None:
        """A LocalQueue's `Active` condition status (`True`, `False` or `Unknown`)."""
        if not self._local_queue_metrics:
            return
        lq = (local_queue.name, local_queue.namespace)
        for each in ("True", "False", "Unknown"):
            self._lq_gauges["status"].set((*lq, each), 1 if each == active else 0)

    def forget_local_queue(self, local_queue: LocalQueueRef) -> None:
        """A LocalQueue was deleted: drop every series labelled with it."""
        match = {"name": local_queue.name, "namespace": local_queue.namespace}
        for family in self._lq_gauges.values():
            family.remove_where(**match)
        for tracked in self._lq_counters.values():
            tracked.remove_where(**match)

    # ------------------------------------------------------------------ atoll's own

    def api_request(
        self, verb: str, result: str, resource: str = "", seconds: float | None = None
    ) -> None:
        """A request to the API server ended (`verb` such as `patch`, `result` such as `200`,
        `409` or `error`, `resource` such as `workloads/status`)."""
        self._api_requests.labels(verb, result, resource).inc()
        if seconds is not None:
            self._api_duration.labels(verb).observe(max(seconds, 0.0))

    def unadmitted_job_stopped(self, active_pods: int) -> None:
        """A managed Job ran without an admitted Workload and was suspended."""
        self._unadmitted_jobs.inc()
        self._unadmitted_pods.inc(max(active_pods, 0))

    def set_gangs_partially_running(self, count: int) -> None:
        """Admitted gangs whose pods are not all ready (PodsReady=False)."""
        self._partial_gangs.set((), count)


__all__ = [
    "GO_DEFAULT_BUCKETS",
    "LONG_WAIT_BUCKETS",
    "WAIT_BUCKETS",
    "AdmissionResult",
    "ClusterQueueStatus",
    "LocalQueueRef",
    "Metrics",
    "PendingStatus",
    "ReplicaRole",
    "exponential_buckets",
]
