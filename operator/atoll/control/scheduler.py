"""The scheduling loop: heads of the queues → snapshot → engine cycle → assume → write.

Mirrors Kueue's pkg/scheduler/scheduler.go (`schedule`): nothing is awaited between taking
the snapshot and assuming the cycle's decisions in the cache, so the next cycle (and a crash
at any point) never double-counts or over-commits quota. The Workload status write is the
ledger of record; a failed write forgets the assumption and the workload is retried.
In the operator a pending status (why a Workload waits) is written after the cycle, behind
admissions in the API budget (`Scheduler.defer_pending`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import structlog

from atoll.api.workload import Workload
from atoll.control.metrics import AdmissionResult, Metrics
from atoll.control.ports import NotFoundError, ObjectRef, StatusMutation, WorkloadStore
from atoll.control.workload_metrics import (
    queued_wait,
    report_admitted,
    report_checks_passed,
    report_eviction,
)
from atoll.engine import decisions as d
from atoll.engine import model as m
from atoll.state import admissionchecks
from atoll.state import lifecycle as lc
from atoll.state import workloads as wls
from atoll.state.cache import Cache
from atoll.state.decide import Decider
from atoll.state.placing import assignments
from atoll.state.reserving import Change

log = structlog.get_logger("atoll.scheduler")

PENDING_DEFER_MAX = 10.0
"""Seconds a deferred pending status waits at most for spare API budget (`defer_pending`)."""

Emit = Callable[[ObjectRef, str, str, str], Awaitable[None]]


def workload_ref(wl: Workload) -> ObjectRef:
    return ObjectRef.of(wl, "Workload", "kueue.x-k8s.io/v1beta2")


@dataclass(slots=True)
class CycleResult:
    admitted: int = 0
    preempted: int = 0
    evicted: int = 0
    pending: int = 0
    failed_writes: int = 0
    decisions: tuple[d.Decision, ...] = ()
    heads: int = 0

    @property
    def progress(self) -> bool:
        return bool(self.admitted or self.preempted or self.evicted)


@dataclass(slots=True)
class Scheduler:
    """Runs cycles whenever woken; only the leader's scheduler writes."""

    cache: Cache
    store: WorkloadStore
    emit: Emit
    clock: Callable[[], float] = time.time
    fair_sharing: m.FairSharing | None = None
    on_cycle: Callable[[CycleResult, float], None] | None = None
    metrics: Metrics | None = None
    debounce: float = 0.01
    defer_pending: Callable[[], Awaitable[None]] | None = None
    """When set, pending statuses are written off the cycle by `write_pending`, each once this
    says the API budget has room to spare: admissions, preemptions and evictions go first. A
    newer decision for a Workload replaces one not written yet, and its admission drops it;
    one deferred `PENDING_DEFER_MAX` seconds is written without waiting. None: written in
    the cycle, as Kueue does."""
    samples_taken: Callable[[], None] | None = None
    """Called after a step that sampled the LocalQueues' usage (Admission Fair Sharing): their
    statuses are to be written."""
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    cycles: int = 0
    _decision: Decider | None = None
    _deferred: dict[str, tuple[d.Pending, dt.datetime, float]] = field(default_factory=dict)
    """Workload key → (its pending decision not written yet, the decision's time, when the
    first decision not written was deferred), oldest first."""
    _deferred_added: asyncio.Event = field(default_factory=asyncio.Event)

    def _decider(self) -> Decider:
        if self._decision is None:
            self._decision = Decider(self.cache, self.fair_sharing)
        return self._decision

    def wake(self) -> None:
        self._wake.set()

    def _now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.clock(), dt.UTC).replace(microsecond=0)

    async def evict_untrusted(self) -> int:
        """Evict the admissions read from Workload statuses that atoll cannot trust (a missing
        ClusterQueue or flavor, more than quota allows: `Cache.untrusted_admissions`), each
        with a Warning Event; run when this replica starts admitting. Returns how many."""
        now = self._now()
        refused = self.cache.untrusted_admissions()
        result = CycleResult()
        for r in refused:
            wl = self.cache.workloads.get(r.key)
            if wl is None:
                continue
            log.warning("untrusted admission evicted", workload=r.key, reason=r.reason.value)
            await self._evict(r.key, lc.evict(r.reason.value, r.message, now), result)
            await self.emit(workload_ref(wl), "Warning", r.reason.value, r.message)
        if refused:
            self.wake()
        return len(refused)

    async def run(self) -> None:
        """Forever: wait for a wake-up (or the next requeue time), then cycle until idle.
        A failing cycle is logged and retried: a bug must not stop admission for good."""
        while True:
            try:
                await self._wait_for_work()
                while True:
                    if not ((await self.run_once()).progress or self._decider().parked):
                        break
                    # A cycle whose writes need no I/O never reaches the event loop: let the
                    # watches and the writer in before the next one.
                    await asyncio.sleep(0)
            except Exception:
                log.exception("scheduling cycle failed", cycle=self.cycles)
                await asyncio.sleep(1.0)
                self.wake()

    async def _wait_for_work(self) -> None:
        timeout = None
        nxt = self.cache.next_requeue(self.clock())
        if nxt is not None:
            timeout = max(0.0, nxt - self.clock()) + 0.05
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)
        await asyncio.sleep(self.debounce)
        self._wake.clear()

    def decide(self) -> tuple[d.Decision, ...]:
        """One engine cycle on the current cache, with its decisions assumed. No awaits."""
        return self._decider().decide(self.clock())

    async def admission_checks(self) -> int:
        """What the admission checks' controllers decided, for every Workload that has checks
        or holds quota without being admitted (`Cache.checked`; Kueue's workload controller):
        a Rejected check deactivates the Workload, a Retry evicts it (its quota goes back and
        it queues again) or, without quota, resets its checks; the checks of one holding
        quota follow its ClusterQueue's, and once every one is Ready it is Admitted. Returns
        how many Workloads were written."""
        written = 0
        now = self._now()
        for key in sorted(self.cache.checked):
            wl = self.cache.workloads.get(key)
            if wl is None or wls.is_finished(wl) or wls.is_deleting(wl):
                continue
            if admissionchecks.rejected(wl):
                written += await self._rejected(wl, now)
                continue
            if admissionchecks.retrying(wl):
                mutate = lc.check_retry(now) if wls.has_quota(wl) else lc.checks_reset(now)
            else:
                mutate = lc.checks_synced(self._wanted_checks(wl), now)
            if mutate(wl) is None:
                continue
            got = await self._write(key, mutate, CycleResult())
            if got is None:
                continue
            written += 1
            self.cache.set_workload(got)
            if wls.is_evicted(got) and not wls.is_evicted(wl):
                report_eviction(self.metrics, got)
                log.info("workload evicted", workload=key, reason=admissionchecks.EVICTED_BY_CHECK)
            if wls.is_admitted(got) and not wls.is_admitted(wl):
                await self._checks_passed(got)
        return written

    def _wanted_checks(self, wl: Workload) -> tuple[str, ...]:
        adm = wl.status.admission
        if adm is None:
            return ()
        flavors = {str(f) for psa in adm.pod_set_assignments for f in (psa.flavors or {}).values()}
        return self.cache.admission_checks_for(adm.cluster_queue, flavors)

    async def _rejected(self, wl: Workload, now: dt.datetime) -> int:
        """A Rejected check: DeactivationTarget (reason AdmissionCheck) with a Warning Event,
        then `spec.active: false` (also when only that second write is left to do); the next
        cycle evicts it as any deactivated Workload."""
        key = wls.wl_key(wl)
        written = 0
        if not wls.is_true(wl, wls.DEACTIVATION_TARGET):
            names = admissionchecks.rejected(wl)
            first = next(s for s in admissionchecks.states(wl) if s.name == names[0])
            mutate = lc.deactivation_target(
                admissionchecks.EVICTED_BY_CHECK, lc.rejected_message(names), now
            )
            got = await self._write(key, mutate, CycleResult())
            if got is None:
                return 0
            self.cache.set_workload(got)
            written += 1
            await self.emit(
                workload_ref(got),
                "Warning",
                "AdmissionCheckRejected",
                f"Deactivating workload because AdmissionCheck for {first.name} was Rejected: "
                f"{first.message}",
            )
            log.info("workload deactivated", workload=key, reason="AdmissionCheckRejected")
        if wl.spec.active:
            try:
                await self.store.deactivate_workload(key)
            except NotFoundError:
                self.cache.delete_workload(key)
                return written
            written += 1
        return written

    async def _checks_passed(self, wl: Workload) -> None:
        """`wl` was just written Admitted, its checks all Ready: its Event and metrics."""
        reserved = wls.condition(wl, wls.QUOTA_RESERVED)
        since = reserved.last_transition_time.timestamp() if reserved else self.clock()
        cq = wl.status.admission.cluster_queue if wl.status.admission else ""
        log.info("workload admitted", workload=wls.wl_key(wl), cluster_queue=cq, checks="Ready")
        report_checks_passed(self.metrics, wl, self.clock())
        await self._admitted_event(wl, max(0.0, self.clock() - since))

    async def _admitted_event(self, wl: Workload, since_reserved: float) -> None:
        cq = wl.status.admission.cluster_queue if wl.status.admission else ""
        await self.emit(
            workload_ref(wl),
            "Normal",
            "Admitted",
            f"Admitted by ClusterQueue {cq}, wait time since reservation was {since_reserved:.0f}s",
        )

    async def run_once(self) -> CycleResult:
        if self.cache.checked:
            await self.admission_checks()
        started = time.perf_counter()
        decisions = self.decide()
        self.cycles += 1
        if (tracker := self.cache.afs) is not None and tracker.sampled:
            tracker.sampled = False
            if self.samples_taken is not None:
                self.samples_taken()
        result = CycleResult(decisions=decisions, heads=self._decider().heads)
        decided = time.perf_counter() - started
        now = self._now()
        writes: list[Awaitable[object]] = []
        for dec in decisions:
            match dec:
                case d.Admit():
                    result.admitted += 1
                    self._deferred.pop(str(dec.workload), None)
                    writes.append(self._admit(dec, now, result))
                case d.Preempt():
                    result.preempted += len(dec.victims)
                    self._deferred.pop(str(dec.workload), None)
                    writes.extend(self._preempt(dec, now, result))
                case d.Evict():
                    result.evicted += 1
                    reason, message = self._eviction_cause(dec)
                    evict = lc.evict(reason, message, now)
                    writes.append(self._evict(str(dec.workload), evict, result))
                case d.Pending():
                    result.pending += 1
                    if self.defer_pending is not None:
                        self._defer(dec, now)
                    else:
                        writes.append(self._pending(dec, now, result))
        writes.extend(self._reservations())
        if writes:
            await asyncio.gather(*writes)
        if self.metrics is not None and decisions:
            outcome = AdmissionResult.SUCCESS if result.admitted else AdmissionResult.INADMISSIBLE
            self.metrics.admission_attempt(outcome, decided)
            self.metrics.scheduling_cycle(decided, heads=result.heads)
        if self.on_cycle is not None:
            self.on_cycle(result, time.perf_counter() - started)
        return result

    def _eviction_cause(self, dec: d.Evict) -> tuple[str, str]:
        wl = self.cache.workloads.get(str(dec.workload))
        return lc.eviction_cause(wl, dec.reason.value, dec.message)

    async def _write(
        self, key: str, mutate: StatusMutation, result: CycleResult, *, confirm: bool = False
    ) -> Workload | None:
        try:
            return await self.store.update_workload_status(key, mutate, confirm_unchanged=confirm)
        except NotFoundError:
            self.cache.delete_workload(key)
        except Exception as e:
            result.failed_writes += 1
            log.warning("workload status write failed", workload=key, error=str(e))
        return None

    async def _evict(
        self, key: str, mutate: StatusMutation, result: CycleResult
    ) -> Workload | None:
        """Write an eviction; counted in the metrics once written (as Kueue does)."""
        written = await self._write(key, mutate, result)
        if written is not None:
            report_eviction(self.metrics, written)
        return written

    async def _admit(self, dec: d.Admit, now: dt.datetime, result: CycleResult) -> None:
        key = str(dec.workload)
        wl = self.cache.workloads.get(key)
        topology = assignments(self.cache.inventory.held().get(key))
        flavors = admissionchecks.flavors_of(dec.pod_sets)
        checks = self.cache.admission_checks_for(str(dec.cluster_queue), flavors)
        # "nothing to write" takes the decision back: confirmed on the server's version
        admit = lc.admit(dec, now, topology, checks)
        written = await self._write(key, admit, result, confirm=True)
        if written is None or not wls.has_quota(written):
            self.cache.forget(key)
            self.wake()
            return
        self.cache.set_workload(written)
        waited = int(queued_wait(wl or written, now.timestamp()))
        ref = workload_ref(written)
        cq = dec.cluster_queue
        admitted = wls.is_admitted(written)
        log.info(
            "workload admitted" if admitted else "quota reserved, waiting for admission checks",
            workload=key,
            cluster_queue=cq,
            borrowing=dec.borrowing,
        )
        report_admitted(self.metrics, written, waited)
        await self.emit(
            ref,
            "Normal",
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {cq}, wait time since queued was {waited}s",
        )
        if admitted:
            await self._admitted_event(written, 0.0)

    def _path(self, cq: str) -> str:
        return lc.cohort_path(self.cache.cluster_queues, self.cache.cohorts, cq)

    def _preempt(
        self, dec: d.Preempt, now: dt.datetime, result: CycleResult
    ) -> list[Awaitable[object]]:
        preemptor = self.cache.workloads.get(str(dec.workload))
        writes: list[Awaitable[object]] = [
            self._pending(
                d.Pending(
                    workload=dec.workload,
                    cluster_queue=dec.cluster_queue,
                    reason=d.PendingReason.WAITING_FOR_PREEMPTED_WORKLOADS,
                    message=dec.message,
                    requeue=dec.requeue,
                ),
                now,
                result,
            )
        ]
        for victim in dec.victims:
            message = lc.preemption_message(
                preemptor,
                victim.reason,
                self._path(str(dec.cluster_queue)),
                self._path(str(victim.cluster_queue)),
            )
            mutate = lc.evict("Preempted", message, now, preempted_reason=victim.reason.value)
            writes.append(self._evict_victim(mutate, message, result, dec, victim))
        return writes

    async def _evict_victim(
        self,
        mutate: StatusMutation,
        message: str,
        result: CycleResult,
        dec: d.Preempt,
        victim: d.Victim,
    ) -> None:
        key = str(victim.workload)
        written = await self._evict(key, mutate, result)
        if written is not None:
            if self.metrics is not None:
                self.metrics.workload_preempted(str(dec.cluster_queue), victim.reason.value)
            self.cache.set_workload(written)
            log.info("workload preempted", workload=key, reason=message)
            await self.emit(workload_ref(written), "Normal", "Preempted", message)

    def _reservations(self) -> list[Awaitable[object]]:
        """Events for the reservations made or slid in the last step (backfill queues),
        and their metrics."""
        book = self._decider().book
        events: list[Awaitable[object]] = []
        for ev in book.events:
            r = ev.reservation
            wl = self.cache.workloads.get(str(r.workload))
            if wl is not None:
                events.append(self.emit(workload_ref(wl), "Normal", ev.change.value, ev.message))
            if self.metrics is not None and ev.change is Change.SLID:
                self.metrics.reservation_slipped(str(r.cluster_queue))
        if self.metrics is not None:
            for key in book.last_backfilled:
                self.metrics.backfilled(self._backfilled_queue(key))
            self.metrics.set_reservations(
                (
                    str(r.cluster_queue),
                    r.start,
                    [
                        (str(f), str(res), v / 1000 if res == "cpu" else float(v))
                        for (f, res), v in r.usage
                    ],
                )
                for r in book.current.values()
            )
        return events

    def _backfilled_queue(self, key: str) -> str:
        adm = self.cache.assumed.get(key)
        return str(adm.cluster_queue) if adm is not None else ""

    def _defer(self, dec: d.Pending, now: dt.datetime) -> None:
        key = str(dec.workload)
        earlier = self._deferred.get(key)
        since = earlier[2] if earlier is not None else self.clock()
        self._deferred[key] = (dec, now, since)
        self._deferred_added.set()

    async def write_pending(self) -> None:
        """Forever: write the deferred pending statuses (`defer_pending`), oldest first, each
        as it is when written (superseded by a newer one; dropped once its Workload holds
        quota, is finished or is gone)."""
        assert self.defer_pending is not None
        while True:
            if not self._deferred:
                await self._deferred_added.wait()
            self._deferred_added.clear()
            while self._deferred:
                key, (_, _, since) = next(iter(self._deferred.items()))
                if self.clock() - since < PENDING_DEFER_MAX:
                    await self.defer_pending()
                entry = self._deferred.pop(key, None)
                wl = self.cache.workloads.get(key)
                if (
                    entry is None
                    or wl is None
                    or wls.has_quota(wl)
                    or wls.is_finished(wl)
                    or key in self.cache.assumed
                ):
                    continue
                try:
                    await self._pending(entry[0], entry[1], CycleResult())
                except Exception:
                    log.exception("pending status write failed", workload=key)

    async def _pending(self, dec: d.Pending, now: dt.datetime, result: CycleResult) -> None:
        key = str(dec.workload)
        written = await self._write(key, lc.pending(dec.reason, dec.message, now), result)
        if written is not None:
            self.cache.set_workload(written)
            reason = lc.written_reason(dec.reason)
            await self.emit(workload_ref(written), "Warning", reason, dec.message)
