"""Topology-aware preemption on the sandbox (dgx-h100: 16 nodes of 8 GPUs, racks of 4): with
every rack full of low-priority gangs, a high-priority rack-required gang evicts the gangs of
exactly one rack, whole, leaves the other racks running, and lands in the rack it freed; and
`atoll what-if` asked just before it is created names the very victims the operator then
evicts (the same step, on a copy of the live state)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import KubeCluster
from tests.kube import builders as b
from tests.kube.conftest import (
    OperatorProcess,
    apply,
    atoll_json,
    condition,
    get_json,
    is_true,
    workload_of,
)

pytestmark = pytest.mark.cluster
RACK = b.RACK


def _queue(cluster: KubeCluster, ns: str) -> None:
    topo, rf = b.dgx_topology(ns)
    apply(
        cluster,
        topo,
        rf,
        b.priority_class(f"low-{ns}", 10),
        b.priority_class(f"high-{ns}", 1000),
        b.cluster_queue(
            f"cq-{ns}", f"rf-{ns}", gpus=1000, preemption={"withinClusterQueue": "LowerPriority"}
        ),
        b.local_queue("q", ns, f"cq-{ns}"),
    )


def _rack_job(name: str, ns: str, pods: int, priority: str) -> dict[str, Any]:
    return b.job(
        name,
        ns,
        queue="q",
        pods=pods,
        gpus=8,
        run="900s",
        priority=priority,
        required_topology=RACK,
    )


def _pods_by_job(cluster: KubeCluster, ns: str) -> dict[str, list[str]]:
    """Nodes of the live (not terminating) pods of each Job."""
    out: dict[str, list[str]] = {}
    for p in get_json(cluster, "get", "pods", "-n", ns)["items"]:
        if p["metadata"].get("deletionTimestamp"):
            continue
        job = p["metadata"].get("labels", {}).get("job-name", "")
        out.setdefault(job, []).append(p["spec"].get("nodeName", ""))
    return out


def _what_if(cluster: KubeCluster, job: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / f"{job['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(job))
    return atoll_json(cluster, "what-if", str(path))[0]


def test_a_rack_required_gang_frees_exactly_one_rack(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, dgx: list[str], tmp_path: Path
) -> None:
    rack_of = {
        n["metadata"]["name"]: n["metadata"]["labels"][RACK]
        for n in get_json(cluster, "get", "nodes", "-l", "atoll.dev/node-group=dgx")["items"]
    }
    assert len(rack_of) == 16

    def dgx_idle() -> bool:  # gangs of earlier tests of the session may still be leaving
        pods = get_json(cluster, "get", "pods", "-A")["items"]
        return not any(p["spec"].get("nodeName") in rack_of for p in pods)

    cluster.wait_for("dgx nodes idle", dgx_idle, timeout=180)
    _queue(cluster, namespace)
    # 8 low-priority gangs of 2 pods x 8 GPUs: every rack full, two gangs per rack.
    lows = [f"low-{i}" for i in range(8)]
    cluster.kubectl(
        "create",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": [_rack_job(n, namespace, 2, f"low-{namespace}") for n in lows],
            }
        ),
    )

    def all_bound() -> bool:
        pods = _pods_by_job(cluster, namespace)
        return all(len(pods.get(n, [])) == 2 and all(pods[n]) for n in lows)

    cluster.wait_for("the low gangs bound", all_bound, timeout=180)
    before = _pods_by_job(cluster, namespace)
    racks_before = {n: {rack_of[x] for x in before[n]} for n in lows}
    assert all(len(r) == 1 for r in racks_before.values())
    per_rack = Counter(next(iter(r)) for r in racks_before.values())
    assert per_rack == dict.fromkeys(set(rack_of.values()), 2)

    high_job = _rack_job("high", namespace, 4, f"high-{namespace}")
    answer = _what_if(cluster, high_job, tmp_path)
    assert answer["decision"]["kind"] == "Preempt", answer
    foreseen = {v["workload"] for v in answer["decision"]["victims"]}
    cluster.kubectl("create", "-f", "-", input=json.dumps(high_job))

    def high_bound() -> bool:
        nodes = _pods_by_job(cluster, namespace).get("high", [])
        return len(nodes) == 4 and all(nodes)

    cluster.wait_for("the high gang bound", high_bound, timeout=240)
    high_racks = {rack_of[x] for x in _pods_by_job(cluster, namespace)["high"]}
    assert len(high_racks) == 1
    (freed,) = high_racks

    preempted = {
        n
        for n in lows
        if (condition(workload_of(cluster, namespace, n), "Preempted") or {}).get("status")
        == "True"
    }
    # exactly the two gangs of the freed rack, whole, and nobody else
    assert preempted == {n for n in lows if racks_before[n] == {freed}}
    assert len(preempted) == 2
    # what-if named them before the operator evicted them
    keys: dict[str, str] = {}
    for n in lows:
        low = workload_of(cluster, namespace, n)
        assert low is not None
        keys[f"{namespace}/{low['metadata']['name']}"] = n
    assert {keys[v] for v in foreseen} == preempted
    for n in preempted:
        reason = (condition(workload_of(cluster, namespace, n), "Preempted") or {}).get("reason")
        assert reason == "InClusterQueue"
    now = _pods_by_job(cluster, namespace)
    for n in set(lows) - preempted:
        wl = workload_of(cluster, namespace, n)
        assert is_true(wl, "Admitted"), n
        assert not is_true(wl, "Evicted"), n
        assert now.get(n) == before[n], n  # still running where it was
    for n in preempted:
        assert not now.get(n), n  # whole gang gone, not re-placed (no room left)
        assert not is_true(workload_of(cluster, namespace, n), "QuotaReserved")
    high = workload_of(cluster, namespace, "high")
    assert is_true(high, "Admitted")
