"""JobSets end to end against the real JobSet controller (v0.11, built into the sandbox): a
labelled JobSet is suspended at creation, admitted whole (one pod set per replicated job, each
with its own flavor), started by unsuspending it, and suspended again when preempted."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.conftest import KubeCluster
from tests.kube import builders as b
from tests.kube.conftest import (
    OperatorProcess,
    apply,
    charged,
    condition,
    create,
    get_json,
    is_true,
    workload_of,
)
from tests.kube.owners import (
    JOBSET,
    check_first_admitted_whole_second_waits,
    check_left_alone,
    check_preempted_and_restored,
    operator_for,
    queue,
)
from tests.sandbox.test_integrations import jobset_controller

pytestmark = pytest.mark.cluster
__all__ = ["jobset_controller"]


jobset_operator = operator_for("jobset_operator", "JobSet", needs=("jobset_controller", "dgx"))
"""`atoll run` with the JobSet integration, once the JobSet CRD is installed."""


def jobset(
    name: str,
    namespace: str,
    *,
    queue: str | None = "q",
    workers: int = 4,
    gpus: int = 8,
    leader_gpus: int = 8,
    run: str = "600s",
    priority: str | None = None,
    required_topology: str | None = None,
) -> dict[str, Any]:
    annotations = {"atoll.dev/run-duration": run}
    if required_topology is not None:
        annotations[b.REQUIRED_TOPOLOGY] = required_topology

    def replicated(rj: str, replicas: int, g: int) -> dict[str, Any]:
        pod = {
            "metadata": {"annotations": dict(annotations)},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "train",
                        "image": "registry.invalid/atoll/trainer:1",
                        "resources": {
                            "requests": {"cpu": "1", b.GPU: str(g)},
                            "limits": {b.GPU: str(g)},
                        },
                    }
                ],
            },
        }
        job_spec = {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": pod}
        return {"name": rj, "replicas": replicas, "template": {"spec": job_spec}}

    labels = {b.QUEUE_LABEL: queue} if queue else {}
    if priority:
        labels["kueue.x-k8s.io/priority-class"] = priority
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicatedJobs": [
                replicated("leader", 1, leader_gpus),
                replicated("workers", workers, gpus),
            ]
        },
    }


def test_a_jobset_is_admitted_whole_and_a_second_waits_whole_with_the_numbers(
    cluster: KubeCluster, jobset_operator: OperatorProcess, namespace: str
) -> None:
    del jobset_operator
    cq = queue(cluster, namespace, gpus=40)
    check_first_admitted_whole_second_waits(
        cluster,
        JOBSET,
        namespace,
        cq=cq,
        pod_sets=[("leader", 1), ("workers", 4)],
        first=jobset("first", namespace),
        second=jobset("second", namespace),
    )


def test_a_jobset_beyond_capacity_is_never_admitted_in_part(
    cluster: KubeCluster, jobset_operator: OperatorProcess, namespace: str
) -> None:
    del jobset_operator
    queue(cluster, namespace, gpus=32)
    create(cluster, jobset("big", namespace))  # 40 GPUs
    cluster.wait_for(
        "the JobSet's Workload to be pending",
        lambda: (
            condition(JOBSET.workload_of(cluster, namespace, "big"), "QuotaReserved") is not None
        ),
    )
    time.sleep(3)
    wl = JOBSET.workload_of(cluster, namespace, "big")
    assert wl is not None
    assert not is_true(wl, "QuotaReserved")
    assert "admission" not in (wl.get("status") or {})
    assert JOBSET.pods_of(cluster, namespace, "big") == []
    assert JOBSET.get(cluster, namespace, "big")["spec"]["suspend"] is True


def test_pod_sets_needing_different_flavors_get_them(
    cluster: KubeCluster, jobset_operator: OperatorProcess, namespace: str
) -> None:
    del jobset_operator
    block = "topology.atoll.dev/block"
    small, big = f"small-{namespace}", f"big-{namespace}"
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": f"cq-{namespace}"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", b.GPU],
                    "flavors": [
                        {
                            "name": small,
                            "resources": [
                                {"name": "cpu", "nominalQuota": 100},
                                {"name": b.GPU, "nominalQuota": 8},
                            ],
                        },
                        {
                            "name": big,
                            "resources": [
                                {"name": "cpu", "nominalQuota": 100},
                                {"name": b.GPU, "nominalQuota": 32},
                            ],
                        },
                    ],
                }
            ],
        },
    }
    apply(
        cluster,
        b.flavor(small, {block: "block-0"}),
        b.flavor(big, {block: "block-1"}),
        cq,
        b.local_queue("q", namespace, f"cq-{namespace}"),
    )
    create(cluster, jobset("mixed", namespace))
    cluster.wait_for(
        "the JobSet to be Admitted",
        lambda: is_true(JOBSET.workload_of(cluster, namespace, "mixed"), "Admitted"),
    )
    wl = JOBSET.workload_of(cluster, namespace, "mixed")
    assert wl is not None
    leader, workers = wl["status"]["admission"]["podSetAssignments"]
    assert leader["flavors"][b.GPU] == small
    assert workers["flavors"][b.GPU] == big
    want = {"leader": {block: "block-0"}, "workers": {block: "block-1"}}

    def selectors() -> dict[str, object]:
        # The Workload is written Admitted before the JobSet is started (selectors
        # injected, then unsuspended), so read the JobSet until the start lands.
        spec = JOBSET.get(cluster, namespace, "mixed")["spec"]
        return {
            rj["name"]: rj["template"]["spec"]["template"]["spec"].get("nodeSelector")
            for rj in spec["replicatedJobs"]
        }

    cluster.wait_for("the flavors' node selectors on the JobSet", lambda: selectors() == want)
    assert selectors() == want
    cluster.wait_for(
        "the 5 pods to be bound",
        lambda: sum(JOBSET.bound(cluster, namespace, "mixed").values()) == 5,
    )
    nodes = {
        n["metadata"]["name"]: n["metadata"]["labels"].get(block)
        for n in get_json(cluster, "get", "nodes")["items"]
    }
    for pod in JOBSET.pods_of(cluster, namespace, "mixed"):
        rj = pod["metadata"]["labels"]["kueue.x-k8s.io/podset"]
        assert nodes[pod["spec"]["nodeName"]] == ("block-0" if rj == "leader" else "block-1")


def test_a_preempted_jobset_is_suspended_and_its_pods_go(
    cluster: KubeCluster, jobset_operator: OperatorProcess, namespace: str
) -> None:
    del jobset_operator
    queue(cluster, namespace, gpus=40, preemption={"withinClusterQueue": "LowerPriority"})
    low = jobset("low", namespace, priority=f"low-{namespace}")
    check_preempted_and_restored(
        cluster, JOBSET, namespace, low=low, roles={"leader": 1, "workers": 4}
    )


def test_a_jobsets_succeeded_jobs_give_their_quota_to_a_waiting_job(
    cluster: KubeCluster, jobset_operator: OperatorProcess, namespace: str
) -> None:
    """Kueue's reclaimable pods for JobSets: `long` fills the 40-GPU queue; its leader Job
    succeeds while its four workers still run, so the leader's 8 GPUs go back
    (`reclaimablePods: [{leader, 1}]`) and a waiting 8-GPU Job is admitted beside it."""
    del jobset_operator
    queue(cluster, namespace, gpus=40)
    long = jobset("long", namespace, run="600s")
    leader = long["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    leader["metadata"]["annotations"]["atoll.dev/run-duration"] = "2s"
    create(cluster, long)
    cluster.wait_for(
        "long to be Admitted",
        lambda: is_true(JOBSET.workload_of(cluster, namespace, "long"), "Admitted"),
    )
    create(cluster, b.job("small", namespace, queue="q", pods=1, gpus=8, run="600s"))
    cluster.wait_for(
        "small to get quota",
        lambda: is_true(workload_of(cluster, namespace, "small"), "QuotaReserved"),
        timeout=60,
    )
    wl = JOBSET.workload_of(cluster, namespace, "long")
    assert wl is not None
    assert is_true(wl, "Admitted")
    assert not is_true(wl, "Finished")  # admitted beside long, not after it
    assert wl["status"]["reclaimablePods"] == [{"name": "leader", "count": 1}]
    assert charged(wl, b.GPU) == 32


def test_unlabelled_jobsets_are_left_alone(
    cluster: KubeCluster, jobset_operator: OperatorProcess, namespace: str
) -> None:
    del jobset_operator
    queue(cluster, namespace, gpus=0)
    plain = jobset("plain", namespace, queue=None, run="1s", gpus=0, leader_gpus=0)
    check_left_alone(cluster, JOBSET, namespace, plain)


def test_an_unlabelled_jobset_goes_to_its_namespaces_default_localqueue(
    cluster: KubeCluster, jobset_operator: OperatorProcess, namespace: str
) -> None:
    """Kueue's LocalQueue defaulting for a JobSet: labelled `default` at creation, admitted
    whole through that LocalQueue; its Jobs, which its controller creates unlabelled, are
    not defaulted (a managed kind owns them): one Workload, the JobSet's."""
    del jobset_operator
    cq = queue(cluster, namespace, gpus=40)
    apply(cluster, b.local_queue("default", namespace, cq))
    lq = ("get", "localqueue", "default", "-n", namespace)
    cluster.wait_for("LocalQueue default active", lambda: is_true(get_json(cluster, *lq), "Active"))
    create(cluster, jobset("plain", namespace, queue=None))
    assert JOBSET.get(cluster, namespace, "plain")["metadata"]["labels"] == {
        b.QUEUE_LABEL: "default"
    }
    cluster.wait_for(
        "plain admitted and its 5 pods running",
        lambda: (
            is_true(JOBSET.workload_of(cluster, namespace, "plain"), "Admitted")
            and sum(
                p["status"].get("phase") == "Running"
                for p in JOBSET.pods_of(cluster, namespace, "plain")
            )
            == 5
        ),
        timeout=120,
    )
    (wl,) = get_json(cluster, "get", "workloads", "-n", namespace)["items"]
    assert wl["spec"]["queueName"] == "default"
    jobs = get_json(cluster, "get", "jobs", "-n", namespace)["items"]
    assert len(jobs) == 5
    assert all(b.QUEUE_LABEL not in (j["metadata"].get("labels") or {}) for j in jobs)


