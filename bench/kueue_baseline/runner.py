"""The fake execution and the recorder (mirrors Kueue's test/performance/scheduler/runner/
controller and runner/recorder).

One watch on every benchmark Workload. When a Workload becomes Admitted, it "runs" for its
class's runtime, then the runner marks it Finished=True (reason Succeeded). When one is
Evicted while it still holds a quota reservation, the runner clears the reservation
(QuotaReserved=False reason Pending, Admitted=False, admission removed), as Kueue's runner
does, because no Job exists to be stopped. Writes are merge patches guarded by the
resourceVersion; on a conflict the runner re-reads and decides again.

Those two reactions start on watch events; a sweep (every `sweep_s`) starts them again
whenever the watch has caught up with a Workload and left it without one: Admitted, not
Evicted, not Finished, its run time over and no finish pending (the finish gave up on a
transient eviction that the controller then withdrew, a re-list after 410 Gone coalesced an
un-admission and re-admission, or the write failed), or Evicted and still reserved with no
un-reserve pending. A rescued finish is written at once (its due time, admission seen + run
time, is past); for a Workload the events handled, the sweep finds the write pending (or done)
and does nothing, so it changes no timing. Rescues, task errors (with the Workload) and watch
re-lists are counted in the summary.

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
import re
import statistics
import time
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from generator import API, BENCH_LABEL, CLASS_LABEL, RUNTIME_LABEL, Shape
from kubeclient import ApiError, KubeClient

WORKLOADS = f"/apis/{API}/workloads"


_PREEMPTOR_UID = re.compile(r"\(UID: ([^,)\s]+)")
"""The preemptor's UID in an Evicted message: `Preempted to accommodate a workload (UID: u, ...`."""


ROUND_GAP_S = 0.5
"""Evictions by one preemptor seen this far apart belong to different preemption rounds."""


def preemption_rounds(times: list[float]) -> int:
    """How many rounds of preemption `times` (when one preemptor's victims were seen
    evicted) make: a round ends at a gap of more than ROUND_GAP_S."""
    ordered = sorted(times)
    return sum(1 for i, t in enumerate(ordered) if i == 0 or t - ordered[i - 1] > ROUND_GAP_S)


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


