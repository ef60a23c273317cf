"""Kueue-named metrics written to an injected registry and read back from it."""

from __future__ import annotations

import math

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

from atoll.control.metrics import (
    LONG_WAIT_BUCKETS,
    WAIT_BUCKETS,
    AdmissionResult,
    ClusterQueueStatus,
    LocalQueueRef,
    Metrics,
    ReplicaRole,
    exponential_buckets,
)

LQ = LocalQueueRef(namespace="team-a", name="user-queue")


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def metrics(registry: CollectorRegistry) -> Metrics:
    return Metrics(registry, version="0.1.0")


def _value(registry: CollectorRegistry, metric: str, /, **labels: str) -> float | None:
    return registry.get_sample_value(metric, labels)


def test_metrics_never_touch_the_global_registry(registry: CollectorRegistry) -> None:
    Metrics(registry).admission_attempt(AdmissionResult.SUCCESS, 0.01)

    assert (
        REGISTRY.get_sample_value(
            "kueue_admission_attempts_total", {"result": "success", "replica_role": "standalone"}
        )
        is None
    )
    assert (
        _value(
            registry, "kueue_admission_attempts_total", result="success", replica_role="standalone"
        )
        == 1
    )


def test_two_instances_can_coexist_in_separate_registries() -> None:
    first, second = CollectorRegistry(), CollectorRegistry()
    Metrics(first).set_pending("cq", active=1, inadmissible=0)
    Metrics(second).set_pending("cq", active=7, inadmissible=0)

    labels = {"cluster_queue": "cq", "status": "active", "replica_role": "standalone"}
    assert first.get_sample_value("kueue_pending_workloads", labels) == 1
    assert second.get_sample_value("kueue_pending_workloads", labels) == 7


