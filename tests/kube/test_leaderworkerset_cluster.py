"""LeaderWorkerSets end to end against the real LWS controller (v0.7.0, built into the
sandbox): each replica group of a labelled LeaderWorkerSet is one Workload; with quota for one
group only, one group's leader and workers are admitted whole and ungated together while the
other group's pods all stay gated, its Workload pending with Kueue's quota message; when the
admitted group's Workload goes, that group is stopped whole (its pods deleted, recreated
gated) and the waiting group is admitted. An unlabelled LeaderWorkerSet is left alone."""

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
    one_queue,
)
from tests.kube.owners import operator_for
from tests.sandbox.test_integrations import lws_controller

pytestmark = pytest.mark.cluster
__all__ = ["lws_controller"]
GATE = "kueue.x-k8s.io/admission"
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
PODSET_LABEL = "kueue.x-k8s.io/podset"


lws_operator = operator_for("lws_operator", "LeaderWorkerSet", needs=("lws_controller", "dgx"))
"""`atoll run` with the LeaderWorkerSet integration, once the LWS CRD is installed."""


def leaderworkerset(
    name: str, namespace: str, *, replicas: int, size: int, queue: str | None = "q"
) -> dict[str, Any]:
    def template(role: str) -> dict[str, Any]:
        container = {
            "name": role,
            "image": "registry.invalid/atoll/serve:1",
            "resources": {"requests": {"cpu": "100m", b.GPU: "1"}, "limits": {b.GPU: "1"}},
        }
        return {"spec": {"containers": [container]}}

    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {b.QUEUE_LABEL: queue} if queue else {},
        },
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {
                "size": size,
                "leaderTemplate": template("leader"),
                "workerTemplate": template("worker"),
            },
        },
    }


def workloads(cluster: KubeCluster, namespace: str) -> list[dict[str, Any]]:
    return list(get_json(cluster, "get", "workloads", "-n", namespace)["items"])


def group_pods(cluster: KubeCluster, namespace: str, name: str, index: str) -> list[dict[str, Any]]:
    selector = f"{NAME_LABEL}={name},{GROUP_LABEL}={index}"
    return list(get_json(cluster, "get", "pods", "-n", namespace, "-l", selector)["items"])


