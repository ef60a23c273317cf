"""What a simulation run produces: one record per Job, a timeline, and (greedy) a deadlock.

Everything here is plain data with a JSON form (`SimResult.to_json`); times are seconds
from the start of the simulation. The timeline is stored column-wise (one array per
series) so that a run of 100,000 Jobs stays small in memory.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

SCHEMA_VERSION = 1


class Mode(Enum):
    GANG = "gang"
    """atoll: whole gangs admitted by the engine, then placed by kube-scheduler."""
    GREEDY = "greedy"
    """kube-scheduler alone: pods placed one by one as they are created."""


class JobState(Enum):
    FINISHED = "Finished"
    RUNNING = "Running"
    PENDING = "Pending"
    DEADLOCKED = "Deadlocked"


@dataclass(slots=True, kw_only=True)
class JobRecord:
    name: str
    """`namespace/name` of the Job."""
    arrival: float
    pods: int
    gpus: int
    """GPUs of the whole gang (pods × GPUs per pod)."""
    cluster_queue: str | None = None
    admitted: float | None = None
    """When the gang was last admitted (gang mode)."""
    started: float | None = None
    """When the last of its pods started running (the job makes progress from then)."""
    finished: float | None = None
    flavor: str | None = None
    domain: str | None = None
    """Where its pods were placed when a topology or devices were involved (e.g.
    `rack=rack-3`, or `2 nodes`); None otherwise."""
    evictions: int = 0
    reason: str | None = None
    """Why it is (or was last) waiting, in Kueue's words."""
    message: str | None = None
    """The message that goes with `reason` (the Workload condition's message)."""
    state: JobState = JobState.PENDING

    @property
    def wait(self) -> float | None:
        """Seconds from arrival to the (last) start."""
        return None if self.started is None else self.started - self.arrival

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "arrival": self.arrival,
            "pods": self.pods,
            "gpus": self.gpus,
            "clusterQueue": self.cluster_queue,
            "admitted": self.admitted,
            "started": self.started,
            "finished": self.finished,
            "wait": self.wait,
            "flavor": self.flavor,
            "domain": self.domain,
            "evictions": self.evictions,
            "reason": self.reason,
            "message": self.message,
            "state": self.state.value,
        }


@dataclass(slots=True)
class Timeline:
    """Samples taken after every instant at which something changed."""

    times: array[float] = field(default_factory=lambda: array("d"))
    series: dict[str, array[int]] = field(default_factory=dict)
    """`usage/<cq>` GPUs admitted, `pending/<cq>` Jobs waiting, `bound/<group>` GPUs
    bound to pods, `busy` GPUs of Jobs making progress, `partial` Jobs with some but not
    all pods running."""

    def add(self, t: float, values: Mapping[str, int]) -> None:
        n = len(self.times)
        if n and self.times[-1] == t:
            n -= 1
            self.times.pop()
            for col in self.series.values():
                col.pop()
        self.times.append(t)
        for key, value in values.items():
            if key not in self.series:
                self.series[key] = array("q", [0] * n)
            self.series[key].append(value)
        for key, col in self.series.items():
            if len(col) == n:
                col.append(values.get(key, 0))

    def extend_to(self, t: float) -> None:
        """Hold the last sample until `t` (a run that ended early, e.g. deadlocked)."""
        if self.times and t > self.times[-1]:
            self.add(t, {k: v[-1] for k, v in self.series.items()})

    def integral(self, values: Sequence[int]) -> float:
        """∫ values dt over the timeline (step function), in value-seconds."""
        t = self.times
        return float(sum(values[i] * (t[i + 1] - t[i]) for i in range(len(t) - 1)))

    def column(self, prefix: str) -> dict[str, array[int]]:
        """Series whose key starts with `prefix/`, keyed by the rest."""
        return {k.split("/", 1)[1]: v for k, v in self.series.items() if k.startswith(prefix + "/")}

    def to_json(self) -> dict[str, Any]:
        return {"times": list(self.times), "series": {k: list(v) for k, v in self.series.items()}}


