"""TrainJobs end to end against the real Kubeflow Trainer (v2.0.0, built into the sandbox) and
JobSet: a labelled TrainJob of 2 nodes × 8 GPUs on a ClusterTrainingRuntime is suspended at
creation, its Workload admitted whole, and started through a pod spec override per pod set, so
that the pods of the JobSet Trainer makes carry the flavor's node selector; a second one waits
whole, suspended, with Kueue's quota message, which `atoll explain trainjob` finds, and `atoll
what-if` composes a third from the runtime in the cluster. The TrainJob's JobSet gets no
Workload. A TrainJob
with its own pod spec override is admitted with it (its pods carry both node selectors) and,
when preempted or when its Workload is deactivated, is suspended, its pods go and its
overrides are put back as the user wrote them. An unlabelled TrainJob is left alone: it runs to
its end unsuspended, and neither it nor its JobSet gets a Workload."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
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
from tests.kube.owners import (
    Obj,
    OwnerKind,
    check_left_alone,
    check_preempted_and_restored,
    frameworks_setting,
    operator_for,
    queue,
)
from tests.sandbox.test_integrations import jobset_controller, trainer_controller

pytestmark = pytest.mark.cluster
__all__ = ["jobset_controller", "trainer_controller"]
POOL = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
"""The flavor's node labels: every dgx node has them, so they constrain nothing, but atoll
must carry them through the TrainJob's override into the JobSet's pods."""
NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
OVERRIDE_IDX = "kueue.x-k8s.io/trainjob-override-idx"
USER_OVERRIDES = "atoll.dev/trainjob-user-overrides"


trainjob_operator = operator_for(
    "trainjob_operator", "TrainJob", needs=("trainer_controller", "dgx")
)
"""`atoll run` with the TrainJob integration, once Trainer's CRDs are installed."""


def runtime(name: str, run: str = "600s") -> dict[str, Any]:
    node = {
        "name": "node",
        "image": "registry.invalid/atoll/train:1",
        "resources": {"requests": {"cpu": "1"}},
    }
    pod = {
        "metadata": {"annotations": {"atoll.dev/run-duration": run}},
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


def with_prepare_step(rt: dict[str, Any], run: str, gpus: int) -> dict[str, Any]:
    """`rt` with a first replicated job `prepare` (one pod of `gpus` GPUs that runs `run`)
    before its trainer step: a step that ends long before the training does."""
    pod = {
        "metadata": {"annotations": {"atoll.dev/run-duration": run}},
        "spec": {
            "containers": [
                {
                    "name": "prepare",
                    "image": "registry.invalid/atoll/prepare:1",
                    "resources": {
                        "requests": {"cpu": "1", b.GPU: str(gpus)},
                        "limits": {b.GPU: str(gpus)},
                    },
                }
            ]
        },
    }
    jobs = rt["spec"]["template"]["spec"]["replicatedJobs"]
    rt["spec"]["template"]["spec"]["replicatedJobs"] = [
        {"name": "prepare", "template": {"spec": {"template": pod}}},
        *jobs,
    ]
    return rt


@contextlib.contextmanager
def cluster_runtime(
    cluster: KubeCluster,
    namespace: str,
    name: str | None = None,
    run: str = "600s",
    prepare: tuple[str, int] | None = None,
) -> Iterator[str]:
    """A ClusterTrainingRuntime (`runtime`, named `name` or after the namespace; with a
    `prepare` step of (run, GPUs) if given) for a test in `namespace`; at the end the
    namespace's TrainJobs are deleted, then the runtime."""
    name = name or f"train-{namespace}"
    rt = runtime(name, run)
    if prepare is not None:
        rt = with_prepare_step(rt, *prepare)
    cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(rt))
    try:
        yield name
    finally:
        cluster.kubectl("delete", "trainjobs", "--all", "-n", namespace, check=False)
        cluster.kubectl("delete", "clustertrainingruntime", name, "--wait=false", check=False)


def trainjob(
    name: str,
    namespace: str,
    runtime_name: str,
    *,
    overrides: list[dict[str, Any]] | None = None,
    priority: str | None = None,
    queue_name: str | None = "q",
) -> dict[str, Any]:
    labels = {b.QUEUE_LABEL: queue_name} if queue_name is not None else {}
    if priority is not None:
        labels["kueue.x-k8s.io/priority-class"] = priority
    spec: dict[str, Any] = {
        "runtimeRef": {"name": runtime_name, "kind": "ClusterTrainingRuntime"},
        "trainer": {
            "numNodes": 2,
            "resourcesPerNode": {
                "requests": {"cpu": "1", b.GPU: "8"},
                "limits": {b.GPU: "8"},
            },
        },
    }
    if overrides is not None:
        spec["podSpecOverrides"] = overrides
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
    }


BLOCK = {"topology.atoll.dev/block": "block-1"}
"""The user's own override: a node selector of half the dgx nodes."""
USERS = [{"targetJobs": [{"name": "node"}], "nodeSelector": BLOCK}]


def _override_index(obj: Obj, templates: object) -> bool:
    del templates
    return OVERRIDE_IDX in (obj["metadata"].get("annotations") or {})


