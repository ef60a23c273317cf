"""Topology- and device-aware gang admission on the sandbox: a rack-required gang lands in
one rack (or waits with numbers), and gangs of 2-GPU NVLink-pair claims are admitted only as
far as free pairs exist, so no admitted gang waits for devices."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest

from tests.conftest import KubeCluster
from tests.kube import builders as b
from tests.kube.conftest import OperatorProcess, apply, condition, get_json, is_true, workload_of

pytestmark = pytest.mark.cluster
RACK = b.RACK


def _tas_queue(cluster: KubeCluster, ns: str) -> None:
    apply(cluster, *b.dgx_tas_queue(ns))


def test_rack_required_gang_lands_inside_one_rack(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, dgx: list[str]
) -> None:
    _tas_queue(cluster, namespace)
    cluster.kubectl(
        "create",
        "-f",
        "-",
        input=json.dumps(
            b.job("ring", namespace, queue="q", pods=16, run="20s", required_topology=RACK)
        ),
    )
    cluster.wait_for(
        "admitted", lambda: is_true(workload_of(cluster, namespace, "ring"), "Admitted")
    )
    wl = workload_of(cluster, namespace, "ring")
    assert wl is not None
    ta = wl["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    assert ta["levels"] == ["kubernetes.io/hostname"]

    def nodes() -> list[str]:
        pods = get_json(cluster, "get", "pods", "-n", namespace, "-l", "job-name=ring")["items"]
        return [p["spec"].get("nodeName", "") for p in pods]

    cluster.wait_for("16 pods bound", lambda: len(nodes()) == 16 and all(nodes()), timeout=90)
    labels = {
        n["metadata"]["name"]: n["metadata"]["labels"]
        for n in get_json(cluster, "get", "nodes")["items"]
    }
    racks = {labels[n][RACK] for n in nodes()}
    assert len(racks) == 1
    assert all(labels[n]["atoll.dev/node-group"] == "dgx" for n in nodes())


def test_gang_larger_than_any_rack_waits_with_the_numbers(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, dgx: list[str]
) -> None:
    _tas_queue(cluster, namespace)
    cluster.kubectl(
        "create",
        "-f",
        "-",
        input=json.dumps(
            b.job("huge", namespace, queue="q", pods=40, run="20s", required_topology=RACK)
        ),
    )

    def placement() -> dict[str, Any] | None:
        """The QuotaReserved=False condition written for the placement failure: Kueue's
        reason `Pending`, atoll's topology message."""
        cond = condition(workload_of(cluster, namespace, "huge"), "QuotaReserved") or {}
        found = cond.get("reason") == "Pending" and f"in one {RACK}" in cond.get("message", "")
        return cond if found else None

    cluster.wait_for("a placement reason", placement)
    message = placement()["message"]  # type: ignore[index]
    assert f"needs 40 pods in one {RACK}" in message
    assert get_json(cluster, "get", "pods", "-n", namespace)["items"] == []


def _pair_job(name: str, ns: str) -> dict[str, Any]:
    job = b.job(name, ns, queue="q", pods=2, gpus=0, run="5s")
    spec = job["spec"]["template"]["spec"]
    spec["nodeSelector"] = {"atoll.dev/node-group": "pcie"}
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "pair"}]
    container = spec["containers"][0]
    container["resources"] = {"requests": {"cpu": "1"}, "claims": [{"name": "gpus"}]}
    return job


def test_pair_claims_are_admitted_only_while_free_pairs_exist(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    template = b.island_claim_template(namespace)
    rf, cq = f"rf-{namespace}", f"cq-{namespace}"
    apply(
        cluster,
        template,
        b.flavor(rf),
        b.cluster_queue(cq, rf, gpus=1000),
        b.local_queue("q", namespace, cq),
    )
    # pcie-bridged-pairs: 4 nodes x 4 pairs = 16 pairs (32 devices), minus what claims of
    # other namespaces still hold; 10 jobs x 2 pods x 1 pair = 20 pairs.

    def free_gangs() -> int:
        """Gangs of 2 pairs the devices not held by other namespaces have room for."""
        used = sum(
            len(c["status"]["allocation"]["devices"]["results"])
            for c in get_json(cluster, "get", "resourceclaims", "-A")["items"]
            if c.get("status", {}).get("allocation") and c["metadata"]["namespace"] != namespace
        )
        return (32 - used) // 4

    jobs = [_pair_job(f"p{i}", namespace) for i in range(10)]
    cluster.kubectl(
        "create",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": copy.deepcopy(jobs)}),
    )

    most = 0
    pending: set[tuple[str, str]] = set()
    over: list[tuple[int, int]] = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        # one LIST: the Workloads as of one moment (reading them one by one could count a
        # gang that just finished and the one admitted in its place)
        workloads = get_json(cluster, "get", "workloads", "-n", namespace)["items"]
        holding = sum(
            1 for wl in workloads if is_true(wl, "QuotaReserved") and not is_true(wl, "Finished")
        )
        room = free_gangs()  # read after: other namespaces only release, never take, here
        most = max(most, holding)
        if holding > room:
            over.append((holding, room))
        for wl in workloads:
            cond = condition(wl, "QuotaReserved")
            if cond and cond["status"] == "False":
                pending.add((cond["reason"], cond["message"]))
        done = get_json(cluster, "get", "jobs", "-n", namespace)["items"]
        if sum(1 for d in done if d["status"].get("succeeded") == 2) == len(jobs):
            break
        time.sleep(0.5)
    else:
        raise AssertionError("not every gang completed")
    assert over == [], "gangs admitted beyond the free NVLink pairs (admitted, room)"
    assert most >= 2  # gangs did run side by side
    # a gang waited for its devices: Kueue's reason, atoll's placement message
    assert any(reason == "Pending" and "island" in message for reason, message in pending)
