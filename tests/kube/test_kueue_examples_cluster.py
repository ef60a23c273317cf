"""Kueue's example manifests for the kinds atoll supports (their shapes, tests/kube/
kueue_examples.py) apply unchanged server-side and behave as Kueue's documentation says,
against the real JobSet, LeaderWorkerSet and Trainer controllers and mpi-operator: a JobSet,
an MPIJob, a pod group, a single pod and a TrainJob are admitted whole and run; the TAS
JobSets land in one rack, in whole slices of 4 per rack, or in one block in whole slices; each
replica group of the LeaderWorkerSet is admitted whole, and with the TAS one each group's
leader and workers land in one rack."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import REPO, KubeCluster
from tests.kube import kueue_examples as ex
from tests.kube.conftest import OperatorProcess, apply, get_json, is_true, replacing_operator
from tests.kube.owners import MPIJOB, PODSET_LABEL, owned_workloads
from tests.kube.test_trainjob_cluster import TRAINJOB, cluster_runtime
from tests.sandbox.test_integrations import (
    jobset_controller,
    lws_controller,
    mpi_controller,
    trainer_controller,
)

pytestmark = pytest.mark.cluster
__all__ = ["jobset_controller", "lws_controller", "mpi_controller", "trainer_controller"]
FRAMEWORKS = "integrations.frameworks=[{}]".format(
    ", ".join(
        f'"{f}"'
        for f in (
            "batch/job",
            "jobset.x-k8s.io/jobset",
            "kubeflow.org/mpijob",
            "pod",
            "leaderworkerset.x-k8s.io/leaderworkerset",
            "trainer.kubeflow.org/trainjob",
        )
    )
)
KINDS = ("JobSet", "MPIJob", "Pod", "LeaderWorkerSet", "TrainJob")
"""The kinds whose Workloads the session's operator, which manages none of them, must not
inherit."""
NODE_GROUP = {"atoll.dev/node-group": "kueue-tas"}
GATE = "kueue.x-k8s.io/admission"


@pytest.fixture(scope="module")
def examples_operator(
    cluster: KubeCluster,
    operator: OperatorProcess,
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    """`atoll run` managing every kind of the examples, on the kueue-tas shape's nodes, once
    the kinds' controllers run (they install the CRDs)."""
    for controller in __all__:
        request.getfixturevalue(controller)
    cluster.add_shape(REPO / "examples" / "clusters" / "kueue-tas.yaml")
    log_dir = tmp_path_factory.mktemp("examples-operator")
    with replacing_operator(cluster, operator, log_dir, "--set", FRAMEWORKS) as op:
        yield op
        # The session's operator manages none of these kinds: their Workloads must be gone
        # (their namespaces deleted) before this operator stops.
        cluster.wait_for(
            "the examples' Workloads to be gone",
            lambda: not any(owned_workloads(cluster, k) for k in KINDS),
            timeout=180,
        )


def user_queue(cluster: KubeCluster, ns: str, *, topology: bool, name: str = "user-queue") -> None:
    """A flavor on the kueue-tas nodes (with the block / rack / hostname Topology when
    `topology`), a ClusterQueue of 100 CPUs and 100Gi, the LocalQueue `name`."""
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
        "metadata": {"name": name, "namespace": ns},
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


def _lws_groups(cluster: KubeCluster, ns: str, *, topology: bool) -> list[dict[str, Any]]:
    """The LeaderWorkerSet example submitted: one Workload per replica group (leader 1,
    workers 2), both admitted whole, each group's 3 pods ungated and bound; the Workloads."""
    user_queue(cluster, ns, topology=topology, name="tas-user-queue" if topology else "user-queue")
    submit(cluster, ns, ex.leaderworkerset(topology=topology))

    def workloads() -> list[dict[str, Any]]:
        return list(get_json(cluster, "get", "workloads", "-n", ns)["items"])

    cluster.wait_for(
        "both groups' Workloads to be Admitted",
        lambda: len(wls := workloads()) == 2 and all(is_true(w, "Admitted") for w in wls),
        timeout=90,
    )
    wls = workloads()
    assert sorted(w["metadata"]["name"].rsplit("-", 1)[0] for w in wls) == [
        "leaderworkerset-web-0",
        "leaderworkerset-web-1",
    ]
    assert all(pod_sets(w) == [("leader", 1), ("worker", 2)] for w in wls)
    cluster.wait_for(
        "the 6 pods to be ungated and bound",
        lambda: (
            len(bound := bound_pods(cluster, ns)) == 6
            and not any(p["spec"].get("schedulingGates") for p in bound)
        ),
        timeout=90,
    )
    return wls


def test_the_leaderworkerset_example_admits_each_group_whole(
    cluster: KubeCluster, examples_operator: OperatorProcess, namespace: str
) -> None:
    del examples_operator
    _lws_groups(cluster, namespace, topology=False)
    groups = Counter(
        p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"]
        for p in bound_pods(cluster, namespace)
    )
    assert groups == {"0": 3, "1": 3}


def test_the_tas_leaderworkerset_example_puts_each_group_in_one_rack(
    cluster: KubeCluster, examples_operator: OperatorProcess, namespace: str
) -> None:
    del examples_operator
    for wl in _lws_groups(cluster, namespace, topology=True):
        assignments = wl["status"]["admission"]["podSetAssignments"]
        assert all(a.get("topologyAssignment") for a in assignments), assignments
    rack_of = {
        n["metadata"]["name"]: n["metadata"]["labels"].get(ex.RACK)
        for n in get_json(cluster, "get", "nodes")["items"]
    }
    racks: dict[str, set[str]] = {}
    for p in bound_pods(cluster, namespace):
        group = p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"]
        racks.setdefault(group, set()).add(rack_of[p["spec"]["nodeName"]])
    assert sorted(racks) == ["0", "1"]
    assert all(len(r) == 1 for r in racks.values()), racks  # the leader with its workers
    # Each pod was pinned to its node by atoll before kube-scheduler saw it, and no group
    # was split and evicted on the way (a pod ungated unpinned lands anywhere).
    unpinned = [
        p["metadata"]["name"]
        for p in bound_pods(cluster, namespace)
        if p["spec"].get("nodeSelector", {}).get("kubernetes.io/hostname") != p["spec"]["nodeName"]
    ]
    assert unpinned == []
    events = get_json(cluster, "get", "events", "-n", namespace)["items"]
    assert not [e["message"] for e in events if e["reason"].startswith("EvictedDueTo")]


def test_the_trainjob_example_is_admitted_and_runs(
    cluster: KubeCluster, examples_operator: OperatorProcess, namespace: str
) -> None:
    del examples_operator
    with cluster_runtime(cluster, namespace, ex.TRAINJOB_RUNTIME):
        wl = run_example(cluster, namespace, ex.trainjob())
        assert wl["metadata"]["name"].startswith("trainjob-fashion-")
        assert pod_sets(wl) == [("node", 1)]
        cluster.wait_for(
            "its node pod to be bound",
            lambda: TRAINJOB.bound(cluster, namespace, "fashion") == {"node": 1},
            timeout=90,
        )
        (p,) = TRAINJOB.pods_of(cluster, namespace, "fashion")
        requests = p["spec"]["containers"][0]["resources"]["requests"]
        assert requests == {"cpu": "1", "memory": "2Gi"}  # resourcesPerNode
