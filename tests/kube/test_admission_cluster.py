"""End-to-end admission stories on a real API server: the operator, kube-scheduler and KWOK."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import KubeCluster
from tests.kube import builders as b
from tests.kube.conftest import (
    OperatorProcess,
    apply,
    condition,
    get_json,
    is_true,
    workload_of,
)

pytestmark = pytest.mark.cluster


def _queues(cluster: KubeCluster, ns: str, *, gpus: int, **cq_args: object) -> str:
    """A flavor, a ClusterQueue and a LocalQueue `q` in `ns`; returns the CQ name."""
    cq = f"cq-{ns}"
    apply(
        cluster,
        b.flavor(f"rf-{ns}"),
        b.cluster_queue(cq, f"rf-{ns}", gpus=gpus, **cq_args),  # type: ignore[arg-type]
        b.local_queue("q", ns, cq),
    )
    return cq


def _create(cluster: KubeCluster, obj: dict[str, object]) -> dict[str, object]:
    out = cluster.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(obj))
    created: dict[str, object] = json.loads(out.stdout)
    return created


def test_quick_start_job_is_admitted_runs_and_finishes(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    cq = _queues(cluster, namespace, gpus=8)
    created = _create(cluster, b.job("sample", namespace, queue="q", pods=3, run="2s"))
    assert created["spec"]["suspend"] is True  # type: ignore[index]  # the webhook suspended it
    cluster.wait_for(
        "the Workload to be Admitted",
        lambda: is_true(workload_of(cluster, namespace, "sample"), "Admitted"),
    )
    wl = workload_of(cluster, namespace, "sample")
    assert wl is not None
    assert wl["metadata"]["name"].startswith("job-sample-")
    assert wl["status"]["admission"]["clusterQueue"] == cq
    (ps,) = wl["status"]["admission"]["podSetAssignments"]
    assert ps["count"] == 3
    assert ps["flavors"] == {"cpu": f"rf-{namespace}", "nvidia.com/gpu": f"rf-{namespace}"}
    assert ps["resourceUsage"]["nvidia.com/gpu"] == "3"
    cluster.kubectl(
        "wait",
        "--for=condition=Complete",
        "job/sample",
        "-n",
        namespace,
        "--timeout=60s",
        timeout=70,
    )
    cluster.wait_for(
        "the Workload to be Finished",
        lambda: is_true(workload_of(cluster, namespace, "sample"), "Finished"),
    )
    table = cluster.kubectl("get", "workloads", "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "QUEUE", "RESERVED", "IN", "ADMITTED", "FINISHED", "AGE"]
    assert table[1].split()[1:5] == ["q", cq, "True", "True"]
    pods = get_json(cluster, "get", "pods", "-n", namespace)["items"]
    assert {p["metadata"]["labels"]["kueue.x-k8s.io/podset"] for p in pods} == {"main"}
    assert all(p["metadata"]["labels"]["kueue.x-k8s.io/cluster-queue-name"] == cq for p in pods)


def test_unlabelled_job_is_left_alone(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    created = _create(cluster, b.job("plain", namespace, queue=None, pods=1, run="1s"))
    assert not created["spec"].get("suspend")  # type: ignore[attr-defined]
    cluster.kubectl(
        "wait",
        "--for=condition=Complete",
        "job/plain",
        "-n",
        namespace,
        "--timeout=60s",
        timeout=70,
    )
    assert workload_of(cluster, namespace, "plain") is None


def test_second_gang_waits_whole_then_runs(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    _queues(cluster, namespace, gpus=8)
    _create(cluster, b.job("first", namespace, queue="q", pods=6, run="6s"))
    cluster.wait_for(
        "first admitted", lambda: is_true(workload_of(cluster, namespace, "first"), "Admitted")
    )
    _create(cluster, b.job("second", namespace, queue="q", pods=4, run="1s"))
    cluster.wait_for(
        "second to be pending with a reason",
        lambda: (
            (condition(workload_of(cluster, namespace, "second"), "QuotaReserved") or {}).get(
                "status"
            )
            == "False"
        ),
    )
    pending = condition(workload_of(cluster, namespace, "second"), "QuotaReserved")
    assert pending is not None
    assert pending["reason"] == "Pending"  # Kueue's reason; the message says why
    assert "insufficient unused quota for nvidia.com/gpu" in pending["message"]
    pods = get_json(cluster, "get", "pods", "-n", namespace, "-l", "job-name=second")["items"]
    assert pods == []  # no part of the second gang runs while it waits
    job = get_json(cluster, "get", "job", "second", "-n", namespace)
    assert job["spec"]["suspend"] is True
    cluster.kubectl(
        "wait",
        "--for=condition=Complete",
        "job/second",
        "-n",
        namespace,
        "--timeout=90s",
        timeout=100,
    )
    first = get_json(cluster, "get", "job", "first", "-n", namespace)
    assert first["status"].get("succeeded") == 6


def test_higher_priority_gang_preempts_a_whole_lower_one(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    _queues(cluster, namespace, gpus=4, preemption={"withinClusterQueue": "LowerPriority"})
    apply(
        cluster,
        b.priority_class(f"low-{namespace}", 10),
        b.priority_class(f"high-{namespace}", 1000),
    )
    _create(
        cluster,
        b.job("low", namespace, queue="q", pods=4, run="120s", priority=f"low-{namespace}"),
    )
    cluster.wait_for(
        "low admitted", lambda: is_true(workload_of(cluster, namespace, "low"), "Admitted")
    )
    _create(
        cluster,
        b.job("high", namespace, queue="q", pods=2, run="2s", priority=f"high-{namespace}"),
    )
    cluster.wait_for(
        "high admitted",
        lambda: is_true(workload_of(cluster, namespace, "high"), "Admitted"),
        timeout=60,
    )
    low = workload_of(cluster, namespace, "low")
    evicted = condition(low, "Evicted")
    preempted = condition(low, "Preempted")
    assert evicted is not None
    assert evicted["reason"] == "Preempted"
    assert preempted is not None
    assert preempted["reason"] == "InClusterQueue"
    assert "Preempted to accommodate a workload" in evicted["message"]
    cluster.wait_for(
        "the low Job suspended and its quota released",
        lambda: (
            get_json(cluster, "get", "job", "low", "-n", namespace)["spec"]["suspend"]
            and not is_true(workload_of(cluster, namespace, "low"), "QuotaReserved")
        ),
    )
    low_pods = get_json(cluster, "get", "pods", "-n", namespace, "-l", "job-name=low")["items"]
    assert all(
        p["metadata"].get("deletionTimestamp") or p["status"]["phase"] != "Running"
        for p in low_pods
    )


def test_cohort_borrowing_then_reclaim(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    cohort = f"co-{namespace}"
    rf = f"rf-{namespace}"
    apply(
        cluster,
        b.flavor(rf),
        b.cluster_queue(
            f"a-{namespace}",
            rf,
            gpus=4,
            cohort=cohort,
            preemption={"reclaimWithinCohort": "Any"},
        ),
        b.cluster_queue(
            f"b-{namespace}",
            rf,
            gpus=4,
            cohort=cohort,
            preemption={"reclaimWithinCohort": "Any"},
        ),
        b.local_queue("qa", namespace, f"a-{namespace}"),
        b.local_queue("qb", namespace, f"b-{namespace}"),
    )
    _create(cluster, b.job("borrower", namespace, queue="qa", pods=6, run="120s"))
    cluster.wait_for(
        "borrower admitted beyond its nominal quota",
        lambda: is_true(workload_of(cluster, namespace, "borrower"), "Admitted"),
    )
    cq = get_json(cluster, "get", "clusterqueue", f"a-{namespace}")

    def borrowed() -> set[str]:
        status = get_json(cluster, "get", "clusterqueue", f"a-{namespace}").get("status", {})
        return {
            r.get("borrowed", "0")
            for f in status.get("flavorsReservation", [])
            for r in f["resources"]
            if r["name"] == b.GPU
        }

    cluster.wait_for("ClusterQueue a to report borrowing 2 GPUs", lambda: borrowed() == {"2"})
    assert cq["spec"]["cohortName"] == cohort
    _create(cluster, b.job("owner", namespace, queue="qb", pods=4, run="2s"))
    cluster.wait_for(
        "owner admitted after reclaiming its quota",
        lambda: is_true(workload_of(cluster, namespace, "owner"), "Admitted"),
        timeout=60,
    )
    preempted = condition(workload_of(cluster, namespace, "borrower"), "Preempted")
    assert preempted is not None
    assert preempted["reason"] == "InCohortReclamation"


@pytest.mark.parametrize(
    ("strategy", "small_admitted"),
    [
        pytest.param("StrictFIFO", False, id="strict-fifo-blocks"),
        pytest.param("BestEffortFIFO", True, id="best-effort-skips"),
    ],
)
def test_queueing_strategy_head_of_line(
    cluster: KubeCluster,
    operator: OperatorProcess,
    namespace: str,
    strategy: str,
    small_admitted: bool,
) -> None:
    _queues(cluster, namespace, gpus=4, strategy=strategy)
    _create(cluster, b.job("running", namespace, queue="q", pods=2, run="30s"))
    cluster.wait_for(
        "running admitted", lambda: is_true(workload_of(cluster, namespace, "running"), "Admitted")
    )
    _create(cluster, b.job("big", namespace, queue="q", pods=4, run="1s"))
    cluster.wait_for(
        "big pending", lambda: condition(workload_of(cluster, namespace, "big"), "QuotaReserved")
    )
    time.sleep(1.1)  # creation timestamps have 1 s resolution: make `small` strictly younger
    _create(cluster, b.job("small", namespace, queue="q", pods=1, run="1s"))
    cluster.wait_for(
        "small evaluated",
        lambda: (
            condition(workload_of(cluster, namespace, "small"), "QuotaReserved")
            or not small_admitted
        ),
        timeout=30,
    )
    if small_admitted:
        cluster.wait_for(
            "small admitted past the blocked head",
            lambda: is_true(workload_of(cluster, namespace, "small"), "Admitted"),
        )
    else:
        time.sleep(3)  # give the scheduler several cycles to (wrongly) admit it
        assert not is_true(workload_of(cluster, namespace, "small"), "QuotaReserved")
    assert not is_true(workload_of(cluster, namespace, "big"), "QuotaReserved")


def test_maximum_execution_time_deactivates_the_workload(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    _queues(cluster, namespace, gpus=8)
    job = b.job("bounded", namespace, queue="q", pods=2, run="300s")
    job["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] = "5"
    _create(cluster, job)
    cluster.wait_for(
        "the Workload admitted",
        lambda: is_true(workload_of(cluster, namespace, "bounded"), "Admitted"),
    )
    wl = workload_of(cluster, namespace, "bounded")
    assert wl is not None
    assert wl["spec"]["maximumExecutionTimeSeconds"] == 5

    def evicted() -> dict[str, object] | None:
        return condition(workload_of(cluster, namespace, "bounded"), "Evicted")

    cluster.wait_for("the eviction after 5 s", lambda: evicted() is not None, timeout=60)
    cond = evicted()
    assert cond is not None
    assert cond["reason"] == "DeactivatedDueToMaximumExecutionTimeExceeded"
    cluster.wait_for(
        "the Job suspended and the quota released",
        lambda: (
            get_json(cluster, "get", "job", "bounded", "-n", namespace)["spec"]["suspend"] is True
            and not is_true(workload_of(cluster, namespace, "bounded"), "QuotaReserved")
        ),
        timeout=60,
    )
    wl = workload_of(cluster, namespace, "bounded")
    assert wl is not None
    assert wl["spec"]["active"] is False
    events = get_json(cluster, "get", "events", "-n", namespace)["items"]
    assert any(e["reason"] == "MaximumExecutionTimeExceeded" for e in events)


def test_pods_done_for_good_give_their_quota_to_a_waiting_job(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    """Kueue's reclaimable pods: `long` (2 at a time, 3 completions) fills the 2-GPU queue;
    once 2 pods succeeded only 1 is left to run, so 1 GPU goes back and `small` is admitted
    while `long` still runs its last pod."""
    _queues(cluster, namespace, gpus=2)
    long = b.job("long", namespace, queue="q", pods=2, run="4s")
    long["spec"]["completions"] = 3  # type: ignore[index]
    _create(cluster, long)
    cluster.wait_for(
        "long to be Admitted",
        lambda: is_true(workload_of(cluster, namespace, "long"), "Admitted"),
    )
    _create(cluster, b.job("small", namespace, queue="q", pods=1, run="1s"))
    seen: dict[str, dict[str, object]] = {}

    def small_admitted() -> bool:
        # one LIST: both Workloads as of one resourceVersion
        for wl in get_json(cluster, "get", "workloads", "-n", namespace)["items"]:
            seen[wl["metadata"]["ownerReferences"][0]["name"]] = wl
        return "small" in seen and is_true(seen["small"], "QuotaReserved")

    cluster.wait_for("small to get quota", small_admitted, timeout=60)
    assert not is_true(seen["long"], "Finished")  # admitted beside long, not after it
    status = seen["long"]["status"]
    assert status["reclaimablePods"] == [{"name": "main", "count": 1}]  # type: ignore[index]
    cluster.kubectl(
        "wait", "--for=condition=Complete", "job/long", "job/small", "-n", namespace,
        "--timeout=60s", timeout=70,
    )  # fmt: skip
    cluster.wait_for(
        "both Workloads to be Finished",
        lambda: all(
            is_true(workload_of(cluster, namespace, j), "Finished") for j in ("long", "small")
        ),
    )


def test_a_requeued_job_asks_only_for_the_pods_it_has_left(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    """Kueue's podSetsCountsAfterReclaim: `long` (2 at a time, 3 completions, lowest priority)
    has run 2 pods to success when `urgent` preempts it. Requeued, it asks for its 1 pod left,
    so it is admitted again as soon as `filler` ends, while `urgent` still runs (asking for
    its whole 2 pods it would wait for `urgent` to end)."""
    _queues(cluster, namespace, gpus=3, preemption={"withinClusterQueue": "LowerPriority"})
    apply(
        cluster,
        b.priority_class(f"low-{namespace}", 10),
        b.priority_class(f"mid-{namespace}", 100),
        b.priority_class(f"high-{namespace}", 1000),
    )
    _create(
        cluster,
        b.job("filler", namespace, queue="q", pods=1, run="25s", priority=f"mid-{namespace}"),
    )
    cluster.wait_for(
        "filler admitted", lambda: is_true(workload_of(cluster, namespace, "filler"), "Admitted")
    )
    long = b.job("long", namespace, queue="q", pods=2, run="8s", priority=f"low-{namespace}")
    long["spec"]["completions"] = 3  # type: ignore[index]
    _create(cluster, long)

    def reclaimable() -> object:
        wl = workload_of(cluster, namespace, "long")
        return (wl or {}).get("status", {}).get("reclaimablePods")

    cluster.wait_for(
        "2 of long's pods to succeed", lambda: reclaimable() == [{"name": "main", "count": 1}]
    )
    _create(
        cluster,
        b.job("urgent", namespace, queue="q", pods=2, run="60s", priority=f"high-{namespace}"),
    )
    cluster.wait_for(
        "urgent admitted in long's place",
        lambda: is_true(workload_of(cluster, namespace, "urgent"), "Admitted"),
        timeout=60,
    )
    evicted = condition(workload_of(cluster, namespace, "long"), "Evicted")
    assert evicted is not None
    assert evicted["reason"] == "Preempted"
    seen: dict[str, dict[str, object]] = {}

    def long_admitted_again() -> bool:
        # one LIST: the three Workloads as of one resourceVersion
        for wl in get_json(cluster, "get", "workloads", "-n", namespace)["items"]:
            seen[wl["metadata"]["ownerReferences"][0]["name"]] = wl
        return is_true(seen.get("long"), "QuotaReserved") and not is_true(seen["long"], "Evicted")

    cluster.wait_for("long admitted again", long_admitted_again, timeout=90)
    # beside urgent, not after it: none of urgent's pods has ended (their quota not given back)
    assert not is_true(seen["urgent"], "Finished")
    assert not seen["urgent"]["status"].get("reclaimablePods")  # type: ignore[attr-defined]
    (assignment,) = seen["long"]["status"]["admission"]["podSetAssignments"]  # type: ignore[index]
    assert assignment["count"] == 1
    assert get_json(cluster, "get", "job", "long", "-n", namespace)["spec"]["parallelism"] == 2
    cluster.kubectl(
        "wait", "--for=condition=Complete", "job/long", "-n", namespace, "--timeout=60s",
        timeout=70,
    )  # fmt: skip
    assert get_json(cluster, "get", "job", "long", "-n", namespace)["status"]["succeeded"] == 3
