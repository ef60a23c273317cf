"""atoll's gang admission on a virtual clock: the operator's own loop, offline.

Each instant, after the events due then (completions, PodsReady timeouts, backoff ends,
arrivals), the simulator runs what `control/scheduler.Scheduler.decide` runs — the same
`state.cache.Cache`, its pending queues (`pending_by_queue`, `parked_keys`),
`engine.ordering.select_heads`, `engine.cycle.run_cycle` + `drain`, and the same
assume / evicting / sticky-preemptor / park bookkeeping — then applies the decisions as
instant Workload status writes, and repeats while a cycle makes progress, as the live loop
does.

Around the engine, the simulated cluster: an admitted gang's pods are bound by
kube-scheduler's rules (`sim/nodes.py`) on the nodes of its flavors; when all are bound the
Job runs for its run duration. waitForPodsReady is therefore satisfied at once unless the
pods cannot be placed (quota admits more than the nodes can hold, fragmentation, taints):
then the gang waits with its pods partly bound and, after the timeout, is evicted whole
and requeued with Kueue's backoff. Preempted gangs lose their pods at once (no graceful
termination) and restart from scratch when readmitted (no checkpoints).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from atoll.api import labels as keys
from atoll.api.configuration import Configuration
from atoll.api.core import Job
from atoll.api.trainjob import TrainingRuntime
from atoll.engine import decisions as d
from atoll.engine import model as m
from atoll.engine.inventory import Placement
from atoll.sim import workloads as sw
from atoll.sim.events import Clock, Kind
from atoll.sim.nodes import GPU, NodePool
from atoll.sim.pods import Gang, Part, domain_text, request, signature, sim_pod
from atoll.sim.results import JobRecord, JobState, Mode, NodeTimeline, SimResult, Timeline
from atoll.sim.scenario import Scenario, SimJob
from atoll.state import afs, convert
from atoll.state import lifecycle as lc
from atoll.state import workloads as wls
from atoll.state.cache import Cache, requeue_period
from atoll.state.decide import Decider
from atoll.state.placing import assignments

Progress = Callable[[int, int, float], None]
"""(finished Jobs, all Jobs, simulated time) after each instant."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    pods_ready: bool = True
    timeout: float = 1800.0
    backoff_base: float = 60.0
    backoff_max: float = 3600.0
    backoff_limit: int | None = None
    fair_sharing: m.FairSharing | None = None
    until: float | None = None
    """Stop the simulation at this time (default: when no event is left)."""

    @classmethod
    def of(cls, cfg: Configuration, until: float | None = None) -> Settings:
        wfpr = cfg.wait_for_pods_ready
        rs = wfpr.requeuing_strategy
        fs = None
        if cfg.fair_sharing is not None:
            fs = m.FairSharing(
                preemption_strategies=tuple(
                    m.FairSharingStrategy(s.value) for s in cfg.fair_sharing.preemption_strategies
                )
            )
        return cls(
            pods_ready=cfg.wait_for_pods_ready_enabled,
            timeout=wfpr.timeout,
            backoff_base=float(rs.backoff_base_seconds),
            backoff_max=float(rs.backoff_max_seconds),
            backoff_limit=rs.backoff_limit_count,
            fair_sharing=fs,
            until=until,
        )


@dataclass(slots=True, kw_only=True)
class _Run:
    key: str
    """The Workload's `namespace/name` (once it arrived; before, the object's key)."""
    sj: SimJob
    record: JobRecord
    cq: str
    gang: Gang | None = None
    gen: int = 0
    running: bool = False
    synced: int = 0
    """Bound pods of this gang the inventory was told about."""


