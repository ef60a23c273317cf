"""`/metrics` of a real `atoll run` after a short story: every queue family says what the
queue statuses say, the series of deleted queues disappear, and a Job that runs to its end
is counted in the admission, PodsReady, finish and API-request families."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import KubeCluster
from tests.kube import builders as b
from tests.kube.conftest import OperatorProcess, apply, get_json, is_true, workload_of

pytestmark = pytest.mark.cluster
GPU = "nvidia.com/gpu"


def _samples(
    operator: OperatorProcess, metric: str, /, **labels: str
) -> dict[tuple[str, ...], float]:
    """The samples of family `name` whose labels include `labels`, keyed by their label
    values (replica_role left out)."""
    out = {}
    for family in text_string_to_metric_families(operator.metrics()):
        for s in family.samples:
            if s.name == metric and all(s.labels.get(k) == v for k, v in labels.items()):
                key = tuple(v for k, v in sorted(s.labels.items()) if k != "replica_role")
                out[key] = s.value
    return out


def _value(operator: OperatorProcess, metric: str, /, **labels: str) -> float | None:
    found = _samples(operator, metric, **labels)
    assert len(found) <= 1, found
    return next(iter(found.values()), None)


def test_queue_families_follow_the_statuses_and_leave_with_the_queue(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    rf, cq, co = f"rf-{namespace}", f"cq-{namespace}", f"co-{namespace}"
    apply(
        cluster,
        b.flavor(rf),
        b.cluster_queue(cq, rf, gpus=4, cohort=co),
        b.local_queue("q", namespace, cq),
    )
    for name, pods in (("runs", 3), ("waits", 4)):
        job = b.job(name, namespace, queue="q", pods=pods, run="1h")
        cluster.kubectl("create", "-f", "-", input=json.dumps(job))
    cluster.wait_for(
        "runs admitted", lambda: is_true(workload_of(cluster, namespace, "runs"), "Admitted")
    )
    lq = {"name": "q", "namespace": namespace}

    def counted() -> bool:
        status = get_json(cluster, "get", "clusterqueue", cq).get("status", {})
        return (status.get("admittedWorkloads"), status.get("pendingWorkloads")) == (1, 1)

    cluster.wait_for("the ClusterQueue status: 1 admitted, 1 pending", counted)
    # the gauges are set in the same pass that writes the statuses, just before
    assert _value(operator, "kueue_admitted_active_workloads", cluster_queue=cq) == 1
    pending = _samples(operator, "kueue_pending_workloads", cluster_queue=cq)
    assert sum(pending.values()) == 1
    assert _value(operator, "kueue_local_queue_reserving_active_workloads", **lq) == 1
    assert sum(_samples(operator, "kueue_local_queue_pending_workloads", **lq).values()) == 1
    assert _value(operator, "kueue_local_queue_status", active="True", **lq) == 1
    info = {"cluster_queue": cq, "parent_cohort": co, "root_cohort": co}
    assert _value(operator, "kueue_cluster_queue_info", **info) == 1
    assert (
        _value(operator, "kueue_cluster_queue_resource_pending", cluster_queue=cq, resource=GPU)
        == 4
    )
    assert _value(operator, "kueue_finished_workloads", cluster_queue=cq) == 0

    cluster.kubectl("delete", "jobs", "--all", "-n", namespace, "--wait=true")
    cluster.kubectl("delete", "localqueue", "q", "-n", namespace, "--wait=true")
    cluster.kubectl("delete", "clusterqueue", cq, "--wait=true")
    cluster.wait_for(
        "the deleted queues' series gone",
        lambda: (
            not any(
                s.labels.get("cluster_queue") == cq
                or (s.labels.get("name"), s.labels.get("namespace")) == ("q", namespace)
                for family in text_string_to_metric_families(operator.metrics())
                for s in family.samples
            )
        ),
    )


def test_a_finished_job_is_counted_from_admission_to_its_end(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    rf, cq = f"rf-{namespace}", f"cq-{namespace}"
    apply(cluster, b.flavor(rf), b.cluster_queue(cq, rf, gpus=4), b.local_queue("q", namespace, cq))
    job = b.job("quick", namespace, queue="q", pods=2, run="3s")
    cluster.kubectl("create", "-f", "-", input=json.dumps(job))
    cluster.wait_for(
        "quick finished", lambda: is_true(workload_of(cluster, namespace, "quick"), "Finished")
    )
    on_cq = {"cluster_queue": cq, "priority_class": ""}
    on_lq = {"name": "q", "namespace": namespace, "priority_class": ""}
    # counted just after the Finished write that the wait above saw
    cluster.wait_for(
        "the finish counted",
        lambda: _value(operator, "kueue_finished_workloads_total", **on_cq) == 1,
    )
    assert _value(operator, "kueue_quota_reserved_workloads_total", **on_cq) == 1
    assert _value(operator, "kueue_admitted_workloads_total", **on_cq) == 1
    assert _value(operator, "kueue_admission_wait_time_seconds_count", **on_cq) == 1
    assert _value(operator, "kueue_local_queue_admitted_workloads_total", **on_lq) == 1
    assert _value(operator, "kueue_local_queue_finished_workloads_total", **on_lq) == 1
    assert _value(operator, "kueue_ready_wait_time_seconds_count", **on_cq) == 1
    assert _value(operator, "kueue_admitted_until_ready_wait_time_seconds_count", **on_cq) == 1
    assert _value(operator, "kueue_local_queue_ready_wait_time_seconds_count", **on_lq) == 1
    until_ready = "kueue_local_queue_admitted_until_ready_wait_time_seconds_count"
    assert _value(operator, until_ready, **on_lq) == 1
    assert _value(operator, "kueue_execution_time_seconds_count", **on_cq) == 1
    # its pods ran 3 s after it was admitted: at least that long admitted (whole seconds)
    executed = _value(operator, "kueue_execution_time_seconds_sum", **on_cq)
    assert executed is not None
    assert executed >= 3
    assert _value(operator, "kueue_evicted_workloads_total", cluster_queue=cq) is None
    status = {"verb": "patch", "resource": "workloads/status", "result": "200"}
    assert (_value(operator, "atoll_api_requests_total", **status) or 0) >= 1
    assert (_value(operator, "atoll_api_request_duration_seconds_count", verb="patch") or 0) >= 1
