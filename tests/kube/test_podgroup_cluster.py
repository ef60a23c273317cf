"""Plain pods end to end (integrations.frameworks `pod`): a labelled pod is gated at creation;
a pod group is admitted whole once all its pods exist and its pods are ungated together; an
incomplete group waits, saying how many pods it misses; a preempted group's pods are deleted,
which releases its quota to the preemptor; unlabelled pods are left alone."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.conftest import KubeCluster
from tests.kube import builders as b
from tests.kube.conftest import (
    OperatorProcess,
    apply,
    create,
    get_json,
    is_true,
    one_queue,
)
from tests.kube.owners import operator_for
from tests.kube.owners import queue as ready_queue

pytestmark = pytest.mark.cluster
GATE = "kueue.x-k8s.io/admission"


pod_operator = operator_for("pod_operator", "Pod")
"""`atoll run` with the plain-pod integration enabled."""


def pod(
    name: str,
    namespace: str,
    *,
    group: str | None = None,
    total: int = 4,
    queue: bool = True,
    priority: str | None = None,
) -> dict[str, Any]:
    labels = {b.QUEUE_LABEL: "q"} if queue else {}
    if priority is not None:
        labels["kueue.x-k8s.io/priority-class"] = priority
    annotations = {"atoll.dev/run-duration": "600s"}
    if group is not None:
        labels["kueue.x-k8s.io/pod-group-name"] = group
        annotations["kueue.x-k8s.io/pod-group-total-count"] = str(total)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/atoll/sleep:1",
                    "resources": {"requests": {"cpu": "100m", b.GPU: "1"}, "limits": {b.GPU: "1"}},
                }
            ],
        },
    }


def _pods(cluster: KubeCluster, namespace: str) -> dict[str, dict[str, Any]]:
    items = get_json(cluster, "get", "pods", "-n", namespace)["items"]
    return {p["metadata"]["name"]: p for p in items}


def _gates(p: dict[str, Any]) -> list[str]:
    return [g["name"] for g in p["spec"].get("schedulingGates") or []]


def _workload(cluster: KubeCluster, namespace: str, prefix: str) -> dict[str, Any] | None:
    for wl in get_json(cluster, "get", "workloads", "-n", namespace)["items"]:
        if wl["metadata"]["name"].startswith(prefix):
            return dict(wl)
    return None


def test_a_pod_group_is_gated_admitted_whole_and_ungated_together(
    cluster: KubeCluster, pod_operator: OperatorProcess, namespace: str
) -> None:
    del pod_operator
    one_queue(cluster, namespace, gpus=4)
    names = [f"w{i}" for i in range(4)]
    create(cluster, *(pod(n, namespace, group="ring") for n in names[:3]))
    made = _pods(cluster, namespace)
    assert all(_gates(made[n]) == [GATE] for n in names[:3])
    assert all(made[n]["metadata"]["labels"]["kueue.x-k8s.io/managed"] == "true" for n in names[:3])
    time.sleep(3)  # three of four: nothing is admitted, nothing runs
    assert _workload(cluster, namespace, "ring") is None
    assert all(_gates(p) == [GATE] for p in _pods(cluster, namespace).values())
    create(cluster, pod(names[3], namespace, group="ring"))
    cluster.wait_for(
        "the group's Workload to be Admitted",
        lambda: is_true(_workload(cluster, namespace, "ring"), "Admitted"),
    )
    wl = _workload(cluster, namespace, "ring")
    assert wl is not None
    assert wl["metadata"]["name"] == "ring"
    assert sum(ps["count"] for ps in wl["spec"]["podSets"]) == 4
    cluster.wait_for(
        "all 4 pods to be ungated and bound",
        lambda: all(
            not _gates(p) and p["spec"].get("nodeName") for p in _pods(cluster, namespace).values()
        ),
    )


def test_an_incomplete_group_waits_with_how_many_pods_it_misses(
    cluster: KubeCluster, pod_operator: OperatorProcess, namespace: str
) -> None:
    del pod_operator
    one_queue(cluster, namespace, gpus=8)
    create(cluster, *(pod(f"p{i}", namespace, group="half", total=4) for i in range(2)))

    def said() -> bool:
        events = get_json(cluster, "get", "events", "-n", namespace)["items"]
        return any(
            e.get("reason") == "WaitingForPods" and "2 of 4 pods exist, 2 missing" in e["message"]
            for e in events
        )

    cluster.wait_for("an event saying 2 pods are missing", said)
    assert _workload(cluster, namespace, "half") is None
    assert all(_gates(p) == [GATE] for p in _pods(cluster, namespace).values())


def test_a_single_labelled_pod_is_a_gang_of_one_and_unlabelled_pods_are_left_alone(
    cluster: KubeCluster, pod_operator: OperatorProcess, namespace: str
) -> None:
    del pod_operator
    one_queue(cluster, namespace, gpus=1)
    create(cluster, pod("solo", namespace), pod("plain", namespace, queue=False))
    made = _pods(cluster, namespace)
    assert made["solo"]["metadata"]["labels"]["kueue.x-k8s.io/managed"] == "true"
    assert _gates(made["plain"]) == []
    assert "kueue.x-k8s.io/managed" not in (made["plain"]["metadata"].get("labels") or {})
    cluster.wait_for(
        "the single pod to be admitted and ungated",
        lambda: (
            is_true(_workload(cluster, namespace, "pod-solo-"), "Admitted")
            and not _gates(_pods(cluster, namespace)["solo"])
        ),
    )
    assert _workload(cluster, namespace, "pod-plain-") is None


def test_a_preempted_group_has_its_pods_deleted_and_its_quota_goes_to_the_preemptor(
    cluster: KubeCluster, pod_operator: OperatorProcess, namespace: str
) -> None:
    del pod_operator
    ready_queue(cluster, namespace, gpus=4, preemption={"withinClusterQueue": "LowerPriority"})
    apply(
        cluster, b.priority_class(f"low-{namespace}", 1), b.priority_class(f"high-{namespace}", 100)
    )
    names = [f"r{i}" for i in range(4)]
    create(cluster, *(pod(n, namespace, group="ring", priority=f"low-{namespace}") for n in names))
    cluster.wait_for(
        "the group's 4 pods to be ungated and bound",
        lambda: (
            all(
                not _gates(p) and p["spec"].get("nodeName")
                for p in _pods(cluster, namespace).values()
            )
            and len(_pods(cluster, namespace)) == 4
        ),
    )
    ring = _workload(cluster, namespace, "ring")
    assert ring is not None
    assert is_true(ring, "Admitted")
    create(cluster, b.job("urgent", namespace, queue="q", pods=4, priority=f"high-{namespace}"))
    cluster.wait_for(
        "the group's pods to be deleted and the urgent Job admitted",
        lambda: (
            not any(n in _pods(cluster, namespace) for n in names)
            and is_true(_workload(cluster, namespace, "job-urgent-"), "Admitted")
        ),
        timeout=120,
    )
    events = get_json(cluster, "get", "events", "-n", namespace)["items"]
    stopped = [
        e for e in events if e.get("reason") == "Stopped" and e["involvedObject"]["kind"] == "Pod"
    ]
    assert stopped, "no Stopped event on the group's pod"
    assert any(e["message"].startswith("Preempted to accommodate") for e in stopped)
    # Its pods gone, the group's Workload ends with its owners (atoll puts no finalizer on
    # pods): it is finished or already garbage-collected, and holds no quota.
    left = _workload(cluster, namespace, "ring")
    assert left is None or not is_true(left, "QuotaReserved")
