"""Reservation and backfill (engine.backfill): the reservation's start from each kind of
end, which later workloads may backfill, slides, preemption and borrowing around it, and a
property: a reservation computed from guaranteed ends is always honoured."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atoll.engine.backfill import Guard, Holder, Reservation, admitted_end, reserve
from atoll.engine.cycle import run_cycle
from atoll.engine.decisions import Admit, Decision, Pending, PendingReason
from atoll.engine.flavors import FitMode, assign_flavors
from atoll.engine.model import (
    AdmittedWorkload,
    Backfill,
    ClusterQueue,
    ClusterQueueName,
    WithinClusterQueue,
    Workload,
)
from atoll.engine.overlay import UsageOverlay
from atoll.engine.snapshot import Snapshot
from tests.engine.builders import (
    admitted,
    by_workload,
    cluster_queue,
    group,
    preemption,
    q,
    quotas,
    snapshot,
    summary,
    workload,
)

GRACE = 10.0
NOW = 1000.0
POLICY = Backfill(grace_seconds=GRACE)


def cq(name: str, gpus: int | tuple[int, int | None, int | None], **kw) -> ClusterQueue:  # type: ignore[no-untyped-def]
    backfill = kw.pop("backfill", POLICY)
    return replace(cluster_queue(name, group(quotas("f", gpu=gpus)), **kw), backfill=backfill)


def job(
    name: str,
    gpus: int,
    *,
    queue: str = "a",
    limit: float | None = None,
    hint: float | None = None,
    at: float = 0.0,
    priority: int = 0,
) -> Workload:
    w = workload(name, queue, gpu=gpus, at=at, priority=priority)
    return replace(w, run_limit=limit, run_hint=hint)


def running(w: Workload, since: float, cq_name: str = "a", **kw) -> AdmittedWorkload:  # type: ignore[no-untyped-def]
    return admitted(w, cq_name, at=since, **kw)


def holder(w: Workload, cq_name: str = "a", since: float = NOW) -> Holder:
    return Holder(workload=w, cluster_queue=ClusterQueueName(cq_name), since=since)


def cycle(
    snap: Snapshot, heads: list[Workload], holders: list[Holder], now: float = NOW
) -> tuple[dict[str, Decision], tuple[Reservation, ...], Guard]:
    reservations = reserve(snap, holders, now)
    guard = Guard(snapshot=snap, reservations=reservations, now=now)
    decisions = run_cycle(snap, heads, reservations, now, guard)
    return by_workload(decisions), reservations, guard


BIG = job("big", 8, at=500.0)

START = [
    pytest.param(
        running(job("r", 6, limit=600), since=900), 900 + 600 + GRACE, True, id="run-limit"
    ),
    pytest.param(running(job("r", 6, hint=300), since=900), 1200, False, id="run-duration-hint"),
    pytest.param(
        running(job("r", 6, limit=600, hint=300), since=900), 1200, False, id="hint-before-limit"
    ),
    pytest.param(
        running(job("r", 6, limit=200, hint=300), since=900),
        900 + 200 + GRACE,
        True,
        id="limit-before-hint",
    ),
    pytest.param(running(job("r", 6), since=900, evicted=True), NOW, True, id="being-evicted"),
    pytest.param(running(job("r", 6, hint=50), since=900), NOW, False, id="hint-exceeded"),
    pytest.param(running(job("r", 6), since=900), None, None, id="no-known-end-no-reservation"),
]


@pytest.mark.parametrize(("busy", "start", "certain"), START)
def test_reservation_start_from_each_bound(
    busy: AdmittedWorkload, start: float | None, certain: bool | None
) -> None:
    snap = snapshot([cq("a", 8)], running=[busy])
    found = reserve(snap, [holder(BIG)], NOW)
    if start is None:
        assert found == ()
        return
    (r,) = found
    assert (r.start, r.certain) == (start, certain)
    assert dict(r.usage) == {("f", "gpu"): 8}


def test_reservation_waits_for_the_earliest_set_of_ends_that_makes_room() -> None:
    busy = [
        running(job("r1", 2, limit=100), since=950),  # ends 1060
        running(job("r2", 4, limit=300), since=950),  # ends 1260
        running(job("r3", 2, limit=900), since=950),  # ends 1860
    ]
    (r,) = reserve(snapshot([cq("a", 8)], running=busy), [holder(job("big", 6))], NOW)
    assert r.start == 950 + 300 + GRACE


SMALL_FREE = 2  # gpus free now in the scenario below: 6 of 8 held until 1310


def _gap() -> Snapshot:
    return snapshot([cq("a", 8)], running=[running(job("r", 6, limit=300), since=NOW)])


BACKFILL = [
    pytest.param(job("s", 2, limit=200), "admit:f", id="guaranteed-end-before-the-start"),
    pytest.param(job("s", 2, limit=400), "pending:WaitingForQuota", id="end-crosses-the-start"),
    pytest.param(job("s", 2), "pending:WaitingForQuota", id="no-guaranteed-end"),
    pytest.param(job("s", 2, hint=10), "pending:WaitingForQuota", id="a-hint-is-not-a-bound"),
]


@pytest.mark.parametrize(("candidate", "expected"), BACKFILL)
def test_backfill_candidates(candidate: Workload, expected: str) -> None:
    snap = _gap()
    decisions, (r,), guard = cycle(snap, [candidate], [holder(BIG)])
    assert r.start == NOW + 300 + GRACE
    assert summary(decisions["s"]) == expected
    assert (candidate.key in guard.backfilled) == (expected == "admit:f")
    if expected != "admit:f":
        d = decisions["s"]
        assert isinstance(d, Pending)
        assert "reserved for default/big" in d.message


def test_work_the_reservation_does_not_need_is_admitted_without_a_bound() -> None:
    """12 GPUs, 6 held until the start, the holder needs 8: 4 stay free for anyone."""
    snap = snapshot([cq("a", 12)], running=[running(job("r", 6, limit=300), since=NOW)])
    decisions, _, _ = cycle(snap, [job("s", 4)], [holder(BIG)])
    assert summary(decisions["s"]) == "admit:f"
    decisions, _, _ = cycle(snap, [job("s", 5)], [holder(BIG)])
    assert summary(decisions["s"]) == "pending:WaitingForQuota"


def test_without_backfill_the_same_cycle_is_kueues() -> None:
    plain = snapshot(
        [cq("a", 8, backfill=None)], running=[running(job("r", 6, limit=300), since=NOW)]
    )
    decisions, reservations, _ = cycle(plain, [job("s", 2)], [holder(BIG)])
    assert reservations == ()
    assert decisions == by_workload(run_cycle(plain, [job("s", 2)]))
    assert summary(decisions["s"]) == "admit:f"


def test_an_exceeded_hint_slides_the_reservation() -> None:
    snap = snapshot([cq("a", 8)], running=[running(job("r", 6, hint=100), since=950)])
    (first,) = reserve(snap, [holder(BIG)], NOW)
    (later,) = reserve(snap, [holder(BIG)], 1200.0)
    assert first.start == 1050
    assert not first.certain
    assert later.start == 1200.0  # exceeded: may end any moment, so the start moves with now
    # a candidate that would have ended before the first start no longer does
    decisions, _, _ = cycle(snap, [job("s", 2, limit=30)], [holder(BIG)], now=1200.0)
    assert summary(decisions["s"]) == "pending:WaitingForQuota"


def test_holder_that_fits_now_keeps_its_quota_from_now() -> None:
    snap = snapshot([cq("a", 8)])
    (r,) = reserve(snap, [holder(BIG)], NOW)
    assert r.start == NOW
    decisions, _, _ = cycle(snap, [job("s", 2, limit=5)], [holder(BIG)])
    assert summary(decisions["s"]) == "pending:WaitingForQuota"
    decisions, _, _ = cycle(snap, [BIG], [holder(BIG)])
    assert summary(decisions["big"]) == "admit:f"


def test_holding_settings() -> None:
    snap = _gap()
    waited = replace(POLICY, min_wait_seconds=600.0)
    held = replace(POLICY, max_hold_seconds=60.0)
    assert reserve(replace_cq(snap, waited), [holder(BIG)], NOW) == ()  # waited 500s only
    assert len(reserve(replace_cq(snap, waited), [holder(BIG)], 1100.0)) == 1
    assert len(reserve(replace_cq(snap, held), [holder(BIG, since=950)], NOW)) == 1
    assert reserve(replace_cq(snap, held), [holder(BIG, since=900)], NOW) == ()


def replace_cq(snap: Snapshot, policy: Backfill) -> Snapshot:
    return snapshot([cq("a", 8, backfill=policy)], running=list(snap.admitted.values()))


def test_a_holder_larger_than_the_quota_rules_allow_reserves_nothing() -> None:
    """8 nominal + 4 borrowable: a 16-GPU holder could never be admitted, so no
    reservation lets it (or blocks anyone for it)."""
    snap = snapshot(
        [cq("a", q(8, 4), cohort="co"), cq("b", 8, cohort="co", backfill=None)],
        running=[running(job("r", 4, limit=100), since=NOW)],
    )
    assert reserve(snap, [holder(job("huge", 16))], NOW) == ()


def test_borrowing_around_a_reservation() -> None:
    """The holder in backfill queue `a` needs to borrow `b`'s unused quota: a backfill
    candidate of `a` may not take it, but queue `b` (no backfill) is never held back."""
    co = "co"
    snap = snapshot(
        [cq("a", 4, cohort=co), cq("b", 4, cohort=co, backfill=None)],
        running=[running(job("r", 4, limit=300), since=NOW)],
    )
    big = job("big", 7)
    (r,) = reserve(snap, [holder(big)], NOW)
    assert r.start == NOW + 300 + GRACE
    decisions, _, _ = cycle(snap, [job("s", 2, queue="a")], [holder(big)])
    assert summary(decisions["s"]) == "pending:WaitingForQuota"
    decisions, _, _ = cycle(snap, [job("t", 4, queue="b")], [holder(big)])
    assert summary(decisions["t"]) == "admit:f"  # Kueue's rules: b's own nominal quota
    decisions, _, _ = cycle(snap, [job("s", 2, queue="a", limit=60)], [holder(big)])
    assert summary(decisions["s"]) == "admit:f"
    assert decisions["s"] == Admit(**{**_fields(decisions["s"]), "borrowing": True})


def _fields(d: Decision) -> dict[str, object]:
    return {f: getattr(d, f) for f in d.__dataclass_fields__}


def test_preemption_around_a_reservation() -> None:
    """A higher-priority candidate may preempt inside its queue as Kueue allows; the
    reservation only refuses it when, even with its victims gone, it would still hold
    the holder's quota at the start."""
    policy = preemption(within=WithinClusterQueue.LOWER_PRIORITY)
    snap = snapshot(
        [cq("a", 8, policy=policy)],
        running=[
            running(job("low", 4, limit=3000), since=NOW),
            running(job("r", 4, limit=300), since=NOW),
        ],
    )
    big = job("big", 8, priority=10)
    (r,) = reserve(snap, [holder(big)], NOW)
    assert r.start == NOW + 3000 + GRACE
    # a short preemptor ends before the start: it preempts `low` as Kueue would
    short = job("p", 4, priority=5, limit=60)
    decisions, _, _ = cycle(snap, [short], [holder(big)])
    assert summary(decisions["p"]) == "preempt:low"
    # an unbounded one would replace `low` and keep the quota past the start: refused
    # (its victim leaving makes no room, the reservation's start counted `low` as ending)
    decisions, _, _ = cycle(snap, [job("p", 4, priority=5)], [holder(big)])
    assert summary(decisions["p"]) == "pending:WaitingForQuota"


