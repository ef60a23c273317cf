"""TrainJobs end to end against the real Kubeflow Trainer (v2.0.0, built into the sandbox) and
JobSet: a labelled TrainJob of 2 nodes × 8 GPUs on a ClusterTrainingRuntime is suspended at
creation, its Workload admitted whole, and started through a pod spec override per pod set, so
that the pods of the JobSet Trainer makes carry the flavor's node selector; a second one waits
whole, suspended, with Kueue's quota message. The TrainJob's JobSet gets no Workload."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import KubeCluster
from tests.kube import builders as b
from tests.kube.conftest import (
    OperatorProcess,
    condition,
    create,
    get_json,
    is_true,
)
from tests.kube.owners import OwnerKind, operator_for, queue
from tests.sandbox.test_integrations import jobset_controller, trainer_controller

pytestmark = pytest.mark.cluster
__all__ = ["jobset_controller", "trainer_controller"]
POOL = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
"""The flavor's node labels: every dgx node has them, so they constrain nothing, but atoll
must carry them through the TrainJob's override into the JobSet's pods."""
NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
OVERRIDE_IDX = "kueue.x-k8s.io/trainjob-override-idx"


trainjob_operator = operator_for(
    "trainjob_operator", "TrainJob", needs=("trainer_controller", "dgx")
)
"""`atoll run` with the TrainJob integration, once Trainer's CRDs are installed."""


def runtime(name: str) -> dict[str, Any]:
    node = {
        "name": "node",
        "image": "registry.invalid/atoll/train:1",
        "resources": {"requests": {"cpu": "1"}},
    }
    pod = {
        "metadata": {"annotations": {"atoll.dev/run-duration": "600s"}},
        "spec": {"containers": [node]},
    }
    trainer_job = {
        "name": "node",
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"template": pod},
        },
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name},
        "spec": {
            "mlPolicy": {"numNodes": 1},
            "template": {"spec": {"replicatedJobs": [trainer_job]}},
        },
    }


def trainjob(name: str, namespace: str, runtime_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace, "labels": {b.QUEUE_LABEL: "q"}},
        "spec": {
            "runtimeRef": {"name": runtime_name, "kind": "ClusterTrainingRuntime"},
            "trainer": {
                "numNodes": 2,
                "resourcesPerNode": {
                    "requests": {"cpu": "1", b.GPU: "8"},
                    "limits": {b.GPU: "8"},
                },
            },
        },
    }


TRAINJOB = OwnerKind(
    kind="TrainJob",
    resource="trainjob",
    name_label=NAME_LABEL,  # Trainer names the JobSet after the TrainJob
    role_label="jobset.sigs.k8s.io/replicatedjob-name",
    suspend_path=("suspend",),
    templates=lambda obj: [],  # its pod templates live in its runtime
    finished="Complete",
)


def workload_of(cluster: KubeCluster, ns: str, name: str) -> dict[str, Any] | None:
    return TRAINJOB.workload_of(cluster, ns, name)


def test_a_trainjob_is_admitted_whole_and_a_second_waits_whole(
    cluster: KubeCluster, trainjob_operator: OperatorProcess, namespace: str
) -> None:
    del trainjob_operator
    cq = queue(cluster, namespace, gpus=24, node_labels=POOL)
    rt = f"train-{namespace}"
    cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(runtime(rt)))
    try:
        first, second = trainjob("first", namespace, rt), trainjob("second", namespace, rt)
        assert create(cluster, first, second).returncode == 0
        # The webhook suspended both at creation.
        assert TRAINJOB.suspended(cluster, namespace, "second")
        cluster.wait_for(
            "the first TrainJob's Workload to be Admitted",
            lambda: is_true(workload_of(cluster, namespace, "first"), "Admitted"),
        )
        wl = workload_of(cluster, namespace, "first")
        assert wl is not None
        assert wl["metadata"]["name"].startswith("trainjob-first-")
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("node", 2)]
        assert wl["status"]["admission"]["clusterQueue"] == cq
        cluster.wait_for(
            "the first TrainJob's 2 pods to be bound",
            lambda: TRAINJOB.bound(cluster, namespace, "first") == {"node": 2},
        )
        started = get_json(cluster, "get", "trainjob", "first", "-n", namespace)
        assert started["spec"].get("suspend") is not True
        assert started["metadata"]["annotations"][OVERRIDE_IDX] == "0"
        (override,) = started["spec"]["podSpecOverrides"]
        assert override["targetJobs"] == [{"name": "node"}]
        assert override["nodeSelector"] == POOL
        for pod in TRAINJOB.pods_of(cluster, namespace, "first"):
            assert pod["spec"].get("nodeSelector") == POOL
            requests = pod["spec"]["containers"][0]["resources"]["requests"]
            assert requests[b.GPU] == "8"  # resourcesPerNode
        # The TrainJob's JobSet belongs to it: no Workload of its own.
        names = [
            w["metadata"]["name"]
            for w in get_json(cluster, "get", "workloads", "-n", namespace)["items"]
        ]
        assert not [n for n in names if n.startswith(("jobset-", "job-"))], names
        cluster.wait_for(
            "the second TrainJob to wait with a reason",
            lambda: (
                (condition(workload_of(cluster, namespace, "second"), "QuotaReserved") or {})
                .get("message", "")
                .startswith("couldn't assign flavors")
            ),
        )
        waiting = condition(workload_of(cluster, namespace, "second"), "QuotaReserved")
        assert waiting is not None
        assert b.GPU in waiting["message"]
        assert TRAINJOB.suspended(cluster, namespace, "second")
        assert TRAINJOB.pods_of(cluster, namespace, "second") == []
    finally:
        for name in ("first", "second"):
            cluster.kubectl("delete", "trainjob", name, "-n", namespace, check=False)
        cluster.kubectl("delete", "clustertrainingruntime", rt, "--wait=false", check=False)
