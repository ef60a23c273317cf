"""Backfill settings and run bounds from API objects (state.convert), and the reservations
the decision step keeps across steps (state.reserving): made, slid, told, counted."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest

from atoll.api.clusterqueue import ClusterQueue
from atoll.api.core import Job
from atoll.engine import decisions as d
from atoll.engine import model as m
from atoll.engine.backfill import Holder, Reservation
from atoll.state import convert
from atoll.state import lifecycle as lc
from atoll.state import workloads as wls
from atoll.state.cache import Cache
from atoll.state.decide import Decider
from atoll.state.reserving import Change, ReservationBook, when
from atoll.state.whatif import ask
from tests.control.builders import cache_with_queue, cluster_queue, job, workload_for


def annotated(**ann: str) -> ClusterQueue:
    cq = cluster_queue()
    meta = cq.metadata.model_copy(update={"annotations": ann})
    return cq.model_copy(update={"metadata": meta})


SETTINGS = [
    pytest.param({}, None, None, id="no-annotation-no-backfill"),
    pytest.param({"atoll.dev/backfill": "false"}, None, None, id="false-is-off"),
    pytest.param({"atoll.dev/backfill": "true"}, m.Backfill(), None, id="defaults"),
    pytest.param(
        {
            "atoll.dev/backfill": "true",
            "atoll.dev/backfill-grace": "30s",
            "atoll.dev/backfill-min-wait": "5m",
            "atoll.dev/backfill-max-hold": "2h",
        },
        m.Backfill(grace_seconds=30, min_wait_seconds=300, max_hold_seconds=7200),
        None,
        id="every-knob",
    ),
    pytest.param(
        {"atoll.dev/backfill": "true", "atoll.dev/backfill-reserve-after": "30m"},
        m.Backfill(reserve_after_seconds=1800),
        None,
        id="reserve-after",
    ),
    pytest.param(
        {"atoll.dev/backfill": "true", "atoll.dev/backfill-reserve-after": "-5m"},
        None,
        "metadata.annotations[atoll.dev/backfill-reserve-after]: '-5m' is not a duration",
        id="a-bad-reserve-after-names-the-annotation",
    ),
    pytest.param(
        {"atoll.dev/backfill": "true", "atoll.dev/backfill-grace": "soon"},
        None,
        "metadata.annotations[atoll.dev/backfill-grace]: 'soon' is not a duration",
        id="a-bad-duration-names-the-annotation",
    ),
]


@pytest.mark.parametrize(("ann", "policy", "error"), SETTINGS)
def test_backfill_settings_from_annotations(
    ann: dict[str, str], policy: m.Backfill | None, error: str | None
) -> None:
    cq = convert.cluster_queue(annotated(**ann))
    assert cq.backfill == policy
    if error is None:
        assert cq.inactive_reason is None
    else:
        assert cq.inactive_reason is not None
        assert cq.inactive_reason.startswith(error)


def test_run_bounds_from_the_workload_and_its_job() -> None:
    j = job("j")
    labels = {**(j.metadata.labels or {}), "kueue.x-k8s.io/max-exec-time-seconds": "600"}
    j = j.model_copy(
        update={
            "metadata": j.metadata.model_copy(
                update={"labels": labels, "annotations": {"atoll.dev/run-duration": "5m"}}
            )
        }
    )
    wl = workload_for(j)
    assert convert.run_bounds(wl, None) == (600.0, None)
    assert convert.run_bounds(wl, j) == (600.0, 300.0)
    shorter = j.model_copy(
        update={"spec": j.spec.model_copy(update={"active_deadline_seconds": 120})}
    )
    assert convert.run_bounds(wl, shorter) == (120.0, 300.0)
    ew = convert.workload(wl, namespace_labels={}, queued_at=0.0, job=shorter)
    assert (ew.run_limit, ew.run_hint) == (120.0, 300.0)


BIG = m.Workload(namespace="ns", name="big", queue_name="lq", pod_sets=())
HOLDERS = [Holder(workload=BIG, cluster_queue=m.ClusterQueueName("cq"), since=0.0)]


def _reservation(start: float) -> Reservation:
    holder = m.Workload(namespace="ns", name="big", queue_name="lq", pod_sets=())
    return Reservation(
        workload=holder.key,
        cluster_queue=m.ClusterQueueName("cq"),
        start=start,
        usage=(((m.FlavorName("rf"), m.ResourceName("nvidia.com/gpu")), 32),),
        certain=True,
        since=0.0,
        holder=holder,
    )


def test_the_book_tells_made_and_slid_reservations_once() -> None:
    book = ReservationBook()
    now = 1_767_225_600.0  # 00:00Z
    first = _reservation(now + 720)
    extra = book.update(HOLDERS, [first], {}, [], now)
    assert [e.change for e in book.events] == [Change.MADE]
    (told,) = extra
    assert isinstance(told, d.Pending)
    assert told.message == (
        "reserved 32 nvidia.com/gpu in rf from 00:12Z, in 12m; 0 Workloads backfilled"
    )
    assert book.update(HOLDERS, [first], {}, [], now + 10) == []  # nothing new to say
    assert book.events == []
    backfilled = {m.WorkloadKey("ns/small"): (first.workload,)}
    book.update(HOLDERS, [first], backfilled, [], now + 20)
    assert book.backfilled_by["ns/big"] == 1
    assert book.last_backfilled == frozenset({"ns/small"})
    later = replace(first, start=now + 900)
    (told,) = book.update(HOLDERS, [later], {}, [], now + 30)
    assert [e.change for e in book.events] == [Change.SLID]
    assert book.slips_total == 1
    assert "1 Workloads backfilled" in told.message
    assert "slid from 00:12Z" in book.events[0].message
    book.update([], [], {}, [], now + 40)  # admitted or gone: forgotten
    assert book.current == {}
    assert "ns/big" not in book.backfilled_by
    assert "ns/big" not in book.since


def test_a_holder_decided_in_the_step_gets_the_reservation_in_its_own_message() -> None:
    book = ReservationBook()
    r = _reservation(1000.0)
    mine = d.Pending(
        workload=r.workload,
        cluster_queue=r.cluster_queue,
        reason=d.PendingReason.WAITING_FOR_QUOTA,
        message="insufficient quota",
        requeue=d.Requeue.INADMISSIBLE,
    )
    decisions: list[d.Decision] = [mine]
    assert book.update(HOLDERS, [r], {}, decisions, 400.0) == []
    assert isinstance(decisions[0], d.Pending)
    assert decisions[0].message.startswith("insufficient quota; reserved 32 nvidia.com/gpu")


def test_when_says_the_clock_time_and_the_time_left() -> None:
    assert when(100.0, 200.0) == "from now"
    assert when(1_767_225_600.0 + 30, 1_767_225_600.0) == "from 00:00Z, in 30s"
    assert when(1_767_225_600.0 + 7200, 1_767_225_600.0) == "from 02:00Z, in 2.0h"


def test_a_forked_step_keeps_the_reservations_in_force_and_its_own_copy() -> None:
    """what-if and explain run the step on `Decider.fork()`: it must see the reservations
    the operator's step holds (else it would admit what the operator refuses), and its own
    steps must not change the operator's book."""
    step = Decider(Cache())
    r = _reservation(1000.0)
    step.book.update(HOLDERS, [r], {}, [], 400.0)
    copy = step.fork()
    assert copy.book.current == step.book.current == {"ns/big": r}
    copy.book.update([], [], {}, [], 500.0)
    assert copy.book.current == {}
    assert step.book.current == {"ns/big": r}


