"""`atoll explain` and `atoll what-if --kubeconfig` against the sandbox, with a real operator:
answers known in advance for quota, cohort borrowing, preemption and topology, and nothing
created by asking."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, KubeCluster
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


def _atoll(cluster: KubeCluster, *args: str) -> dict[str, Any]:
    return atoll_json(cluster, *args)[0]


def _create(cluster: KubeCluster, obj: dict[str, Any]) -> None:
    cluster.kubectl("create", "-f", "-", input=json.dumps(obj))


def _admitted(cluster: KubeCluster, ns: str, job: str) -> None:
    cluster.wait_for(
        f"{job} admitted", lambda: is_true(workload_of(cluster, ns, job), "Admitted"), timeout=60
    )


def _pending(cluster: KubeCluster, ns: str, job: str) -> dict[str, Any]:
    def reason() -> str | None:
        c = condition(workload_of(cluster, ns, job), "QuotaReserved")
        return c["reason"] if c and c["status"] == "False" else None

    cluster.wait_for(f"{job} pending with a reason", lambda: reason() is not None, timeout=60)
    wl = workload_of(cluster, ns, job)
    assert wl is not None
    return wl


def _job_file(tmp_path: Path, job: dict[str, Any]) -> str:
    path = tmp_path / f"{job['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(job))
    return str(path)


def test_explain_pending_for_quota(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    rf, cq = f"rf-{namespace}", f"cq-{namespace}"
    apply(cluster, b.flavor(rf), b.cluster_queue(cq, rf, gpus=4), b.local_queue("q", namespace, cq))
    _create(cluster, b.job("big", namespace, queue="q", pods=4, run="300s"))
    _admitted(cluster, namespace, "big")
    _create(cluster, b.job("next", namespace, queue="q", pods=2, run="30s"))
    time.sleep(1.1)  # creation timestamps have one-second resolution: order them
    _create(cluster, b.job("after", namespace, queue="q", pods=2, run="30s"))
    wl = _pending(cluster, namespace, "next")
    _pending(cluster, namespace, "after")
    big = workload_of(cluster, namespace, "big")
    assert big is not None
    big_key = f"{namespace}/{big['metadata']['name']}"

    ex = _atoll(cluster, "explain", f"{namespace}/next")
    assert ex["workload"] == f"{namespace}/{wl['metadata']['name']}"
    assert (ex["state"], ex["clusterQueue"], ex["position"], ex["queueLength"]) == (
        "Pending",
        cq,
        1,
        2,
    )
    assert ex["condition"]["reason"] == condition(wl, "QuotaReserved")["reason"]  # type: ignore[index]
    # written as Kueue writes it; atoll's own, finer reason is the decision's
    assert ex["condition"]["reason"] == "Pending"
    assert (ex["decision"]["kind"], ex["decision"]["reason"]) == ("Pending", "WaitingForQuota")
    by_kind = {c["kind"]: c for c in ex["counterfactuals"]}
    assert by_kind["quota"]["nominalQuota"] == [
        {"flavor": rf, "resource": b.GPU, "now": "4", "needed": "6"}
    ]
    assert [w["workload"] for w in by_kind["finish"]["workloads"]] == [big_key]
    # big runs 300 s from its start: the estimate is within that window from now
    assert ex["estimate"]["at"] is not None
    assert 200 < ex["estimate"]["inSeconds"] <= 300

    after = _atoll(cluster, "explain", f"{namespace}/after")
    assert (after["position"], after["ahead"]) == (2, [ex["workload"]])
    # next runs 30 s after big ends; after fits beside it (4 GPUs, 2 + 2)
    assert abs(after["estimate"]["at"] - ex["estimate"]["at"]) < 2


def test_what_if_borrowing_and_preemption_create_nothing(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, tmp_path: Path
) -> None:
    rf, cohort = f"rf-{namespace}", f"co-{namespace}"
    a, lender = f"a-{namespace}", f"b-{namespace}"
    apply(
        cluster,
        b.flavor(rf),
        b.priority_class(f"low-{namespace}", 10),
        b.priority_class(f"high-{namespace}", 1000),
        b.cluster_queue(
            a, rf, gpus=4, cohort=cohort, preemption={"withinClusterQueue": "LowerPriority"}
        ),
        b.cluster_queue(lender, rf, gpus=4, cohort=cohort),
        b.local_queue("qa", namespace, a),
    )
    wide = _job_file(tmp_path, b.job("wide", namespace, queue="qa", pods=6))
    answer = _atoll(cluster, "what-if", wide)
    assert answer["clusterQueue"] == a
    assert answer["decision"] == {
        "kind": "Admit",
        "flavors": f"cpu={rf}, nvidia.com/gpu={rf}",
        "borrowing": True,
    }
    # a Job without a queue name asks its namespace's LocalQueue `default`, as the webhook
    # would label it
    apply(cluster, b.local_queue("default", namespace, a))
    unlabelled = _job_file(tmp_path, b.job("plain", namespace, queue=None, pods=2))
    assert _atoll(cluster, "what-if", unlabelled)["clusterQueue"] == a
    _create(
        cluster,
        b.job("low", namespace, queue="qa", pods=8, run="300s", priority=f"low-{namespace}"),
    )
    _admitted(cluster, namespace, "low")
    low = workload_of(cluster, namespace, "low")
    assert low is not None
    vip = _job_file(
        tmp_path, b.job("vip", namespace, queue="qa", pods=4, priority=f"high-{namespace}")
    )
    answer = _atoll(cluster, "what-if", vip)
    assert answer["decision"]["kind"] == "Preempt"
    assert answer["decision"]["victims"] == [
        {"workload": f"{namespace}/{low['metadata']['name']}", "reason": "InClusterQueue"}
    ]
    # asking created nothing and evicted no one
    assert [
        j["metadata"]["name"] for j in get_json(cluster, "get", "jobs", "-n", namespace)["items"]
    ] == ["low"]
    assert len(get_json(cluster, "get", "workloads", "-n", namespace)["items"]) == 1
    assert condition(workload_of(cluster, namespace, "low"), "Evicted") is None


def _tas_queue(cluster: KubeCluster, ns: str) -> None:
    topo, rf = b.dgx_topology(ns)
    apply(cluster, topo, rf, b.cluster_queue(f"cq-{ns}", f"rf-{ns}", gpus=128))
    apply(cluster, b.local_queue("q", ns, f"cq-{ns}"))


def test_topology_what_if_and_preferred_counterfactual(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, tmp_path: Path
) -> None:
    cluster.add_shape(REPO / "examples" / "clusters" / "dgx-h100.yaml")
    _tas_queue(cluster, namespace)
    # a rack holds 4 nodes x 8 GPUs: 16 one-GPU pods fit in one rack, 40 never do
    fits = _atoll(
        cluster,
        "what-if",
        _job_file(
            tmp_path,
            b.job("ring", namespace, queue="q", pods=16, run="20s", required_topology=RACK),
        ),
    )
    assert fits["decision"]["kind"] == "Admit"
    (where,) = fits["domains"]
    assert where.startswith(f"main: {RACK}=")
    wide = _atoll(
        cluster,
        "what-if",
        _job_file(
            tmp_path,
            b.job("wide", namespace, queue="q", pods=40, run="20s", required_topology=RACK),
        ),
    )
    assert wide["decision"]["kind"] == "Pending"
    assert wide["decision"]["reason"] == "TopologyPlacementFailed"
    assert wide["domains"] == []

    _create(
        cluster, b.job("wide", namespace, queue="q", pods=40, run="20s", required_topology=RACK)
    )
    _pending(cluster, namespace, "wide")
    ex = _atoll(cluster, "explain", f"{namespace}/wide")
    assert ex["decision"]["reason"] == "TopologyPlacementFailed"
    kinds = [c["kind"] for c in ex["counterfactuals"]]
    assert "preferred" in kinds
    assert "quota" not in kinds  # quota is not what stops it
    assert get_json(cluster, "get", "pods", "-n", namespace)["items"] == []


def test_explain_names_what_it_cannot_find(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    del operator  # atoll's CRDs installed: the Workload is missing, not its kind
    kube = str(cluster.kubeconfig)
    out = subprocess.run(
        [sys.executable, "-m", "atoll", "explain", f"{namespace}/nope", "--kubeconfig", kube],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 1
    assert f"no Workload for job '{namespace}/nope'" in out.stderr