def queue_of(scn: Scenario) -> Callable[[SimJob], str | None]:
    """The ClusterQueue a Job's LocalQueue points at (None without a queue-name label)."""
    lqs = {f"{q.namespace or 'default'}/{q.name}": q.spec.cluster_queue for q in scn.local_queues}

    def of(sj: SimJob) -> str | None:
        name = (sj.job.metadata.labels or {}).get(keys.QUEUE_NAME_LABEL)
        if name is None:
            return None
        return lqs.get(f"{sj.job.namespace or 'default'}/{name}") or f"<no LocalQueue {name}>"

    return of


def gpu_quota(scn: Scenario) -> dict[str, tuple[int, int | None]]:
    """Per ClusterQueue: its nominal GPU quota and its GPU borrowingLimit (None: unlimited
    in a cohort; 0: no cohort to borrow from), summed over flavors."""
    out: dict[str, tuple[int, int | None]] = {}
    for cq in scn.cluster_queues:
        nominal = 0
        limits: list[int | None] = []
        for group in cq.spec.resource_groups:
            for fq in group.flavors:
                for r in fq.resources:
                    if r.name == GPU:
                        nominal += r.nominal_quota.value
                        limits.append(r.borrowing_limit.value if r.borrowing_limit else None)
        borrowing: int | None = 0
        if cq.spec.cohort_name:
            borrowing = None if None in limits else sum(x for x in limits if x is not None)
        out[cq.name] = (nominal, borrowing)
    return out


def fill_cache(scn: Scenario) -> Cache:
    """A Cache holding the scenario's queue objects, as the operator's handlers fill it."""
    cfg = scn.config
    period = requeue_period(
        batched=cfg.atoll.batched_requeue, long_interval=cfg.long_requeue_interval
    )
    cache = Cache(requeue_period=period, afs=afs.tracker_for(cfg))
    for f in scn.flavors:
        cache.set_flavor(f)
    for co in scn.cohorts:
        cache.set_cohort(co)
    for cq in scn.cluster_queues:
        cache.set_cluster_queue(cq)
    for lq in scn.local_queues:
        cache.set_local_queue(lq)
    for wpc in scn.workload_classes:
        cache.set_workload_class(wpc)
    for pc in scn.priority_classes:
        cache.set_priority_class(pc)
    for ns, ns_labels in scn.namespaces.items():
        cache.set_namespace(ns, ns_labels)
    for rt in scn.training_runtimes:  # read by the TrainJob adapter, as the operator's watch
        if isinstance(rt, TrainingRuntime):
            cache.training_runtimes[wls.key_of(rt.namespace, rt.name)] = rt
        else:
            cache.cluster_training_runtimes[rt.name] = rt
    return cache


def _progress_key(decisions: tuple[d.Decision, ...]) -> tuple[tuple[str, str], ...]:
    """What a cycle did: its admissions, preemptions (with victims) and evictions."""
    out: list[tuple[str, str]] = []
    for dec in decisions:
        match dec:
            case d.Admit():
                out.append(("admit", dec.workload))
            case d.Preempt():
                victims = ",".join(sorted(v.workload for v in dec.victims))
                out.append(("preempt", f"{dec.workload} -> {victims}"))
            case d.Evict():
                out.append(("evict", dec.workload))
    return tuple(out)


