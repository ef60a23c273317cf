"""The reservations of backfill queues across decision steps (`engine.backfill` decides).

Each step the Decider asks this book for the holders (the first workload, in queue order, of
every ClusterQueue with backfill on), has the engine compute their reservations and run the
cycle under them, and gives the book the outcome: it remembers since when each holder holds
one (for `max_hold_seconds`), notices reservations made or slid (a later start than it said
before: a run-duration hint was exceeded, or work without a known end holds the quota), counts
the admissions backfilled under them, and tells the holder, in a Pending decision's message,
what is reserved for it and from when. Pure bookkeeping: no I/O; the caller writes the
decisions and events and exports the counters.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum

from atoll.engine import decisions as d
from atoll.engine import model as m
from atoll.engine.backfill import MAX_HOLDERS, Holder, Reservation, describe, reserve
from atoll.engine.reservedhosts import Hosts
from atoll.engine.snapshot import Snapshot
from atoll.state.cache import Cache

SLIP_TOLERANCE = 1.0
"""Seconds a reservation's start may move later without counting as a slip (rounding)."""


class Change(Enum):
    MADE = "ReservationMade"
    SLID = "ReservationSlid"


@dataclass(frozen=True, slots=True, kw_only=True)
class ReservationEvent:
    """A reservation made or slid in the last step (an Event on the holder's Workload)."""

    change: Change
    reservation: Reservation
    previous_start: float | None
    message: str


def when(start: float, now: float) -> str:
    """`from 14:05Z, in 12m` (or `from now`)."""
    if start <= now:
        return "from now"
    left = start - now
    span = (
        f"{left:.0f}s"
        if left < 60
        else f"{left / 60:.0f}m"
        if left < 5400
        else f"{left / 3600:.1f}h"
    )
    return f"from {clock(start)}, in {span}"


def clock(t: float) -> str:
    """`14:05Z`."""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%H:%MZ")


def text(r: Reservation, now: float, backfilled: int) -> str:
    """What the holder's condition says: what is reserved, from when, what was backfilled."""
    return f"{brief(r, now)}; {backfilled} Workloads backfilled"


