"""`atoll simulate` predicts what the operator does: the same queue objects and Jobs, run
through the simulator and on the sandbox with a real `atoll run`, give the same flavor per
Job and the same admission order."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import TEST_SHAPE, KubeCluster
from tests.kube import builders as b
from tests.kube.conftest import OperatorProcess, apply, condition, get_json, is_true, workload_of

pytestmark = pytest.mark.cluster
RACK = "topology.atoll.dev/rack"
# name: (priority, run seconds). Two flavors of 4 GPUs; every Job takes 4 GPUs, so each
# flavor runs one Job at a time and the run times make every hand-over 5 s apart.
JOBS = {"j6": (60, 5), "j5": (50, 15), "j4": (40, 5), "j3": (30, 10), "j2": (20, 8), "j1": (10, 5)}


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
    objs += [b.priority_class(f"{name}-{ns}", prio) for name, (prio, _) in JOBS.items()]
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


def _simulate(ns: str, tmp_path: Path) -> dict[str, tuple[float, str]]:
    shape = {
        "apiVersion": "atoll.dev/v1alpha1",
        "kind": "ClusterShape",
        "metadata": {"name": "test", "annotations": {"atoll.dev/shape-file": str(TEST_SHAPE)}},
    }
    ns_doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    docs = [shape, ns_doc, *_objects(ns, hold=False), *_jobs(ns)]
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
    return {j["name"].split("/")[1]: (j["admitted"], j["flavor"]) for j in run["jobs"]}


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
    seen: dict[str, tuple[float, str]] = {}
    for name in JOBS:
        wl = workload_of(cluster, namespace, name)
        assert wl is not None
        (ps,) = wl["status"]["admission"]["podSetAssignments"]
        seen[name] = (_admitted_at(wl), ps["flavors"][b.GPU])
    assert {j: f for j, (_, f) in seen.items()} == {j: f for j, (_, f) in predicted.items()}
    # the order: Jobs the simulator admits >= 3 s apart are admitted in that order (the API
    # records seconds; hand-overs on the sandbox also take the pods' start-up time)
    for x, (tx, _) in predicted.items():
        for y, (ty, _) in predicted.items():
            if ty - tx >= 3:
                assert seen[x][0] < seen[y][0], (x, y, predicted, seen)
            if tx == ty:
                assert abs(seen[x][0] - seen[y][0]) <= 1, (x, y, seen)
