"""kube-scheduler alone: pods placed one by one, with the all-reduce barrier.

No quota, no queues, no gang: each Job's pods are created by the Job controller as soon as
the Job exists, in slow-start batches of 1, 2, 4, … pods (`POD_BATCH_INTERVAL` apart), and
kube-scheduler binds each pending pod, in its queue order (priority, then creation time),
to a node where it fits now (`sim/nodes.py`). A distributed Job makes progress only while
ALL its pods run (all-reduce is a barrier), so a partly placed Job holds its GPUs and does
nothing. Pod-priority preemption by kube-scheduler is not modelled.

When the run ends with Jobs that hold GPUs and wait for GPUs held by one another, the
wait-for graph has a cycle: a deadlock (Coffman: mutual exclusion, hold and wait, no
preemption, circular wait). The result names the cycle, what each Job holds and what it
waits for.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from atoll.engine import model as m
from atoll.sim import workloads as sw
from atoll.sim.events import Clock, Kind
from atoll.sim.gang import Progress, fill_cache, queue_of
from atoll.sim.nodes import GPU, NodePool, Signature
from atoll.sim.pods import Gang, Part, request, signature
from atoll.sim.results import (
    Deadlock,
    Holder,
    JobRecord,
    JobState,
    Mode,
    NodeTimeline,
    SimResult,
    Timeline,
)
from atoll.sim.scenario import Scenario, SimJob
from atoll.state import convert
from atoll.state.cache import Cache

POD_BATCH_INTERVAL = 0.1
"""Seconds between two slow-start batches of the Job controller (its real pace is a few
milliseconds; the order of pods is what matters)."""


def batch_of(index: int) -> int:
    """Slow-start batch of the pod with this index: 0 | 1 2 | 3 4 5 6 | 7 …"""
    return (index + 1).bit_length() - 1


@dataclass(slots=True, kw_only=True)
class _GJob:
    sj: SimJob
    record: JobRecord
    cq: str
    gang: Gang
    priority: int
    created: int = 0
    running: bool = False
    last_bound: float = 0.0

    def created_at(self, index: int) -> float:
        return self.sj.arrival + batch_of(index) * POD_BATCH_INTERVAL


def _workload(sj: SimJob, kinds: sw.Kinds, cache: Cache) -> m.Workload:
    """The pods and priority of the object, read as the operator reads them (its pods are
    the same with or without atoll; only their admission differs)."""
    wl = kinds.compose(sj.job, cache, created=sj.arrival)
    return convert.workload(wl, namespace_labels={}, queued_at=0.0)


@dataclass(slots=True)
class GreedySimulator:
    scenario: Scenario
    progress: Progress | None = None
    until: float | None = None
    """Stop the simulation at this time (default: when no event is left)."""
    pool: NodePool = field(init=False)
    clock: Clock = field(default_factory=Clock)
    timeline: Timeline = field(default_factory=Timeline)
    nodes: NodeTimeline | None = field(init=False, default=None)
    _jobs: dict[str, _GJob] = field(default_factory=dict)
    _pending: list[_GJob] = field(default_factory=list)
    """Jobs with created pods not yet bound."""
    _finished: int = 0
    _usage: dict[str, int] = field(default_factory=dict)
    _waiting: dict[str, int] = field(default_factory=dict)
    _busy: int = 0
    _partial: int = 0
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        scn = self.scenario
        self.pool = NodePool.of(scn.nodes)
        self.nodes = self.pool.node_timeline()
        of = queue_of(scn)
        cache = fill_cache(scn)
        kinds = sw.Kinds.all()
        for sj in scn.jobs:
            try:
                ew = _workload(sj, kinds, cache)
            except sw.ComposeError as e:
                self.notes.append(f"{sj.key}: not simulated ({e.reason}): {e}")
                continue
            parts = tuple(
                Part(sig=signature(ps), req=request(ps), size=ps.count) for ps in ew.pod_sets
            )
            gang = Gang(owner=sj.key, parts=parts)
            record = JobRecord(
                name=sj.key,
                arrival=sj.arrival,
                pods=gang.size,
                gpus=gang.gpus,
                cluster_queue=of(sj),
            )
            self._jobs[sj.key] = _GJob(
                sj=sj, record=record, cq=of(sj) or "-", gang=gang, priority=ew.priority
            )
            self._usage[of(sj) or "-"] = self._waiting[of(sj) or "-"] = 0
            self.clock.at(sj.arrival, Kind.ARRIVE, sj.key)

    def _create_pods(self, job: _GJob, t: float) -> None:
        """The Job controller's next slow-start batch, and the one after it."""
        if job.created == 0:
            self._waiting[job.cq] += 1
        batch = batch_of(job.created)
        job.created = min(job.gang.size, 2 ** (batch + 1) - 1)
        if job not in self._pending:
            self._pending.append(job)
        if job.created < job.gang.size:
            self.clock.at(t + POD_BATCH_INTERVAL, Kind.PODS, job.sj.key)

    def _schedule(self, t: float) -> None:
        """One pass of kube-scheduler's queue: every pending pod in queue order."""
        pods = sorted(
            (-job.priority, job.created_at(i), job.sj.seq, i, job.sj.key)
            for job in self._pending
            for i in range(len(job.gang.placed), job.created)
        )
        failed: set[tuple[Signature, tuple[tuple[str, int], ...]]] = set()
        for *_, key in pods:
            job = self._jobs[key]
            part = job.gang.part_at(len(job.gang.placed))[0]
            shape = (part.sig, tuple(sorted(part.req.items())))
            if shape in failed:
                continue
            if not job.gang.place_one(self.pool):
                failed.add(shape)
                continue
            job.last_bound = t
            self._usage[job.cq] += part.gpus_per_pod
            self._partial += len(job.gang.placed) == 1
            if job.gang.complete:
                self._partial -= 1
                self._waiting[job.cq] -= 1
                self._busy += job.record.gpus
                job.running = True
                job.record.started = t
                job.record.state = JobState.RUNNING
                self.clock.at(t + job.sj.duration, Kind.COMPLETE, key)
        self._pending = [j for j in self._pending if len(j.gang.placed) < j.created]

    def _complete(self, job: _GJob, t: float) -> None:
        job.gang.release(self.pool)
        self._usage[job.cq] -= job.record.gpus
        self._busy -= job.record.gpus
        job.running = False
        job.record.finished = t
        job.record.state = JobState.FINISHED
        self._finished += 1

    def _sample(self, t: float) -> None:
        values = {f"usage/{k}": v for k, v in self._usage.items()}
        values.update({f"pending/{k}": v for k, v in self._waiting.items()})
        values.update({f"bound/{g}": v for g, v in self.pool.group_used.items()})
        values["busy"], values["partial"] = self._busy, self._partial
        self.timeline.add(t, values)
        if self.nodes is not None:
            self.nodes.add(t, self.pool.gpus_bound())

    def run(self) -> SimResult:
        until = self.until
        while (nxt := self.clock.next_time()) is not None and (until is None or nxt <= until):
            for ev in self.clock.pop_instant():
                job = self._jobs[ev.key]
                if ev.kind is Kind.COMPLETE:
                    self._complete(job, ev.t)
                else:
                    self._create_pods(job, ev.t)
            self._schedule(self.clock.now)
            self._sample(self.clock.now)
            if self.progress is not None:
                self.progress(self._finished, len(self._jobs), self.clock.now)
        # cut short by `until`, a Job still waiting may yet get its pods: no verdict then
        deadlock = self._deadlock() if self.clock.next_time() is None else None
        return SimResult(
            scenario=self.scenario.name,
            mode=Mode.GREEDY,
            jobs=[j.record for j in self._jobs.values()],
            timeline=self.timeline,
            nodes=self.nodes,
            gpu_capacity=self.pool.groups(),
            end=self.clock.now,
            deadlock=deadlock,
            notes=self.notes,
        )

    # -- deadlock -------------------------------------------------------------------------
    def _holder(self, job: _GJob) -> Holder:
        holds: dict[str, int] = {}
        for k, i in enumerate(job.gang.placed):
            name = self.pool.infos[i].name
            holds[name] = holds.get(name, 0) + job.gang.part_at(k)[0].gpus_per_pod
        waiting = [job.gang.part_at(k)[0] for k in range(len(job.gang.placed), job.gang.size)]
        waits = sorted(
            {
                owner
                for sig in {p.sig for p in waiting} or {p.sig for p in job.gang.parts}
                for i in self.pool.feasible_nodes(sig)
                for owner in self.pool.holders[i]
                if owner != job.sj.key
            }
        )
        return Holder(
            job=job.sj.key,
            holds=holds,
            pending_pods=len(waiting),
            waits_for_gpus=sum(p.gpus_per_pod for p in waiting),
            waits_for=tuple(waits),
        )

    def _deadlock(self) -> Deadlock | None:
        stuck = {k: j for k, j in self._jobs.items() if j.record.finished is None}
        for j in stuck.values():
            j.record.state = JobState.PENDING
            j.record.reason = "Unschedulable"
            j.record.message = (
                f"{len(j.gang.placed)} of {j.gang.size} pods bound; no node has room for the others"
            )
        graph = {k: self._holder(j) for k, j in stuck.items() if j.gang.placed}
        cycle = find_cycle({k: [w for w in h.waits_for if w in graph] for k, h in graph.items()})
        if not cycle:
            return None
        nodes = {
            i
            for k in cycle
            for part in stuck[k].gang.parts
            for i in self.pool.feasible_nodes(part.sig)
        }
        free = sum(self.pool.free[i].get(GPU, 0) for i in nodes)
        for k in cycle:
            stuck[k].record.state = JobState.DEADLOCKED
            stuck[k].record.reason = "Deadlock"
            stuck[k].record.message = (
                f"holds {sum(graph[k].holds.values())} GPUs and waits for "
                f"{graph[k].waits_for_gpus} more held by {', '.join(graph[k].waits_for)}"
            )
        return Deadlock(
            since=max(stuck[k].last_bound for k in cycle),
            cycle=tuple(graph[k] for k in cycle),
            free_gpus=free,
        )


def find_cycle(graph: dict[str, list[str]]) -> list[str]:
    """A cycle of the directed graph (first found in key order), or []."""
    color: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        color[node] = 1
        stack.append(node)
        for nxt in graph.get(node, ()):
            if color.get(nxt) == 1:
                return stack[stack.index(nxt) :]
            if nxt not in color and (found := visit(nxt)):
                return found
        stack.pop()
        color[node] = 2
        return []

    for start in sorted(graph):
        if start not in color and (found := visit(start)):
            return found
    return []
