"""Reservation and backfill for the ClusterQueues that ask for it (`ClusterQueue.backfill`).

atoll's own rule; Kueue has no equivalent (it only has StrictFIFO, which idles the quota
behind a head that does not fit, and BestEffortFIFO, under which a big gang may wait for
ever behind a stream of small ones). The idea is Slurm's backfill scheduler:

- Reservation: the first workload of a backfill queue in queue order (a holder; with
  `reserve_after_seconds`, also every workload of the queue that has waited that long),
  when it does not fit now, gets the earliest time it would fit from the admitted
  workloads' ends: each admitted workload ends at its reservation time plus its `run_limit`
  (guaranteed: maximum execution time or active deadline, plus the queue's grace), or else
  plus its `run_hint` (an estimate: once exceeded it is taken as ending now, so the
  reservation slides); work with neither never ends as far as a reservation knows. The
  quota the holder would then be assigned is reserved from that time. Holders are served
  in order (`reserve`): a later one plans around the reservations before it in its cohort
  tree (each held from its start until the holder's own end), and takes no start at which
  it would still be running when an earlier one starts and keep that one from fitting.
- Backfill: another workload of a backfill queue in the holder's cohort tree is admitted
  only when, besides fitting by Kueue's rules, either its own guaranteed end (now +
  `run_limit` + grace) comes before the reservation's start, or the holder would still fit
  at the start with it still running (it only uses what the reservation does not need).
- Hosts: with `Hosts` (the inventory), a holder that placement places also needs its hosts
  at the start, and holds the ones it would be placed on then (`engine.reservedhosts`); a
  candidate that would still run at the start gets a `Fence` for the cycle's placer.

A reservation is never charged as usage: it only refuses admissions Kueue's rules would make,
never makes one they would refuse, so no queue ever exceeds its quota or borrowing limits
because of it. Queues without `backfill` are never refused anything here. Pure: `now` is an
argument, times are float seconds on the caller's clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from atoll.engine.decisions import Pending, PendingReason, Requeue
from atoll.engine.flavors import Assignment, FitMode, assign_flavors
from atoll.engine.model import (
    AdmittedWorkload,
    Backfill,
    ClusterQueue,
    ClusterQueueName,
    FlavorResource,
    Workload,
    WorkloadKey,
)
from atoll.engine.overlay import UsageOverlay
from atoll.engine.reservedhosts import Fence, Fenced, HostHold, Hosts, Planner
from atoll.engine.snapshot import Snapshot

MAX_HOLDERS = 8
"""Reservations per ClusterQueue at most (the head and the first workloads, in queue order,
that waited `reserve_after_seconds`): each one costs a pass over the admitted workloads'
ends per step."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Holder:
    """A workload that may hold a reservation: the first of its backfill queue, or one that
    has waited the queue's `reserve_after_seconds`."""

    workload: Workload
    cluster_queue: ClusterQueueName
    since: float
    """When it first held one (the caller remembers; `now` for a new holder)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Reservation:
    workload: WorkloadKey
    cluster_queue: ClusterQueueName
    start: float
    """When the holder will fit, on the caller's clock."""
    usage: tuple[tuple[FlavorResource, int], ...]
    """The quota reserved from `start` (what the holder would be assigned then)."""
    certain: bool
    """Every end the start waits for is guaranteed (no run-duration hint among them)."""
    since: float
    holder: Workload = field(compare=False, repr=False)
    end: float | None = None
    """When the holder, admitted at `start`, gives the quota back (its guaranteed end, or
    its hint); None when nothing says (later holders plan around it for ever)."""
    end_certain: bool = True
    """`end` is guaranteed (and so is `start`)."""
    hosts: HostHold | None = field(default=None, compare=False)
    """The hosts held from `start` (`engine.reservedhosts`), when the holder is a gang that
    placement places and its placement was found."""

    def alive(self, t: float) -> bool:
        """The reserved quota is held at `t` (from `start`, until `end`)."""
        return self.start <= t and (self.end is None or t < self.end)


def _grace(snapshot: Snapshot, cq: ClusterQueueName) -> float:
    q = snapshot.cluster_queues.get(cq)
    return q.backfill.grace_seconds if q is not None and q.backfill is not None else 0.0


def admitted_end(a: AdmittedWorkload, now: float, grace: float) -> tuple[float, bool] | None:
    """When an admitted workload is expected to release its quota, and whether that is
    guaranteed; None when nothing says. One being evicted releases it now; one only
    assumed so far (reserved later than `now`) counts from now."""
    if a.evicted:
        return now, True
    return run_end(a.workload, min(a.reserved_at, now), now, grace)


