"""Plain pods end to end (integrations.frameworks `pod`): a labelled pod is gated at creation
and kept by the `kueue.x-k8s.io/managed` finalizer; a pod group is admitted whole once all its
pods exist and its pods are ungated together; an incomplete group waits, saying how many pods
it misses; a failed pod's replacement joins the group's Workload; a pod beyond the group's
count is deleted; a `retriable-in-group: "false"` pod finishes its group once none runs; a
preempted group's pods are deleted (kept Failed by their finalizer, marked TerminationTarget),
which releases its quota to the preemptor, and the group waits for replacements, readmitted
whole once they come; pods of a group that disagree on its size get no Workload; unlabelled
pods are left alone. An excess pod's deletion and a replacement's joining are Events."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.conftest import KubeCluster
from tests.kube import builders as b
from tests.kube.conftest import (
    OperatorProcess,
    apply,
    charged,
    create,
    get_json,
    is_true,
    one_queue,
)
from tests.kube.owners import operator_for
from tests.kube.owners import queue as ready_queue

pytestmark = pytest.mark.cluster
GATE = "kueue.x-k8s.io/admission"
FINALIZER = "kueue.x-k8s.io/managed"
WAITING = "WaitingForReplacementPods"
ROLE = "kueue.x-k8s.io/role-hash"


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
    retriable: bool = True,
) -> dict[str, Any]:
    labels = {b.QUEUE_LABEL: "q"} if queue else {}
    if priority is not None:
        labels["kueue.x-k8s.io/priority-class"] = priority
    annotations = {"atoll.dev/run-duration": "600s"}
    if not retriable:
        annotations["kueue.x-k8s.io/retriable-in-group"] = "false"
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
    cluster.wait_for(
        "the group's Workload to be PodsReady (its 4 pods ready)",
        lambda: is_true(_workload(cluster, namespace, "ring"), "PodsReady"),
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


def _events(cluster: KubeCluster, namespace: str, reason: str) -> list[dict[str, Any]]:
    items = get_json(cluster, "get", "events", "-n", namespace)["items"]
    return [e for e in items if e.get("reason") == reason]


def test_pods_that_disagree_on_the_groups_size_get_no_workload_and_a_warning(
    cluster: KubeCluster, pod_operator: OperatorProcess, namespace: str
) -> None:
    del pod_operator
    one_queue(cluster, namespace, gpus=8)
    create(
        cluster,
        pod("a", namespace, group="odd", total=2),
        pod("b", namespace, group="odd", total=3),
        pod("c", namespace, group="odd", total=3),
    )
    cluster.wait_for(
        "a Warning naming the total-count annotation",
        lambda: any(
            "kueue.x-k8s.io/pod-group-total-count" in e["message"]
            for e in _events(cluster, namespace, "ErrWorkloadCompose")
        ),
    )
    assert _workload(cluster, namespace, "odd") is None
    assert all(_gates(p) == [GATE] for p in _pods(cluster, namespace).values())


def _finalized(p: dict[str, Any]) -> bool:
    return FINALIZER in (p["metadata"].get("finalizers") or [])


def _end(cluster: KubeCluster, namespace: str, name: str, phase: str) -> None:
    """End a plain pod as its kubelet would (the sandbox's pods run until told)."""
    cluster.kubectl(
        "patch",
        "pod",
        name,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"phase": phase}}),
    )


def _all_bound(cluster: KubeCluster, namespace: str, names: list[str]) -> bool:
    pods = _pods(cluster, namespace)
    return all(n in pods and not _gates(pods[n]) and pods[n]["spec"].get("nodeName") for n in names)


def _condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    """The condition `type_` of a Workload or a pod ({} without it)."""
    for c in (obj or {}).get("status", {}).get("conditions") or []:
        if c["type"] == type_:
            return dict(c)
    return {}


def _wait_finished(cluster: KubeCluster, namespace: str, message: str) -> None:
    """Wait until the group's Workload is Finished (Succeeded, `message`) and no pod of it
    keeps the finalizer."""
    cluster.wait_for(
        "the group's Workload to finish",
        lambda: is_true(_workload(cluster, namespace, "ring"), "Finished"),
    )
    finished = _condition(_workload(cluster, namespace, "ring"), "Finished")
    assert (finished["reason"], finished["message"]) == ("Succeeded", message)
    cluster.wait_for(
        "every pod to lose its finalizer",
        lambda: not any(_finalized(p) for p in _pods(cluster, namespace).values()),
    )


RING = [f"r{i}" for i in range(4)]


