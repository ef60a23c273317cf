"""The fake execution and the recorder (mirrors Kueue's test/performance/scheduler/runner/
controller and runner/recorder).

One watch on every benchmark Workload. When a Workload becomes Admitted, it "runs" for its
class's runtime, then the runner marks it Finished=True (reason Succeeded). When one is
Evicted while it still holds a quota reservation, the runner clears the reservation
(QuotaReserved=False reason Pending, Admitted=False, admission removed), as Kueue's runner
does, because no Job exists to be stopped. Writes are merge patches guarded by the
resourceVersion; on a conflict the runner re-reads and decides again.

Times are taken when events arrive on the watch (time.monotonic), as Kueue's recorder does:
time-to-admission = first Admitted=True event - first event of the Workload. Usage per
ClusterQueue is the integral of the cpu of its admitted, unfinished Workloads over the run,
divided by nominal quota x run span (Kueue reads the same from ClusterQueue status; computing
it from Workload events keeps it independent of how often each controller writes that status).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from generator import API, BENCH_LABEL, CLASS_LABEL, RUNTIME_LABEL, Shape
from kubeclient import ApiError, KubeClient

WORKLOADS = f"/apis/{API}/workloads"


def _ns_path(ns: str, name: str) -> str:
    return f"/apis/{API}/namespaces/{ns}/workloads/{name}"


def _now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    conds = (obj.get("status") or {}).get("conditions") or []
    return {c["type"]: c for c in conds}


def _is_true(conds: dict[str, dict[str, Any]], type_: str) -> bool:
    c = conds.get(type_)
    return c is not None and c.get("status") == "True"


def change_kind(before: dict[str, Any], after: dict[str, Any]) -> str:
    """What one Workload change seen on the watch did, by its conditions: `admit`, `evict`,
    `pending-first` (the first QuotaReserved=False), `pending-update` (its reason or message
    changed), `finish` and `unreserve` (the runner's writes), or `other`."""
    b, a = _conditions(before), _conditions(after)
    if _is_true(a, "Finished") and not _is_true(b, "Finished"):
        return "finish"
    if _is_true(a, "QuotaReserved") and not _is_true(b, "QuotaReserved"):
        return "admit"
    if _is_true(a, "Evicted") and not _is_true(b, "Evicted"):
        return "evict"
    if _is_true(b, "QuotaReserved") and not _is_true(a, "QuotaReserved"):
        return "unreserve"
    old, new = b.get("QuotaReserved"), a.get("QuotaReserved")
    if new is not None and not _is_true(a, "QuotaReserved"):
        if old is None:
            return "pending-first"
        if (old.get("reason"), old.get("message")) != (new.get("reason"), new.get("message")):
            return "pending-update"
    return "other"


def _set_condition(
    obj: dict[str, Any], type_: str, status: str, reason: str, message: str
) -> list[dict[str, Any]]:
    conds = [c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] != type_]
    old = _conditions(obj).get(type_)
    changed = old is None or old.get("status") != status
    conds.append(
        {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": _now_rfc3339() if changed else old["lastTransitionTime"],  # type: ignore[index]
            "observedGeneration": obj["metadata"].get("generation", 1),
        }
    )
    return conds


@dataclass(slots=True)
class WorkloadRecord:
    ns: str
    name: str
    cls: str
    cpu_milli: int
    runtime_s: float
    first_seen: float
    obj: dict[str, Any] = field(default_factory=dict)
    seen: dict[str, Any] = field(default_factory=dict)
    """The last version seen on the watch (`obj` may be a newer write's response)."""
    admitted_at: float | None = None
    running_since: float | None = None
    busy_cpu_ms: float = 0.0
    finished_at: float | None = None
    finish_due: float | None = None
    finish_written: float | None = None
    evictions: int = 0
    evicted: bool = False
    epoch: int = 0

    @property
    def cq(self) -> str:
        return self.ns


def _cpu_milli(obj: dict[str, Any]) -> int:
    total = 0
    for ps in obj["spec"]["podSets"]:
        for c in ps["template"]["spec"]["containers"]:
            raw = str(((c.get("resources") or {}).get("requests") or {}).get("cpu", "0"))
            milli = int(raw[:-1]) if raw.endswith("m") else int(float(raw) * 1000)
            total += milli * int(ps.get("count", 1))
    return total