def test_a_holder_admitted_in_the_cycle_holds_nothing_any_more() -> None:
    snap = snapshot([cq("a", 8), cq("b", 8, backfill=None)])
    decisions, _, _ = cycle(snap, [BIG, job("s", 2, queue="a")], [holder(BIG)])
    assert summary(decisions["big"]) == "admit:f"


# -- property: a reservation from guaranteed ends is honoured -----------------------------
Scene = tuple[int, list[AdmittedWorkload], Workload, list[Workload]]


@st.composite
def scenes(draw: st.DrawFn) -> Scene:
    capacity = draw(st.integers(4, 16))
    busy: list[AdmittedWorkload] = []
    used = 0
    for i in range(draw(st.integers(0, 6))):
        size = draw(st.integers(1, 4))
        if used + size > capacity:
            break
        used += size
        limit = draw(st.floats(10, 1000))
        busy.append(running(job(f"r{i}", size, limit=limit), since=draw(st.floats(0, NOW))))
    big = job("big", draw(st.integers(1, capacity)))
    heads = [
        job(
            f"c{i}",
            draw(st.integers(1, 4)),
            limit=draw(st.none() | st.floats(1, 2000)),
            at=float(i + 1),
        )
        for i in range(draw(st.integers(1, 4)))
    ]
    return capacity, busy, big, heads


