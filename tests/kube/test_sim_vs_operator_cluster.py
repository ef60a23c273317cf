"""`atoll simulate` predicts what the operator does: the same queue objects and Jobs (and, in
a second test, Jobs, JobSets against the real JobSet controller and pod groups together), run
through the simulator and on the sandbox with a real `atoll run`, give the same flavor per
workload and the same admission order."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
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
    workload_of,
)
from tests.kube.owners import owned_workloads
from tests.kube.test_jobset_cluster import jobset
from tests.kube.test_podgroup_cluster import pod
from tests.sandbox.test_integrations import jobset_controller

pytestmark = pytest.mark.cluster
__all__ = ["jobset_controller"]
RACK = "topology.atoll.dev/rack"
# name: (priority, run seconds). Two flavors of 4 GPUs; every Job takes 4 GPUs, so each
# flavor runs one Job at a time and the run times make every hand-over 5 s apart.
JOBS = {"j6": (60, 5), "j5": (50, 15), "j4": (40, 5), "j3": (30, 10), "j2": (20, 8), "j1": (10, 5)}


def _objects(
    ns: str, *, hold: bool, priorities: dict[str, int] | None = None
) -> list[dict[str, Any]]:
    """Two flavors of 4 GPUs in one ClusterQueue (held, or not), a LocalQueue `q`, and a
    WorkloadPriorityClass `<name>-<ns>` per name of `priorities` (default: the Jobs')."""
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
    if priorities is None:
        priorities = {name: prio for name, (prio, _) in JOBS.items()}
    objs += [b.priority_class(f"{name}-{ns}", prio) for name, prio in priorities.items()]
    return objs


def _jobs(ns: str) -> list[dict[str, Any]]:
    out = []
    for name, (_, run) in JOBS.items():
        job = b.job(name, ns, queue="q", pods=2, gpus=2, run=f"{run}s", priority=f"{name}-{ns}")
        job["metadata"]["annotations"] = {
            "atoll.dev/arrival": "0",
            "atoll.dev/run-duration": f"{run}s",
        }
        out.append(job)
    return out


def _simulate(
    ns: str, tmp_path: Path, docs: list[dict[str, Any]] | None = None
) -> dict[str, tuple[float, str]]:
    """`atoll simulate --json` of the queue objects and `docs` (default: the Jobs): the
    admission time and flavor by name."""
    shape = {
        "apiVersion": "atoll.dev/v1alpha1",
        "kind": "ClusterShape",
        "metadata": {"name": "test", "annotations": {"atoll.dev/shape-file": str(TEST_SHAPE)}},
    }
    ns_doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    docs = docs or [*_objects(ns, hold=False), *_jobs(ns)]
    docs = [shape, ns_doc, *docs]
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


def _admitted_at(wl: dict[str, Any]) -> float:
    c = condition(wl, "QuotaReserved")
    assert c is not None
    return dt.datetime.fromisoformat(c["lastTransitionTime"].replace("Z", "+00:00")).timestamp()


def test_simulated_order_and_flavors_match_the_operator(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, tmp_path: Path
) -> None:
    predicted = _simulate(namespace, tmp_path)
    assert sorted(predicted) == sorted(JOBS)
    # on the sandbox: everything queued while the ClusterQueue holds, then released at once,
    # as the simulator has all Jobs arrive at t=0
    apply(cluster, *_objects(namespace, hold=True))
    for job in _jobs(namespace):
        cluster.kubectl("create", "-f", "-", input=json.dumps(job))
    cluster.wait_for(
        "six Workloads",
        lambda: len(get_json(cluster, "get", "workloads", "-n", namespace)["items"]) == 6,
    )
    cq = f"cq-{namespace}"
    cluster.kubectl(
        "patch", "clusterqueue", cq, "--type=merge", "-p", '{"spec":{"stopPolicy":"None"}}'
    )

    def finished() -> bool:
        return all(is_true(workload_of(cluster, namespace, j), "Finished") for j in JOBS)

    cluster.wait_for("every Job finished", finished, timeout=150, interval=1.0)
    _same_decisions(predicted, lambda name: workload_of(cluster, namespace, name))


def _same_decisions(
    predicted: dict[str, tuple[float, str]], workload: Callable[[str], dict[str, Any] | None]
) -> None:
    """The live Workloads got the simulated flavor (every pod set the same one), and those
    the simulator admits >= 3 s apart were admitted in that order (the API records seconds;
    hand-overs on the sandbox also take the controllers' and pods' start-up time); those it
    admits at once, within a second."""
    seen: dict[str, tuple[float, str]] = {}
    for name in predicted:
        wl = workload(name)
        assert wl is not None
        flavors = {ps["flavors"][b.GPU] for ps in wl["status"]["admission"]["podSetAssignments"]}
        assert len(flavors) == 1, (name, flavors)
        seen[name] = (_admitted_at(wl), flavors.pop())
    assert {j: f for j, (_, f) in seen.items()} == {j: f for j, (_, f) in predicted.items()}
    for x, (tx, _) in predicted.items():
        for y, (ty, _) in predicted.items():
            if ty - tx >= 3:
                assert seen[x][0] < seen[y][0], (x, y, predicted, seen)
            if tx == ty:
                assert abs(seen[x][0] - seen[y][0]) <= 1, (x, y, seen)


# -- Jobs, JobSets and pod groups together ---------------------------------------------------
FRAMEWORKS = ["batch/job", "jobset.x-k8s.io/jobset", "pod"]
# name: (kind, priority, run seconds). Every workload takes 4 GPUs (2 pods x 2; a JobSet's
# leader and worker 2 each), so each flavor runs one at a time. Simulated: flavor a runs j-hi
# 0-10, j-lo 10-25, js-b 25-70, then pg-b; flavor b runs js-a 0-45, then pg-a: hand-overs on
# different flavors are >= 20 s apart, more than the controllers' latency on the sandbox.
# The pod groups come last on each flavor: the sandbox never ends a bare pod.
KINDS = {
    "j-hi": ("Job", 60, 10),
    "js-a": ("JobSet", 50, 45),
    "j-lo": ("Job", 40, 15),
    "js-b": ("JobSet", 30, 45),
    "pg-a": ("Pod", 20, 600),
    "pg-b": ("Pod", 10, 600),
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


def _kinds(ns: str) -> list[dict[str, Any]]:
    """The Jobs, JobSets and pod groups' Pods, each arriving at 0 with its run time."""
    out: list[dict[str, Any]] = []
    for name, (kind, _, run) in KINDS.items():
        timing = {"atoll.dev/arrival": "0", "atoll.dev/run-duration": f"{run}s"}
        priority = f"{name}-{ns}"
        if kind == "Job":
            obj = b.job(name, ns, queue="q", pods=2, gpus=2, run=f"{run}s", priority=priority)
        elif kind == "JobSet":
            obj = jobset(
                name, ns, workers=1, gpus=2, leader_gpus=2, run=f"{run}s", priority=priority
            )
        else:
            for i in range(2):
                p = pod(f"{name}-{i}", ns, group=name, total=2)
                p["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = priority
                p["metadata"]["annotations"].update(timing)
                resources = p["spec"]["containers"][0]["resources"]
                resources["requests"][b.GPU] = resources["limits"][b.GPU] = "2"
                out.append(p)
            continue
        obj["metadata"]["annotations"] = timing
        out.append(obj)
    return out


def _kinds_workload(cluster: KubeCluster, ns: str, name: str) -> dict[str, Any] | None:
    """The Workload of the Job or JobSet `name`, or of the pod group `name`."""
    kind = KINDS[name][0]
    for wl in get_json(cluster, "get", "workloads", "-n", ns)["items"]:
        if kind == "Pod" and wl["metadata"]["name"] == name:
            return dict(wl)
        refs = wl["metadata"].get("ownerReferences") or []
        if any(r["kind"] == kind and r["name"] == name for r in refs):
            return dict(wl)
    return None


def test_simulated_order_and_flavors_of_jobs_jobsets_and_pod_groups_match_the_operator(
    cluster: KubeCluster, kinds_operator: OperatorProcess, namespace: str, tmp_path: Path
) -> None:
    del kinds_operator
    priorities = {name: prio for name, (_, prio, _) in KINDS.items()}
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "integrations": {"frameworks": FRAMEWORKS},
    }
    docs = [config, *_objects(namespace, hold=False, priorities=priorities), *_kinds(namespace)]
    predicted = _simulate(namespace, tmp_path, docs)
    assert sorted(predicted) == sorted(KINDS)
    assert all(at is not None for at, _ in predicted.values()), predicted
    apply(cluster, *_objects(namespace, hold=True, priorities=priorities))
    create(cluster, *_kinds(namespace))
    cluster.wait_for(
        "six Workloads",
        lambda: all(_kinds_workload(cluster, namespace, n) for n in KINDS),
        timeout=120,
    )
    cq = f"cq-{namespace}"
    cluster.kubectl(
        "patch", "clusterqueue", cq, "--type=merge", "-p", '{"spec":{"stopPolicy":"None"}}'
    )

    def admitted() -> bool:
        return all(is_true(_kinds_workload(cluster, namespace, n), "QuotaReserved") for n in KINDS)

    cluster.wait_for("every workload admitted", admitted, timeout=300, interval=2.0)
    _same_decisions(predicted, lambda name: _kinds_workload(cluster, namespace, name))