@pytest.mark.parametrize(
    ("reserve_after", "expected"),
    [
        pytest.param(None, ["a"], id="head-only-by-default"),
        pytest.param("30m", ["a", "b"], id="and-those-that-waited-30m"),
        pytest.param("5m", ["a", "b", "c"], id="and-those-that-waited-5m"),
    ],
)
def test_holders_are_the_head_and_the_workloads_that_waited_long_enough(
    reserve_after: str | None, expected: list[str]
) -> None:
    cache = cache_with_queue()
    ann = {"atoll.dev/backfill": "true"}
    if reserve_after is not None:
        ann["atoll.dev/backfill-reserve-after"] = reserve_after
    cache.set_cluster_queue(annotated(**ann))
    for name, created in [("a", "00:00"), ("b", "00:20"), ("c", "00:50")]:
        wl = workload_for(job(name, pods=8), created=f"2026-12-01T{created}:00Z")
        cache.set_workload(wl)
    now = 1_796_086_800.0  # 2026-12-01T01:00:00Z
    cache.queue_heads(now)
    holders = ReservationBook().holders(cache, cache.snapshot(), now)
    assert [h.workload.name.split("-")[1] for h in holders] == expected


def _limited(name: str, seconds: int) -> Job:
    j = job(name, pods=8)
    labels = {**(j.metadata.labels or {}), "kueue.x-k8s.io/max-exec-time-seconds": str(seconds)}
    return j.model_copy(update={"metadata": j.metadata.model_copy(update={"labels": labels})})


def test_a_workload_that_waited_long_enough_is_told_its_own_reservation() -> None:
    """8 GPUs, all held by `busy` until 02:00:15 (its 2 h limit plus grace). At 00:40 the
    head reserves from then, and `second`, queued 35 min ago (threshold 30 min), from the
    head's own end. `second` is of the head's equivalence class, so it is parked with the
    head's failure, but its message names its own reservation, not the head's."""
    cache = cache_with_queue()
    cache.set_cluster_queue(
        annotated(**{"atoll.dev/backfill": "true", "atoll.dev/backfill-reserve-after": "30m"})
    )
    midnight = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    busy = workload_for(_limited("busy", 7200), created="2026-11-30T23:59:00Z")
    cache.set_workload(busy)
    admit = ask(Decider(cache), wls.wl_key(busy), midnight.timestamp()).decision
    assert isinstance(admit, d.Admit)
    cache.set_workload(busy.model_copy(update={"status": lc.admit(admit, midnight)(busy)}))
    keys = {}
    for name, created in [("head", "00:01"), ("second", "00:05")]:
        wl = workload_for(_limited(name, 900), created=f"2026-12-01T{created}:00Z")
        cache.set_workload(wl)
        keys[name] = wls.wl_key(wl)
    step = Decider(cache)
    now = midnight.timestamp() + 2400
    told = {str(dec.workload): dec for dec in step.decide(now)}
    head, second = step.book.current[keys["head"]], step.book.current[keys["second"]]
    assert head.start == midnight.timestamp() + 7200 + 15
    assert second.start == head.start + 900 + 15
    mine, heads = told[keys["second"]], told[keys["head"]]
    assert isinstance(mine, d.Pending)
    assert isinstance(heads, d.Pending)
    assert mine.message.endswith(
        "; reserved 8 nvidia.com/gpu in rf from 02:15Z, in 1.6h; 0 Workloads backfilled"
    )
    assert "02:00Z" not in mine.message
    assert "; reserved 8 nvidia.com/gpu in rf from 02:00Z, in 80m;" in heads.message