def _rv(obj: dict[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


def _idle(task: asyncio.Task[None] | None) -> bool:
    return task is None or task.done()


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


def _preemptor(conds: dict[str, dict[str, Any]]) -> str:
    """The UID of the Workload an eviction was for, named in the Evicted condition's message
    (`Preempted to accommodate a workload (UID: u, ...`), or "" if none."""
    match = _PREEMPTOR_UID.search((conds.get("Evicted") or {}).get("message", ""))
    return match.group(1) if match else ""


def _pending_message(obj: dict[str, Any]) -> str:
    c = _conditions(obj).get("QuotaReserved") or {}
    return f"{c.get('reason')}: {re.sub(r'[0-9]+', 'N', c.get('message') or '')}"


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
    """The newest version known: from the watch, a write's response or a re-read; never
    replaced by an older one (the watch may still be delivering versions a write outran)."""
    seen: dict[str, Any] = field(default_factory=dict)
    """The last version seen on the watch."""
    admitted_at: float | None = None
    running_since: float | None = None
    busy_cpu_ms: float = 0.0
    finished_at: float | None = None
    finish_due: float | None = None
    finish_written: float | None = None
    evictions: int = 0
    evicted: bool = False
    epoch: int = 0
    """Bumped when a running period (Admitted, not Finished) starts on the watch."""
    finisher: asyncio.Task[None] | None = None
    """The finish of the current running period, while it is pending."""
    unreserver: asyncio.Task[None] | None = None
    changes: list[str] = field(default_factory=list)
    """Its changes seen on the watch, by `change_kind` (shown with a rescue)."""

    @property
    def cq(self) -> str:
        return self.ns

    @property
    def key(self) -> str:
        return f"{self.ns}/{self.name}"


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

    def __init__(self, client: KubeClient, shape: Shape, sweep_s: float = 1.0) -> None:
        self.client = client
        self.shape = shape
        self.sweep_s = sweep_s
        self.records: dict[str, WorkloadRecord] = {}
        self.expected = shape.total_workloads
        self.finished = 0
        self.all_finished = asyncio.Event()
        self.started = time.monotonic()
        self.last_finish = self.started
        self.events = 0
        self.changes: Counter[str] = Counter()
        """Workload changes seen on the watch, by `change_kind`."""
        self.pending_messages: Counter[str] = Counter()
        """Pending statuses written (first or changed), by reason and message with its
        numbers blanked: which of a controller's pending writes are frequent."""
        self.eviction_kinds: Counter[str] = Counter()
        """Evictions by the evicted class, the preemptor's class and the reason
        (`medium by large, InCohortReclamation`): who makes room for whom, and how."""
        self.preemptions: dict[str, list[float]] = {}
        """Preemptor UID → when each of its victims was seen evicted: how many preemptors
        there were, and how many rounds each needed (`preemption_rounds`)."""
        self.writes = 0
        self.conflicts = 0
        self.errors: list[str] = []
        self.error_count = 0
        self.rescued: Counter[str] = Counter()
        """Finishes and un-reserves the sweep had to start, by kind."""
        self.rescued_workloads: list[str] = []
        self.sweeps = 0
        self.relists = 0
        self.watch_restarts = 0
        self.timeline: list[tuple[float, str, str, str]] = []
        """(time since start, UID, change kind, preemptor UID for an `evict`, else "") of every
        Workload change seen on the watch, `create` first: written to timeline.json for
        bench/kueue_baseline/preemptions.py."""
        self._tasks: set[asyncio.Task[None]] = set()

    # -- watch -----------------------------------------------------------------------------
    async def run(self) -> None:
        """The watch and the sweep, until cancelled; raises what either raises."""
        tasks = {
            asyncio.create_task(self._watch(), name="watch"),
            asyncio.create_task(self._sweep(), name="sweep"),
        }
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for t in done:
                t.result()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _list(self, params: dict[str, str]) -> str:
        listing = await self.client.request("GET", WORKLOADS, params=params)
        for obj in listing.get("items") or []:
            rec = self.records.get(obj["metadata"]["uid"])
            # a re-list repeats the Workloads that did not change: they are no event
            if rec is None or _rv(obj) > _rv(rec.seen):
                self._handle(obj, time.monotonic())
        return str(listing["metadata"]["resourceVersion"])

    async def _watch(self) -> None:
        params = {"labelSelector": f"{BENCH_LABEL}=true"}
        rv = await self._list(params)
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
                # the versions since rv are gone: the listing shows only where each Workload
                # is now (what happened in between is coalesced; the sweep covers it)
                self.relists += 1
                rv = await self._list(params)
            except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
                self.watch_restarts += 1  # the stream broke: resume from rv
                await asyncio.sleep(0.5)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_s)
            self.sweep(time.monotonic())

    def sweep(self, now: float) -> None:
        """Start the finish or un-reserve a Workload needs when none is pending (module
        docstring). Only once the watch has brought the newest version the runner knows (a
        write's response or a re-read can be ahead of it): until then the event of that version
        is still to come and decides as in any run."""
        self.sweeps += 1
        for rec in self.records.values():
            if rec.finished_at is not None or _rv(rec.seen) < _rv(rec.obj):
                continue
            conds = _conditions(rec.obj)
            if _is_true(conds, "Finished"):
                continue
            evicted = _is_true(conds, "Evicted")
            if evicted and _is_true(conds, "QuotaReserved") and _idle(rec.unreserver):
                self._rescue(rec, "unreserve")
                rec.unreserver = self._spawn(self._unreserve(rec), f"unreserve {rec.key}")
            elif (
                _is_true(conds, "Admitted")
                and not evicted
                and rec.running_since is not None
                and now >= rec.running_since + rec.runtime_s
                and _idle(rec.finisher)
            ):
                self._rescue(rec, "finish")
                due = rec.running_since + rec.runtime_s
                rec.finisher = self._spawn(
                    self._finish_at(rec, rec.epoch, due), f"finish {rec.key}"
                )

    def _rescue(self, rec: WorkloadRecord, kind: str) -> None:
        self.rescued[kind] += 1
        if len(self.rescued_workloads) < 20:
            self.rescued_workloads.append(f"{kind} {rec.key} after {' '.join(rec.changes)}")

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
            kind = "create"
        else:
            kind = change_kind(rec.seen, obj)
            self.changes[kind] += 1
            if kind.startswith("pending"):
                self.pending_messages[_pending_message(obj)] += 1
            rec.changes.append(kind)
        rec.seen = obj
        if not rec.obj or _rv(obj) >= _rv(rec.obj):
            rec.obj = obj
        self.events += 1
        conds = _conditions(obj)
        by = _preemptor(conds) if kind == "evict" else ""
        self.timeline.append((now - self.started, uid, kind, by))
        admitted, finished = _is_true(conds, "Admitted"), _is_true(conds, "Finished")
        evicted, reserved = _is_true(conds, "Evicted"), _is_true(conds, "QuotaReserved")
        running = admitted and not finished
        if running and rec.running_since is None:
            rec.running_since = now
            rec.epoch += 1
            if rec.admitted_at is None:
                rec.admitted_at = now
            rec.finisher = self._spawn(
                self._finish_at(rec, rec.epoch, now + rec.runtime_s), f"finish {rec.key}"
            )
        elif not running and rec.running_since is not None:
            rec.busy_cpu_ms += rec.cpu_milli * (now - rec.running_since)
            rec.running_since = None
        if evicted and not rec.evicted:
            rec.evictions += 1
            self.eviction_kinds[self._eviction_kind(rec, conds)] += 1
        rec.evicted = evicted
        if evicted and reserved and not finished:
            rec.unreserver = self._spawn(self._unreserve(rec), f"unreserve {rec.key}")
        if finished and rec.finished_at is None:
            rec.finished_at = now
            self.finished += 1
            self.last_finish = now
            if self.finished >= self.expected:
                self.all_finished.set()

    def _eviction_kind(self, rec: WorkloadRecord, conds: dict[str, dict[str, Any]]) -> str:
        """`<evicted class> by <preemptor class>, <reason>`: the reason is the Preempted
        condition's (InClusterQueue, InCohortReclamation, ...) or else the Evicted one's; the
        preemptor is found by the UID both controllers name in the Evicted message."""
        evicted = conds.get("Evicted") or {}
        preempted = conds.get("Preempted") or {}
        reason = (
            preempted.get("reason") if preempted.get("status") == "True" else None
        ) or evicted.get("reason", "?")
        uid = _preemptor(conds)
        by = self.records.get(uid) if uid else None
        if uid:
            self.preemptions.setdefault(uid, []).append(time.monotonic())
        return f"{rec.cls} by {by.cls if by else '?'}, {reason}"

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._error(f"{task.get_name()}: {exc!r}")

    def _error(self, message: str) -> None:
        self.error_count += 1
        if len(self.errors) < 100:
            self.errors.append(message[:300])

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
            written = await self.client.request(
                "PATCH",
                _ns_path(rec.ns, rec.name) + "/status",
                body,
                content_type="application/merge-patch+json",
            )
            if _rv(written) >= _rv(rec.obj):  # the watch may have brought a later one
                rec.obj = written
            return True
        except ApiError as e:
            if e.status != 409:
                raise
            self.conflicts += 1
            fresh = await self.client.request("GET", _ns_path(rec.ns, rec.name))
            if _rv(fresh) > _rv(rec.obj):
                rec.obj = fresh
            return False

    async def _finish_at(self, rec: WorkloadRecord, epoch: int, due: float) -> None:
        """Finished=True at `due` (admission seen + run time) unless the running period it
        belongs to (`epoch`) is over, the Workload is evicted or already Finished."""
        rec.finish_due = due
        await asyncio.sleep(max(0.0, due - time.monotonic()))
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
        self._error(f"finish {rec.key}: gave up after 20 conflicts")

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
        self._error(f"unreserve {rec.key}: gave up after 20 conflicts")

    def timeline_doc(self) -> dict[str, Any]:
        """The timeline with what it needs to be read alone: each Workload's ClusterQueue,
        class and name, and when the run started (Unix time), to find them in a
        controller's log."""
        return {
            "started_unix": time.time() - (time.monotonic() - self.started),
            "workloads": {uid: [r.cq, r.cls, r.name] for uid, r in self.records.items()},
            "events": [[round(t, 4), u, k, p] for t, u, k, p in self.timeline],
        }

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
            "pending_messages": dict(self.pending_messages.most_common(8)),
            "eviction_kinds": dict(self.eviction_kinds.most_common()),
            "preemptors": len(self.preemptions),
            "preemption_rounds": sum(map(preemption_rounds, self.preemptions.values())),
            "runner_writes": self.writes,
            "runner_conflicts": self.conflicts,
            "runner_errors": self.errors[:10],
            "runner_error_count": self.error_count,
            # the sweep's rescues: each one is a Workload the events alone left unfinished
            # (or reserved while evicted); its Finished was written late
            "runner_rescued": dict(sorted(self.rescued.items())),
            "runner_rescued_workloads": self.rescued_workloads[:10],
            "watch_relists": self.relists,
            "watch_restarts": self.watch_restarts,
        }


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    k = max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[k]
