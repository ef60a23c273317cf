"""One scheduling decision step on the cache, shared by the live scheduler and the simulator.

The heads of the queues (`pending_by_queue`, `select_heads`) → one engine cycle
(`run_cycle`) on the snapshot → each admitted gang placed on the inventory (topology and
devices; `placing.TopologyChecker`, which may turn it into a domain preemption or a pending
decision) → `drain` → the decisions assumed in the cache: admissions assumed, victims marked
evicting, BestEffortFIFO preemptors made sticky, inadmissible workloads parked. No awaits
and no I/O: the caller writes the decisions (the operator to the API server, the simulator
to its virtual cluster).

Mirrors Kueue's pkg/scheduler/scheduler.go `schedule`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from atoll.engine import decisions as d
from atoll.engine import model as m
from atoll.engine.cycle import drain, run_cycle
from atoll.engine.ordering import select_heads
from atoll.engine.snapshot import Snapshot
from atoll.state.cache import Cache
from atoll.state.placing import TopologyChecker


def admission_of(dec: d.Admit) -> m.Admission:
    """The engine admission an Admit decision gives (what the cache assumes)."""
    return m.Admission(
        cluster_queue=dec.cluster_queue,
        pod_sets=tuple(
            m.PodSetAssignment(
                name=p.name, count=p.count, flavors=p.flavors, resource_usage=p.resource_usage
            )
            for p in dec.pod_sets
        ),
    )


@dataclass(slots=True)
class Decider:
    cache: Cache
    fair_sharing: m.FairSharing | None = None
    checker: TopologyChecker = field(init=False)
    heads: int = 0
    """Heads of the last step."""
    parked: int = 0
    """Workloads the last step parked as inadmissible: the heads behind them are new, so
    another step is due even when this one admitted nothing (BestEffortFIFO)."""

    def __post_init__(self) -> None:
        self.checker = TopologyChecker(self.cache)

    def decide(self, now: float) -> tuple[d.Decision, ...]:
        """One engine cycle on the current cache, with its decisions assumed."""
        cache = self.cache
        snapshot = cache.snapshot(self.fair_sharing)
        heads = select_heads(cache.pending_by_queue(now), cache.parked_keys())
        self.checker.prune()
        evicting = {str(k) for k in snapshot.evicted}
        placed: list[d.Decision] = []
        phantom = False
        retry: set[str] = set()
        for engine_dec in run_cycle(snapshot, heads):
            if phantom and isinstance(engine_dec, d.Pending):
                # The engine counted the quota of a gang decided earlier in this cycle that
                # placement then turned down: this one may fit after all, so it is tried
                # again next step instead of being parked.
                retry.add(str(engine_dec.workload))
            dec = self._place(engine_dec, snapshot, evicting)
            if isinstance(engine_dec, d.Admit) and not isinstance(dec, d.Admit):
                phantom = True
            if isinstance(dec, d.Preempt):
                # Later gangs of this cycle see these victims as leaving, never as new ones.
                evicting.update(str(v.workload) for v in dec.victims)
            placed.append(dec)
        decisions = (*placed, *drain(snapshot))
        self.heads = len(heads)
        self.parked = 0
        for dec in decisions:
            match dec:
                case d.Admit():
                    cache.assume(dec.workload, admission_of(dec))
                case d.Preempt():
                    cache.evicting.update(v.workload for v in dec.victims)
                    cache.preempting(dec.workload, dec.cluster_queue)
                case d.Evict():
                    cache.evicting.add(dec.workload)
                case d.Pending():
                    if dec.requeue is d.Requeue.INADMISSIBLE and dec.workload not in retry:
                        cache.park(dec.workload)
                        self.parked += 1
        return decisions

    def _place(self, dec: d.Decision, snapshot: Snapshot, evicting: set[str]) -> d.Decision:
        """An admitted gang that involves topology or devices is placed now, on the inventory
        as it is after the admissions before it in this cycle; else it preempts inside one
        domain of its required level, or stays pending."""
        if not isinstance(dec, d.Admit):
            quota_miss = isinstance(dec, d.Preempt) or (
                isinstance(dec, d.Pending) and dec.requeue is d.Requeue.INADMISSIBLE
            )
            if quota_miss:
                self.checker.forget(str(dec.workload))  # its nominated domain is free again
            return dec
        checked = self.checker.place_or_preempt(dec, snapshot, evicting)
        if isinstance(checked, d.Pending | d.Preempt):
            return checked
        if checked is not None:
            self.cache.inventory.hold(checked)
        return dec