def run_end(w: Workload, began: float, now: float, grace: float) -> tuple[float, bool] | None:
    """When `w`, holding quota from `began`, gives it back, and whether that is guaranteed:
    `began` + its run limit + grace, or its run-duration hint when that comes sooner (never
    before `now`: a hint exceeded may end any moment); None when nothing says."""
    bound = None if w.run_limit is None else began + w.run_limit + grace
    if w.run_hint is not None:
        hinted = max(began + w.run_hint, now)  # a hint exceeded: it may end any moment
        if bound is None or hinted < bound:
            return hinted, False
    return None if bound is None else (bound, True)


def _ends(
    snapshot: Snapshot, root: int, now: float, grace: float
) -> list[tuple[float, bool, WorkloadKey]]:
    """(end, not guaranteed, key) of the admitted workloads of one cohort tree, by end."""
    tree = snapshot.tree
    out = []
    for key, a in snapshot.admitted.items():
        n = tree.cluster_queues.get(a.cluster_queue)
        if n is None or tree.root(n) != root:
            continue
        end = admitted_end(a, now, grace)
        if end is not None:
            out.append((end[0], not end[1], key))
    out.sort()
    return out


def _events(
    snapshot: Snapshot, root: int, now: float, grace: float, planned: Sequence[Reservation]
) -> list[tuple[float, bool, int, str]]:
    """The times a holder's start may be, in order: (time, not guaranteed, 0, key) for the
    admitted workloads' ends, (time, not guaranteed, 1, index) for the planned reservations'."""
    events = [(t, late, 0, str(key)) for t, late, key in _ends(snapshot, root, now, grace)]
    events += [
        (r.end, not (r.certain and r.end_certain), 1, str(i))
        for i, r in enumerate(planned)
        if r.end is not None and r.end > now
    ]
    events.sort()
    return events


def _may_hold(snapshot: Snapshot, policy: Backfill, h: Holder, now: float) -> bool:
    """`h` is not admitted, has waited `min_wait_seconds` and held no longer than
    `max_hold_seconds`."""
    if h.workload.key in snapshot.admitted:
        return False
    if policy.min_wait_seconds > 0 and now - h.workload.queued_at < policy.min_wait_seconds:
        return False
    return policy.max_hold_seconds is None or now - h.since <= policy.max_hold_seconds


def _reserve_one(
    snapshot: Snapshot,
    ov: UsageOverlay,
    clean: UsageOverlay,
    h: Holder,
    *,
    now: float,
    earlier: Sequence[Reservation],
    hosts: Hosts | None = None,
) -> Reservation | None:
    """`h`'s reservation, planned around `earlier`; `ov` and `clean` are overlays of
    `snapshot` with no change outside a what-if (`clean` for checks at other times). With
    `hosts`, a gang that placement places also needs its hosts at the start: the first time
    both quota and hosts are there (else, when its hosts are never known to free, the first
    time its quota is, with no hosts held)."""
    cq = snapshot.cluster_queues.get(h.cluster_queue)
    if cq is None or cq.backfill is None or not _may_hold(snapshot, cq.backfill, h, now):
        return None
    policy = cq.backfill
    root = ov.tree.root(ov.node(cq.name))
    planned = [r for r in earlier if ov.tree.root(ov.node(r.cluster_queue)) == root]
    events = _events(snapshot, root, now, policy.grace_seconds, planned)

    def made(start: float, certain: bool, usage: Mapping[FlavorResource, int]) -> Reservation:
        ends = run_end(h.workload, start, start, policy.grace_seconds)
        return Reservation(
            workload=h.workload.key,
            cluster_queue=cq.name,
            start=start,
            usage=tuple(sorted(usage.items())),
            certain=certain,
            since=h.since,
            holder=h.workload,
            end=None if ends is None else ends[0],
            end_certain=ends is not None and ends[1],
        )

    gone: list[str] = []
    quota_only: list[Reservation] = []
    planners: dict[object, Planner | None] = {}

    def attempt(at: float, certain: bool) -> Reservation | None:
        """The holder's reservation from `at` (the admitted workloads that end by then are
        gone from `ov`, and listed in `gone`), if it fits beside the planned reservations
        held then and keeps every planned one that starts later."""
        ov.begin()
        try:
            for r in planned:
                if r.alive(at):
                    ov.add(ov.node(r.cluster_queue), dict(r.usage))
            a = assign_flavors(ov, h.workload, cq)
        finally:
            ov.rollback()
        if a.mode is not FitMode.FIT:
            return None
        mine = made(at, certain, a.usage)
        for r in planned:
            if r.start > at and mine.alive(r.start):
                held = [(ov.node(cq.name), dict(mine.usage))]
                if not _fits_at(snapshot, clean, r, now, held=held, others=planned):
                    return None
        if hosts is None:
            return mine
        got = _with_hosts(hosts, planners, mine, a, planned=planned, gone=gone)
        if got is None:
            quota_only.append(mine)
        return got

    found = attempt(now, True)
    if found is not None or not events:
        return found if found is not None or not quota_only else quota_only[0]
    ov.begin()
    try:
        certain, i = True, 0
        while i < len(events):
            start, batch = events[i][0], []
            while i < len(events) and events[i][0] == start:
                certain = certain and not events[i][1]
                if events[i][2] == 0:
                    batch.append(WorkloadKey(events[i][3]))
                i += 1
            ov.remove_workloads(batch)
            gone.extend(batch)
            found = attempt(start, certain)
            if found is not None:
                return found
        return quota_only[0] if quota_only else None
    finally:
        ov.rollback()