def _gpus(held: list[AdmittedWorkload]) -> int:
    return sum(ps.count * dict(ps.requests)["gpu"] for a in held for ps in a.workload.pod_sets)


@settings(max_examples=200, deadline=None)
@given(scenes())
def test_property_backfill_never_delays_a_guaranteed_reservation(scene: Scene) -> None:
    """Candidates come one cycle at a time (one head per queue), each on the snapshot with
    the earlier admissions in it: Kueue's quota always holds, and at the reservation's
    start, with every guaranteed end reached, the holder fits."""
    capacity, busy, big, candidates = scene
    reservations = reserve(snapshot([cq("a", capacity)], running=busy), [holder(big)], NOW)
    if not reservations:
        return
    (r,) = reservations
    held = list(busy)
    for c in candidates:
        current = snapshot([cq("a", capacity)], running=held)
        guard = Guard(snapshot=current, reservations=reservations, now=NOW)
        (dec,) = run_cycle(current, [c], reservations, NOW, guard)
        if isinstance(dec, Admit):
            held.append(running(c, since=NOW))
            assert _gpus(held) <= capacity
        else:
            assert isinstance(dec, Pending)
            assert dec.reason is PendingReason.WAITING_FOR_QUOTA
    left = [a for a in held if (end := admitted_end(a, NOW, GRACE)) is None or end[0] > r.start]
    final = snapshot([cq("a", capacity)], running=left)
    a_cq = final.cluster_queues[ClusterQueueName("a")]
    assert assign_flavors(UsageOverlay(final), big, a_cq).mode is FitMode.FIT