TRAINJOB = OwnerKind(
    kind="TrainJob",
    resource="trainjob",
    name_label=NAME_LABEL,  # Trainer names the JobSet after the TrainJob
    role_label="jobset.sigs.k8s.io/replicatedjob-name",
    suspend_path=("suspend",),
    templates=lambda obj: [],  # its pod templates live in its runtime
    finished="Complete",
    carries=_override_index,
)


def workload_of(cluster: KubeCluster, ns: str, name: str) -> dict[str, Any] | None:
    return TRAINJOB.workload_of(cluster, ns, name)


def _atoll(cluster: KubeCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atoll", *args, "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _explain_and_what_if(cluster: KubeCluster, ns: str, rt: str, tmp: Path) -> None:
    """`atoll explain trainjob` finds the waiting TrainJob's Workload; `atoll what-if` of a
    third, given the operator's frameworks, composes its Workload from the runtime in the
    cluster (and names a missing one)."""
    ex = _atoll(cluster, "explain", "trainjob", f"{ns}/second", "--json")
    assert ex.returncode == 0, ex.stderr
    answer = json.loads(ex.stdout)
    assert answer["workload"].startswith(f"{ns}/trainjob-second-")
    assert answer["state"] == "Pending"
    manifest = tmp / "third.yaml"
    manifest.write_text(json.dumps(trainjob("third", ns, rt)))
    wi = _atoll(
        cluster, "what-if", str(manifest), "--set", frameworks_setting("TrainJob"), "--json"
    )
    assert wi.returncode == 0, wi.stderr
    (line,) = wi.stdout.splitlines()
    third = json.loads(line)
    assert third["ahead"] == [answer["workload"]]  # the second waits ahead of it
    assert third["atHead"]["kind"] == "Pending"  # the first holds the GPUs it would need
    assert "nvidia.com/gpu" in third["atHead"]["message"]
    lost = tmp / "lost.yaml"
    lost.write_text(json.dumps(trainjob("lost", ns, "no-such-runtime")))
    refused = _atoll(cluster, "what-if", str(lost), "--set", frameworks_setting("TrainJob"))
    assert refused.returncode == 2
    assert "spec.runtimeRef: ClusterTrainingRuntime 'no-such-runtime' not found" in refused.stderr


def test_a_trainjob_is_admitted_whole_and_a_second_waits_whole(
    cluster: KubeCluster, trainjob_operator: OperatorProcess, namespace: str, tmp_path: Path
) -> None:
    del trainjob_operator
    cq = queue(cluster, namespace, gpus=24, node_labels=POOL)
    with cluster_runtime(cluster, namespace) as rt:
        first, second = trainjob("first", namespace, rt), trainjob("second", namespace, rt)
        # The second is created once the first is admitted: created together, their
        # Workloads may get the same creation second, and the queue then orders them by UID.
        assert create(cluster, first).returncode == 0
        cluster.wait_for(
            "the first TrainJob's Workload to be Admitted",
            lambda: is_true(workload_of(cluster, namespace, "first"), "Admitted"),
        )
        assert create(cluster, second).returncode == 0
        # The webhook suspended it at creation.
        assert TRAINJOB.suspended(cluster, namespace, "second")
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
        _explain_and_what_if(cluster, namespace, rt, tmp_path)


def _started_with_both_selectors(cluster: KubeCluster, ns: str, name: str) -> None:
    """The TrainJob runs with atoll's override of `node` only (Trainer refuses a job named by
    two overrides): the user's node selector, which the Workload's pod set carries, and the
    flavor's labels; the user's list is recorded; its pods have both selectors."""
    started = TRAINJOB.get(cluster, ns, name)
    annotations = started["metadata"]["annotations"]
    assert annotations[OVERRIDE_IDX] == "0"
    assert json.loads(annotations[USER_OVERRIDES]) == USERS
    (ours,) = started["spec"]["podSpecOverrides"]
    assert ours["targetJobs"] == [{"name": "node"}]
    assert ours["nodeSelector"] == {**BLOCK, **POOL}
    wl = workload_of(cluster, ns, name)
    assert wl is not None
    assert wl["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] == BLOCK
    for pod in TRAINJOB.pods_of(cluster, ns, name):
        assert pod["spec"].get("nodeSelector") == {**BLOCK, **POOL}


def test_a_preempted_trainjob_is_suspended_its_pods_go_and_its_overrides_are_cut_back(
    cluster: KubeCluster, trainjob_operator: OperatorProcess, namespace: str
) -> None:
    del trainjob_operator
    queue(
        cluster,
        namespace,
        gpus=16,
        node_labels=POOL,
        preemption={"withinClusterQueue": "LowerPriority"},
    )
    with cluster_runtime(cluster, namespace) as rt:
        try:
            low = trainjob("low", namespace, rt, overrides=USERS, priority=f"low-{namespace}")
            check_preempted_and_restored(
                cluster,
                TRAINJOB,
                namespace,
                low=low,
                roles={"node": 2},
                started=lambda: _started_with_both_selectors(cluster, namespace, "low"),
            )
            stopped = TRAINJOB.get(cluster, namespace, "low")
            assert stopped["spec"]["podSpecOverrides"] == USERS
        finally:
            cluster.kubectl("delete", "job", "urgent", "-n", namespace, check=False)


def test_a_trainjob_whose_workload_is_deactivated_is_suspended_and_cut_back(
    cluster: KubeCluster, trainjob_operator: OperatorProcess, namespace: str
) -> None:
    del trainjob_operator
    queue(cluster, namespace, gpus=16, node_labels=POOL)
    with cluster_runtime(cluster, namespace) as rt:
        paused = trainjob("paused", namespace, rt, overrides=USERS)
        assert create(cluster, paused).returncode == 0
        cluster.wait_for(
            "the TrainJob's 2 pods to be bound",
            lambda: TRAINJOB.bound(cluster, namespace, "paused") == {"node": 2},
        )
        _started_with_both_selectors(cluster, namespace, "paused")
        wl = workload_of(cluster, namespace, "paused")
        assert wl is not None
        cluster.kubectl(
            "patch", "workload", wl["metadata"]["name"], "-n", namespace, "--type=merge",
            "-p", json.dumps({"spec": {"active": False}}),
        )  # fmt: skip
        cluster.wait_for(
            "the TrainJob to be suspended, its pods gone and its overrides cut back",
            lambda: (
                TRAINJOB.suspended(cluster, namespace, "paused")
                and TRAINJOB.pods_of(cluster, namespace, "paused") == []
                and not TRAINJOB.carries_admission(TRAINJOB.get(cluster, namespace, "paused"))
            ),
            timeout=90,
        )
        assert TRAINJOB.get(cluster, namespace, "paused")["spec"]["podSpecOverrides"] == USERS
        evicted = condition(workload_of(cluster, namespace, "paused"), "Evicted")
        assert evicted is not None
        assert evicted["reason"] == "Deactivated"  # Kueue's reason for spec.active: false
        assert not is_true(workload_of(cluster, namespace, "paused"), "QuotaReserved")


def test_an_unlabelled_trainjob_is_left_alone(
    cluster: KubeCluster, trainjob_operator: OperatorProcess, namespace: str
) -> None:
    del trainjob_operator
    queue(cluster, namespace, gpus=16, node_labels=POOL)
    with cluster_runtime(cluster, namespace, run="1s") as rt:
        plain = trainjob("plain", namespace, rt, queue_name=None)
        check_left_alone(cluster, TRAINJOB, namespace, plain)  # nor a Workload for its JobSet
        assert OVERRIDE_IDX not in (
            TRAINJOB.get(cluster, namespace, "plain")["metadata"].get("annotations") or {}
        )


def test_a_trainjobs_finished_step_gives_its_quota_to_a_waiting_job(
    cluster: KubeCluster, trainjob_operator: OperatorProcess, namespace: str
) -> None:
    """Kueue's reclaimable pods for a TrainJob: its `prepare` step (1 pod, 8 GPUs, 3 s) and its
    trainer (2 nodes x 8 GPUs) fill the 24-GPU queue; once `prepare`'s Job succeeded its 8
    GPUs go back while the training runs, and a waiting 8-GPU Job is admitted beside it. Both
    read the JobSet Trainer made, as its PodsReady does."""
    del trainjob_operator
    queue(cluster, namespace, gpus=24, node_labels=POOL)
    with cluster_runtime(cluster, namespace, prepare=("3s", 8)) as rt:
        assert create(cluster, trainjob("train", namespace, rt)).returncode == 0
        cluster.wait_for(
            "the TrainJob's Workload to be Admitted",
            lambda: is_true(workload_of(cluster, namespace, "train"), "Admitted"),
        )
        wl = workload_of(cluster, namespace, "train")
        assert wl is not None
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
            ("prepare", 1),
            ("node", 2),
        ]
        assert create(cluster, b.job("next", namespace, queue="q", pods=1, gpus=8)).returncode == 0
        seen: dict[str, dict[str, Any]] = {}

        def next_admitted() -> bool:
            # one LIST: both Workloads as of one resourceVersion
            for w in get_json(cluster, "get", "workloads", "-n", namespace)["items"]:
                seen[w["metadata"]["ownerReferences"][0]["name"]] = w
            return "next" in seen and is_true(seen["next"], "QuotaReserved")

        cluster.wait_for("the waiting Job to get quota", next_admitted, timeout=90)
        train = seen["train"]
        assert not is_true(train, "Finished")  # beside the training, not after it
        assert train["status"]["reclaimablePods"] == [{"name": "prepare", "count": 1}]
        assert TRAINJOB.bound(cluster, namespace, "train").get("node") == 2
        # Trainer v2.0 reports its JobSet's Jobs only in the JobSet: read there, the
        # TrainJob's pods are ready, so the 20 s PodsReady timeout does not evict it
        cluster.wait_for(
            "the TrainJob's pods to be ready",
            lambda: is_true(workload_of(cluster, namespace, "train"), "PodsReady"),
        )
        assert condition(workload_of(cluster, namespace, "train"), "Evicted") is None
