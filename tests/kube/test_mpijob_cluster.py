"""MPIJobs end to end against the real mpi-operator (v0.8.2, built into the sandbox): a
labelled MPIJob is suspended at creation, admitted whole (a launcher and a worker pod set),
started by unsuspending it, so that its launcher and its workers start together, both with
the flavor's node selector, and suspended again, its pods gone, when preempted. An
unlabelled MPIJob is left alone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from atoll.sandbox.processes import Proc
from tests.conftest import KubeCluster
from tests.kube import builders as b
from tests.kube.conftest import (
    OperatorProcess,
    apply,
    condition,
    create,
    get_json,
    is_true,
    replacing_operator,
)
from tests.sandbox.test_integrations import mpi_controller

pytestmark = pytest.mark.cluster
__all__ = ["mpi_controller"]
NAME_LABEL = "training.kubeflow.org/job-name"
ROLE_LABEL = "training.kubeflow.org/job-role"
FRAMEWORKS = 'integrations.frameworks=["batch/job", "kubeflow.org/mpijob"]'
PRODUCT = "nvidia.com/gpu.product"
H100 = {PRODUCT: "NVIDIA-H100-80GB-HBM3"}
"""The flavor's node labels in the first test: every dgx node has them, so they constrain
nothing there, but atoll must inject them into both replica types and mpi-operator must carry
them into the launcher's Job as well as the worker pods."""


@pytest.fixture(scope="module")
def mpi_operator(
    cluster: KubeCluster,
    operator: OperatorProcess,
    mpi_controller: Proc | None,
    tmp_path_factory: pytest.TempPathFactory,
    dgx: list[str],
) -> Iterator[OperatorProcess]:
    """`atoll run` with the MPIJob integration enabled, started once the MPIJob CRD is
    installed (the session's operator is started again afterwards)."""
    del mpi_controller, dgx
    log_dir = tmp_path_factory.mktemp("mpi-operator")
    with replacing_operator(cluster, operator, log_dir, "--set", FRAMEWORKS) as op:
        yield op


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


def workload_of(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any] | None:
    for wl in get_json(cluster, "get", "workloads", "-n", namespace)["items"]:
        for ref in wl["metadata"].get("ownerReferences") or []:
            if ref["kind"] == "MPIJob" and ref["name"] == name:
                return dict(wl)
    return None