# -- more than one holder (reserve_after_seconds) -------------------------------------------
def test_a_second_holder_plans_after_the_first() -> None:
    """8 GPUs, 6 held until 1310: the head (6 GPUs, 600 s) reserves from 1310; the second
    holder (4 GPUs) cannot share that start, so it waits for the head's own end."""
    snap = snapshot([cq("a", 8)], running=[running(job("r", 6, limit=300), since=NOW)])
    head = job("head", 6, limit=600, at=1.0)
    second = job("second", 4, limit=100, at=2.0)
    first, after = reserve(snap, [holder(head), holder(second)], NOW)
    assert (first.start, first.end) == (1310, 1310 + 600 + GRACE)
    assert after.start == first.end
    assert after.certain


def test_a_later_holder_that_ends_before_an_earlier_one_starts_goes_first() -> None:
    """A later holder may take a start before an earlier one's when it ends by then."""
    snap = snapshot(
        [cq("a", 8)],
        running=[
            running(job("r1", 4, limit=100), since=NOW),  # ends 1110
            running(job("r2", 4, limit=500), since=NOW),  # ends 1510
        ],
    )
    head = job("head", 8, at=1.0)
    short = job("short", 4, limit=200, at=2.0)  # from 1110 ends 1320 < 1510
    long = job("long", 4, limit=900, at=3.0)  # from 1110 would still run at 1510
    first, *rest = reserve(snap, [holder(head), holder(short)], NOW)
    assert first.start == 1510
    assert [r.start for r in rest] == [1110]
    # `long` would be in the head's way at 1110, and the head (no limit) then holds all 8
    # GPUs for ever: no reservation for it
    assert reserve(snap, [holder(head), holder(long)], NOW) == (first,)


