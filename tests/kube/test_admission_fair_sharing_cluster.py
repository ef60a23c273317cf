"""Admission Fair Sharing on the sandbox: with the Configuration's `admissionFairSharing`, a
ClusterQueue whose `admissionScope` asks for it admits the Job of the LocalQueue that used
less first, even when another LocalQueue's Job is older, and each LocalQueue's status shows
its sampled usage."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import KubeCluster
from tests.kube import builders as b
from tests.kube.conftest import (
    OperatorProcess,
    apply,
    atoll_json,
    create,
    get_json,
    is_true,
    replacing_operator,
    workload_of,
)

pytestmark = pytest.mark.cluster
AFS = {"usageHalfLifeTime": "10m", "usageSamplingInterval": "2s"}


def _admitted(cluster: KubeCluster, ns: str, job: str) -> bool:
    return is_true(workload_of(cluster, ns, job), "Admitted")


def _amount(text: str) -> float:
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def _explain(cluster: KubeCluster, *args: str) -> tuple[dict[str, Any], str]:
    """`atoll explain ARGS --json`: its answer and its stderr."""
    return atoll_json(cluster, "explain", *args)


def _afs_status(cluster: KubeCluster, ns: str, lq: str) -> dict[str, Any]:
    status = get_json(cluster, "get", "localqueue", lq, "-n", ns).get("status") or {}
    return (status.get("fairSharing") or {}).get("admissionFairSharingStatus") or {}


@pytest.fixture
def fair_queue(cluster: KubeCluster, namespace: str) -> Iterator[str]:
    """A ClusterQueue of 2 GPUs ordered by LocalQueue usage, deleted afterwards: every
    later `atoll explain` without `admissionFairSharing` would warn about it."""
    rf, cq = f"rf-{namespace}", f"cq-{namespace}"
    queue = b.cluster_queue(cq, rf, gpus=2)
    queue["spec"]["admissionScope"] = {"admissionMode": "UsageBasedAdmissionFairSharing"}
    apply(cluster, b.flavor(rf), queue)
    yield cq
    cluster.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)
    cluster.kubectl("delete", "resourceflavor", rf, "--wait=false", check=False)


def test_the_localqueue_that_used_less_is_admitted_first(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, fair_queue: str, tmp_path: Path
) -> None:
    ns, cq = namespace, fair_queue
    setting = f"admissionFairSharing={json.dumps(AFS)}"
    with replacing_operator(cluster, operator, tmp_path, "--set", setting):
        apply(cluster, b.local_queue("a", ns, cq), b.local_queue("b", ns, cq))
        create(cluster, b.job("a-1", ns, queue="a", pods=2, run="12s"))
        cluster.wait_for("a-1 admitted", lambda: _admitted(cluster, ns, "a-1"))
        # a-2 is older than b-1, and both wait for a-1's GPUs
        create(cluster, b.job("a-2", ns, queue="a", pods=2, run="600s"))
        cluster.wait_for("a-2 has a Workload", lambda: workload_of(cluster, ns, "a-2") is not None)
        create(cluster, b.job("b-1", ns, queue="b", pods=2, run="600s"))
        cluster.wait_for(
            "LocalQueue a's usage sampled with a-1's GPUs",
            lambda: (
                _amount(_afs_status(cluster, ns, "a").get("consumedResources", {}).get(b.GPU, "0"))
                > 0
            ),
            timeout=60,
        )
        assert _afs_status(cluster, ns, "a")["lastUpdate"]
        cluster.wait_for(
            "b-1 admitted after a-1", lambda: _admitted(cluster, ns, "b-1"), timeout=90
        )
        assert not _admitted(cluster, ns, "a-2")
        b_status = _afs_status(cluster, ns, "b")
        assert "lastUpdate" in b_status
    # explain, with and without the operator's setting: its answer alone on stdout (the
    # warning that the admission scope has no effect without it goes to stderr)
    plain, warned = _explain(cluster, f"{ns}/a-2")
    assert plain["localQueueUsage"] is None
    assert "admissionScope UsageBasedAdmissionFairSharing has no effect" in warned
    fair, _ = _explain(cluster, f"{ns}/a-2", "--set", setting)
    assert fair["localQueueUsage"] > 0
    assert fair["position"] == 1


def test_a_resource_the_usage_no_longer_has_leaves_the_localqueue_status(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, fair_queue: str, tmp_path: Path
) -> None:
    """The status is written as a merge patch: a resource whose usage decayed to nothing
    must be removed from `consumedResources` (a merge patch keeps the keys it does not
    name), and the usage read back after a restart must not bring it back."""
    ns = namespace
    apply(cluster, b.local_queue("a", ns, fair_queue))
    old = {
        "weightedShare": 0,
        "admissionFairSharingStatus": {
            "consumedResources": {"example.com/old": "5"},
            "lastUpdate": "2026-01-01T00:00:00Z",
        },
    }
    cluster.kubectl(
        "patch",
        "localqueue",
        "a",
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"fairSharing": old}}),
    )
    setting = f"admissionFairSharing={json.dumps(AFS)}"
    with replacing_operator(cluster, operator, tmp_path, "--set", setting):
        cluster.wait_for(
            "a sample of LocalQueue a written",
            lambda: (
                _afs_status(cluster, ns, "a").get("lastUpdate", "2026-01-01T00:00:00Z")
                != "2026-01-01T00:00:00Z"
            ),
            timeout=60,
        )
        status = _afs_status(cluster, ns, "a")
        assert "example.com/old" not in status.get("consumedResources", {}), status