def _with_hosts(
    hosts: Hosts,
    planners: dict[object, Planner | None],
    mine: Reservation,
    a: Assignment,
    *,
    planned: Sequence[Reservation],
    gone: Sequence[str],
) -> Reservation | None:
    """`mine` with the hosts its holder would be placed on at its start, once `gone` have
    left and beside the hosts of the planned reservations it meets; `mine` unchanged when
    placement does not place the holder; None when its hosts are not free then.
    `planners`: one per flavor assignment of the holder (by the assignment's usage)."""
    shape = tuple(sorted(a.usage.items()))
    if shape not in planners:
        gang = hosts.gang(mine.holder, mine.cluster_queue, a)
        planners[shape] = None if gang is None else Planner(hosts=hosts, gang=gang)
    planner = planners[shape]
    if planner is None:
        return mine
    taken = [
        r.hosts.placement
        for r in planned
        if r.hosts is not None
        and (r.alive(mine.start) or (r.start > mine.start and mine.alive(r.start)))
    ]
    hold = planner.at(gone, taken)
    return None if hold is None else dataclasses.replace(mine, hosts=hold)


def _fits_at(
    snapshot: Snapshot,
    ov: UsageOverlay,
    r: Reservation,
    now: float,
    *,
    gone: Iterable[WorkloadKey] = (),
    held: Iterable[tuple[int, Mapping[FlavorResource, int]]] = (),
    done: Iterable[tuple[int, Mapping[FlavorResource, int], float | None]] = (),
    others: Iterable[Reservation] = (),
) -> bool:
    """At `r`'s start, does its holder fit? The admitted workloads that end by then (on the
    snapshot, by its queue's grace) are gone, and so are `gone`; `done` (node, usage, end)
    released when they end by then; `held` (node, usage) added, and so is every one of
    `others` held then. `ov` is as it is outside: unchanged afterwards."""
    hcq = snapshot.cluster_queues[r.cluster_queue]
    grace = _grace(snapshot, r.cluster_queue)
    ov.begin()
    try:
        leaving = set(gone)
        for key, a in snapshot.admitted.items():
            end = admitted_end(a, now, grace)
            if end is not None and end[0] <= r.start:
                leaving.add(key)
        ov.remove_workloads(sorted(leaving))
        for node, usage, end_at in done:
            if end_at is not None and end_at <= r.start:
                ov.remove(node, usage)
        for node, usage in held:
            ov.add(node, usage)
        for o in others:
            if o is not r and o.alive(r.start):
                ov.add(ov.node(o.cluster_queue), dict(o.usage))
        return assign_flavors(ov, r.holder, hcq).mode is FitMode.FIT
    finally:
        ov.rollback()


def reserve(
    snapshot: Snapshot, holders: Iterable[Holder], now: float, hosts: Hosts | None = None
) -> tuple[Reservation, ...]:
    """The reservation of each holder that does not fit now, or fits now (start `now`: the
    capacity it is about to take is not given away): holders that could not fit even once
    every admitted workload with a known end has ended get none. `holders` in the order they
    are served: each plans around the reservations made before it. With `hosts`, a holder
    that placement places also holds the hosts it would be placed on at the start."""
    ov, clean = UsageOverlay(snapshot), UsageOverlay(snapshot)
    out: list[Reservation] = []
    for h in holders:
        r = _reserve_one(snapshot, ov, clean, h, now=now, earlier=out, hosts=hosts)
        if r is not None:
            out.append(r)
    return tuple(out)