def gates(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def index_of(wl: dict[str, Any]) -> str:
    return str(wl["metadata"]["annotations"]["kueue.x-k8s.io/component-workload-index"])


def scheduled_at(pod: dict[str, Any]) -> str:
    return str((condition(pod, "PodScheduled") or {}).get("lastTransitionTime", ""))


def _admitted_whole(
    cluster: KubeCluster,
    namespace: str,
    name: str,
    wl: dict[str, Any],
    size: int,
    *,
    restarted: bool = False,
) -> None:
    """The group of `wl` has all its pods ungated, bound and labelled with their pod set,
    none scheduled before the Workload reserved quota. The checks read one listing of the
    group. `restarted`: the group was just stopped, and the LWS controller recreates a whole
    group whenever one of its pods goes, so it may replace the group more than once while the
    old pods are torn down; wait for a listing whose pods were all bound after this admission
    (pods of the earlier admission cannot be told from early ones)."""
    index = index_of(wl)
    reserved = (condition(wl, "QuotaReserved") or {})["lastTransitionTime"]
    seen: list[dict[str, Any]] = []

    def started() -> bool:
        seen[:] = group_pods(cluster, namespace, name, index)
        return (
            len(seen) == size
            and all(not gates(p) and p["spec"].get("nodeName") for p in seen)
            and all(PODSET_LABEL in p["metadata"].get("labels", {}) for p in seen)
            and (not restarted or all(scheduled_at(p) >= reserved for p in seen))
        )

    cluster.wait_for(f"group {index}'s {size} pods to be ungated, bound and labelled", started)
    early = [p["metadata"]["name"] for p in seen if scheduled_at(p) < reserved]
    assert early == [], f"pods scheduled before the admission at {reserved}: {early}"
    roles = sorted(p["metadata"]["labels"][PODSET_LABEL] for p in seen)
    assert roles == ["leader", *["worker"] * (size - 1)]


def _waits_gated(cluster: KubeCluster, namespace: str, name: str, index: str, size: int) -> None:
    cluster.wait_for(
        f"group {index}'s {size} pods to exist, gated",
        lambda: len(group_pods(cluster, namespace, name, index)) == size,
    )
    for pod in group_pods(cluster, namespace, name, index):
        assert gates(pod) == [GATE], pod["metadata"]["name"]
        assert not pod["spec"].get("nodeName"), pod["metadata"]["name"]


def test_each_group_is_one_gang_and_the_second_waits_until_the_first_goes(
    cluster: KubeCluster, lws_operator: OperatorProcess, namespace: str
) -> None:
    del lws_operator
    one_queue(cluster, namespace, gpus=4)  # one group of 4 pods x 1 GPU
    create(cluster, leaderworkerset("serve", namespace, replicas=2, size=4))
    lws = get_json(cluster, "get", "leaderworkerset", "serve", "-n", namespace)
    for field in ("leaderTemplate", "workerTemplate"):
        meta = lws["spec"]["leaderWorkerTemplate"][field]["metadata"]
        assert meta["labels"][b.QUEUE_LABEL] == "q"
        assert meta["annotations"]["kueue.x-k8s.io/pod-suspending-parent"] == (
            "leaderworkerset.x-k8s.io/leaderworkerset"
        )
    cluster.wait_for(
        "two Workloads, one Admitted",
        lambda: (
            len(wls := workloads(cluster, namespace)) == 2
            and sum(is_true(w, "Admitted") for w in wls) == 1
        ),
    )
    (first,) = [w for w in workloads(cluster, namespace) if is_true(w, "Admitted")]
    (second,) = [w for w in workloads(cluster, namespace) if not is_true(w, "Admitted")]
    for wl in (first, second):
        assert wl["metadata"]["name"].startswith(f"leaderworkerset-serve-{index_of(wl)}-")
        (ref,) = wl["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"]) == (
            "LeaderWorkerSet",
            "serve",
            lws["metadata"]["uid"],
        )
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
            ("leader", 1),
            ("worker", 3),
        ]
    _admitted_whole(cluster, namespace, "serve", first, 4)
    cluster.wait_for(
        "the first group's Workload to be PodsReady (its 4 pods ready)",
        lambda: is_true(_named(cluster, namespace, first), "PodsReady"),
    )
    _waits_gated(cluster, namespace, "serve", index_of(second), 4)
    cluster.wait_for(
        "the second group's Workload to say why it waits",
        lambda: (
            "couldn't assign flavors"
            in (condition(_named(cluster, namespace, second), "QuotaReserved") or {}).get(
                "message", ""
            )
        ),
    )
    waiting = condition(_named(cluster, namespace, second), "QuotaReserved")
    assert waiting is not None
    assert waiting["status"] == "False"
    assert "insufficient unused quota for nvidia.com/gpu" in waiting["message"]
    table = cluster.kubectl("get", "workloads", "-n", namespace).stdout
    assert first["metadata"]["name"] in table
    assert second["metadata"]["name"] in table

    # The first group's Workload goes: the group is stopped whole (its running pods are
    # deleted; the LWS controller recreates them, gated) and queued again with a new
    # Workload. The quota goes to one group, whole, and the other waits whole. Which one:
    # as in Kueue, the parked Workload is requeued a batch (1 s) after the release, so the
    # new Workload, created at once, may be tried first.
    cluster.kubectl("delete", "workload", first["metadata"]["name"], "-n", namespace)

    def settled() -> bool:
        wls = workloads(cluster, namespace)
        return (
            len(wls) == 2
            and first["metadata"]["uid"] not in {w["metadata"]["uid"] for w in wls}
            and sorted(index_of(w) for w in wls) == sorted([index_of(first), index_of(second)])
            and sum(is_true(w, "Admitted") for w in wls) == 1
        )

    cluster.wait_for("one group Admitted again, the first with a new Workload", settled)
    (now_admitted,) = [w for w in workloads(cluster, namespace) if is_true(w, "Admitted")]
    (waiting,) = [w for w in workloads(cluster, namespace) if not is_true(w, "Admitted")]
    _admitted_whole(
        cluster,
        namespace,
        "serve",
        now_admitted,
        4,
        restarted=index_of(now_admitted) == index_of(first),
    )
    _waits_gated(cluster, namespace, "serve", index_of(waiting), 4)