class Runner:
    """Watches, finishes and un-reserves benchmark Workloads; records their timeline."""

    def __init__(self, client: KubeClient, shape: Shape) -> None:
        self.client = client
        self.shape = shape
        self.records: dict[str, WorkloadRecord] = {}
        self.expected = shape.total_workloads
        self.finished = 0
        self.all_finished = asyncio.Event()
        self.started = time.monotonic()
        self.last_finish = self.started
        self.events = 0
        self.changes: Counter[str] = Counter()
        """Workload changes seen on the watch, by `change_kind`."""
        self.writes = 0
        self.conflicts = 0
        self.errors: list[str] = []
        self._tasks: set[asyncio.Task[None]] = set()

    # -- watch -----------------------------------------------------------------------------
    async def run(self) -> None:
        params = {"labelSelector": f"{BENCH_LABEL}=true"}
        listing = await self.client.request("GET", WORKLOADS, params=params)
        rv = listing["metadata"]["resourceVersion"]
        for obj in listing.get("items") or []:
            self._handle(obj, time.monotonic())
        while True:
            try:
                async for ev in self.client.watch(WORKLOADS, rv, params):
                    obj = ev["object"]
                    if ev["type"] == "ERROR":
                        raise ApiError(int(obj.get("code", 500)), str(obj.get("message")))
                    rv = obj["metadata"]["resourceVersion"]
                    if ev["type"] in ("ADDED", "MODIFIED"):
                        self._handle(obj, time.monotonic())
            except ApiError as e:
                if e.status != 410:
                    raise
                listing = await self.client.request("GET", WORKLOADS, params=params)
                rv = listing["metadata"]["resourceVersion"]
                for obj in listing.get("items") or []:
                    self._handle(obj, time.monotonic())

    def _handle(self, obj: dict[str, Any], now: float) -> None:
        uid = obj["metadata"]["uid"]
        rec = self.records.get(uid)
        if rec is None:
            labels = obj["metadata"].get("labels") or {}
            rec = WorkloadRecord(
                ns=obj["metadata"]["namespace"],
                name=obj["metadata"]["name"],
                cls=labels.get(CLASS_LABEL, "?"),
                cpu_milli=_cpu_milli(obj),
                runtime_s=int(labels.get(RUNTIME_LABEL, "0")) / 1000,
                first_seen=now,
            )
            self.records[uid] = rec
        else:
            self.changes[change_kind(rec.seen, obj)] += 1
        rec.obj = rec.seen = obj
        self.events += 1
        conds = _conditions(obj)
        admitted, finished = _is_true(conds, "Admitted"), _is_true(conds, "Finished")
        evicted, reserved = _is_true(conds, "Evicted"), _is_true(conds, "QuotaReserved")
        running = admitted and not finished
        if running and rec.running_since is None:
            rec.running_since = now
            rec.epoch += 1
            if rec.admitted_at is None:
                rec.admitted_at = now
            self._spawn(self._finish_later(rec, rec.epoch))
        elif not running and rec.running_since is not None:
            rec.busy_cpu_ms += rec.cpu_milli * (now - rec.running_since)
            rec.running_since = None
        if evicted and not rec.evicted:
            rec.evictions += 1
        rec.evicted = evicted
        if evicted and reserved and not finished:
            self._spawn(self._unreserve(rec))
        if finished and rec.finished_at is None:
            rec.finished_at = now
            self.finished += 1
            self.last_finish = now
            if self.finished >= self.expected:
                self.all_finished.set()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.errors.append(repr(task.exception())[:300])

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- writes ----------------------------------------------------------------------------
    async def _patch_status(self, rec: WorkloadRecord, status: dict[str, Any]) -> bool:
        """Merge-patch the status at the record's resourceVersion; False on a conflict (the
        record then holds the fresh object)."""
        body = {"metadata": {"resourceVersion": rec.obj["metadata"]["resourceVersion"]}}
        body["status"] = status  # type: ignore[assignment]
        try:
            self.writes += 1
            rec.obj = await self.client.request(
                "PATCH",
                _ns_path(rec.ns, rec.name) + "/status",
                body,
                content_type="application/merge-patch+json",
            )
            return True
        except ApiError as e:
            if e.status != 409:
                raise
            self.conflicts += 1
            fresh = await self.client.request("GET", _ns_path(rec.ns, rec.name))
            if int(fresh["metadata"]["resourceVersion"]) > int(
                rec.obj["metadata"]["resourceVersion"]
            ):
                rec.obj = fresh
            return False

    async def _finish_later(self, rec: WorkloadRecord, epoch: int) -> None:
        rec.finish_due = time.monotonic() + rec.runtime_s
        await asyncio.sleep(rec.runtime_s)
        for _ in range(20):
            conds = _conditions(rec.obj)
            still = _is_true(conds, "Admitted") and not _is_true(conds, "Evicted")
            if rec.epoch != epoch or not still or _is_true(conds, "Finished"):
                return
            conditions = _set_condition(
                rec.obj, "Finished", "True", "Succeeded", "Finished by the benchmark runner"
            )
            if await self._patch_status(rec, {"conditions": conditions}):
                rec.finish_written = time.monotonic()
                return
        self.errors.append(f"gave up finishing {rec.ns}/{rec.name}")

    async def _unreserve(self, rec: WorkloadRecord) -> None:
        for _ in range(20):
            conds = _conditions(rec.obj)
            if not (_is_true(conds, "Evicted") and _is_true(conds, "QuotaReserved")):
                return
            if _is_true(conds, "Finished"):
                return
            obj = dict(rec.obj)
            conditions = _set_condition(
                obj, "QuotaReserved", "False", "Pending", "Evicted by the test runner"
            )
            obj["status"] = {**obj.get("status", {}), "conditions": conditions}
            if _is_true(conds, "Admitted"):
                conditions = _set_condition(
                    obj, "Admitted", "False", "NoReservation", "The workload has no reservation"
                )
            if await self._patch_status(rec, {"conditions": conditions, "admission": None}):
                return
        self.errors.append(f"gave up un-reserving {rec.ns}/{rec.name}")

    # -- summary ---------------------------------------------------------------------------
    def summary(self, end: float | None = None) -> dict[str, Any]:
        end = end if end is not None else self.last_finish
        span = max(1e-9, end - self.started)
        classes: dict[str, dict[str, Any]] = {}
        for wc in self.shape.classes:
            recs = [r for r in self.records.values() if r.cls == wc.name]
            waits = sorted(
                (r.admitted_at - r.first_seen) * 1000 for r in recs if r.admitted_at is not None
            )
            runs = [
                (r.finished_at - r.admitted_at) * 1000
                for r in recs
                if r.finished_at is not None and r.admitted_at is not None
            ]
            lags = [
                (r.finish_written - r.finish_due) * 1000
                for r in recs
                if r.finish_written is not None and r.finish_due is not None
            ]
            classes[wc.name] = {
                "count": len(recs),
                "admitted": len(waits),
                "finished": sum(1 for r in recs if r.finished_at is not None),
                "evictions": sum(r.evictions for r in recs),
                "avg_ms": statistics.fmean(waits) if waits else math.nan,
                "p50_ms": _percentile(waits, 0.50),
                "p99_ms": _percentile(waits, 0.99),
                "max_ms": waits[-1] if waits else math.nan,
                # admitted -> Finished seen on the watch: the run time plus the runner's lag
                "avg_run_ms": statistics.fmean(runs) if runs else math.nan,
                # due -> Finished written (the runner's own delay; large = the harness lags)
                "avg_finish_lag_ms": statistics.fmean(lags) if lags else math.nan,
            }
        busy = 0.0
        for r in self.records.values():
            busy += r.busy_cpu_ms
            if r.running_since is not None:
                busy += r.cpu_milli * (end - r.running_since)
        nominal = len(self.shape.cluster_queues) * self.shape.nominal_cpu * 1000
        admitted = sum(1 for r in self.records.values() if r.admitted_at is not None)
        return {
            "workloads": len(self.records),
            "expected": self.expected,
            "finished": self.finished,
            "admitted": admitted,
            "wall_s": span,
            "admissions_per_s": admitted / span,
            "usage_pct": 100 * busy / (nominal * span),
            "classes": classes,
            # every ADDED/MODIFIED Workload event: creates + all controllers' and the
            # runner's writes; minus creates and runner writes = the controller's writes
            "workload_events": self.events,
            "controller_workload_writes": (
                self.events - len(self.records) - (self.writes - self.conflicts)
            ),
            "unfinished": [
                {
                    "workload": f"{r.ns}/{r.name}",
                    "conditions": {
                        t: (c.get("status"), c.get("reason")) for t, c in _conditions(r.obj).items()
                    },
                }
                for r in self.records.values()
                if r.finished_at is None
            ][:5],
            "workload_changes": dict(sorted(self.changes.items())),
            "runner_writes": self.writes,
            "runner_conflicts": self.conflicts,
            "runner_errors": self.errors[:10],
        }


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    k = max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[k]