def test_admission_attempt_counts_and_times_by_result(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    metrics.admission_attempt(AdmissionResult.SUCCESS, 0.02)
    metrics.admission_attempt(AdmissionResult.INADMISSIBLE, 0.3)
    metrics.admission_attempt(AdmissionResult.INADMISSIBLE, 0.004)

    role = {"replica_role": "standalone"}
    assert _value(registry, "kueue_admission_attempts_total", result="inadmissible", **role) == 2
    assert _value(registry, "kueue_admission_attempts_total", result="success", **role) == 1
    name = "kueue_admission_attempt_duration_seconds"
    assert _value(registry, f"{name}_count", result="inadmissible", **role) == 2
    assert _value(registry, f"{name}_sum", result="inadmissible", **role) == pytest.approx(0.304)
    # Go's default buckets, not Python's: 0.005 exists, 0.075 does not.
    assert _value(registry, f"{name}_bucket", result="inadmissible", le="0.005", **role) == 1
    assert _value(registry, f"{name}_bucket", result="inadmissible", le="0.075", **role) is None


def test_pending_workloads_by_status(metrics: Metrics, registry: CollectorRegistry) -> None:
    metrics.set_pending("cluster-queue", active=3, inadmissible=2)
    metrics.set_pending("cluster-queue", active=1, inadmissible=2)

    role = {"replica_role": "standalone", "cluster_queue": "cluster-queue"}
    assert _value(registry, "kueue_pending_workloads", status="active", **role) == 1
    assert _value(registry, "kueue_pending_workloads", status="inadmissible", **role) == 2


def test_workload_admitted_counts_and_observes_wait_time(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    metrics.workload_admitted("cq", wait_seconds=3.0, priority_class="high", local_queue=LQ)
    metrics.workload_admitted("cq", wait_seconds=100.0, priority_class="high")

    labels = {"cluster_queue": "cq", "priority_class": "high", "replica_role": "standalone"}
    assert _value(registry, "kueue_admitted_workloads_total", **labels) == 2
    wait = "kueue_admission_wait_time_seconds"
    assert _value(registry, f"{wait}_count", **labels) == 2
    assert _value(registry, f"{wait}_bucket", le="5.0", **labels) == 1
    assert _value(registry, f"{wait}_bucket", le="40960.0", **labels) == 2
    # the admission checks' wait: 0 without checks (Kueue's scheduler), else as given
    metrics.workload_admitted("cq", wait_seconds=50.0, priority_class="high", checks_seconds=20.0)
    checks = "kueue_admission_checks_wait_time_seconds"
    assert _value(registry, f"{checks}_count", **labels) == 3
    assert _value(registry, f"{checks}_sum", **labels) == 20
    lq = {"name": "user-queue", "namespace": "team-a", "priority_class": "high"}
    lq_role = {**lq, "replica_role": "standalone"}
    assert _value(registry, "kueue_local_queue_admitted_workloads_total", **lq_role) == 1


def test_quota_reserved_counts_and_observes_wait_time(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    metrics.quota_reserved("cq", wait_seconds=7.5)

    labels = {"cluster_queue": "cq", "priority_class": "", "replica_role": "standalone"}
    assert _value(registry, "kueue_quota_reserved_workloads_total", **labels) == 1
    assert _value(registry, "kueue_quota_reserved_wait_time_seconds_sum", **labels) == 7.5


def test_eviction_reason_and_cause_are_labels(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    metrics.workload_evicted("cq", "PodsReadyTimeout", first_eviction=True)
    metrics.workload_evicted("cq", "PodsReadyTimeout")
    metrics.workload_evicted("cq", "Deactivated", underlying_cause="RequeuingLimitExceeded")

    base = {"cluster_queue": "cq", "priority_class": "", "replica_role": "standalone"}
    timeout = {**base, "reason": "PodsReadyTimeout", "underlying_cause": ""}
    deactivated = {**base, "reason": "Deactivated", "underlying_cause": "RequeuingLimitExceeded"}
    assert _value(registry, "kueue_evicted_workloads_total", **timeout) == 2
    assert _value(registry, "kueue_evicted_workloads_once_total", **timeout) == 1
    assert _value(registry, "kueue_evicted_workloads_total", **deactivated) == 1


def test_preemption_is_counted_on_the_preempting_queue(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    metrics.workload_preempted("team-b", "InCohortReclamation")

    assert (
        _value(
            registry,
            "kueue_preempted_workloads_total",
            preempting_cluster_queue="team-b",
            reason="InCohortReclamation",
            replica_role="standalone",
        )
        == 1
    )


def test_cluster_queue_status_is_one_hot(metrics: Metrics, registry: CollectorRegistry) -> None:
    metrics.set_cluster_queue_status("cq", ClusterQueueStatus.PENDING)
    metrics.set_cluster_queue_status("cq", ClusterQueueStatus.ACTIVE)

    values = {
        status.value: _value(
            registry,
            "kueue_cluster_queue_status",
            cluster_queue="cq",
            status=status.value,
            replica_role="standalone",
        )
        for status in ClusterQueueStatus
    }
    assert values == {"pending": 0, "active": 1, "terminating": 0}


def test_resource_usage_and_quota_carry_cohort_flavor_and_resource(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    metrics.set_usage("research", "team-a", "h100", "nvidia.com/gpu", 6)
    metrics.set_reservation("research", "team-a", "h100", "nvidia.com/gpu", 8)
    metrics.set_quota("research", "team-a", "h100", "nvidia.com/gpu", nominal=8, lending_limit=2)

    labels = {
        "cohort": "research",
        "cluster_queue": "team-a",
        "flavor": "h100",
        "resource": "nvidia.com/gpu",
        "replica_role": "standalone",
    }
    assert _value(registry, "kueue_cluster_queue_resource_usage", **labels) == 6
    assert _value(registry, "kueue_cluster_queue_resource_reservation", **labels) == 8
    assert _value(registry, "kueue_cluster_queue_nominal_quota", **labels) == 8
    assert _value(registry, "kueue_cluster_queue_borrowing_limit", **labels) == math.inf
    assert _value(registry, "kueue_cluster_queue_lending_limit", **labels) == 2


def test_resource_families_are_absent_when_turned_off(registry: CollectorRegistry) -> None:
    metrics = Metrics(registry, cluster_queue_resources=False, local_queue_metrics=False)

    metrics.set_usage("", "cq", "default", "cpu", 1)
    metrics.set_local_queue_pending(LQ, active=1, inadmissible=0)
    metrics.workload_admitted("cq", wait_seconds=1, local_queue=LQ)

    text = generate_latest(registry).decode()
    assert "kueue_cluster_queue_resource_usage" not in text
    assert "kueue_local_queue" not in text
    assert "kueue_admitted_workloads_total" in text


def test_gauges_follow_the_replica_role(metrics: Metrics, registry: CollectorRegistry) -> None:
    metrics.set_admitted_active("cq", 4)
    metrics.admission_attempt(AdmissionResult.SUCCESS, 0.1)

    metrics.set_role(ReplicaRole.LEADER)

    gauge = "kueue_admitted_active_workloads"
    assert _value(registry, gauge, cluster_queue="cq", replica_role="leader") == 4
    assert _value(registry, gauge, cluster_queue="cq", replica_role="standalone") is None
    counter = "kueue_admission_attempts_total"
    assert _value(registry, counter, result="success", replica_role="standalone") == 1
    assert _value(registry, "atoll_leader") == 1
    assert metrics.role is ReplicaRole.LEADER


def test_forgetting_a_cluster_queue_drops_only_its_series(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    for cq in ("gone", "kept"):
        metrics.set_pending(cq, active=1, inadmissible=1)
        metrics.workload_admitted(cq, wait_seconds=1.0, local_queue=LQ)
        metrics.workload_preempted(cq, "InClusterQueue")
        metrics.set_usage("", cq, "default", "cpu", 2)
    metrics.set_local_queue_pending(LQ, active=2, inadmissible=0)

    metrics.forget_cluster_queue("gone")

    text = generate_latest(registry).decode()
    assert 'cluster_queue="gone"' not in text
    assert 'cluster_queue="kept"' in text
    assert 'preempting_cluster_queue="kept"' in text
    assert (
        _value(
            registry,
            "kueue_local_queue_pending_workloads",
            name="user-queue",
            namespace="team-a",
            status="active",
            replica_role="standalone",
        )
        == 2
    )


def test_forgetting_a_local_queue_drops_its_series(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    other = LocalQueueRef(namespace="team-b", name="user-queue")
    for lq in (LQ, other):
        metrics.set_local_queue_counts(lq, reserving=1, admitted=1)
        metrics.set_local_queue_status(lq, "True")

    metrics.forget_local_queue(LQ)

    text = generate_latest(registry).decode()
    assert 'namespace="team-a"' not in text
    assert 'namespace="team-b"' in text


def test_cluster_queue_info_replaces_the_previous_placement(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    metrics.set_cluster_queue_info("cq", parent_cohort="a", root_cohort="root")
    metrics.set_cluster_queue_info("cq", parent_cohort="b", root_cohort="root")

    info = "kueue_cluster_queue_info"
    base = {"cluster_queue": "cq", "root_cohort": "root", "replica_role": "standalone"}
    assert _value(registry, info, parent_cohort="b", **base) == 1
    assert _value(registry, info, parent_cohort="a", **base) is None


def test_finished_gauge_and_counter_share_a_base_name(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    metrics.workload_finished("cq", execution_seconds=42.0)
    metrics.set_finished("cq", 1)

    labels = {"cluster_queue": "cq", "replica_role": "standalone"}
    assert _value(registry, "kueue_finished_workloads", **labels) == 1
    assert _value(registry, "kueue_finished_workloads_total", priority_class="", **labels) == 1
    assert _value(registry, "kueue_execution_time_seconds_sum", priority_class="", **labels) == 42


def test_pods_ready_histograms(metrics: Metrics, registry: CollectorRegistry) -> None:
    metrics.pods_ready("cq", queued_seconds=30.0, admitted_seconds=12.0)
    metrics.workload_evicted("cq", "Preempted", pods_ready_seconds=1800.0)
    metrics.quota_released("cq", "PodsReadyTimeout", seconds=4.0)

    labels = {"cluster_queue": "cq", "replica_role": "standalone"}
    assert _value(registry, "kueue_ready_wait_time_seconds_sum", priority_class="", **labels) == 30
    assert (
        _value(
            registry,
            "kueue_admitted_until_ready_wait_time_seconds_sum",
            priority_class="",
            **labels,
        )
        == 12
    )
    assert (
        _value(
            registry,
            "kueue_pods_ready_to_evicted_time_seconds_sum",
            reason="Preempted",
            underlying_cause="",
            **labels,
        )
        == 1800
    )
    assert (
        _value(
            registry,
            "kueue_workload_eviction_latency_seconds_sum",
            reason="PodsReadyTimeout",
            **labels,
        )
        == 4
    )


def test_atoll_metrics(metrics: Metrics, registry: CollectorRegistry) -> None:
    metrics.scheduling_cycle(0.002, heads=3)
    metrics.api_request("patch", "409", "workloads/status", seconds=0.05)
    metrics.api_request("patch", "200", "workloads/status")
    metrics.set_gangs_partially_running(2)

    assert _value(registry, "atoll_scheduling_cycle_duration_seconds_count") == 1
    assert _value(registry, "atoll_scheduling_cycle_heads_sum") == 3
    requests = {"verb": "patch", "resource": "workloads/status"}
    assert _value(registry, "atoll_api_requests_total", result="409", **requests) == 1
    assert _value(registry, "atoll_api_request_duration_seconds_count", verb="patch") == 1
    assert _value(registry, "atoll_gangs_partially_running") == 2
    assert _value(registry, "atoll_build_info", version="0.1.0") == 1
    assert _value(registry, "atoll_leader") == 0


def test_kueue_wait_buckets() -> None:
    assert exponential_buckets(4) == (1.0, 2.5, 5.0, 10.0)
    assert len(WAIT_BUCKETS) == 14
    assert WAIT_BUCKETS[-1] == 2.5 * 2**12
    assert len(LONG_WAIT_BUCKETS) == 16
    assert LONG_WAIT_BUCKETS[-1] == 2.5 * 2**14


def test_negative_durations_are_clamped_to_zero(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    metrics.admission_attempt(AdmissionResult.SUCCESS, -0.5)  # a clock step backwards

    name = "kueue_admission_attempt_duration_seconds_sum"
    assert _value(registry, name, result="success", replica_role="standalone") == 0


def test_several_reservations_of_one_queue_show_their_sum_and_earliest_start(
    registry: CollectorRegistry,
) -> None:
    metrics = Metrics(registry)
    metrics.set_reservations(
        [
            ("gpus", 2000.0, [("h100", "nvidia.com/gpu", 32.0)]),
            ("gpus", 1500.0, [("h100", "nvidia.com/gpu", 8.0)]),
            ("cpus", 900.0, [("default", "cpu", 1.5)]),
        ]
    )
    gpus = {"cluster_queue": "gpus", "flavor": "h100", "resource": "nvidia.com/gpu"}
    assert registry.get_sample_value("atoll_backfill_reserved_quota", gpus) == 40
    start = "atoll_backfill_reservation_start_seconds"
    assert registry.get_sample_value(start, {"cluster_queue": "gpus"}) == 1500
    assert registry.get_sample_value(start, {"cluster_queue": "cpus"}) == 900
    metrics.set_reservations([])
    assert registry.get_sample_value("atoll_backfill_reserved_quota", gpus) is None


def test_forgetting_a_cluster_queue_drops_its_backfill_series(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    for cq in ("gone", "kept"):
        metrics.backfilled(cq)
        metrics.reservation_slipped(cq)
    metrics.set_reservations([("gone", 100.0, [("default", "cpu", 2.0)])])

    metrics.forget_cluster_queue("gone")

    for name in ("atoll_backfill_admissions_total", "atoll_backfill_reservation_slips_total"):
        assert registry.get_sample_value(name, {"cluster_queue": "gone"}) is None
        assert registry.get_sample_value(name, {"cluster_queue": "kept"}) == 1
    assert 'cluster_queue="gone"' not in generate_latest(registry).decode()