def _running_group(cluster: KubeCluster, namespace: str, **kw: Any) -> str:
    """Create the group `ring` of the 4 pods `RING` and wait until they all run; its
    Workload's uid."""
    names = RING
    create(cluster, *(pod(n, namespace, group="ring", total=len(names), **kw) for n in names))
    cluster.wait_for(
        f"the group's {len(names)} pods to be ungated and bound",
        lambda: _all_bound(cluster, namespace, names),
    )
    wl = _workload(cluster, namespace, "ring")
    assert wl is not None
    assert is_true(wl, "Admitted")
    return str(wl["metadata"]["uid"])


def test_a_failed_pods_replacement_joins_the_groups_workload_and_the_group_completes(
    cluster: KubeCluster, pod_operator: OperatorProcess, namespace: str
) -> None:
    del pod_operator
    one_queue(cluster, namespace, gpus=4)
    uid = _running_group(cluster, namespace)
    assert all(_finalized(p) for p in _pods(cluster, namespace).values())
    _end(cluster, namespace, "r3", "Failed")
    cluster.wait_for(
        "the Workload to wait for a replacement pod",
        lambda: _condition(_workload(cluster, namespace, "ring"), WAITING).get("status") == "True",
    )
    wl = _workload(cluster, namespace, "ring")
    assert _condition(wl, WAITING)["reason"] == "PodsFailed"
    assert not is_true(wl, "Finished")
    assert _finalized(_pods(cluster, namespace)["r3"])  # kept until a replacement comes
    create(cluster, pod("r4", namespace, group="ring"))
    cluster.wait_for(
        "the replacement to be ungated and bound under the same Workload",
        lambda: _all_bound(cluster, namespace, ["r0", "r1", "r2", "r4"]),
    )
    wl = _workload(cluster, namespace, "ring")
    assert wl is not None
    assert wl["metadata"]["uid"] == uid
    assert len(get_json(cluster, "get", "workloads", "-n", namespace)["items"]) == 1
    assert "r4" in {r["name"] for r in wl["metadata"]["ownerReferences"]}
    cluster.wait_for(
        "an OwnerReferencesAdded event on the Workload",
        lambda: any(
            e["involvedObject"]["kind"] == "Workload" and e["involvedObject"]["name"] == "ring"
            for e in _events(cluster, namespace, "OwnerReferencesAdded")
        ),
    )
    (role,) = {ps["name"] for ps in wl["spec"]["podSets"]}
    roles = {p["metadata"]["annotations"].get(ROLE) for p in _pods(cluster, namespace).values()}
    assert roles == {role}  # stamped at creation, the replacement's too
    cluster.wait_for(
        "the failed pod to lose its finalizer and the Workload to stop waiting",
        lambda: (
            not _finalized(_pods(cluster, namespace)["r3"])
            and _condition(_workload(cluster, namespace, "ring"), WAITING).get("status") == "False"
        ),
    )
    for n in ("r0", "r1", "r2", "r4"):
        _end(cluster, namespace, n, "Succeeded")
    _wait_finished(cluster, namespace, "Pods succeeded: 4/4.")


def test_a_groups_succeeded_pod_gives_its_quota_to_a_waiting_pod(
    cluster: KubeCluster, pod_operator: OperatorProcess, namespace: str
) -> None:
    """Kueue's reclaimable pods for pod groups: `ring` (4 pods of 1 GPU) fills the 4-GPU
    queue and a single pod waits; once one of the group's pods succeeds, its GPU goes back
    (`reclaimablePods`: its role, 1) and the single pod is admitted while three still run."""
    del pod_operator
    one_queue(cluster, namespace, gpus=4)
    _running_group(cluster, namespace)
    create(cluster, pod("solo", namespace))
    cluster.wait_for(
        "the single pod's Workload to wait",
        lambda: (
            _condition(_workload(cluster, namespace, "pod-solo-"), "QuotaReserved").get("status")
            == "False"
        ),
    )
    _end(cluster, namespace, "r0", "Succeeded")
    cluster.wait_for(
        "the single pod to get quota",
        lambda: is_true(_workload(cluster, namespace, "pod-solo-"), "QuotaReserved"),
    )
    wl = _workload(cluster, namespace, "ring")
    assert wl is not None
    assert not is_true(wl, "Finished")  # admitted beside the group, not after it
    (role,) = {ps["name"] for ps in wl["spec"]["podSets"]}
    assert wl["status"]["reclaimablePods"] == [{"name": role, "count": 1}]
    assert charged(wl, b.GPU) == 3
    cluster.wait_for(
        "the single pod to be ungated and bound", lambda: _all_bound(cluster, namespace, ["solo"])
    )