def pods_of(cluster: KubeCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    pods = get_json(cluster, "get", "pods", "-n", namespace, "-l", f"{NAME_LABEL}={name}")
    return list(pods["items"])


def workload_names(cluster: KubeCluster, namespace: str) -> list[str]:
    items = get_json(cluster, "get", "workloads", "-n", namespace)["items"]
    return [w["metadata"]["name"] for w in items]


def urgent(cluster: KubeCluster, namespace: str) -> dict[str, Any] | None:
    for wl in get_json(cluster, "get", "workloads", "-n", namespace)["items"]:
        if wl["metadata"]["name"].startswith("job-urgent-"):
            return dict(wl)
    return None


def bound(pods: list[dict[str, Any]]) -> dict[str, int]:
    """Bound pods by role (launcher, worker)."""
    out: dict[str, int] = {}
    for pod in pods:
        if pod["spec"].get("nodeName"):
            role = pod["metadata"]["labels"][ROLE_LABEL]
            out[role] = out.get(role, 0) + 1
    return out


def _get(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    got: dict[str, Any] = get_json(cluster, "get", "mpijob", name, "-n", namespace)
    return got


def _queue(
    cluster: KubeCluster,
    ns: str,
    gpus: int,
    node_labels: dict[str, str] | None = None,
    **cq: Any,
) -> str:
    rf, cq_name = f"rf-{ns}", f"cq-{ns}"
    apply(
        cluster,
        b.flavor(rf, node_labels),
        b.cluster_queue(cq_name, rf, gpus=gpus, **cq),
        b.local_queue("q", ns, cq_name),
    )
    # Until atoll has the queue, a Workload waits as inadmissible and a later one may pass it
    # (as in Kueue): wait for the LocalQueue's Active condition, which atoll writes.
    cluster.wait_for(
        "the LocalQueue to be Active",
        lambda: is_true(get_json(cluster, "get", "localqueue", "q", "-n", ns), "Active"),
    )
    return cq_name


def test_an_mpijobs_launcher_and_workers_start_together_and_a_second_waits_whole(
    cluster: KubeCluster, mpi_operator: OperatorProcess, namespace: str
) -> None:
    del mpi_operator
    cq = _queue(cluster, namespace, gpus=40, node_labels=H100)
    assert create(cluster, mpijob("first", namespace), mpijob("second", namespace)).returncode == 0
    # The webhook suspends both at creation (the first may already be admitted and started
    # again by now, so its pods are checked against its admission time below).
    assert _get(cluster, namespace, "second")["spec"]["runPolicy"]["suspend"] is True
    cluster.wait_for(
        "the first MPIJob's Workload to be Admitted",
        lambda: is_true(workload_of(cluster, namespace, "first"), "Admitted"),
    )
    wl = workload_of(cluster, namespace, "first")
    assert wl is not None
    assert wl["metadata"]["name"].startswith("mpijob-first-")
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
        ("launcher", 1),
        ("worker", 4),
    ]
    assert [a["name"] for a in wl["status"]["admission"]["podSetAssignments"]] == [
        "launcher",
        "worker",
    ]
    cluster.wait_for(
        "the first MPIJob's launcher and 4 workers to be bound",
        lambda: bound(pods_of(cluster, namespace, "first")) == {"launcher": 1, "worker": 4},
    )
    admitted_at = (condition(wl, "QuotaReserved") or {})["lastTransitionTime"]
    early = [
        p["metadata"]["name"]
        for p in pods_of(cluster, namespace, "first")
        if p["metadata"]["creationTimestamp"] < admitted_at
    ]
    assert early == [], f"pods created before the admission at {admitted_at}: {early}"
    products = {
        n["metadata"]["name"]: n["metadata"]["labels"].get(PRODUCT)
        for n in get_json(cluster, "get", "nodes")["items"]
    }
    for pod in pods_of(cluster, namespace, "first"):
        role = pod["metadata"]["labels"][ROLE_LABEL]
        # Both pod sets carry the admission and the flavor: the launcher's pod too, which
        # mpi-operator creates from the Job it made at creation and updated on resume.
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/podset"] == role
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/cluster-queue-name"] == cq
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
    # The second needs 32 GPUs more than are left: it waits whole, neither launcher nor worker.
    cluster.wait_for(
        "the second MPIJob to wait with a reason",
        lambda: (
            (condition(workload_of(cluster, namespace, "second"), "QuotaReserved") or {})
            .get("message", "")
            .startswith("couldn't assign flavors")
        ),
    )
    waiting = condition(workload_of(cluster, namespace, "second"), "QuotaReserved")
    assert waiting is not None
    assert waiting["status"] == "False"
    assert "nvidia.com/gpu" in waiting["message"]
    assert pods_of(cluster, namespace, "second") == []
    assert _get(cluster, namespace, "second")["spec"]["runPolicy"]["suspend"] is True
    table = cluster.kubectl("get", "workloads", "-n", namespace).stdout
    assert "mpijob-first-" in table
    assert "mpijob-second-" in table


def test_a_preempted_mpijob_is_suspended_and_its_pods_go(
    cluster: KubeCluster, mpi_operator: OperatorProcess, namespace: str
) -> None:
    del mpi_operator
    _queue(cluster, namespace, gpus=32, preemption={"withinClusterQueue": "LowerPriority"})
    apply(
        cluster, b.priority_class(f"low-{namespace}", 1), b.priority_class(f"high-{namespace}", 100)
    )
    create(cluster, mpijob("low", namespace, priority=f"low-{namespace}"))
    cluster.wait_for(
        "the low MPIJob's launcher and workers to be bound",
        lambda: bound(pods_of(cluster, namespace, "low")) == {"launcher": 1, "worker": 4},
    )
    worker = _get(cluster, namespace, "low")["spec"]["mpiReplicaSpecs"]["Worker"]
    assert worker["template"]["metadata"]["annotations"].get("kueue.x-k8s.io/workload")
    create(
        cluster,
        b.job("urgent", namespace, queue="q", pods=2, gpus=8, priority=f"high-{namespace}"),
    )
    cluster.wait_for(
        "the low MPIJob to be suspended and its pods to go",
        lambda: (
            _get(cluster, namespace, "low")["spec"]["runPolicy"]["suspend"] is True
            and pods_of(cluster, namespace, "low") == []
        ),
        timeout=90,
    )
    evicted = condition(workload_of(cluster, namespace, "low"), "Evicted")
    assert evicted is not None
    assert evicted["reason"] == "Preempted"
    launcher = get_json(cluster, "get", "job", "low-launcher", "-n", namespace)
    assert launcher["spec"]["suspend"] is True  # mpi-operator follows the MPIJob
    specs = _get(cluster, namespace, "low")["spec"]["mpiReplicaSpecs"]
    for replica in specs.values():  # the templates are restored as they were created
        meta = replica["template"]["metadata"]
        assert "kueue.x-k8s.io/workload" not in (meta.get("annotations") or {})
        assert "kueue.x-k8s.io/podset" not in (meta.get("labels") or {})
    cluster.wait_for(
        "the urgent Job to be admitted in the MPIJob's place",
        lambda: is_true(urgent(cluster, namespace), "Admitted"),
    )


def test_unlabelled_mpijobs_are_left_alone(
    cluster: KubeCluster, mpi_operator: OperatorProcess, namespace: str
) -> None:
    del mpi_operator
    _queue(cluster, namespace, gpus=0)
    create(cluster, mpijob("plain", namespace, queue=None, run="1s", gpus=0, workers=2))
    assert not _get(cluster, namespace, "plain")["spec"]["runPolicy"].get("suspend")
    cluster.kubectl(
        "wait",
        "--for=condition=Succeeded",
        "mpijob/plain",
        "-n",
        namespace,
        "--timeout=120s",
        timeout=130,
    )
    assert workload_of(cluster, namespace, "plain") is None
    names = [
        w["metadata"]["name"]
        for w in get_json(cluster, "get", "workloads", "-n", namespace)["items"]
    ]
    assert names == []  # nor for its launcher Job
