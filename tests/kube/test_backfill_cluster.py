"""Reservation and backfill on the sandbox: a 4 x 8-GPU gang behind a stream of small Jobs
with `kueue.x-k8s.io/max-exec-time-seconds`, on a 32-GPU ClusterQueue of the dgx nodes.

Two 8-GPU Jobs hold half the quota; they would run 60 s but their limit is 30 s, which
atoll enforces, so their guaranteed end is known from their admission. 2-GPU Jobs of 6 s
(limit 10 s) arrive two at a time, about every second, and keep GPUs busy all the time.
With `atoll.dev/backfill: "true"` the gang reserves the quota from the long Jobs' guaranteed
end (admission + limit + the queue's grace), small Jobs still run in the gap (those that end
before it), and the gang starts at the reserved time. Without the annotation (Kueue's
BestEffortFIFO) the stream always holds a few GPUs and the gang never starts.
"""

from __future__ import annotations

import calendar
import json
import time
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from atoll.api.configuration import parse_duration
from atoll.state.reserving import clock
from tests.conftest import KubeCluster
from tests.kube import builders as b
from tests.kube.conftest import OperatorProcess, apply, condition, get_json, is_true

pytestmark = pytest.mark.cluster

DGX = {"atoll.dev/node-group": "dgx"}
LIMIT = "kueue.x-k8s.io/max-exec-time-seconds"
WINDOW = 70.0
"""Seconds the stream of small Jobs lasts."""
LONG_LIMIT = 30
"""Seconds the two long Jobs may run (they would run 60 s): atoll evicts them then."""
GRACE = "3s"
"""The queue's `atoll.dev/backfill-grace`: what the reservation adds to every guaranteed end
(the time an evicted Workload may take to give its quota back)."""
RESOLUTION = 1.0
"""Seconds: Workload conditions' times (metav1.Time) are whole seconds, and the guaranteed
ends a reservation counts from are read from them."""
START_METRIC = "atoll_backfill_reservation_start_seconds"


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
    return float(calendar.timegm(time.strptime(c["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ")))


def _reservation_start(operator: OperatorProcess, cq: str) -> float | None:
    """The operator's stated start of the queue's reservation (Unix time), from its metric."""
    for family in text_string_to_metric_families(operator.metrics()):
        if family.name == START_METRIC:
            for s in family.samples:
                if s.labels.get("cluster_queue") == cq:
                    return float(s.value)
    return None


def _story(
    cluster: KubeCluster, operator: OperatorProcess, ns: str, *, backfill: bool
) -> dict[str, Any]:
    rf, cq = f"dgx-{ns}", f"cq-{ns}"
    queue = b.cluster_queue(cq, rf, gpus=32)
    if backfill:
        queue["metadata"]["annotations"] = {
            "atoll.dev/backfill": "true",
            "atoll.dev/backfill-grace": GRACE,
        }
    apply(cluster, b.flavor(rf, node_labels=DGX), queue, b.local_queue("q", ns, cq))
    for i in range(2):
        _create(cluster, _job(f"long-{i}", ns, pods=1, gpus=8, run="60s", limit=LONG_LIMIT))
    start = time.monotonic()
    gang_at: float | None = None
    message = ""
    starts: list[float] = []
    admitted: dict[str, float] = {}
    """By Job name: when its Workload got quota (the long Jobs lose it at their limit)."""
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
        for name, wl in wls.items():
            if (t := _reserved_at(wl)) is not None:
                admitted.setdefault(name, t)
        gang = wls.get("gang")
        if is_true(gang, "QuotaReserved"):
            break
        c = condition(gang, "QuotaReserved")
        if c is not None and "reserved" in c.get("message", ""):
            message = message or c["message"]
            # the gang holds the queue's reservation until it is admitted (the Jobs queued
            # after it come after it), so the queue's start, read before that, is the gang's;
            # one not in the future says it fits now (the long Jobs were just evicted)
            stated = _reservation_start(operator, cq)
            now = time.time()
            if (
                stated is not None
                and stated > now
                and not is_true(_workloads(cluster, ns).get("gang"), "QuotaReserved")
            ):
                starts.append(stated)
        time.sleep(0.5)
    wls = _workloads(cluster, ns)
    return {
        "gang_created": gang_at,
        "gang_reserved": _reserved_at(wls.get("gang")),
        "long_reserved": [admitted.get(f"long-{i}") for i in range(2)],
        "small_reserved": [
            t
            for name, wl in wls.items()
            if name.startswith("small-") and (t := _reserved_at(wl) or admitted.get(name))
        ],
        "message": message,
        "starts": starts,
    }


def test_backfill_starts_the_gang_at_its_reserved_time_while_small_jobs_fill_the_gap(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, dgx: list[str]
) -> None:
    seen = _story(cluster, operator, namespace, backfill=True)
    assert seen["gang_reserved"] is not None, f"the gang never started: {seen['message']!r}"
    assert seen["starts"], "the reservation's start was never exported"
    # the long Jobs' ends are guaranteed: every step states the same start until then
    distinct = sorted(set(seen["starts"]))
    assert len(distinct) == 1, (
        f"the stated start moved: {distinct} (gang created at {seen['gang_created']}, the long "
        f"Jobs reserved at {seen['long_reserved']})"
    )
    stated = distinct[0]
    grace = parse_duration(GRACE)
    assert None not in seen["long_reserved"], seen
    long_end = max(seen["long_reserved"]) + LONG_LIMIT
    # the start stated is the long Jobs' guaranteed end: their admission, limit and grace
    assert stated == long_end + grace, seen
    assert f"reserved 32 nvidia.com/gpu in dgx-{namespace} from {clock(stated)}" in seen["message"]
    # the gang is admitted once the long Jobs are evicted at their limit and have given the
    # quota back (the grace is the time allowed for that): not before the limit, not after
    # the start, give or take the conditions' whole seconds
    admitted = seen["gang_reserved"]
    assert stated - grace - RESOLUTION <= admitted <= stated + RESOLUTION, (admitted - stated, seen)
    gap = [t for t in seen["small_reserved"] if seen["gang_created"] < t < admitted]
    assert gap, "small Jobs ending before the reservation must run in the gap"
    events = get_json(cluster, "get", "events", "-n", namespace)["items"]
    reasons = [e["reason"] for e in events]
    assert "ReservationMade" in reasons
    assert "ReservationSlid" not in reasons  # guaranteed ends: the start never moves later


def test_without_backfill_the_stream_starves_the_gang(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str, dgx: list[str]
) -> None:
    seen = _story(cluster, operator, namespace, backfill=False)
    assert seen["gang_reserved"] is None
    assert len(seen["small_reserved"]) > 10