def _named(cluster: KubeCluster, namespace: str, wl: dict[str, Any]) -> dict[str, Any] | None:
    for w in workloads(cluster, namespace):
        if w["metadata"]["uid"] == wl["metadata"]["uid"]:
            return w
    return None


def test_an_unlabelled_leaderworkerset_is_left_alone(
    cluster: KubeCluster, lws_operator: OperatorProcess, namespace: str
) -> None:
    del lws_operator
    one_queue(cluster, namespace, gpus=0)
    create(cluster, leaderworkerset("plain", namespace, replicas=1, size=2, queue=None))
    cluster.wait_for(
        "the unlabelled group's 2 pods to be bound",
        lambda: (
            len(pods := group_pods(cluster, namespace, "plain", "0")) == 2
            and all(p["spec"].get("nodeName") for p in pods)
        ),
    )
    assert all(not gates(p) for p in group_pods(cluster, namespace, "plain", "0"))
    lws = get_json(cluster, "get", "leaderworkerset", "plain", "-n", namespace)
    meta = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"].get("metadata") or {}
    assert "kueue.x-k8s.io/pod-suspending-parent" not in (meta.get("annotations") or {})
    assert workloads(cluster, namespace) == []


def _scale(cluster: KubeCluster, namespace: str, name: str, replicas: int) -> None:
    patch = json.dumps({"spec": {"replicas": replicas}})
    cluster.kubectl("patch", "leaderworkerset", name, "-n", namespace, "--type=merge", "-p", patch)


def _by_index(cluster: KubeCluster, namespace: str) -> dict[str, dict[str, Any]]:
    return {index_of(w): w for w in workloads(cluster, namespace)}


def test_scaling_up_adds_groups_that_queue_and_scaling_down_drops_their_workloads(
    cluster: KubeCluster, lws_operator: OperatorProcess, namespace: str
) -> None:
    del lws_operator
    one_queue(cluster, namespace, gpus=4)  # two groups of 2 pods x 1 GPU
    create(cluster, leaderworkerset("grow", namespace, replicas=1, size=2))
    cluster.wait_for(
        "group 0 to be Admitted",
        lambda: is_true(_by_index(cluster, namespace).get("0"), "Admitted"),
    )
    _scale(cluster, namespace, "grow", 3)
    # Quota for two groups: group 0 keeps its admission, one of the two new groups (created
    # in the same second: either may be first in the queue) is admitted, the other queues.
    cluster.wait_for(
        "three Workloads, two Admitted",
        lambda: (
            set(by := _by_index(cluster, namespace)) == {"0", "1", "2"}
            and sum(is_true(w, "Admitted") for w in by.values()) == 2
        ),
    )
    by = _by_index(cluster, namespace)
    assert is_true(by["0"], "Admitted")
    (queued,) = [i for i, w in by.items() if not is_true(w, "Admitted")]
    (added,) = [i for i, w in by.items() if i != "0" and is_true(w, "Admitted")]
    _admitted_whole(cluster, namespace, "grow", by[added], 2)
    _waits_gated(cluster, namespace, "grow", queued, 2)
    _scale(cluster, namespace, "grow", 1)
    cluster.wait_for(
        "the Workloads of groups 1 and 2 to be deleted",
        lambda: set(_by_index(cluster, namespace)) == {"0"},
    )
    assert is_true(_by_index(cluster, namespace)["0"], "Admitted")