def test_backfill_keeps_every_reservation_of_the_tree() -> None:
    """10 GPUs, 8 held until 1310; the head (8 GPUs, 600 s) reserves 1310-1920, the second
    holder (all 10) from 1920: 2 GPUs may be backfilled only by work gone by 1920."""
    snap = snapshot([cq("a", 10)], running=[running(job("r", 8, limit=300), since=NOW)])
    head = job("head", 8, limit=600, at=1.0)
    second = job("second", 10, limit=100, at=2.0)
    holders = [holder(head), holder(second)]
    decisions, (first, after), _ = cycle(snap, [job("s", 2, limit=1000)], holders)
    assert (first.start, after.start) == (1310, 1310 + 600 + GRACE)
    assert summary(decisions["s"]) == "pending:WaitingForQuota"
    assert "reserved for default/second" in str(getattr(decisions["s"], "message", ""))
    decisions, _, guard = cycle(snap, [job("s", 2, limit=500)], holders)
    assert summary(decisions["s"]) == "admit:f"
    assert set(guard.backfilled[job("s", 2).key]) == {head.key, second.key}


# -- property: reservations from guaranteed ends are honoured --------------------------------
MultiScene = tuple[int, list[AdmittedWorkload], list[Workload], list[Workload]]


@st.composite
def multi_scenes(draw: st.DrawFn) -> MultiScene:
    capacity, busy, _, candidates = draw(scenes())
    holders = [
        job(
            f"h{i}",
            draw(st.integers(1, capacity)),
            limit=draw(st.none() | st.floats(10, 1000)),
            at=float(i),
        )
        for i in range(draw(st.integers(1, 3)))
    ]
    return capacity, busy, holders, candidates


def _fits_beside(capacity: int, held: list[AdmittedWorkload], w: Workload) -> bool:
    snap = snapshot([cq("a", capacity)], running=held)
    a_cq = snap.cluster_queues[ClusterQueueName("a")]
    return assign_flavors(UsageOverlay(snap), w, a_cq).mode is FitMode.FIT


@settings(max_examples=200, deadline=None)
@given(multi_scenes())
def test_property_every_guaranteed_reservation_is_honoured(scene: MultiScene) -> None:
    """Several holders in one queue and candidates one cycle at a time: Kueue's quota always
    holds, and at each certain reservation's start, with every guaranteed end reached and the
    other holders running that hold their reservations then, the holder fits."""
    capacity, busy, holders, candidates = scene
    base = snapshot([cq("a", capacity)], running=busy)
    reservations = reserve(base, [holder(h) for h in holders], NOW)
    held = list(busy)
    for c in candidates:
        current = snapshot([cq("a", capacity)], running=held)
        guard = Guard(snapshot=current, reservations=reservations, now=NOW)
        (dec,) = run_cycle(current, [c], reservations, NOW, guard)
        if isinstance(dec, Admit):
            held.append(running(c, since=NOW))
            assert _gpus(held) <= capacity
        else:
            assert isinstance(dec, Pending)
    for r in reservations:
        if not r.certain:
            continue
        left = [a for a in held if (e := admitted_end(a, NOW, GRACE)) is None or e[0] > r.start]
        beside = [
            running(o.holder, since=o.start)
            for o in reservations
            if o is not r and o.alive(r.start)
        ]
        assert _fits_beside(capacity, left + beside, r.holder)
