"""Reservation and backfill on the sandbox: a 4 x 8-GPU gang behind a stream of small Jobs
with `kueue.x-k8s.io/max-exec-time-seconds`, on a 32-GPU ClusterQueue of the dgx nodes.

Two 8-GPU Jobs hold half the quota for about 25 s; 2-GPU Jobs of 6 s (limit 10 s) arrive
two at a time, about every second, and keep GPUs busy all the time. With
`atoll.dev/backfill: "true"` the gang reserves the quota from when the two long Jobs end,
small Jobs still run in the gap (they end before it), and the gang starts at the reserved
time. Without the annotation
(Kueue's BestEffortFIFO) the stream always holds a few GPUs and the gang never starts.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.conftest import KubeCluster
from tests.kube import builders as b
from tests.kube.conftest import OperatorProcess, apply, condition, get_json, is_true

pytestmark = pytest.mark.cluster

DGX = {"atoll.dev/node-group": "dgx"}
LIMIT = "kueue.x-k8s.io/max-exec-time-seconds"
WINDOW = 70.0
"""Seconds the stream of small Jobs lasts."""


def _job(name: str, ns: str, *, pods: int, gpus: int, run: str, limit: int) -> dict[str, Any]:
    job = b.job(name, ns, queue="q", pods=pods, gpus=gpus, run=run, node_selector=DGX)
    job["metadata"]["labels"][LIMIT] = str(limit)
    return job


def _create(cluster: KubeCluster, job: dict[str, Any]) -> None:
    cluster.kubectl("create", "-f", "-", input=json.dumps(job))


def _workloads(cluster: KubeCluster, ns: str) -> dict[str, dict[str, Any]]:
    """By Job name."""
    out = {}
    for wl in get_json(cluster, "get", "workloads", "-n", ns)["items"]:
        for ref in wl["metadata"].get("ownerReferences") or []:
            if ref["kind"] == "Job":
                out[ref["name"]] = wl
    return out


def _reserved_at(wl: dict[str, Any] | None) -> float | None:
    c = condition(wl, "QuotaReserved")
    if c is None or c["status"] != "True":
        return None
    return time.mktime(time.strptime(c["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone


def _story(cluster: KubeCluster, ns: str, *, backfill: bool) -> dict[str, Any]:
    rf, cq = f"dgx-{ns}", f"cq-{ns}"
    queue = b.cluster_queue(cq, rf, gpus=32)
    if backfill:
        queue["metadata"]["annotations"] = {
            "atoll.dev/backfill": "true",
            "atoll.dev/backfill-grace": "1s",
        }
    apply(cluster, b.flavor(rf, node_labels=DGX), queue, b.local_queue("q", ns, cq))
    for i in range(2):
        _create(cluster, _job(f"long-{i}", ns, pods=1, gpus=8, run="25s", limit=40))
    start = time.monotonic()
    gang_at: float | None = None
    message = ""
    n = 0
    while time.monotonic() - start < WINDOW:
        smalls = [_job(f"small-{n + k}", ns, pods=1, gpus=2, run="6s", limit=10) for k in range(2)]
        cluster.kubectl(
            "create",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": smalls}),
        )
        n += 2
        if gang_at is None and time.monotonic() - start > 3:
            _create(cluster, _job("gang", ns, pods=4, gpus=8, run="5s", limit=60))
            gang_at = time.time()
        wls = _workloads(cluster, ns)
        gang = wls.get("gang")
        c = condition(gang, "QuotaReserved")
        if c is not None and c["status"] == "False" and "reserved" in c.get("message", ""):
            message = c["message"]
        if is_true(gang, "QuotaReserved"):
            break
        time.sleep(0.5)
    wls = _workloads(cluster, ns)
    return {
        "gang_created": gang_at,
        "gang_reserved": _reserved_at(wls.get("gang")),
        "long_reserved": [_reserved_at(wls.get(f"long-{i}")) for i in range(2)],
        "small_reserved": [
            t for name, wl in wls.items() if name.startswith("small-") and (t := _reserved_at(wl))
        ],
        "message": message,
    }


def test_backfill_starts_the_gang_by_its_reservation_while_small_jobs_fill_the_gap(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, dgx: list[str]
) -> None:
    seen = _story(cluster, namespace, backfill=True)
    assert seen["gang_reserved"] is not None, f"the gang never started: {seen['message']!r}"
    assert "reserved 32 nvidia.com/gpu" in seen["message"]
    long_start = max(t for t in seen["long_reserved"] if t is not None)
    # reserved from the long Jobs' estimated end (their 25 s run-duration hint); admitted
    # by then, give or take their pods' start and completion on the sandbox, one cycle and
    # the one-second resolution of the conditions
    assert seen["gang_reserved"] <= long_start + 25 + 15
    gap = [t for t in seen["small_reserved"] if seen["gang_created"] < t < seen["gang_reserved"]]
    assert gap, "small Jobs ending before the reservation must run in the gap"
    events = get_json(cluster, "get", "events", "-n", namespace)["items"]
    assert any(e["reason"] == "ReservationMade" for e in events)


def test_without_backfill_the_stream_starves_the_gang(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, dgx: list[str]
) -> None:
    seen = _story(cluster, namespace, backfill=False)
    assert seen["gang_reserved"] is None
    assert len(seen["small_reserved"]) > 10
