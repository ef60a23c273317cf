"""`atoll explain`: why a workload waits, what would let it in, and when it may start.

Everything is computed on copies of a cache (the operator's, or one read from a live cluster
by `atoll.kube.live`) with the step the scheduler runs (`state.decide.Decider.decide`: queue
heads, engine cycle, topology/device placement, domain preemption), never changing the cache:
- where the workload stands: its ClusterQueue, position in queue order, who is ahead;
- the next step's decision for it, and the decision were it at the head of its queue
  (`state.whatif.ask`);
- counterfactuals, each checked by running the step on a changed copy: the quota that would
  admit it, the running workloads whose finishing would admit it (the scheduling loop run on
  a copy without them: the workloads ahead of it, parked ones too, get their turn first),
  whether a required topology relaxed to preferred would place it, and other LocalQueues of
  its namespace through which it would be admitted now;
- a start-time estimate: the scheduling loop (the same step) run forward on a copy on a
  virtual clock, each admitted Job finishing after its run time (`atoll.dev/run-duration`
  when sooner than its limit, else `maximumExecutionTimeSeconds` or
  `activeDeadlineSeconds`: `run_times`). A workload holding a reservation (backfill) is
  admitted by the step at the reservation's start at the latest when its ends are
  guaranteed: the run wakes up then, and the estimate says so. When a Job in the way has
  no known run time, the estimate says so instead of guessing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from atoll.api import labels as keys
from atoll.api.clusterqueue import ClusterQueue
from atoll.api.quantity import Quantity
from atoll.api.workload import Workload
from atoll.engine import decisions as d
from atoll.engine import model as m
from atoll.engine.backfill import Reservation, run_end
from atoll.engine.inventory import Placement
from atoll.state import admissionchecks, reserving
from atoll.state import workloads as wls
from atoll.state.cache import Cache
from atoll.state.decide import Decider
from atoll.state.lifecycle import without_reservation
from atoll.state.whatif import Answer, ask, decision_json, describe

RunTime = Callable[[str], float | None]
"""Workload key → how long it runs once started (seconds), None when unknown."""

MAX_FINISH_CANDIDATES = 64
MAX_ESTIMATE_STEPS = 5_000
MAX_SETTLE_STEPS = 1_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Counterfactual:
    kind: str
    """quota | finish | preferred | queue"""
    text: str
    detail: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    at: float | None
    """Epoch seconds when the workload would be admitted; None when it cannot be said."""
    note: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Explanation:
    workload: str
    job: str | None
    state: str
    """Finished | Admitted | Evicted | QuotaReserved | Pending | Inactive"""
    local_queue: str | None
    cluster_queue: str | None
    position: int | None
    queue_length: int
    ahead: tuple[str, ...]
    condition: tuple[str, str] | None
    """(reason, message) of the workload's QuotaReserved=False condition, as written; for a
    Workload holding quota that waits for its admission checks, their states."""
    decision: d.Decision | None
    """What the next cycle would decide were it at the head of its queue (topology
    checked)."""
    is_head: bool
    counterfactuals: tuple[Counterfactual, ...] = ()
    estimate: Estimate | None = None
    now: float = 0.0
    reservation: Reservation | None = None
    """The quota reserved for it in a backfill ClusterQueue (`atoll.dev/backfill`)."""
    queue_usage: float | None = None
    """Its LocalQueue's usage when its ClusterQueue orders by it (Admission Fair Sharing)."""

    def describe(self) -> str:
        lines = [f"Workload {self.workload}" + (f" (Job {self.job})" if self.job else "")]
        lines.append(f"  state: {self.state}")
        if self.local_queue:
            cq = self.cluster_queue or "(no such ClusterQueue)"
            lines.append(f"  queue: LocalQueue {self.local_queue} → ClusterQueue {cq}")
        if self.queue_usage is not None:
            lines.append(
                f"  order: Admission Fair Sharing, LocalQueue usage {self.queue_usage:.4g} "
                "(lower usage goes first, then priority and age)"
            )
        if self.position is not None:
            lines.append(f"  position: {self.position} of {self.queue_length} pending")
        if self.ahead:
            shown = ", ".join(self.ahead[:10]) + (" …" if len(self.ahead) > 10 else "")
            lines.append(f"  ahead of it: {shown}")
        if self.condition is not None:
            lines.append(f"  reason: {self.condition[0]}: {self.condition[1]}")
        if self.decision is not None:
            where = "next cycle" if self.is_head else "at the head of its queue"
            lines.append(f"  {where}: {describe(self.decision)}")
        for cf in self.counterfactuals:
            lines.append(f"  {cf.text}")
        if self.reservation is not None:
            lines.append(f"  reservation: {reserving.brief(self.reservation, self.now)}")
        if self.estimate is not None:
            lines.append(f"  start estimate: {self._estimate_text(self.estimate)}")
        return "\n".join(lines)

    def _estimate_text(self, e: Estimate) -> str:
        if e.at is None:
            return f"cannot estimate: {e.note}"
        when = dt.datetime.fromtimestamp(e.at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        wait = max(0.0, e.at - self.now)
        return f"in about {_human(wait)} ({when}); {e.note}"

    def to_json(self) -> dict[str, Any]:
        est = self.estimate
        return {
            "workload": self.workload,
            "job": self.job,
            "state": self.state,
            "localQueue": self.local_queue,
            "clusterQueue": self.cluster_queue,
            "position": self.position,
            "queueLength": self.queue_length,
            "ahead": list(self.ahead),
            "localQueueUsage": (
                self.queue_usage
                if self.queue_usage is None or math.isfinite(self.queue_usage)
                else str(self.queue_usage)  # "inf" / "-inf" (a LocalQueue of weight 0)
            ),
            "condition": {"reason": self.condition[0], "message": self.condition[1]}
            if self.condition
            else None,
            "decision": decision_json(self.decision),
            "isHead": self.is_head,
            "counterfactuals": [
                {"kind": c.kind, "text": c.text, **c.detail} for c in self.counterfactuals
            ],
            "estimate": None
            if est is None
            else {
                "at": est.at,
                "inSeconds": None if est.at is None else max(0.0, est.at - self.now),
                "note": est.note,
            },
            "reservation": None
            if self.reservation is None
            else {
                "start": self.reservation.start,
                "certain": self.reservation.certain,
                "usage": [
                    {"flavor": f, "resource": r, "amount": v}
                    for (f, r), v in self.reservation.usage
                ],
            },
        }


def _human(seconds: float) -> str:
    s = round(seconds)
    if s < 90:
        return f"{s}s"
    if s < 5400:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


# -- run times ---------------------------------------------------------------------------
def run_times(cache: Cache) -> RunTime:
    """Run time of a workload, as a reservation counts it (`engine.backfill.run_end`, from
    the run bounds `convert.run_bounds` read off the Workload and its Job): its
    `atoll.dev/run-duration` hint when that is sooner than its limit, else its limit
    (`maximumExecutionTimeSeconds` or `activeDeadlineSeconds`, the smaller)."""

    def of(key: str) -> float | None:
        w = cache.engine_workload(key)
        end = None if w is None else run_end(w, 0.0, 0.0, 0.0)
        return None if end is None else end[0]

    return of


def _started(cache: Cache, key: str) -> float | None:
    wl = cache.workloads.get(key)
    if wl is None:
        return None
    job = cache.owner_job(wl)
    if job is not None and job.status is not None and job.status.start_time is not None:
        return job.status.start_time.timestamp()
    cond = wls.condition(wl, wls.QUOTA_RESERVED)
    if cond is not None and cond.status == "True":
        return cond.last_transition_time.timestamp()
    return None


# -- the pieces --------------------------------------------------------------------------
def _state(wl: Workload) -> str:
    if wls.is_finished(wl):
        return "Finished"
    if wls.is_evicted(wl) and wls.has_quota(wl):
        return "Evicted"
    if wls.is_admitted(wl):
        return "Admitted"
    if wls.has_quota(wl):
        return "QuotaReserved"
    if not wl.spec.active:
        return "Inactive"
    return "Pending"


def _waiting_for_checks(wl: Workload) -> tuple[str, str] | None:
    """(UnsatisfiedChecks, each admission check and its state) of a Workload holding quota
    that waits for its checks; None without checks."""
    states = admissionchecks.states(wl)
    if not states:
        return None
    each = ", ".join(
        f"{s.name} {s.state.value}" + (f" ({s.message})" if s.message else "") for s in states
    )
    return admissionchecks.UNSATISFIED, f"quota reserved; waiting for admission checks: {each}"


def _fits(trial: Decider, key: str, now: float) -> d.Decision | None:
    """The step's decision at the head of its queue on `trial`, when it is an admission."""
    dec = ask(trial, key, now).at_head
    return dec if isinstance(dec, d.Admit | d.Preempt) else None


def settle(decider: Decider, key: str, now: float) -> d.Decision | None:
    """The scheduling loop at one instant on `decider` (a fork: its cache changes), as the
    operator runs it: steps while one makes progress or parks heads, until `key` is
    admitted or preempts (that decision), else None."""
    for _ in range(MAX_SETTLE_STEPS):
        progress = False
        for dec in decider.decide(now):
            if isinstance(dec, d.Admit | d.Preempt) and dec.workload == key:
                return dec
            progress = progress or not isinstance(dec, d.Pending)
        if not progress and not decider.parked:
            return None
    return None


def _flavor_shortfalls(pending: d.Pending) -> list[Counterfactual]:
    """What each flavor of its ClusterQueue lacks now, when more than one was tried."""
    by_flavor: dict[str, list[d.Shortfall]] = {}
    for sf in pending.shortfalls:
        by_flavor.setdefault(str(sf.flavor), []).append(sf)
    if len(by_flavor) < 2:
        return []
    out = []
    for flavor, shorts in by_flavor.items():
        lacks = "; ".join(
            f"{_fmt(str(sf.resource), sf.needed - sf.available)} more {sf.resource} "
            f"(needs {_fmt(str(sf.resource), sf.needed)}, free "
            f"{_fmt(str(sf.resource), sf.available)})"
            for sf in shorts
        )
        out.append(
            Counterfactual(
                kind="flavor",
                text=f"on flavor {flavor} it lacks {lacks}",
                detail={
                    "flavor": flavor,
                    "lacks": [
                        {"resource": str(sf.resource), "needed": sf.needed, "free": sf.available}
                        for sf in shorts
                    ],
                },
            )
        )
    return out


def _quota_counterfactual(
    base: Decider, key: str, now: float, pending: d.Pending
) -> Counterfactual | None:
    """Raise the ClusterQueue's nominal quota by each shortfall; report it if that admits."""
    cache = base.cache
    cq_name = str(pending.cluster_queue or "")
    cq = cache.cluster_queues.get(cq_name)
    if cq is None or not pending.shortfalls:
        return None
    raise_by = {
        (str(s.flavor), str(s.resource)): s.needed - s.available
        for s in pending.shortfalls
        if s.needed > s.available
    }
    if not raise_by:
        return None
    changed, was = _with_quota(cq, raise_by)
    trial = base.fork()
    trial.cache.set_cluster_queue(changed)
    if _fits(trial, key, now) is None:
        return None
    parts = [
        f"{r} in flavor {f} were {_fmt(r, was[(f, r)] + extra)} (now {_fmt(r, was[(f, r)])})"
        for (f, r), extra in sorted(raise_by.items())
    ]
    return Counterfactual(
        kind="quota",
        text=f"would fit if ClusterQueue {cq_name}'s nominalQuota of " + "; ".join(parts),
        detail={
            "clusterQueue": cq_name,
            "nominalQuota": [
                {"flavor": f, "resource": r, "now": _fmt(r, was[(f, r)]), "needed": _fmt(r, v)}
                for (f, r), v in sorted(
                    ((k, was[k] + extra) for k, extra in raise_by.items()), key=lambda x: x[0]
                )
            ],
        },
    )


def _fmt(resource: str, amount: int) -> str:
    """An engine amount as a quantity string (cpu is in milli-units)."""
    if resource != "cpu":
        return str(amount)
    return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"


def _with_quota(
    cq: ClusterQueue, raise_by: dict[tuple[str, str], int]
) -> tuple[ClusterQueue, dict[tuple[str, str], int]]:
    was: dict[tuple[str, str], int] = {}
    groups = []
    for rg in cq.spec.resource_groups or ():
        flavors = []
        for fq in rg.flavors:
            resources = []
            for rq in fq.resources:
                k = (str(fq.name), str(rq.name))
                unit = 1 if rq.name == "cpu" else 1000
                current = rq.nominal_quota.milli if rq.name == "cpu" else rq.nominal_quota.value
                was[k] = current
                if k in raise_by:
                    new = Quantity.from_milli((current + raise_by[k]) * unit)
                    resources.append(rq.model_copy(update={"nominal_quota": new}))
                else:
                    resources.append(rq)
            flavors.append(fq.model_copy(update={"resources": tuple(resources)}))
        groups.append(rg.model_copy(update={"flavors": tuple(flavors)}))
    spec = cq.spec.model_copy(update={"resource_groups": tuple(groups)})
    return cq.model_copy(update={"spec": spec}), was


def _related(cache: Cache, cq: str) -> set[str]:
    """ClusterQueues sharing quota with `cq`: its whole cohort tree (or itself)."""

    def root(name: str) -> str | None:
        obj = cache.cluster_queues.get(name)
        cohort = obj.spec.cohort_name if obj else None
        seen: set[str] = set()
        while cohort and cohort not in seen:
            seen.add(cohort)
            parent = cache.cohorts.get(cohort)
            if parent is None or not parent.spec.parent_name:
                return cohort
            cohort = parent.spec.parent_name
        return cohort

    mine = root(cq)
    if mine is None:
        return {cq}
    return {name for name in cache.cluster_queues if root(name) == mine}


def _finish_counterfactual(
    base: Decider, answer: Answer, now: float, runtime: RunTime
) -> Counterfactual | None:
    """The fewest running workloads (soonest to end first) whose finishing admits it: the
    scheduling loop run at once on a copy without them admits it (`settle`)."""
    cache, key = base.cache, answer.workload
    if answer.cluster_queue is None:
        return None
    related = _related(cache, answer.cluster_queue)
    running: list[tuple[float, str]] = []
    for other, adm, evicted in cache.holding():
        if other == key or evicted or str(adm.cluster_queue) not in related:
            continue
        start, rt = _started(cache, other), runtime(other)
        end = start + rt if start is not None and rt is not None else float("inf")
        running.append((end, other))
    running.sort()
    running = running[:MAX_FINISH_CANDIDATES]

    def fits_without(gone: list[str]) -> bool:
        return settle(finished(base, gone), key, now) is not None

    chosen: list[str] = []
    for _, other in running:
        chosen.append(other)
        if fits_without(chosen):
            break
    else:
        return None
    for other in list(reversed(chosen[:-1])):  # drop the ones it can do without
        rest = [c for c in chosen if c != other]
        if fits_without(rest):
            chosen = rest
    ends = dict((k, e) for e, k in running)
    return Counterfactual(
        kind="finish",
        text="would fit after " + ", ".join(f"{c}" for c in chosen) + " finish"
        if len(chosen) > 1
        else f"would fit after {chosen[0]} finishes",
        detail={
            "workloads": [
                {"workload": c, "endsAt": None if ends[c] == float("inf") else ends[c]}
                for c in chosen
            ]
        },
    )


def _preferred_counterfactual(
    base: Decider, key: str, now: float, dec: d.Decision | None
) -> Counterfactual | None:
    """A required topology that cannot be placed: would the preferred level place it?"""
    wl = base.cache.workloads.get(key)
    if wl is None or not isinstance(dec, d.Pending):
        return None
    if dec.reason is not d.PendingReason.TOPOLOGY_PLACEMENT_FAILED:
        return None
    pod_sets = []
    relaxed: list[str] = []
    for ps in wl.spec.pod_sets:
        tr = ps.topology_request
        if tr is not None and tr.required:
            relaxed.append(f"{ps.name}: {tr.required}")
            loose = tr.model_copy(update={"required": None, "preferred": tr.required})
            pod_sets.append(ps.model_copy(update={"topology_request": loose}))
        else:
            pod_sets.append(ps)
    if not relaxed:
        return None
    spec = wl.spec.model_copy(update={"pod_sets": tuple(pod_sets)})
    trial = base.fork()
    trial.cache.set_workload(wl.model_copy(update={"spec": spec}))
    if _fits(trial, key, now) is None:
        return None
    return Counterfactual(
        kind="preferred",
        text="would fit now as preferred instead of required topology ("
        + ", ".join(relaxed)
        + "): use kueue.x-k8s.io/podset-preferred-topology",
        detail={"podSets": relaxed},
    )


def _queue_counterfactuals(base: Decider, key: str, now: float) -> list[Counterfactual]:
    """Other LocalQueues of the namespace through which it would be admitted now."""
    cache = base.cache
    wl = cache.workloads.get(key)
    if wl is None:
        return []
    ns = wl.namespace or ""
    mine = cache.local_queues.get(wls.key_of(ns, wl.spec.queue_name or ""))
    out = []
    for lq_key, lq in sorted(cache.local_queues.items()):
        if lq.namespace != ns or lq.name == wl.spec.queue_name:
            continue
        if mine is not None and lq.spec.cluster_queue == mine.spec.cluster_queue:
            continue
        trial = base.fork()
        trial.cache.set_workload(
            wl.model_copy(update={"spec": wl.spec.model_copy(update={"queue_name": lq.name})})
        )
        dec = ask(trial, key, now).decision
        if isinstance(dec, d.Admit):
            flavors = ", ".join(sorted({str(f) for ps in dec.pod_sets for _, f in ps.flavors}))
            out.append(
                Counterfactual(
                    kind="queue",
                    text=f"would be admitted now through LocalQueue {lq.name} (ClusterQueue "
                    f"{lq.spec.cluster_queue}, flavor {flavors})",
                    detail={
                        "localQueue": lq_key,
                        "clusterQueue": lq.spec.cluster_queue,
                        "flavors": flavors,
                    },
                )
            )
    return out


# -- the estimate ------------------------------------------------------------------------
def _requeued(wl: Workload, now: float) -> Workload:
    at = dt.datetime.fromtimestamp(now, dt.UTC).replace(microsecond=0)
    conds = without_reservation(wl.status.conditions or (), "Preempted", "preempted", at)
    return wl.model_copy(update={"status": wls.status_with(wl, conditions=conds, admission=None)})


def finished(base: Decider, gone: Iterable[str]) -> Decider:
    """A fork of `base` where the workloads `gone` finished: deleted, their pods gone, and
    the parked workloads woken at once (the question is whether it would fit, not when the
    batched requeue would try it)."""
    trial = base.fork()
    for key in gone:
        _finish(trial.cache, key)
    trial.cache.wake_parked()
    return trial


def _finish(cache: Cache, key: str) -> None:
    cache.delete_workload(key)
    cache.inventory.forget_gang(key)


def _apply(sim: Cache, decisions: tuple[d.Decision, ...], t: float) -> None:
    """The status writes the operator makes for the step's decisions, as far as the step
    reads them: victims are requeued at once (the step has already assumed the rest)."""
    for dec in decisions:
        if isinstance(dec, d.Preempt):
            for v in dec.victims:
                victim = sim.workloads.get(v.workload)
                sim.forget(v.workload)
                sim.evicting.discard(v.workload)
                if victim is not None and wls.has_quota(victim):
                    sim.set_workload(_requeued(victim, t))


def estimate_start(base: Decider, key: str, now: float, runtime: RunTime) -> Estimate:
    """Run the scheduling loop forward on a fork of `base` until `key` is admitted. When the
    first step gives `key` a reservation (a backfill queue), its start is a time the run
    wakes up at, and the estimate names it."""
    sim = base.fork()
    cache = sim.cache
    ends: dict[str, float | None] = {}
    for other, _, _ in cache.holding():
        start, rt = _started(cache, other), runtime(other)
        ends[other] = None if rt is None else max(now, (start or now) + rt)
    t = now
    reserved: Reservation | None = None
    for _ in range(MAX_ESTIMATE_STEPS):
        if key not in cache.workloads:
            return Estimate(at=None, note="the workload is gone")
        decisions = sim.decide(t)
        if t == now:
            reserved = sim.book.current.get(key)
        progress = False
        for dec in decisions:
            if isinstance(dec, d.Admit) and dec.workload == key:
                return Estimate(at=t, note=_assumptions(t > now, reserved, now))
            if isinstance(dec, d.Admit):
                rt = runtime(dec.workload)
                ends[dec.workload] = None if rt is None else t + rt
            if isinstance(dec, d.Preempt):
                for v in dec.victims:
                    ends.pop(v.workload, None)
            progress = progress or isinstance(dec, d.Admit | d.Preempt)
        _apply(cache, decisions, t)
        if progress or sim.parked:
            continue
        known = [e for e in ends.values() if e is not None]
        requeue = cache.next_requeue(t)
        if requeue is not None:
            known.append(requeue)
        if reserved is not None and reserved.start > t:
            known.append(reserved.start)
        if not known:
            return _no_estimate(ends)
        t = max(t, min(known))
        for other in [k for k, e in ends.items() if e is not None and e <= t]:
            del ends[other]
            _finish(cache, other)
    return Estimate(at=None, note=f"not admitted within {MAX_ESTIMATE_STEPS} simulated steps")


def _no_estimate(ends: dict[str, float | None]) -> Estimate:
    unknown = sorted(k for k, e in ends.items() if e is None)
    if unknown:
        shown = ", ".join(unknown[:5]) + (" …" if len(unknown) > 5 else "")
        return Estimate(
            at=None,
            note=f"it waits for {shown}, whose run time is unknown (set the "
            f"{keys.RUN_DURATION_ANNOTATION} annotation, the "
            f"{keys.MAX_EXEC_TIME_SECONDS_LABEL} label or activeDeadlineSeconds on the Job)",
        )
    return Estimate(at=None, note="nothing running would free what it needs (it never fits)")


def _assumptions(later: bool, reserved: Reservation | None, now: float) -> str:
    if not later:
        return "it would be admitted in the next cycle"
    note = (
        "assuming each admitted Job runs for its atoll.dev/run-duration (else its "
        "maximumExecutionTimeSeconds or activeDeadlineSeconds)"
    )
    if reserved is None:
        return note
    sure = (
        "guaranteed by the running Workloads' limits"
        if reserved.certain
        else "estimated from run-duration hints"
    )
    return f"its reservation starts {reserving.when(reserved.start, now)} ({sure}); {note}"


def _usage_at(cache: Cache, lq: str, now: float) -> float:
    """LocalQueue `lq`'s usage as the step at `now` orders by it (samples due then taken, on
    a copy)."""
    probe = cache.fork()
    probe.sample_usage(now)
    return probe.lq_usage(lq)


# -- all of it ---------------------------------------------------------------------------
def explain(
    cache: Cache,
    key: str,
    now: float,
    *,
    fair_sharing: m.FairSharing | None = None,
    runtime: RunTime | None = None,
) -> Explanation:
    """Everything `atoll explain` says about the workload `key` (the cache is unchanged)."""
    wl = cache.workloads[key]
    rt = runtime or run_times(cache)
    state = _state(wl)
    base = Decider(cache, fair_sharing)
    answer: Answer = ask(base, key, now)
    cond = wls.condition(wl, wls.QUOTA_RESERVED)
    written = (
        (cond.reason, cond.message)
        if cond is not None and cond.status == "False" and state == "Pending"
        else _waiting_for_checks(wl)
        if state == "QuotaReserved"
        else None
    )
    lq = wls.key_of(wl.namespace, wl.spec.queue_name) if wl.spec.queue_name else None
    lq_obj = cache.local_queues.get(lq) if lq else None
    fair = lq is not None and lq_obj is not None and cache.uses_afs(lq_obj.spec.cluster_queue)
    told = Explanation(
        workload=key,
        job=wls.owner_job_key(wl),
        state=state,
        local_queue=lq,
        cluster_queue=answer.cluster_queue
        or (
            cache.local_queues[lq].spec.cluster_queue
            if lq in cache.local_queues and state != "Pending"
            else None
        ),
        position=answer.position,
        queue_length=len(answer.queue),
        ahead=answer.ahead,
        condition=written,
        decision=None,
        is_head=False,
        now=now,
        queue_usage=_usage_at(cache, lq, now) if fair and lq is not None else None,
    )
    if state != "Pending" or answer.position is None:
        return told
    decision = answer.at_head
    cfs: list[Counterfactual] = []
    if isinstance(decision, d.Pending):
        cfs.extend(_flavor_shortfalls(decision))
        quota = _quota_counterfactual(base, key, now, decision)
        if quota is not None:
            cfs.append(quota)
        preferred = _preferred_counterfactual(base, key, now, decision)
        if preferred is not None:
            cfs.append(preferred)
        finish = _finish_counterfactual(base, answer, now, rt)
        if finish is not None:
            cfs.append(finish)
        cfs.extend(_queue_counterfactuals(base, key, now))
    return dataclasses.replace(
        told,
        decision=decision,
        is_head=answer.decision is not None,
        counterfactuals=tuple(cfs),
        estimate=estimate_start(base, key, now, rt),
        reservation=reserving.reservation_of(cache, key, now, fair_sharing, base.checker.hosts()),
    )


# -- what-if on a live cache ---------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class JobWhatIf:
    """`atoll what-if JOB.yaml --kubeconfig`: the answer for a Job not created."""

    job: str
    answer: Answer
    decision: d.Decision | None
    """The next cycle's decision for it, placement checked (None: not a head)."""
    at_head: d.Decision | None
    domains: tuple[str, ...]
    """Where its pod sets would land: `podset: level=value/…` or `podset: N nodes`."""
    error: str | None = None

    def describe(self) -> str:
        lines = [f"Job {self.job}, ClusterQueue {self.answer.cluster_queue or '-'}:"]
        if self.error:
            lines.append(f"  cannot be queued: {self.error}")
            return "\n".join(lines)
        if self.answer.cluster_queue is None:
            lines.append("  not queued: its LocalQueue or ClusterQueue does not exist")
        if self.answer.ahead:
            lines.append(
                f"  waits behind {len(self.answer.ahead)}: {', '.join(self.answer.ahead[:10])}"
            )
        if self.decision is not None:
            lines.append("  now: " + describe(self.decision))
        if self.at_head is not None and self.at_head is not self.decision:
            lines.append("  if it were at the head: " + describe(self.at_head))
        for where in self.domains:
            lines.append(f"  placed: {where}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "clusterQueue": self.answer.cluster_queue,
            "ahead": list(self.answer.ahead),
            "decision": decision_json(self.decision),
            "atHead": decision_json(self.at_head),
            "domains": list(self.domains),
            "error": self.error,
        }


def _domains(placed: Placement | None) -> tuple[str, ...]:
    if placed is None:
        return ()
    out = []
    for ps in placed.pod_sets:
        nodes = sorted({p.node for p in ps.pods})
        where = (
            f"{ps.level}={'/'.join(ps.domain)}"
            if ps.level
            else f"{len(nodes)} node{'s' * (len(nodes) != 1)}"
        )
        out.append(f"{ps.name}: {where} ({', '.join(nodes[:8])}{' …' * (len(nodes) > 8)})")
    return tuple(out)


def what_if_workload(
    cache: Cache,
    wl: Workload,
    now: float,
    fair_sharing: m.FairSharing | None = None,
    *,
    also: Sequence[Workload] = (),
) -> JobWhatIf:
    """The next step's decision for `wl` were it created now, with `also` (the other
    Workloads of its object: a LeaderWorkerSet's groups) created with it (on a fork: the
    cache is unchanged)."""
    trial = Decider(cache.fork(), fair_sharing)
    key = wls.wl_key(wl)
    for other in also:
        trial.cache.set_workload(other)
    trial.cache.set_workload(wl)
    answer = ask(trial, key, now)
    return JobWhatIf(
        job=wls.owner_job_key(wl) or key,
        answer=answer,
        decision=answer.decision,
        at_head=answer.at_head,
        domains=_domains(answer.placement),
    )