@dataclass(slots=True)
class ReservationBook:
    current: dict[str, Reservation] = field(default_factory=dict)
    """By holder key: the reservations in force after the last step."""
    since: dict[str, float] = field(default_factory=dict)
    backfilled_by: dict[str, int] = field(default_factory=dict)
    """By holder key: admissions backfilled while it held its reservation."""
    events: list[ReservationEvent] = field(default_factory=list)
    """Made or slid in the last step."""
    last_backfilled: frozenset[str] = frozenset()
    """Admitted in the last step while a reservation of their cohort tree was in force."""
    backfilled_total: int = 0
    slips_total: int = 0

    def holders(self, cache: Cache, snapshot: Snapshot, now: float) -> list[Holder]:
        """The workloads that may hold a reservation, in the order they are served: the
        first of every backfill queue (by queue name), then the second holders of every
        queue, and so on (`Backfill.reserve_after_seconds`)."""
        ranked: list[tuple[int, str, Holder]] = []
        for name in snapshot.backfill_queues:
            policy = snapshot.cluster_queues[name].backfill
            assert policy is not None  # the index holds the queues with backfill on
            for rank, w in enumerate(_candidates(cache, name, policy, now)):
                since = self.since.get(str(w.key), now)
                ranked.append((rank, name, Holder(workload=w, cluster_queue=name, since=since)))
        ranked.sort(key=lambda x: (x[0], x[1]))
        return [h for _, _, h in ranked]

    def update(
        self,
        holders: Iterable[Holder],
        reservations: Iterable[Reservation],
        backfilled: Mapping[m.WorkloadKey, tuple[m.WorkloadKey, ...]],
        decisions: list[d.Decision],
        now: float,
    ) -> list[d.Decision]:
        """Record the step's outcome; `decisions` get the holders' messages; returns the
        Pending decisions to add for holders not decided this step whose reservation was
        made or slid."""
        new = {str(r.workload): r for r in reservations}
        self.events = []
        self.last_backfilled = frozenset(str(k) for k in backfilled)
        if not new and not self.current and not self.since:
            return []
        for under in backfilled.values():
            for h in under:
                self.backfilled_by[str(h)] = self.backfilled_by.get(str(h), 0) + 1
            self.backfilled_total += 1
        self.events = []
        changed: set[str] = set()
        for key, r in new.items():
            old = self.current.get(key)
            if r.start <= now:
                continue  # it fits now: about to be admitted, nothing to tell
            if old is None or old.start <= now:
                change, prev = Change.MADE, None
            elif r.start > old.start + SLIP_TOLERANCE and r.start > now:
                change, prev = Change.SLID, old.start
                self.slips_total += 1
            else:
                continue
            changed.add(key)
            self.since.setdefault(key, now)
            message = text(r, now, self.backfilled_by.get(key, 0))
            if prev is not None:
                message += f" (slid from {when(prev, now).removeprefix('from ')})"
            self.events.append(
                ReservationEvent(change=change, reservation=r, previous_start=prev, message=message)
            )
        still = {str(h.workload.key) for h in holders}
        for key in set(self.since) - still:
            del self.since[key]  # no longer first of its queue: its hold time starts over
        for key in set(self.current) - set(new):
            self.backfilled_by.pop(key, None)
        self.current = new
        extra: list[d.Decision] = []
        decided = set()
        for i, dec in enumerate(decisions):
            mine = new.get(str(dec.workload))
            if mine is not None and isinstance(dec, d.Pending):
                decided.add(str(dec.workload))
                note = text(mine, now, self.backfilled_by.get(str(dec.workload), 0))
                decisions[i] = dataclasses.replace(dec, message=f"{dec.message}; {note}")
        for key in sorted(changed - decided):
            r = new[key]
            if r.start <= now:
                continue  # it fits now: its own decision comes when it is the head
            extra.append(
                d.Pending(
                    workload=r.workload,
                    cluster_queue=r.cluster_queue,
                    reason=d.PendingReason.WAITING_FOR_QUOTA,
                    message=text(r, now, self.backfilled_by.get(key, 0)),
                    requeue=d.Requeue.IMMEDIATE,  # only told: it stays in its queue as it is
                )
            )
        return extra


def _candidates(cache: Cache, name: str, policy: m.Backfill, now: float) -> Iterator[m.Workload]:
    """The holders of one backfill queue in queue order: its first workload, then (with
    `reserve_after_seconds`) those that have waited that long, `MAX_HOLDERS` at most."""
    found = 0
    for i, key in enumerate(cache.queues.ordered(name)):
        if found == MAX_HOLDERS or (i > 0 and policy.reserve_after_seconds is None):
            return
        if key in cache.assumed:
            continue
        w = cache.engine_workload(key)
        if w is None:
            continue
        if i == 0 or now - w.queued_at >= (policy.reserve_after_seconds or 0.0):
            found += 1
            yield w


def reservation_of(
    cache: Cache,
    key: str,
    now: float,
    fair_sharing: m.FairSharing | None = None,
    hosts: Hosts | None = None,
) -> Reservation | None:
    """The reservation `key` holds at `now` (the same rule as the decision step, whose
    `hosts` are `TopologyChecker.hosts`), if any."""
    snapshot = cache.snapshot(fair_sharing)
    cache.queue_heads(now)  # the queues up to date, as a step has them
    holders = ReservationBook().holders(cache, snapshot, now)
    if all(h.workload.key != key for h in holders):
        return None
    return next((r for r in reserve(snapshot, holders, now, hosts) if r.workload == key), None)


def brief(r: Reservation, now: float) -> str:
    """What `atoll explain` says about a reservation."""
    estimate = "" if r.certain else " (estimated from run-duration hints)"
    hosts = "" if r.hosts is None else f" on {r.hosts.where}"
    return f"reserved {describe(r.usage)}{hosts} {when(r.start, now)}{estimate}"