@dataclass(slots=True)
class GangSimulator:
    scenario: Scenario
    settings: Settings = field(default_factory=Settings)
    progress: Progress | None = None
    cache: Cache = field(init=False)
    decider: Decider = field(init=False)
    pool: NodePool = field(init=False)
    clock: Clock = field(default_factory=Clock)
    cycles: int = 0
    _runs: dict[str, _Run] = field(default_factory=dict)
    """By Workload key, once arrived."""
    _all: list[_Run] = field(default_factory=list)
    """Every workload of the scenario, in scenario order."""
    _arriving: dict[str, _Run] = field(default_factory=dict)
    """By the scenario object's key, until it arrives."""
    kinds: sw.Kinds = field(init=False)
    _waiting: list[_Run] = field(default_factory=list)
    """Admitted gangs whose pods are not all bound yet, in admission order."""
    _usage: dict[str, int] = field(default_factory=dict)
    _pending: dict[str, int] = field(default_factory=dict)
    _busy: int = 0
    _lost: float = 0.0
    """GPU-seconds of progress evictions threw away."""
    _finished: int = 0
    _arrived: int = 0
    _quiet_since: float = 0.0
    """When a Job last arrived, started or finished, or a gang was evicted other than by a
    PodsReady timeout at the backoff cap: after that only capped retries happened."""
    _expired: set[str] = field(default_factory=set)
    """Deactivated for their maximum execution time, not evicted yet (a step is due)."""
    _flavors: dict[str, m.ResourceFlavor] = field(default_factory=dict)
    _requeue_at: float | None = None
    """When the scheduled REQUEUE_PARKED event is due."""
    _sample_at: float | None = None
    """When the scheduled SAMPLE_USAGE event is due."""
    _drains: bool = False
    _topology: bool = False
    """A flavor has a topologyName: atoll places gangs on the inventory (as the operator
    does), so the inventory must also see the pods of the gangs it did not place."""
    timeline: Timeline = field(default_factory=Timeline)
    nodes: NodeTimeline | None = field(init=False, default=None)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        scn = self.scenario
        self.cache = fill_cache(scn)
        self.kinds = sw.Kinds.of_config(scn.config)
        self.decider = Decider(self.cache, self.settings.fair_sharing)
        self.pool = NodePool.of(scn.nodes)
        self.nodes = self.pool.node_timeline()
        self._topology = any(f.spec.topology_name for f in scn.flavors)
        if self._topology:
            for node in scn.nodes:
                self.cache.inventory.upsert_node(node)
            for topology in scn.topologies:
                self.cache.inventory.upsert_topology(topology)
        self._flavors = {f.name: convert.flavor(f) for f in scn.flavors}
        self._drains = any(q.spec.stop_policy.value != "None" for q in scn.cluster_queues) or any(
            q.spec.stop_policy.value != "None" for q in scn.local_queues
        )
        of = queue_of(scn)
        for sj in scn.jobs:
            cq = of(sj)
            if cq is None:
                self.notes.append(f"{sj.key}: no {keys.QUEUE_NAME_LABEL} label, not simulated")
                continue
            if self.kinds.of(sj.job) is None:
                self.notes.append(
                    f"{sj.key}: the {sw.framework_of(sj.job)} framework is not in the "
                    "Configuration's integrations.frameworks, not simulated"
                )
                continue
            record = JobRecord(name=sj.key, arrival=sj.arrival, pods=0, gpus=0, cluster_queue=cq)
            run = _Run(key=sj.key, sj=sj, record=record, cq=cq)
            self._arriving[sj.key] = run
            self._all.append(run)
            self._usage.setdefault(cq, 0)
            self._pending.setdefault(cq, 0)
            self.clock.at(sj.arrival, Kind.ARRIVE, sj.key)

    # -- events ---------------------------------------------------------------------------
    def _arrive(self, key: str, t: float) -> None:
        run = self._arriving.pop(key)
        job = run.sj.job
        self._arrived += 1
        self._quiet_since = t
        try:
            wl = self.kinds.compose(job, self.cache, created=t)
        except sw.ComposeError as e:  # the operator's Warning event: no Workload
            run.record.reason, run.record.message = e.reason, str(e)
            self.notes.append(f"{run.sj.key}: no Workload ({e.reason}): {e}")
            return
        run.key = wls.wl_key(wl)
        self._runs[run.key] = run
        if isinstance(job, Job):
            self.cache.set_job(job)  # its run bounds (activeDeadlineSeconds, run-duration)
        self.cache.set_workload(wl)
        ew = self.cache.engine_workload(run.key)
        if ew is not None and ew.pod_sets:
            run.record.pods = sum(ps.count for ps in ew.pod_sets)
            run.record.gpus = sum(
                ps.count * dict(ps.requests).get(m.ResourceName(GPU), 0) for ps in ew.pod_sets
            )
        self._pending[run.cq] += 1

    def _gang(self, run: _Run, dec: d.Admit, placement: Placement | None) -> Gang:
        """The admitted pod sets' pods: each pod set's template merged with its flavors,
        pinned where atoll placed it (topology or devices)."""
        ew = self.cache.engine_workload(dec.workload)
        assert ew is not None
        by_name = {ps.name: ps for ps in ew.pod_sets}
        placed = {ps.name: ps for ps in placement.pod_sets} if placement is not None else {}
        parts = []
        for adm in dec.pod_sets:
            ps = by_name[adm.name]
            names = sorted({str(f) for _, f in adm.flavors})
            flavors = [self._flavors[n] for n in names if n in self._flavors]
            pins: tuple[int, ...] = ()
            if (where := placed.get(str(adm.name))) is not None:
                nodes = (self.pool.index(p.node) for p in where.pods)
                pins = tuple(i for i in nodes if i is not None)
            parts.append(
                Part(sig=signature(ps, flavors), req=request(ps), size=adm.count, pins=pins)
            )
        return Gang(owner=run.sj.key, parts=tuple(parts))

    def _admit(self, dec: d.Admit, t: float) -> None:
        run = self._runs[dec.workload]
        placement = self.cache.inventory.held().get(dec.workload) if self._topology else None
        now = sw.at(t)
        admit = lc.admit(dec, now, assignments(placement))
        self.cache.set_workload(lc.applied(self.cache.workloads[dec.workload], admit))
        run.gang = self._gang(run, dec, placement)
        names = sorted({str(f) for adm in dec.pod_sets for _, f in adm.flavors})
        run.record.domain = domain_text(placement) if placement is not None else None
        run.gen += 1
        run.record.admitted = t
        run.record.flavor = ",".join(names)
        run.record.cluster_queue = str(dec.cluster_queue)
        run.record.reason = run.record.message = None
        run.record.state = JobState.RUNNING
        self._usage[run.cq] += run.gang.gpus
        self._pending[run.cq] -= 1
        self._waiting.append(run)
        if self.settings.pods_ready:
            self.clock.at(t + self.settings.timeout, Kind.TIMEOUT, dec.workload, run.gen)
        left = wls.execution_time_left(self.cache.workloads[dec.workload], sw.EPOCH + t)
        if left is not None:
            self.clock.at(t + max(0.0, left), Kind.OUT_OF_TIME, dec.workload, run.gen)

    def _evict(self, key: str, eviction: lc.Mutation, t: float, *, backoff: bool) -> None:
        """The Workload evicted by `eviction` (a lifecycle mutation), its pods gone at once,
        its quota released and the Workload requeued, after the backoff for a PodsReady
        timeout (`backoff`), or deactivated past backoffLimitCount, as the operator does."""
        run, wl = self._runs[key], self.cache.workloads[key]
        if run.gang is not None:
            self._usage[run.cq] -= run.gang.gpus
            if run.running and run.record.started is not None:
                gpus = run.gang.gpus
                self._busy -= gpus
                self._lost += gpus * (t - run.record.started)
            self._release(run)
            if run in self._waiting:
                self._waiting.remove(run)
        run.gang, run.running = None, False
        run.gen += 1
        run.record.evictions += 1
        run.record.started = None
        run.record.state = JobState.PENDING
        s = self.settings
        released = sw.released(
            wl, eviction, t, backoff=(s.backoff_base, s.backoff_max) if backoff else None
        )
        evicted = wls.condition(released, wls.EVICTED)
        assert evicted is not None
        run.record.reason, run.record.message = evicted.reason, evicted.message
        rs = released.status.requeue_state if backoff else None
        if rs is None or rs.requeue_at is None or rs.requeue_at < sw.at(t + s.backoff_max):
            self._quiet_since = t
        self._expired.discard(key)
        if not wl.spec.active:  # deactivated (maximum execution time): not requeued
            run.record.reason = "Deactivated"
            run.record.message = (
                f"{evicted.message}: exceeded maximumExecutionTimeSeconds "
                f"({wl.spec.maximum_execution_time_seconds}s)"
            )
        elif rs is not None and lc.requeuing_limit_exceeded(released, s.backoff_limit):
            released = sw.deactivated(released, t)
            run.record.reason = "Deactivated"
            run.record.message = (
                f"{rs.count} PodsReady timeouts, more than backoffLimitCount {s.backoff_limit}"
            )
        else:
            self._pending[run.cq] += 1
            when = sw.requeue_time(released) if backoff else None
            if when is not None:
                self.clock.at(when, Kind.REQUEUE, key, run.gen)
        self.cache.set_workload(released)

    def _release(self, run: _Run) -> None:
        """Unbind the gang's pods (and tell the inventory the ones it saw are gone)."""
        assert run.gang is not None
        if run.synced:
            ns, _, name = run.key.partition("/")
            for i in range(run.synced):
                self.cache.inventory.delete_pod(ns, f"{name}-{i}")
            run.synced = 0
        run.gang.release(self.pool)

    def _sync_pods(self, run: _Run) -> None:
        """Pods of a gang atoll did not place, bound since the last call, as the inventory
        would see them from the API (so that placements count them)."""
        assert run.gang is not None
        if not self._topology or any(p.pins for p in run.gang.parts):
            return
        ns, _, name = run.key.partition("/")
        for i in range(run.synced, len(run.gang.placed)):
            node = self.pool.infos[run.gang.placed[i]].name
            req = run.gang.part_at(i)[0].req
            self.cache.inventory.upsert_pod(sim_pod(ns, f"{name}-{i}", node, req))
        run.synced = len(run.gang.placed)

    def _complete(self, key: str, t: float) -> None:
        run = self._runs[key]
        assert run.gang is not None
        gpus = run.gang.gpus
        self._usage[run.cq] -= gpus
        self._busy -= gpus
        self._release(run)
        run.gang, run.running = None, False
        run.gen += 1
        run.record.finished = t
        run.record.state = JobState.FINISHED
        self._finished += 1
        self._quiet_since = t
        self.cache.delete_workload(key)  # as if its Job were deleted after finishing
        if isinstance(run.sj.job, Job):
            self.cache.delete_job(run.sj.key)

    def _handle(self, kind: Kind, key: str, gen: int, t: float) -> bool:
        """Apply one event; False when it is stale (nothing happened)."""
        if kind is Kind.ARRIVE:
            self._arrive(key, t)
            return True
        if kind is Kind.REQUEUE_PARKED:
            self._requeue_at = None
            return self.cache.any_parked()  # the step wakes them (`Cache.requeue_due`)
        if kind is Kind.SAMPLE_USAGE:
            self._sample_at = None
            due = self.cache.afs.next_due() if self.cache.afs is not None else None
            # the step samples it; with nothing admitted, the next step's sample is as good
            return due is not None and due <= sw.EPOCH + t and self.cache.holds_quota
        run = self._runs[key]
        if gen != run.gen or (kind is Kind.TIMEOUT and run.running):
            return False  # the gang was evicted, readmitted or finished since, or runs
        elif kind is Kind.COMPLETE:
            self._complete(key, t)
        elif kind is Kind.TIMEOUT:
            self._evict(key, lc.pods_ready_timeout(sw.at(t)), t, backoff=True)
        elif kind is Kind.REQUEUE:
            self.cache.set_workload(sw.backoff_finished(self.cache.workloads[key], t))
        elif kind is Kind.OUT_OF_TIME:
            wl = self.cache.workloads[key]
            left = wls.execution_time_left(wl, sw.EPOCH + t)
            if left is None or left > 0 or not wl.spec.active:
                return False
            self.cache.set_workload(sw.out_of_time(wl, t))  # the next step evicts it
            self._expired.add(key)
        return True

    # -- the loop -------------------------------------------------------------------------
    def _apply(self, decisions: tuple[d.Decision, ...], t: float) -> bool:
        progress = False
        for dec in decisions:
            match dec:
                case d.Admit():
                    self._admit(dec, t)
                    progress = True
                case d.Preempt():
                    self._preempt(dec, t)
                    progress = True
                case d.Evict():
                    wl = self.cache.workloads.get(dec.workload)
                    reason, message = lc.eviction_cause(wl, dec.reason.value, dec.message)
                    self._evict(dec.workload, lc.evict(reason, message, sw.at(t)), t, backoff=False)
                    progress = True
                case d.Pending():
                    run = self._runs.get(dec.workload)
                    if run is not None:
                        run.record.reason = dec.reason.value
                        run.record.message = dec.message
        return progress

    def _preempt(self, dec: d.Preempt, t: float) -> None:
        """The victims evicted with the operator's message; the preemptor waits for them."""
        preemptor = self.cache.workloads.get(dec.workload)
        cqs, cohorts = self.cache.cluster_queues, self.cache.cohorts
        for v in dec.victims:
            message = lc.preemption_message(
                preemptor,
                v.reason,
                lc.cohort_path(cqs, cohorts, str(dec.cluster_queue)),
                lc.cohort_path(cqs, cohorts, str(v.cluster_queue)),
            )
            evict = lc.evict(lc.PREEMPTED, message, sw.at(t), preempted_reason=v.reason.value)
            self._evict(v.workload, evict, t, backoff=False)
        record = self._runs[dec.workload].record
        record.reason = d.PendingReason.WAITING_FOR_PREEMPTED_WORKLOADS.value
        record.message = dec.message

    def _place_waiting(self, t: float) -> None:
        still = []
        for run in self._waiting:
            assert run.gang is not None
            run.gang.place(self.pool)
            self._sync_pods(run)
            if run.gang.complete:
                run.running = True
                run.record.started = t
                self._quiet_since = t
                self._busy += run.gang.gpus
                self.clock.at(t + run.sj.duration, Kind.COMPLETE, run.key, run.gen)
            else:
                still.append(run)
        self._waiting = still

    def _settle(self, t: float) -> None:
        """Cycle until a cycle makes no progress (the live loop's `while progress`). A
        cycle that repeats an earlier cycle of the same instant, from the same workloads
        holding quota, means the engine ping-pongs (e.g. a preemptor and its requeued
        victim taking turns): the instant is ended there and the repetition reported in the
        notes. (The same decisions from another state are no loop: a reclaimed victim may
        be admitted again once its queue is back within nominal quota.)"""
        now = sw.EPOCH + t
        seen: set[tuple[tuple[tuple[str, str], ...], int]] = set()
        # XOR of the hashes of the workloads admitted or evicted in this instant: equal
        # values mean the same workloads hold quota (Zobrist hashing, O(1) per decision)
        holding = 0
        self.cache.sample_usage(now)  # as the live step does, also with nothing pending
        while self._drains or self._expired or any(self._pending.values()):
            decisions = self.decider.decide(now)
            self.cycles += 1
            progress = self._apply(decisions, t)
            self._place_waiting(t)
            if not progress:
                if self.decider.parked:
                    continue  # the heads behind the parked ones get their turn now
                return
            key = _progress_key(decisions)
            for dec in decisions:
                match dec:
                    case d.Admit() | d.Evict():
                        holding ^= hash(dec.workload)
                    case d.Preempt():
                        for v in dec.victims:
                            holding ^= hash(v.workload)
            if (key, holding) in seen:
                self.notes.append(f"t={t:g}s: the engine repeats a cycle (livelock): {key}")
                return
            seen.add((key, holding))
        self._place_waiting(t)

    def _requeue_parked(self, t: float) -> None:
        """An event for the batched requeue of the parked workloads, when one is due (as
        the live loop's timer, `Cache.next_requeue`)."""
        cache = self.cache
        at = cache.next_wake(sw.EPOCH + t)  # on the step's clock: sw.EPOCH + simulated seconds
        if at is None or at <= sw.EPOCH + t or not cache.any_parked():
            return
        due = round(at - sw.EPOCH, 6)  # simulated seconds, without the clock's rounding
        if sw.EPOCH + due < at:
            due = at - sw.EPOCH  # the step at `due` must see the requeue due
        if self._requeue_at != due:
            self._requeue_at = due
            self.clock.at(due, Kind.REQUEUE_PARKED, "")

    def _sample_usage(self, t: float) -> None:
        """An event for the next LocalQueue usage sample (Admission Fair Sharing), as the
        operator's timer, while a ClusterQueue is ordered by the usage and a workload holds
        quota: the usage then follows what is admitted between the other events too. (With
        nothing admitted it only decays, which a later sample computes exactly.)"""
        tracker = self.cache.afs
        if tracker is None or not self.cache.holds_quota or not self.cache.orders_by_usage:
            return
        at = tracker.next_due()
        if at is None or at <= sw.EPOCH + t:
            return
        due = round(at - sw.EPOCH, 6)
        if sw.EPOCH + due < at:
            due = at - sw.EPOCH  # the step at `due` must see the sample due
        if self._sample_at != due:
            self._sample_at = due
            self.clock.at(due, Kind.SAMPLE_USAGE, "")

    def _sample(self, t: float) -> None:
        values = {f"usage/{cq}": v for cq, v in self._usage.items()}
        values.update({f"pending/{cq}": v for cq, v in self._pending.items()})
        values.update({f"bound/{g}": v for g, v in self.pool.group_used.items()})
        values["busy"] = self._busy
        values["partial"] = sum(1 for r in self._waiting if r.gang and r.gang.placed)
        self.timeline.add(t, values)
        if self.nodes is not None:
            self.nodes.add(t, self.pool.gpus_bound())

    def _only_retries_left(self, t: float) -> bool:
        """No Job runs or is still to arrive, and for two whole retry periods (PodsReady
        timeout + the backoff cap) the only thing that happened was gangs timing out waiting
        for their pods at the backoff cap: the run would repeat that forever (Kueue retries
        without end unless `backoffLimitCount` is set), so it ends here, with a note."""
        s = self.settings
        if not s.pods_ready or self._busy or self._arrived < len(self._all):
            return False
        if t - self._quiet_since <= 2 * (s.timeout + s.backoff_max):
            return False
        stuck = sorted(r.sj.key for r in self._all if r.record.finished is None)
        self.notes.append(
            f"t={t:g}s: stopped: nothing runs or arrives any more and {', '.join(stuck)} "
            "keep timing out waiting for their pods to be placed (set waitForPodsReady "
            "requeuingStrategy.backoffLimitCount to deactivate them instead)"
        )
        return True

    def run(self) -> SimResult:
        until = self.settings.until
        end = 0.0
        while (nxt := self.clock.next_time()) is not None and (until is None or nxt <= until):
            live = [self._handle(ev.kind, ev.key, ev.gen, ev.t) for ev in self.clock.pop_instant()]
            if not any(live):
                continue
            end = nxt
            self._settle(nxt)
            self._requeue_parked(nxt)
            self._sample_usage(nxt)
            self._sample(nxt)
            if self.progress is not None:
                self.progress(self._finished, len(self._all), nxt)
            if self._only_retries_left(nxt):
                break
        return SimResult(
            scenario=self.scenario.name,
            mode=Mode.GANG,
            jobs=[r.record for r in self._all],
            timeline=self.timeline,
            nodes=self.nodes,
            gpu_capacity=self.pool.groups(),
            gpu_quota=gpu_quota(self.scenario),
            end=end,
            cycles=self.cycles,
            lost_gpu_seconds=self._lost,
            notes=self.notes,
        )
