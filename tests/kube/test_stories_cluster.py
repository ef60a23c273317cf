"""The stories that justify gang admission, on the sandbox: the all-reduce deadlock that
kube-scheduler alone walks into, waitForPodsReady, and bad input that must not hurt."""

from __future__ import annotations

import copy
import json
import threading
import time
from typing import Any

import pytest

from atoll.sandbox.allreduce import AllReduceAgent
from tests.conftest import REPO, KubeCluster
from tests.kube import builders as b
from tests.kube.conftest import (
    OperatorProcess,
    apply,
    charged,
    condition,
    get_json,
    is_true,
    workload_of,
)

pytestmark = pytest.mark.cluster
SIX = {"atoll.dev/node-group": "six"}


def _pods(cluster: KubeCluster, ns: str, job: str) -> list[dict[str, Any]]:
    return list(get_json(cluster, "get", "pods", "-n", ns, "-l", f"job-name={job}")["items"])


def _running(cluster: KubeCluster, ns: str, job: str) -> int:
    return sum(
        1
        for p in _pods(cluster, ns, job)
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    )


def _set_parallelism(cluster: KubeCluster, ns: str, job: str, n: int) -> None:
    cluster.kubectl(
        "patch",
        "job",
        job,
        "-n",
        ns,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"parallelism": n}}),
    )


def six_gpu_queue(cluster: KubeCluster, namespace: str) -> None:
    """LocalQueue `q` of a ClusterQueue of the 6 GPUs of the deadlock-6gpu nodes."""
    rf, cq = f"six-{namespace}", f"cq-six-{namespace}"
    apply(
        cluster,
        b.flavor(rf, node_labels=SIX),
        b.cluster_queue(cq, rf, gpus=6),
        b.local_queue("q", namespace, cq),
    )


@pytest.fixture
def allreduce(cluster: KubeCluster) -> Any:
    cluster.add_shape(REPO / "examples" / "clusters" / "deadlock-6gpu.yaml")
    agent = AllReduceAgent(kubectl=cluster.kubectl)
    stop = threading.Event()
    thread = agent.run_in_thread(stop, interval=0.3)
    yield agent
    stop.set()
    thread.join(timeout=5)


def test_interleaved_gangs_deadlock_without_atoll(
    cluster: KubeCluster, namespace: str, allreduce: AllReduceAgent
) -> None:
    """Two 4-pod all-reduce Jobs grown in turns on 6 GPUs end 3 + 3: neither can finish."""
    for name in ("a", "bb"):
        job = b.job(name, namespace, queue=None, pods=4, node_selector=SIX, allreduce_seconds=2)
        job["spec"]["parallelism"] = 1
        cluster.kubectl("create", "-f", "-", input=json.dumps(job))
    for n in (1, 2, 3):
        for name in ("a", "bb"):
            _set_parallelism(cluster, namespace, name, n)
            cluster.wait_for(
                f"{name} to run {n} pods",
                lambda name=name, n=n: _running(cluster, namespace, name) == n,
            )
    for name in ("a", "bb"):
        _set_parallelism(cluster, namespace, name, 4)
    cluster.wait_for(
        "both 4th pods to be created and stuck Pending",
        lambda: all(len(_pods(cluster, namespace, j)) == 4 for j in ("a", "bb")),
    )
    # All 6 GPUs are held; each gang needs one more. Watch well past the 2 s all-reduce step.
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        assert _running(cluster, namespace, "a") == 3
        assert _running(cluster, namespace, "bb") == 3
        time.sleep(0.5)
    for name in ("a", "bb"):
        job = get_json(cluster, "get", "job", name, "-n", namespace)
        assert not job["status"].get("succeeded")
    assert (namespace, "a") not in allreduce.completed
    cluster.kubectl("delete", "job", "a", "bb", "-n", namespace, "--wait=true", timeout=90)


def test_gang_admission_runs_the_same_jobs_one_after_the_other(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, allreduce: AllReduceAgent
) -> None:
    six_gpu_queue(cluster, namespace)
    for name in ("a", "bb"):
        job = b.job(name, namespace, queue="q", pods=4, node_selector=SIX, allreduce_seconds=2)
        cluster.kubectl("create", "-f", "-", input=json.dumps(job))
    most = 0
    deadline = time.monotonic() + 120
    done: set[str] = set()
    while time.monotonic() < deadline and len(done) < 2:
        # One LIST: both Workloads as of one resourceVersion. Two reads could see `a` still
        # running and, a moment later, `bb` admitted after `a` finished.
        wls = get_json(cluster, "get", "workloads", "-n", namespace)["items"]
        holding = [w for w in wls if is_true(w, "QuotaReserved") and not is_true(w, "Finished")]
        # A gang whose pods succeeded gives their GPUs back before its Job is Complete
        # (reclaimable pods): what counts is the GPUs still charged.
        most = max(most, sum(charged(w, b.GPU) for w in holding))
        for j in ("a", "bb"):
            if get_json(cluster, "get", "job", j, "-n", namespace)["status"].get("succeeded") == 4:
                done.add(j)
        time.sleep(0.3)
    assert done == {"a", "bb"}, "both gangs must complete"
    assert most <= 6, f"gangs were charged {most} GPUs on 6 GPUs"


