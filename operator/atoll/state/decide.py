"""One scheduling decision step on the cache, shared by the live scheduler and the simulator.

The heads of the queues (`Cache.queue_heads`: what `select_heads` gives on
`pending_by_queue`) → one engine cycle (`run_cycle`) on the snapshot, which hands each gang
quota admits to the snapshot's placer (`engine.gangstep.CyclePlacer`: topology and devices on
the inventory, the gang converted by `placing.TopologyChecker` and decided by
`engine.gangstep.decide`, which may turn it into a domain preemption or a pending decision)
before it counts → `drain` → the decisions
assumed in the cache: admissions assumed, victims marked evicting, BestEffortFIFO
preemptors made sticky, inadmissible workloads parked. No awaits and no I/O: the caller
writes the decisions (the operator to the API server, the simulator to its virtual
cluster).

Congested queues: when a capacity change wakes the parked workloads, each queue would try
them one head per cycle, and most only get parked again. A cycle whose every head belongs to
an equivalence class (`engine.ordering.scheduling_class`) that already failed on this very
snapshot changes nothing but parking those heads, so it is not run (a class that failed in
placement failed on the snapshot *and* the inventory, with the same domains nominated for
preemptors: its pod sets' `placement` inputs are part of the class; gangs with DRA claims,
whose templates are not in either, are always tried): the heads are parked
with the decision their class got, and when every workload left awake in the queues is of
such a class, whole queues are parked at once (`Cache.queue_park_all`). The decisions are
those of the cycles skipped: a workload is told its pending decision again only when it
differs from the last one it was told. Any other cycle runs as before.

This is the only place a cycle is run. `decide(now, commit=False)` runs the same step on a
copy (`Decider.fork`: a copy of the cache and of what this Decider remembers, such as the
domains nominated for preemptors) and leaves this one untouched: `atoll what-if` is that step
once with the new Workload added to the copy, `atoll explain`'s start estimate is the step run
forward on a copy, and its counterfactuals are the step on changed copies
(`state/whatif.py`, `control/explain.py`).

Mirrors Kueue's pkg/scheduler/scheduler.go `schedule` (and its scheduling equivalence
hashing, which parks the workloads equivalent to a head that does not fit).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from copy import deepcopy
from dataclasses import dataclass, field

from atoll.engine import decisions as d
from atoll.engine import model as m
from atoll.engine.backfill import Guard, reserve
from atoll.engine.cycle import drain, run_cycle
from atoll.engine.domainpreemption import Nomination
from atoll.engine.inventory import Inventory, Placement
from atoll.engine.snapshot import Snapshot, placing
from atoll.state.cache import Cache
from atoll.state.placing import TopologyChecker
from atoll.state.reserving import ReservationBook


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


_FORKED = frozenset({
    "cache", "fair_sharing", "checker", "heads", "parked",
    "_failed", "_failed_on", "_placed_on", "_told", "_told_in",
})  # fmt: skip
"""The fields `Decider.fork` copies one by one."""


@dataclass(slots=True)
class Decider:
    cache: Cache
    fair_sharing: m.FairSharing | None = None
    checker: TopologyChecker = field(init=False)
    heads: int = 0
    """Heads of the last step."""
    parked: int = 0
    """Workloads the last step parked as inadmissible: the heads behind them are new, so
    another step is due even when this one admitted nothing (BestEffortFIFO). 0 when the
    step already parked every workload such steps would only park again."""
    _failed: dict[tuple[str, Hashable], d.Pending] = field(default_factory=dict)
    """(queue, class) → the decision a workload of that class got, and was parked with, on
    the snapshot `_failed_on`: every workload of the class gets it on that snapshot."""
    _failed_on: Snapshot | None = None
    _placed_on: dict[tuple[str, Hashable], tuple[Inventory, dict[str, Nomination]]] = field(
        default_factory=dict
    )
    """(queue, class) → the inventory and nominations its failure in placement was found on
    (a failure there holds only while both are unchanged)."""
    _told: dict[tuple[str, Hashable], tuple[d.Pending, set[str]]] = field(default_factory=dict)
    """(queue, class) → its last failure, and the workloads whose last decision it was."""
    _told_in: dict[str, tuple[str, Hashable]] = field(default_factory=dict)
    book: ReservationBook = field(default_factory=ReservationBook)
    """Reservations of backfill queues (`engine.backfill`), events and counters."""

    def __post_init__(self) -> None:
        self.checker = TopologyChecker(self.cache)

    def fork(self) -> Decider:
        """This Decider on a copy of its cache (`Cache.fork`), remembering what it remembers (the
        domains nominated for preemptors, the classes that failed on the current snapshot,
        the failures told): the copy's next step is the one this Decider would take, and
        neither sees the other's steps afterwards. (Taking the snapshot here changes nothing
        but the cache's memo of it: the next step would take the same one.)"""
        copy = Decider(self.cache.fork(), self.fair_sharing)
        copy.checker = self.checker.fork(copy.cache)
        copy.heads, copy.parked = self.heads, self.parked
        if self._failed and self.cache.snapshot(self.fair_sharing) is self._failed_on:
            copy._failed = dict(self._failed)
            copy._placed_on = dict(self._placed_on)
            copy._failed_on = copy.cache.snapshot(self.fair_sharing)
        copy._told = {k: (dec, set(keys)) for k, (dec, keys) in self._told.items()}
        copy._told_in = dict(self._told_in)
        for f in dataclasses.fields(Decider):  # any other memory, deep-copied
            if f.name not in _FORKED:
                setattr(copy, f.name, deepcopy(getattr(self, f.name)))
        return copy

    def decide(self, now: float, *, commit: bool = True) -> tuple[d.Decision, ...]:
        """One engine cycle on the current cache, with its decisions assumed; with
        `commit=False`, the same step on a fork (nothing here changes)."""
        if not commit:
            return self.fork().decide(now)
        cache = self.cache
        cache.sample_usage(now)  # first: the snapshot carries the LocalQueues' usage
        snapshot = cache.snapshot(self.fair_sharing)
        if snapshot is not self._failed_on:
            self._failed, self._failed_on, self._placed_on = {}, snapshot, {}
        drained = drain(snapshot)
        skipped: list[d.Decision] = []
        heads = [w for _, w in self._skip(now, bool(drained), skipped)]
        self.checker.prune()
        holders = self.book.holders(cache, snapshot, now)
        reservations = reserve(snapshot, holders, now, self.checker.hosts()) if holders else ()
        guard = Guard(snapshot=snapshot, reservations=reservations, now=now)
        placed, placements, failed = self._cycle(snapshot, heads, guard)
        admitted = {dec.workload for dec in placed if isinstance(dec, d.Admit)}
        backfilled = {k: v for k, v in guard.backfilled.items() if k in admitted}
        decisions = (*skipped, *placed, *drained)
        self.heads = len(heads)
        progress = self._assume(decisions, placements, failed)
        if self.parked and not progress and cache.snapshot(self.fair_sharing) is snapshot:
            # The next steps would start from this snapshot: skip those that only park.
            more: list[d.Decision] = []
            self.parked = len(self._skip(now, bool(drained), more))
            decisions = (*decisions, *more)
        # Each holder's own reservation in its message, after the failures of its class are
        # remembered (`_fail`): a workload of the same class is told its own, not the head's.
        told = list(decisions)
        told += self.book.update(holders, reservations, backfilled, told, now)
        cache.promised = frozenset(self.book.current)
        decisions = tuple(told)
        for dec in decisions:
            self._tell(dec)
        return decisions

    def _cycle(
        self, snapshot: Snapshot, heads: list[m.Workload], guard: Guard
    ) -> tuple[list[d.Decision], dict[str, Placement], dict[str, bool]]:
        """The engine cycle, placing each gang it admits; where the admitted gangs are
        placed; the heads that stay pending whose failure holds for their class (→ whether
        placement took part in it)."""
        placer = self.checker.placer(snapshot)
        decisions = run_cycle(
            placing(snapshot, placer), heads, guard.reservations, guard.now, guard
        )
        failed = {}
        for dec in decisions:
            key = str(dec.workload)
            if not isinstance(dec, d.Pending):
                continue
            if key not in placer.changed:
                failed[key] = False
            elif not self._claims(key):
                failed[key] = True
        return list(decisions), placer.placed, failed

    def _claims(self, key: str) -> bool:
        """Does the workload's gang have DRA resource claims (placed by templates that are
        neither in the snapshot nor in the inventory)?"""
        wl = self.cache.workloads.get(key)
        return wl is None or any(ps.template.spec.resource_claims for ps in wl.spec.pod_sets)

    def _assume(
        self,
        decisions: tuple[d.Decision, ...],
        placements: Mapping[str, Placement],
        failed: Mapping[str, bool],
    ) -> bool:
        """Assume the decisions in the cache, holding the admitted gangs' placements;
        whether any admits, preempts or evicts."""
        cache = self.cache
        self.parked = 0
        progress = False
        for dec in decisions:
            match dec:
                case d.Admit():
                    cache.assume(dec.workload, admission_of(dec))
                    placement = placements.get(str(dec.workload))
                    if placement is not None:
                        cache.inventory.hold(placement)
                    progress = True
                case d.Preempt():
                    cache.evicting.update(v.workload for v in dec.victims)
                    cache.preempting(dec.workload, dec.cluster_queue)
                    progress = True
                case d.Evict():
                    cache.evicting.add(dec.workload)
                    progress = True
                case d.Pending():
                    if dec.requeue is not d.Requeue.INADMISSIBLE:
                        continue
                    if dec.workload in failed:
                        self._fail(dec, placed=failed[dec.workload])
                    if not cache.queue_asleep(dec.workload):  # skipped ones are parked
                        cache.park(dec.workload, dec)
                        self.parked += 1
        return progress

    # -- cycles that would only park their heads again -----------------------------------
    def _class(self, key: str) -> tuple[str, Hashable]:
        where = self.cache.queues.class_of(key)
        assert where is not None  # a head is in a queue
        return where

    def _fail(self, dec: d.Pending, *, placed: bool) -> None:
        where = self.cache.queues.class_of(dec.workload)
        if where is None:
            return
        self._failed[where] = dec
        if placed:
            inventory = self.cache.inventory.snapshot()
            self._placed_on[where] = (inventory, dict(self.checker.nominations))
        else:
            self._placed_on.pop(where, None)
        told = self._told.get(where)
        if told is None or not _same(told[0], dec):
            self._told[where] = (dec, set())

    def _known(self, where: tuple[str, Hashable]) -> bool:
        """Did the class fail on what the next cycle would start from?"""
        if where not in self._failed:
            return False
        on = self._placed_on.get(where)
        return on is None or (
            on[0] is self.cache.inventory.snapshot() and on[1] == self.checker.nominations
        )

    def _skip(
        self, now: float, drains: bool, out: list[d.Decision]
    ) -> list[tuple[str, m.Workload]]:
        """The heads of the next cycle that is not a no-op. The cycles before it, whose
        every head failed as its class did on this snapshot, are done here: their heads
        parked and their decisions added to `out`."""
        cache, known, queues = self.cache, self._known, self.cache.queues
        heads = cache.queue_heads(now)
        while True:
            if not heads or drains or any(not known(self._class(w.key)) for _, w in heads):
                return heads
            if all(known((g, c)) for g, _ in heads for c in queues.classes_of(g)):
                for g, _ in heads:
                    self._park_queue(g, out)
                return []
            for _, w in heads:
                where = self._class(w.key)
                self._again(where, w.key, out)
                cache.park(w.key, self._failed[where])
                self.checker.forget(w.key)
            heads = cache.queue_heads_again()  # only parked since, at the same `now`

    def _again(self, where: tuple[str, Hashable], key: str, out: list[d.Decision]) -> None:
        """Tell `key` its class's failure unless that was the last thing it was told."""
        told = self._told.get(where)
        if told is None or key not in told[1]:
            out.append(dataclasses.replace(self._failed[where], workload=m.WorkloadKey(key)))

    def _park_queue(self, group: str, out: list[d.Decision]) -> None:
        cache = self.cache
        for c, members in cache.queues.classes_of(group).items():
            told = self._told.get((group, c))
            awake = cache.queues.awake_of(group, members, cache.parked)
            told_keys = told[1] if told is not None else ()
            for key in sorted(key for key in awake if key not in told_keys):
                self._again((group, c), key, out)
            cache.note_lacks(awake, self._failed[(group, c)])
        for key in [k for k in self.checker.nominations if cache.queues.group_of.get(k) == group]:
            if not cache.queue_asleep(key):
                self.checker.forget(key)
        cache.queue_park_all(group)

    def _tell(self, dec: d.Decision) -> None:
        """Remember which workloads were last told their class's failure."""
        key = str(dec.workload)
        where = self._told_in.pop(key, None)
        if where is not None and (told := self._told.get(where)) is not None:
            told[1].discard(key)
        if isinstance(dec, d.Pending):
            where = self.cache.queues.class_of(key)
            told = self._told.get(where) if where is not None else None
            if where is not None and told is not None and _same(told[0], dec):
                told[1].add(key)
                self._told_in[key] = where


def _same(a: d.Pending, b: d.Pending) -> bool:
    """The same decision for two workloads (all but the workload's name)."""
    return dataclasses.replace(a, workload=b.workload) == b
