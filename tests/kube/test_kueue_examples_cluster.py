"""Kueue's example manifests for the kinds atoll supports (their shapes, tests/kube/
kueue_examples.py) apply unchanged server-side and behave as Kueue's documentation says,
against the real JobSet controller and mpi-operator: a JobSet, an MPIJob, a pod group and a
single pod are admitted whole and run; the TAS JobSets land in one rack, in whole slices of 4
per rack, or in one block in whole slices."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from atoll.sandbox.processes import Proc
from tests.conftest import REPO, KubeCluster
from tests.kube import kueue_examples as ex
from tests.kube.conftest import OperatorProcess, apply, get_json, is_true, replacing_operator
from tests.kube.owners import MPIJOB, PODSET_LABEL, owned_workloads
from tests.sandbox.test_integrations import jobset_controller, mpi_controller

pytestmark = pytest.mark.cluster
__all__ = ["jobset_controller", "mpi_controller"]
FRAMEWORKS = (
    'integrations.frameworks=["batch/job", "jobset.x-k8s.io/jobset", "kubeflow.org/mpijob", "pod"]'
)
NODE_GROUP = {"atoll.dev/node-group": "kueue-tas"}
GATE = "kueue.x-k8s.io/admission"


@pytest.fixture(scope="module")
def examples_operator(
    cluster: KubeCluster,
    operator: OperatorProcess,
    jobset_controller: Proc | None,
    mpi_controller: Proc | None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    """`atoll run` managing every kind of the examples, on the kueue-tas shape's nodes."""
    del jobset_controller, mpi_controller
    cluster.add_shape(REPO / "examples" / "clusters" / "kueue-tas.yaml")
    log_dir = tmp_path_factory.mktemp("examples-operator")
    with replacing_operator(cluster, operator, log_dir, "--set", FRAMEWORKS) as op:
        yield op
        # The session's operator manages none of these kinds: their Workloads must be gone
        # (their namespaces deleted) before this operator stops.
        cluster.wait_for(
            "the examples' Workloads to be gone",
            lambda: not any(owned_workloads(cluster, k) for k in ("JobSet", "MPIJob", "Pod")),
            timeout=180,
        )


def user_queue(cluster: KubeCluster, ns: str, *, topology: bool) -> None:
    """A flavor on the kueue-tas nodes (with the block / rack / hostname Topology when
    `topology`), a ClusterQueue of 100 CPUs and 100Gi, the LocalQueue `user-queue`."""
    rf: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": f"ex-{ns}"},
        "spec": {"nodeLabels": NODE_GROUP},
    }
    objs = []
    if topology:
        rf["spec"]["topologyName"] = f"ex-{ns}"
        levels = [ex.BLOCK, ex.RACK, "kubernetes.io/hostname"]
        objs.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Topology",
                "metadata": {"name": f"ex-{ns}"},
                "spec": {"levels": [{"nodeLabel": lv} for lv in levels]},
            }
        )
    resources = [{"name": "cpu", "nominalQuota": 100}, {"name": "memory", "nominalQuota": "100Gi"}]
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": f"ex-{ns}"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [{"name": f"ex-{ns}", "resources": resources}],
                }
            ],
        },
    }
    lq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "user-queue", "namespace": ns},
        "spec": {"clusterQueue": f"ex-{ns}"},
    }
    apply(cluster, *objs, rf, cq, lq)


def submit(cluster: KubeCluster, ns: str, *objs: dict[str, Any]) -> None:
    """As a user would: `kubectl create` for generated names, server-side apply otherwise."""
    for obj in objs:
        verb = ["create"] if "generateName" in obj["metadata"] else ["apply", "--server-side"]
        done = cluster.kubectl(*verb, "-n", ns, "-f", "-", input=json.dumps(obj), check=False)
        assert done.returncode == 0, done.stderr


def only_workload(cluster: KubeCluster, ns: str) -> dict[str, Any] | None:
    items = get_json(cluster, "get", "workloads", "-n", ns)["items"]
    assert len(items) <= 1, [w["metadata"]["name"] for w in items]
    return dict(items[0]) if items else None


def admitted(cluster: KubeCluster, ns: str) -> dict[str, Any]:
    cluster.wait_for(
        "the example's Workload to be Admitted",
        lambda: is_true(only_workload(cluster, ns), "Admitted"),
        timeout=90,
    )
    wl = only_workload(cluster, ns)
    assert wl is not None
    return wl


def run_example(
    cluster: KubeCluster, ns: str, *objs: dict[str, Any], topology: bool = False
) -> dict[str, Any]:
    """The example submitted to `user-queue`; its Workload once Admitted."""
    user_queue(cluster, ns, topology=topology)
    submit(cluster, ns, *objs)
    return admitted(cluster, ns)