def test_gang_that_never_becomes_ready_is_evicted_and_requeued_with_backoff(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    rf, cq = f"rf-{namespace}", f"cq-{namespace}"
    apply(cluster, b.flavor(rf), b.cluster_queue(cq, rf, gpus=8), b.local_queue("q", namespace, cq))
    job = b.job(
        "stuck", namespace, queue="q", pods=2, node_selector={"atoll.dev/node-group": "nowhere"}
    )
    cluster.kubectl("create", "-f", "-", input=json.dumps(job))
    cluster.wait_for(
        "the first PodsReady timeout",
        lambda: (
            (condition(workload_of(cluster, namespace, "stuck"), "Evicted") or {}).get("reason")
            == "PodsReadyTimeout"
        ),
        timeout=60,
    )
    wl = workload_of(cluster, namespace, "stuck")
    assert condition(wl, "PodsReady")["reason"] == "WaitForStart"  # type: ignore[index]
    cluster.wait_for(
        "the quota released and the Job suspended",
        lambda: (
            not is_true(workload_of(cluster, namespace, "stuck"), "QuotaReserved")
            and get_json(cluster, "get", "job", "stuck", "-n", namespace)["spec"]["suspend"]
        ),
        timeout=60,
    )
    wl = workload_of(cluster, namespace, "stuck")
    assert wl is not None
    assert wl["status"]["requeueState"]["count"] == 1
    cluster.wait_for(
        "a second attempt after the backoff, evicted again",
        lambda: (
            (
                (workload_of(cluster, namespace, "stuck") or {})
                .get("status", {})
                .get("requeueState")
                or {}
            ).get("count", 0)
            >= 2
        ),
        timeout=90,
    )
    events = get_json(cluster, "get", "events", "-n", namespace)["items"]
    reasons = {e["reason"] for e in events}
    assert {"Started", "Stopped"} <= reasons


def _pending_condition(cluster: KubeCluster, ns: str, job: str) -> dict[str, Any] | None:
    c = condition(workload_of(cluster, ns, job), "QuotaReserved")
    return c if c and c["status"] == "False" else None


@pytest.mark.parametrize(
    ("setup", "reason", "words"),
    [
        # Kueue's reasons; the message says which cause
        pytest.param(
            "missing-local-queue",
            "Inadmissible",
            ["LocalQueue no-such-queue doesn't exist"],
            id="lq",
        ),
        pytest.param(
            "missing-flavor", "Inadmissible", ["ClusterQueue", "is inactive"], id="flavor"
        ),
        pytest.param(
            "too-big",
            "Pending",
            ["insufficient quota for nvidia.com/gpu", "> maximum capacity"],
            id="too-big",
        ),
    ],
)
def test_bad_input_gets_a_reason_and_an_event_and_the_operator_keeps_running(
    cluster: KubeCluster,
    operator: OperatorProcess,
    namespace: str,
    *,
    setup: str,
    reason: str,
    words: list[str],
) -> None:
    rf, cq = f"rf-{namespace}", f"cq-{namespace}"
    queue = "q"
    if setup == "missing-local-queue":
        queue = "no-such-queue"
    elif setup == "missing-flavor":
        apply(
            cluster, b.cluster_queue(cq, f"missing-{rf}", gpus=8), b.local_queue("q", namespace, cq)
        )
    else:
        apply(
            cluster,
            b.flavor(rf),
            b.cluster_queue(cq, rf, gpus=4),
            b.local_queue("q", namespace, cq),
        )
    job = b.job("bad", namespace, queue=queue, pods=8 if setup == "too-big" else 1)
    cluster.kubectl("create", "-f", "-", input=json.dumps(copy.deepcopy(job)))
    cluster.wait_for("a pending reason", lambda: _pending_condition(cluster, namespace, "bad"))
    cond = _pending_condition(cluster, namespace, "bad")
    assert cond is not None
    assert cond["reason"] == reason
    for word in words:
        assert word in cond["message"]
    cluster.wait_for(
        "a Warning event on the Workload with the same reason",
        lambda: any(
            e["reason"] == reason and e["type"] == "Warning"
            for e in get_json(cluster, "get", "events", "-n", namespace)["items"]
        ),
    )
    if setup == "missing-flavor":
        cluster.wait_for(
            "the ClusterQueue reported inactive",
            lambda: (
                (condition(get_json(cluster, "get", "clusterqueue", cq), "Active") or {}).get(
                    "status"
                )
                == "False"
            ),
        )
    assert operator.proc is not None
    assert operator.proc.poll() is None


def test_metrics_use_kueue_names(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    rf, cq = f"rf-{namespace}", f"cq-{namespace}"
    apply(cluster, b.flavor(rf), b.cluster_queue(cq, rf, gpus=8), b.local_queue("q", namespace, cq))
    cluster.kubectl("create", "-f", "-", input=json.dumps(b.job("m", namespace, queue="q", pods=2)))
    cluster.wait_for("admitted", lambda: is_true(workload_of(cluster, namespace, "m"), "Admitted"))
    cluster.wait_for(
        "the admission counted",
        lambda: f'kueue_admitted_workloads_total{{cluster_queue="{cq}"' in operator.metrics(),
    )
    quota = f'kueue_cluster_queue_nominal_quota{{cluster_queue="{cq}",cohort=""'
    cluster.wait_for("the queue gauges exported", lambda: quota in operator.metrics())
    text = operator.metrics()
    assert "kueue_admission_attempts_total" in text
    assert "atoll_api_requests_total" in text
