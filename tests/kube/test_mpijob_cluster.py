"""MPIJobs end to end against the real mpi-operator (v0.8.2, built into the sandbox): a
labelled MPIJob is suspended at creation, admitted whole (a launcher and a worker pod set),
started by unsuspending it, so that its launcher and its workers start together, both with
the flavor's node selector, and suspended again, its pods gone, when preempted. An
unlabelled MPIJob is left alone."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import KubeCluster
from tests.kube import builders as b
from tests.kube.conftest import OperatorProcess, get_json, is_true
from tests.kube.owners import (
    MPIJOB,
    check_first_admitted_whole_second_waits,
    check_left_alone,
    check_preempted_and_restored,
    operator_for,
    queue,
)
from tests.sandbox.test_integrations import mpi_controller

pytestmark = pytest.mark.cluster
__all__ = ["mpi_controller"]
PRODUCT = "nvidia.com/gpu.product"
H100 = {PRODUCT: "NVIDIA-H100-80GB-HBM3"}
"""The flavor's node labels in the first test: every dgx node has them, so they constrain
nothing there, but atoll must inject them into both replica types and mpi-operator must carry
them into the launcher's Job as well as the worker pods."""


mpi_operator = operator_for(
    "mpi_operator", "MPIJob", needs=("mpi_controller", "dgx"), wait_gone=False
)
"""`atoll run` with the MPIJob integration, once the MPIJob CRD is installed. It does not wait
for the MPIJobs' Workloads to go: their namespaces are still not being emptied minutes after
their deletion (the Workloads not even marked deleted after 180 s), and each test's queues
are its own namespace's."""


def mpijob(
    name: str,
    namespace: str,
    *,
    queue: str | None = "q",
    workers: int = 4,
    gpus: int = 8,
    run: str = "600s",
    priority: str | None = None,
) -> dict[str, Any]:
    def replica(replicas: int, g: int) -> dict[str, Any]:
        requests = {"cpu": "1", b.GPU: str(g)} if g else {"cpu": "1"}
        container = {
            "name": "mpi",
            "image": "registry.invalid/atoll/mpi:1",
            "resources": {"requests": requests, "limits": {b.GPU: str(g)} if g else {}},
        }
        pod = {
            "metadata": {"annotations": {"atoll.dev/run-duration": run}},
            "spec": {"containers": [container]},
        }
        return {"replicas": replicas, "restartPolicy": "Never", "template": pod}

    labels = {b.QUEUE_LABEL: queue} if queue else {}
    if priority:
        labels["kueue.x-k8s.io/priority-class"] = priority
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "slotsPerWorker": 1,
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {"Launcher": replica(1, 0), "Worker": replica(workers, gpus)},
        },
    }


def urgent(cluster: KubeCluster, namespace: str) -> dict[str, Any] | None:
    for wl in get_json(cluster, "get", "workloads", "-n", namespace)["items"]:
        if wl["metadata"]["name"].startswith("job-urgent-"):
            return dict(wl)
    return None


def test_an_mpijobs_launcher_and_workers_start_together_and_a_second_waits_whole(
    cluster: KubeCluster, mpi_operator: OperatorProcess, namespace: str
) -> None:
    del mpi_operator
    cq = queue(cluster, namespace, gpus=40, node_labels=H100)
    check_first_admitted_whole_second_waits(
        cluster,
        MPIJOB,
        namespace,
        cq=cq,
        pod_sets=[("launcher", 1), ("worker", 4)],
        first=mpijob("first", namespace),
        second=mpijob("second", namespace),
    )
    products = {
        n["metadata"]["name"]: n["metadata"]["labels"].get(PRODUCT)
        for n in get_json(cluster, "get", "nodes")["items"]
    }
    for pod in MPIJOB.pods_of(cluster, namespace, "first"):
        role = pod["metadata"]["labels"][MPIJOB.role_label]
        # Both pod sets carry the flavor: the launcher's pod too, which mpi-operator creates
        # from the Job it made at creation and updated on resume.
        assert pod["spec"].get("nodeSelector") == H100, (role, pod["spec"].get("nodeSelector"))
        assert products[pod["spec"]["nodeName"]] == H100[PRODUCT]
    # The launcher's batch/v1 Job belongs to the MPIJob: no Workload of its own.
    launcher = get_json(cluster, "get", "job", "first-launcher", "-n", namespace)
    assert launcher["metadata"]["ownerReferences"][0]["kind"] == "MPIJob"
    assert launcher["spec"]["template"]["spec"].get("nodeSelector") == H100
    names = [
        w["metadata"]["name"]
        for w in get_json(cluster, "get", "workloads", "-n", namespace)["items"]
    ]
    assert not [n for n in names if n.startswith("job-")], names


def test_a_preempted_mpijob_is_suspended_and_its_pods_go(
    cluster: KubeCluster, mpi_operator: OperatorProcess, namespace: str
) -> None:
    del mpi_operator
    queue(cluster, namespace, gpus=32, preemption={"withinClusterQueue": "LowerPriority"})
    low = mpijob("low", namespace, priority=f"low-{namespace}")
    check_preempted_and_restored(
        cluster, MPIJOB, namespace, low=low, roles={"launcher": 1, "worker": 4}
    )
    launcher = get_json(cluster, "get", "job", "low-launcher", "-n", namespace)
    assert launcher["spec"]["suspend"] is True  # mpi-operator follows the MPIJob
    cluster.wait_for(
        "the urgent Job to be admitted in the MPIJob's place",
        lambda: is_true(urgent(cluster, namespace), "Admitted"),
    )


def test_unlabelled_mpijobs_are_left_alone(
    cluster: KubeCluster, mpi_operator: OperatorProcess, namespace: str
) -> None:
    del mpi_operator
    queue(cluster, namespace, gpus=0)
    plain = mpijob("plain", namespace, queue=None, run="1s", gpus=0, workers=2)
    check_left_alone(cluster, MPIJOB, namespace, plain)  # nor a Workload for its launcher Job