def test_a_rack_required_jobset_lands_each_replicated_job_in_one_rack(
    cluster: KubeCluster, jobset_operator: OperatorProcess, namespace: str
) -> None:
    del jobset_operator
    topo, rf = b.dgx_topology(namespace)
    apply(
        cluster,
        topo,
        rf,
        b.cluster_queue(f"cq-{namespace}", f"rf-{namespace}", gpus=128),
        b.local_queue("q", namespace, f"cq-{namespace}"),
    )
    create(cluster, jobset("ring", namespace, required_topology=b.RACK))  # workers: a rack
    try:
        cluster.wait_for(
            "the JobSet to be Admitted",
            lambda: is_true(JOBSET.workload_of(cluster, namespace, "ring"), "Admitted"),
        )
    except AssertionError as e:
        waiting = condition(JOBSET.workload_of(cluster, namespace, "ring"), "QuotaReserved") or {}
        raise AssertionError(f"{e}; QuotaReserved: {waiting.get('message')}") from e
    wl = JOBSET.workload_of(cluster, namespace, "ring")
    assert wl is not None
    assert all(a.get("topologyAssignment") for a in wl["status"]["admission"]["podSetAssignments"])
    cluster.wait_for(
        "the 5 pods to be bound",
        lambda: sum(JOBSET.bound(cluster, namespace, "ring").values()) == 5,
        timeout=90,
    )
    racks = {
        n["metadata"]["name"]: n["metadata"]["labels"].get(b.RACK)
        for n in get_json(cluster, "get", "nodes")["items"]
    }
    by_set: dict[str, set[str]] = {}
    for pod in JOBSET.pods_of(cluster, namespace, "ring"):
        rj = pod["metadata"]["labels"]["kueue.x-k8s.io/podset"]
        by_set.setdefault(rj, set()).add(racks[pod["spec"]["nodeName"]])
    assert by_set.keys() == {"leader", "workers"}
    assert len(by_set["workers"]) == 1
    assert len(by_set["leader"]) == 1