def test_a_pod_beyond_the_groups_count_is_deleted(
    cluster: KubeCluster, pod_operator: OperatorProcess, namespace: str
) -> None:
    del pod_operator
    one_queue(cluster, namespace, gpus=8)
    uid = _running_group(cluster, namespace)
    create(cluster, pod("extra", namespace, group="ring"))
    cluster.wait_for(
        "the fifth pod of a group of 4 to be deleted",
        lambda: "extra" not in _pods(cluster, namespace),
    )
    wl = _workload(cluster, namespace, "ring")
    assert wl is not None
    assert wl["metadata"]["uid"] == uid
    assert sum(ps["count"] for ps in wl["spec"]["podSets"]) == 4
    assert _all_bound(cluster, namespace, RING)
    cluster.wait_for(
        "an ExcessPodDeleted event on the excess pod",
        lambda: any(
            e["involvedObject"]["name"] == "extra"
            for e in _events(cluster, namespace, "ExcessPodDeleted")
        ),
    )


def test_an_unretriable_pod_finishes_its_group_once_none_runs(
    cluster: KubeCluster, pod_operator: OperatorProcess, namespace: str
) -> None:
    del pod_operator
    one_queue(cluster, namespace, gpus=4)
    create(
        cluster,
        pod("a", namespace, group="ring", total=2, retriable=False),
        pod("b", namespace, group="ring", total=2),
    )
    cluster.wait_for("both pods to run", lambda: _all_bound(cluster, namespace, ["a", "b"]))
    _end(cluster, namespace, "a", "Failed")
    time.sleep(3)  # one pod still runs: the group is not finished
    assert not is_true(_workload(cluster, namespace, "ring"), "Finished")
    _end(cluster, namespace, "b", "Succeeded")
    _wait_finished(cluster, namespace, "Pods succeeded: 1/2.")  # no replacement awaited


def test_a_preempted_group_waits_for_replacements_and_is_readmitted_whole_when_they_come(
    cluster: KubeCluster, pod_operator: OperatorProcess, namespace: str
) -> None:
    del pod_operator
    ready_queue(cluster, namespace, gpus=4, preemption={"withinClusterQueue": "LowerPriority"})
    apply(
        cluster, b.priority_class(f"low-{namespace}", 1), b.priority_class(f"high-{namespace}", 100)
    )
    names = RING
    uid = _running_group(cluster, namespace, priority=f"low-{namespace}")
    create(
        cluster,
        b.job("urgent", namespace, queue="q", pods=4, priority=f"high-{namespace}", run="20s"),
    )
    cluster.wait_for(
        "the group's pods to end Failed (kept by their finalizer) and the urgent Job admitted",
        lambda: (
            all(
                p["status"].get("phase") == "Failed" and p["metadata"].get("deletionTimestamp")
                for n, p in _pods(cluster, namespace).items()
                if n in names
            )
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
    for n, p in _pods(cluster, namespace).items():
        if n in names:
            target = _condition(p, "TerminationTarget")
            assert target.get("status") == "True", f"{n} lacks TerminationTarget: {p['status']}"
            assert target["reason"] == "WorkloadEvictedDueToPreempted"
            assert target["message"].startswith("Preempted to accommodate")
    cluster.wait_for(
        "the preempted group to wait for replacements",
        lambda: _condition(_workload(cluster, namespace, "ring"), WAITING).get("status") == "True",
    )
    ring = _workload(cluster, namespace, "ring")
    assert ring is not None
    assert ring["metadata"]["uid"] == uid
    assert not is_true(ring, "QuotaReserved")
    assert _condition(ring, WAITING)["reason"] == "Preempted"
    fresh = [f"n{i}" for i in range(4)]
    create(cluster, *(pod(n, namespace, group="ring", priority=f"low-{namespace}") for n in fresh))
    cluster.wait_for(
        "the urgent Job to finish and the group to be readmitted whole with its replacements",
        lambda: _all_bound(cluster, namespace, fresh),
        timeout=180,
    )
    ring = _workload(cluster, namespace, "ring")
    assert ring is not None
    assert ring["metadata"]["uid"] == uid
    assert is_true(ring, "Admitted")
    # the urgent Job had given its GPUs back: finished, or its pods all done (reclaimable)
    urgent = _workload(cluster, namespace, "job-urgent-")
    assert urgent is not None
    assert charged(urgent, b.GPU) == 0
    assert not is_true(urgent, "Evicted")
    cluster.wait_for(
        "the replaced pods to lose their finalizer and be gone",
        lambda: not any(n in _pods(cluster, namespace) for n in names),
    )
    cluster.wait_for(
        "the Workload to stop waiting",
        lambda: _condition(_workload(cluster, namespace, "ring"), WAITING).get("status") == "False",
    )
