"""`atoll simulate` predicts what the operator does for every kind at once: Jobs, JobSets
(against the real JobSet controller) and pod groups in one ClusterQueue, run through the
simulator and on the sandbox with a real `atoll run`, get the same flavor per workload and
are admitted in the same order."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from atoll.sandbox.processes import Proc
from tests.conftest import TEST_SHAPE, KubeCluster
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
from tests.kube.test_jobset_cluster import jobset, owned_workloads
from tests.kube.test_podgroup_cluster import pod
from tests.kube.test_sim_vs_operator_cluster import RACK
from tests.sandbox.test_integrations import jobset_controller

pytestmark = pytest.mark.cluster
__all__ = ["jobset_controller"]
FRAMEWORKS = ["batch/job", "jobset.x-k8s.io/jobset", "pod"]
# name: (kind, priority, run seconds). Two flavors of 4 GPUs; every workload takes 4 GPUs
# (2 pods x 2, a JobSet's leader and worker 2 each), so each flavor runs one at a time.
# Simulated: flavor a runs j-hi 0-10, pg-a 10-20, j-lo 20-35, js-b 35-65; flavor b runs
# js-a 0-60, then pg-b: every hand-over between the flavors is >= 15 s apart, more than the
# controllers' latency on the sandbox.
WORKLOADS = {
    "j-hi": ("Job", 60, 10),
    "js-a": ("JobSet", 50, 60),
    "pg-a": ("Pod", 40, 10),
    "j-lo": ("Job", 30, 15),
    "js-b": ("JobSet", 20, 30),
    "pg-b": ("Pod", 10, 10),
}


@pytest.fixture(scope="module")
def kinds_operator(
    cluster: KubeCluster,
    operator: OperatorProcess,
    jobset_controller: Proc | None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    """`atoll run` with the JobSet and plain-pod integrations enabled."""
    del jobset_controller
    log_dir = tmp_path_factory.mktemp("kinds-operator")
    frameworks = f"integrations.frameworks={json.dumps(FRAMEWORKS)}"
    with replacing_operator(cluster, operator, log_dir, "--set", frameworks) as op:
        yield op
        cluster.wait_for(
            "the JobSets' and pods' Workloads to be gone",
            lambda: not owned_workloads(cluster, "JobSet") and not owned_workloads(cluster, "Pod"),
            timeout=180,
        )


def _objects(ns: str, *, hold: bool) -> list[dict[str, Any]]:
    cq = b.cluster_queue(f"cq-{ns}", f"a-{ns}", gpus=4)
    group = cq["spec"]["resourceGroups"][0]
    second = json.loads(json.dumps(group["flavors"][0]))
    second["name"] = f"b-{ns}"
    group["flavors"].append(second)
    if hold:
        cq["spec"]["stopPolicy"] = "Hold"
    objs = [
        b.flavor(f"a-{ns}", node_labels={RACK: "rack-0"}),
        b.flavor(f"b-{ns}", node_labels={RACK: "rack-1"}),
        cq,
        b.local_queue("q", ns, f"cq-{ns}"),
    ]
    objs += [b.priority_class(f"{name}-{ns}", prio) for name, (_, prio, _) in WORKLOADS.items()]
    return objs


def _workloads(ns: str) -> list[dict[str, Any]]:
    """The Jobs, JobSets and pod groups' Pods, each arriving at 0 with its run time."""
    out: list[dict[str, Any]] = []
    for name, (kind, _, run) in WORKLOADS.items():
        timing = {"atoll.dev/arrival": "0", "atoll.dev/run-duration": f"{run}s"}
        priority = f"{name}-{ns}"
        if kind == "Job":
            obj = b.job(name, ns, queue="q", pods=2, gpus=2, run=f"{run}s", priority=priority)
            obj["metadata"]["annotations"] = timing
            out.append(obj)
        elif kind == "JobSet":
            obj = jobset(
                name, ns, workers=1, gpus=2, leader_gpus=2, run=f"{run}s", priority=priority
            )
            obj["metadata"]["annotations"] = timing
            out.append(obj)
        else:
            for i in range(2):
                p = pod(f"{name}-{i}", ns, group=name, total=2)
                p["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = priority
                p["metadata"]["annotations"].update(timing)
                resources = p["spec"]["containers"][0]["resources"]
                resources["requests"][b.GPU] = resources["limits"][b.GPU] = "2"
                out.append(p)
    return out


def _simulate(ns: str, tmp_path: Path) -> dict[str, tuple[float, str]]:
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "integrations": {"frameworks": FRAMEWORKS},
    }
    shape = {
        "apiVersion": "atoll.dev/v1alpha1",
        "kind": "ClusterShape",
        "metadata": {"name": "test", "annotations": {"atoll.dev/shape-file": str(TEST_SHAPE)}},
    }
    ns_doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    docs = [config, shape, ns_doc, *_objects(ns, hold=False), *_workloads(ns)]
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    out = subprocess.run(
        [sys.executable, "-m", "atoll", "simulate", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    (run,) = json.loads(out.stdout)["runs"]
    assert not run["notes"], run["notes"]
    return {j["name"].rsplit("/", 1)[1]: (j["admitted"], j["flavor"]) for j in run["jobs"]}


def _live_workload(cluster: KubeCluster, ns: str, name: str) -> dict[str, Any] | None:
    """The Workload of the Job or JobSet `name`, or of the pod group `name`."""
    kind = WORKLOADS[name][0]
    for wl in get_json(cluster, "get", "workloads", "-n", ns)["items"]:
        if kind == "Pod" and wl["metadata"]["name"] == name:
            return dict(wl)
        for ref in wl["metadata"].get("ownerReferences") or []:
            if ref["kind"] == kind and ref["name"] == name:
                return dict(wl)
    return None


def _admitted_at(wl: dict[str, Any]) -> float:
    c = condition(wl, "QuotaReserved")
    assert c is not None
    return dt.datetime.fromisoformat(c["lastTransitionTime"].replace("Z", "+00:00")).timestamp()


def test_simulated_order_and_flavors_of_jobs_jobsets_and_pod_groups_match_the_operator(
    cluster: KubeCluster, kinds_operator: OperatorProcess, namespace: str, tmp_path: Path
) -> None:
    del kinds_operator
    predicted = _simulate(namespace, tmp_path)
    assert sorted(predicted) == sorted(WORKLOADS)
    assert all(at is not None for at, _ in predicted.values()), predicted
    # on the sandbox: everything queued while the ClusterQueue holds, then released at once,
    # as the simulator has everything arrive at t=0
    apply(cluster, *_objects(namespace, hold=True))
    for obj in _workloads(namespace):
        create(cluster, obj)
    cluster.wait_for(
        "six Workloads",
        lambda: all(_live_workload(cluster, namespace, n) for n in WORKLOADS),
        timeout=120,
    )
    cluster.kubectl(
        "patch",
        "clusterqueue",
        f"cq-{namespace}",
        "--type=merge",
        "-p",
        '{"spec":{"stopPolicy":"None"}}',
    )

    def finished() -> bool:
        return all(is_true(_live_workload(cluster, namespace, n), "Finished") for n in WORKLOADS)

    cluster.wait_for("every workload finished", finished, timeout=300, interval=2.0)
    seen: dict[str, tuple[float, str]] = {}
    for name in WORKLOADS:
        wl = _live_workload(cluster, namespace, name)
        assert wl is not None
        flavors = {ps["flavors"][b.GPU] for ps in wl["status"]["admission"]["podSetAssignments"]}
        assert len(flavors) == 1, (name, flavors)
        seen[name] = (_admitted_at(wl), flavors.pop())
    assert {n: f for n, (_, f) in seen.items()} == {n: f for n, (_, f) in predicted.items()}
    # the order: workloads the simulator admits >= 3 s apart are admitted in that order
    for x, (tx, _) in predicted.items():
        for y, (ty, _) in predicted.items():
            if ty - tx >= 3:
                assert seen[x][0] < seen[y][0], (x, y, predicted, seen)