def pod_sets(wl: dict[str, Any]) -> list[tuple[str, int]]:
    return [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]]


def bound_pods(cluster: KubeCluster, ns: str) -> list[dict[str, Any]]:
    pods = get_json(cluster, "get", "pods", "-n", ns)["items"]
    return [p for p in pods if p["spec"].get("nodeName")]


def test_the_jobset_example_is_admitted_whole_and_runs(
    cluster: KubeCluster, examples_operator: OperatorProcess, namespace: str
) -> None:
    del examples_operator
    wl = run_example(cluster, namespace, ex.jobset())
    assert pod_sets(wl) == [("workers", 1), ("driver", 1)]
    cluster.wait_for("both pods to be bound", lambda: len(bound_pods(cluster, namespace)) == 2)
    roles = {p["metadata"]["labels"][PODSET_LABEL] for p in bound_pods(cluster, namespace)}
    assert roles == {"workers", "driver"}


def _domains(cluster: KubeCluster, ns: str, level: str) -> Counter[str]:
    """Bound pods per value of the node label `level`."""
    nodes = {
        n["metadata"]["name"]: n["metadata"]["labels"].get(level)
        for n in get_json(cluster, "get", "nodes")["items"]
    }
    return Counter(nodes[p["spec"]["nodeName"]] for p in bound_pods(cluster, ns))


@pytest.mark.parametrize("example", sorted(ex.TAS_JOBSETS))
def test_the_tas_jobset_examples_land_as_kueues_docs_say(
    cluster: KubeCluster, examples_operator: OperatorProcess, namespace: str, example: str
) -> None:
    del examples_operator
    obj = ex.TAS_JOBSETS[example]
    wl = run_example(cluster, namespace, obj, topology=True)
    (assignment,) = wl["status"]["admission"]["podSetAssignments"]
    assert assignment.get("topologyAssignment"), assignment
    pods = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"]
    cluster.wait_for(
        f"the {pods} pods to be bound",
        lambda: len(bound_pods(cluster, namespace)) == pods,
        timeout=90,
    )
    racks = _domains(cluster, namespace, ex.RACK)
    blocks = _domains(cluster, namespace, ex.BLOCK)
    if example == "required":  # all in one rack
        assert len(racks) == 1, racks
    else:  # whole slices of 4 per rack; 6 CPUs a rack hold one slice, so 2 racks
        assert all(n % 4 == 0 for n in racks.values()), racks
        assert len(racks) == 2, racks
    if example == "combined":  # and both slices in one block
        assert len(blocks) == 1, blocks


def test_the_mpijob_example_starts_launcher_and_workers_together(
    cluster: KubeCluster, examples_operator: OperatorProcess, namespace: str
) -> None:
    del examples_operator
    wl = run_example(cluster, namespace, ex.mpijob())
    assert pod_sets(wl) == [("launcher", 1), ("worker", 2)]
    cluster.wait_for(
        "the launcher and 2 workers to be bound",
        lambda: MPIJOB.bound(cluster, namespace, "ring") == {"launcher": 1, "worker": 2},
        timeout=90,
    )


def test_the_single_pod_example_is_admitted_and_ungated(
    cluster: KubeCluster, examples_operator: OperatorProcess, namespace: str
) -> None:
    del examples_operator
    wl = run_example(cluster, namespace, ex.pod())
    assert wl["metadata"]["name"].startswith("pod-lone-nap-")
    assert pod_sets(wl)[0][1] == 1
    cluster.wait_for("the pod to be bound", lambda: len(bound_pods(cluster, namespace)) == 1)
    (p,) = bound_pods(cluster, namespace)
    assert not p["spec"].get("schedulingGates")


def test_the_pod_group_example_is_admitted_whole_and_ungated_together(
    cluster: KubeCluster, examples_operator: OperatorProcess, namespace: str
) -> None:
    del examples_operator
    user_queue(cluster, namespace, topology=False)
    leader, worker = ex.pod_group()
    submit(cluster, namespace, leader)
    (alone,) = get_json(cluster, "get", "pods", "-n", namespace)["items"]
    assert [g["name"] for g in alone["spec"].get("schedulingGates") or []] == [GATE]
    submit(cluster, namespace, worker)
    wl = admitted(cluster, namespace)
    assert wl["metadata"]["name"] == "pair"
    assert sum(n for _, n in pod_sets(wl)) == 2
    cluster.wait_for("both pods to be bound", lambda: len(bound_pods(cluster, namespace)) == 2)
    assert not any(p["spec"].get("schedulingGates") for p in bound_pods(cluster, namespace))