@dataclass(frozen=True, slots=True, kw_only=True)
class Holder:
    """One Job of a deadlock: what it holds and what it waits for."""

    job: str
    holds: Mapping[str, int]
    """Node → GPUs its running pods hold there."""
    pending_pods: int
    waits_for_gpus: int
    waits_for: tuple[str, ...]
    """Jobs holding GPUs on the nodes its pending pods could use."""

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "holds": dict(self.holds),
            "pendingPods": self.pending_pods,
            "waitsForGpus": self.waits_for_gpus,
            "waitsFor": list(self.waits_for),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Deadlock:
    since: float
    """When the last pod of the cycle was placed: nothing changed for these Jobs after."""
    cycle: tuple[Holder, ...]
    """The wait-for cycle, each Job waiting for the next (the last for the first)."""
    free_gpus: int
    """GPUs free on the nodes the cycle's pending pods could use."""

    def describe(self) -> str:
        parts = []
        for h in self.cycle:
            where = ", ".join(f"{n}: {g}" for n, g in sorted(h.holds.items()))
            parts.append(
                f"{h.job} holds {sum(h.holds.values())} GPUs ({where}) and waits for "
                f"{h.waits_for_gpus} more held by {', '.join(h.waits_for)}"
            )
        names = " → ".join([h.job for h in self.cycle] + [self.cycle[0].job])
        return (
            f"deadlock at t={self.since:g}s: wait-for cycle {names}; "
            + "; ".join(parts)
            + f"; {self.free_gpus} GPUs free where they could run"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "since": self.since,
            "cycle": [h.to_json() for h in self.cycle],
            "freeGpus": self.free_gpus,
            "message": self.describe(),
        }


def align_ends(results: list[SimResult], until: float | None = None) -> None:
    """Extend every run's timeline to `until` (a run stopped there holds its state up to
    it), else to the latest end among them (a deadlocked run holds its GPUs forever), so
    that plots and totals compare the same span."""
    end = until if until is not None else max((r.end for r in results), default=0.0)
    for r in results:
        r.timeline.extend_to(end)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


@dataclass(slots=True)
class NodeTimeline:
    """GPUs bound on each node over time (kept for clusters of at most `MAX_NODE_ROWS` nodes,
    for the per-node occupancy plot); a sample is added only when something changed."""

    names: tuple[str, ...]
    capacity: tuple[int, ...]
    times: list[float] = field(default_factory=list)
    bound: list[tuple[int, ...]] = field(default_factory=list)

    def add(self, t: float, bound: tuple[int, ...]) -> None:
        if self.bound and self.bound[-1] == bound:
            return
        if self.times and self.times[-1] == t:
            self.bound[-1] = bound
            return
        self.times.append(t)
        self.bound.append(bound)


MAX_NODE_ROWS = 256


@dataclass(slots=True, kw_only=True)
class SimResult:
    scenario: str
    mode: Mode
    jobs: list[JobRecord]
    timeline: Timeline
    gpu_capacity: Mapping[str, int]
    """GPUs per node group."""
    end: float
    cycles: int = 0
    """Engine cycles run (gang mode)."""
    lost_gpu_seconds: float = 0.0
    """GPU-seconds of progress thrown away: the run time of gangs evicted (preempted)
    while running, which restart from scratch."""
    deadlock: Deadlock | None = None
    notes: list[str] = field(default_factory=list)
    nodes: NodeTimeline | None = None
    """Per-node GPU occupancy (small clusters only)."""
    gpu_quota: Mapping[str, tuple[int, int | None]] = field(default_factory=dict)
    """ClusterQueue → (nominal GPU quota, borrowingLimit of GPUs: None when unlimited in a
    cohort, 0 without a cohort), summed over its flavors (gang mode)."""

    def summary(self) -> dict[str, Any]:
        waits = [w for j in self.jobs if (w := j.wait) is not None]
        done = [j for j in self.jobs if j.finished is not None]
        tl = self.timeline
        busy = tl.integral(tl.series.get("busy", ()))
        bound = sum(tl.integral(col) for col in tl.column("bound").values())
        return {
            "jobs": len(self.jobs),
            "finished": len(done),
            "unfinished": len(self.jobs) - len(done),
            "makespan": max((j.finished for j in done if j.finished is not None), default=None),
            "meanWait": sum(waits) / len(waits) if waits else None,
            "p50Wait": percentile(waits, 0.5),
            "p95Wait": percentile(waits, 0.95),
            "maxWait": max(waits, default=None),
            "evictions": sum(j.evictions for j in self.jobs),
            "gpuHoursProgressing": busy / 3600,
            "gpuHoursUseful": (busy - self.lost_gpu_seconds) / 3600,
            "gpuHoursLostToEviction": self.lost_gpu_seconds / 3600,
            "gpuHoursHeldIdle": (bound - busy) / 3600,
            "deadlocked": self.deadlock is not None,
            "cycles": self.cycles,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "schemaVersion": SCHEMA_VERSION,
            "scenario": self.scenario,
            "mode": self.mode.value,
            "end": self.end,
            "gpuCapacity": dict(self.gpu_capacity),
            "summary": self.summary(),
            "jobs": [j.to_json() for j in self.jobs],
            "timeline": self.timeline.to_json(),
            "deadlock": None if self.deadlock is None else self.deadlock.to_json(),
            "notes": list(self.notes),
        }