@dataclass(slots=True)
class Guard:
    """The backfill check of one cycle: whether an admission the cycle is about to make in
    a backfill queue keeps every reservation of its cohort tree."""

    snapshot: Snapshot
    reservations: Sequence[Reservation]
    now: float
    admitted: list[tuple[int, Mapping[FlavorResource, int], float | None]] = field(
        default_factory=list
    )
    """(node, usage, guaranteed end) of what this cycle admitted so far."""
    backfilled: dict[WorkloadKey, tuple[WorkloadKey, ...]] = field(default_factory=dict)
    """The admissions allowed while reservations of their cohort tree were in force, with
    the holders of those reservations."""
    done: set[WorkloadKey] = field(default_factory=set)
    """Admitted in this cycle (a holder among them holds no reservation any more)."""
    ends: dict[str, float | None] = field(default_factory=dict)
    """Guaranteed ends of what this cycle admitted so far, by key (None: unknown)."""
    fences: dict[WorkloadKey, Fence] = field(default_factory=dict)
    """The reserved hosts each admission checked must leave room on (`fence`)."""

    def check(
        self,
        ov: UsageOverlay,
        w: Workload,
        *,
        cq: ClusterQueue,
        node: int,
        usage: Mapping[FlavorResource, int],
        leaving: Sequence[WorkloadKey],
    ) -> Pending | None:
        """None when `w` may take `usage` (else why not), given the victims `leaving`."""
        own_end = None
        if cq.backfill is not None and w.run_limit is not None:
            own_end = self.now + w.run_limit + cq.backfill.grace_seconds
        if cq.backfill is not None:
            root = ov.tree.root(node)
            inside: list[WorkloadKey] = []
            fenced: list[Fenced] = []
            for r in self.reservations:
                if r.workload == w.key or r.workload in self.done:
                    continue
                if ov.tree.root(ov.node(r.cluster_queue)) != root:
                    continue
                inside.append(r.workload)
                if own_end is not None and own_end <= r.start:
                    continue
                if not self._holder_fits(ov, r, node, usage, leaving):
                    return _refused(w, cq, r, own_end)
                if r.hosts is not None:
                    fenced.append(Fenced(hold=r.hosts, start=r.start, holder=str(r.workload)))
            if inside:
                self.backfilled[w.key] = tuple(inside)
            if fenced:
                self.fences[w.key] = Fence(fenced=tuple(fenced), ends=self.ends)
        self.admitted.append((node, usage, own_end))
        self.ends[str(w.key)] = own_end
        self.done.add(w.key)
        return None

    def withdraw(self, key: WorkloadKey) -> None:
        """The admission of `key`, checked last, was not made after all (placement kept it
        pending): forget it."""
        if key in self.done and str(key) in self.ends:
            self.admitted.pop()
            self.done.discard(key)
            del self.ends[str(key)]
            self.backfilled.pop(key, None)
            self.fences.pop(key, None)

    def fence(self, key: WorkloadKey) -> Fence | None:
        """The reserved hosts the admission of `key`, checked last, must leave room on."""
        return self.fences.get(key)

    def _holder_fits(
        self,
        ov: UsageOverlay,
        r: Reservation,
        node: int,
        usage: Mapping[FlavorResource, int],
        leaving: Sequence[WorkloadKey],
    ) -> bool:
        """At the reservation's start, with `usage` still held (and the other reservations
        held then), does the holder fit?"""
        others = [o for o in self.reservations if o.workload not in self.done]
        return _fits_at(
            self.snapshot,
            ov,
            r,
            self.now,
            gone=leaving,
            held=[(node, usage)],
            done=self.admitted,
            others=others,
        )


def _refused(w: Workload, cq: ClusterQueue, r: Reservation, own_end: float | None) -> Pending:
    why = (
        "it has no guaranteed end (maximumExecutionTimeSeconds or activeDeadlineSeconds)"
        if own_end is None
        else "its guaranteed end comes after the reservation starts"
    )
    return Pending(
        workload=w.key,
        cluster_queue=cq.name,
        reason=PendingReason.WAITING_FOR_QUOTA,
        message=(
            f"The quota it would use is reserved for {r.workload} ({describe(r.usage)}), and {why}"
        ),
        requeue=Requeue.INADMISSIBLE,
    )


_PLAIN = frozenset({"cpu", "memory", "pods", "ephemeral-storage"})


def describe(usage: Iterable[tuple[FlavorResource, int]]) -> str:
    """`32 nvidia.com/gpu in h100`-style text for reserved quota: the extended resources
    (GPUs and other devices) when there are any, else every resource."""
    items = list(usage)
    shown = [(fr, v) for fr, v in items if fr[1] not in _PLAIN] or items
    parts = []
    for (flavor, resource), value in shown:
        amount = f"{value / 1000:g}" if resource == "cpu" else str(value)
        parts.append(f"{amount} {resource} in {flavor}")
    return ", ".join(parts)
