"""The cache: the ledger of quota (observed and assumed), parked workloads, stale events."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from atoll.engine import decisions as d
from atoll.engine import model as m
from atoll.engine.ordering import select_heads
from atoll.state import workloads as wls
from atoll.state.cache import REQUEUE_BATCH_PERIOD, Cache, requeue_period
from atoll.state.decide import Decider
from tests.control.builders import cache_with_queue, job, workload_for

NOW = 1_796_000_000.0


def _admission(gpus: int) -> m.Admission:
    return m.Admission(
        cluster_queue=m.ClusterQueueName("cq"),
        pod_sets=(
            m.PodSetAssignment(
                name=m.PodSetName("main"),
                count=gpus,
                flavors=((m.ResourceName("nvidia.com/gpu"), m.FlavorName("rf")),),
                resource_usage=((m.ResourceName("nvidia.com/gpu"), gpus),),
            ),
        ),
    )


def test_a_new_workload_is_pending_in_its_cluster_queue() -> None:
    cache = cache_with_queue()
    cache.set_workload(workload_for(job("a")))
    groups = cache.pending_by_queue(NOW)
    assert list(groups) == ["cq"]
    (pending,) = groups[m.ClusterQueueName("cq")]
    assert pending.name.startswith("job-a-")
    assert pending.pod_sets[0].requests == (("nvidia.com/gpu", 1),)


def test_unknown_local_queue_is_grouped_apart_so_it_still_gets_a_decision() -> None:
    cache = cache_with_queue()
    raw = workload_for(job("a")).to_dict()
    raw["spec"]["queueName"] = "missing"
    cache.set_workload(type(workload_for(job("a"))).from_dict(raw))
    (group,) = cache.pending_by_queue(NOW)
    assert group.startswith("\0lq:")


def test_assumed_admissions_count_in_the_snapshot_until_forgotten() -> None:
    cache = cache_with_queue(gpus=8)
    wl = workload_for(job("a", pods=4))
    cache.set_workload(wl)
    key = wls.wl_key(wl)
    cache.assume(key, _admission(4))
    assert not cache.pending_by_queue(NOW)
    assert key in cache.snapshot().admitted
    epoch = cache.epoch
    cache.forget(key)
    assert key not in cache.snapshot().admitted
    assert cache.epoch == epoch  # freed quota wakes parked workloads, batched:
    assert cache.requeue_requested  # (see test_a_change_wakes_parked_workloads_...)


def _settled(cache: Cache) -> Cache:
    """`cache` after the requeue its own set-up requested (each queue object is a change)."""
    cache.requeue_period = REQUEUE_BATCH_PERIOD  # atoll.batchedRequeue: true
    cache.requeue_due(NOW - REQUEUE_BATCH_PERIOD)
    cache.requeue_due(NOW)
    assert not cache.requeue_requested
    return cache


def test_parked_workloads_are_released_by_any_change() -> None:
    cache = _settled(cache_with_queue())
    wl = workload_for(job("a"))
    cache.set_workload(wl)
    cache.park(wls.wl_key(wl))
    assert cache.parked_keys() == {wls.wl_key(wl)}
    cache.set_cluster_queue(cache.cluster_queues["cq"].model_copy(deep=True))
    assert not cache.requeue_requested  # same spec: nothing changed
    cache.bump()
    assert cache.requeue_requested
    cache.requeue_due(NOW + REQUEUE_BATCH_PERIOD)
    assert cache.parked_keys() == {wls.wl_key(wl)}  # batched: a period after the request
    cache.requeue_due(NOW + 2 * REQUEUE_BATCH_PERIOD)
    assert cache.parked_keys() == frozenset()


def test_a_workload_holding_a_reservation_is_woken_by_the_next_step_alone() -> None:
    cache = _settled(cache_with_queue())
    holder, other = workload_for(job("holder")), workload_for(job("other"))
    for wl in (holder, other):
        cache.set_workload(wl)
    keys = [wls.wl_key(holder), wls.wl_key(other)]
    assert [w.name for _, w in cache.queue_heads(NOW)] == [holder.metadata.name]
    assert not cache.requeue_requested
    cache.queue_park_all(cache.queues.group_of[keys[0]])  # parked by its queue's marker
    cache.park(keys[1])
    cache.promised = frozenset({keys[0]})
    assert cache.parked_keys() == set(keys)
    cache.requeue_due(NOW)
    assert cache.parked_keys() == set(keys)  # no change yet: the promise wakes nothing
    cache.bump()
    cache.requeue_due(NOW)
    assert cache.parked_keys() == {keys[1]}  # the holder at once, the other in the batch
    assert [k for _, k in cache.queues.heads(cache.parked)] == [keys[0]]
    cache.set_workload(holder.model_copy(deep=True))  # its own event, seen in the same step
    assert [w.name for _, w in cache.queue_heads(NOW)] == [holder.metadata.name]
    cache.park(keys[0])  # tried and parked again: not woken again until the next change
    cache.requeue_due(NOW + REQUEUE_BATCH_PERIOD / 2)
    assert cache.parked_keys() == set(keys)
    cache.requeue_due(NOW + REQUEUE_BATCH_PERIOD)
    assert cache.parked_keys() == frozenset()


def test_an_older_watch_event_does_not_overwrite_a_newer_write() -> None:
    cache = cache_with_queue()
    raw = workload_for(job("a")).to_dict()
    newer = dict(raw, metadata=dict(raw["metadata"], resourceVersion="20"))
    older = dict(raw, metadata=dict(raw["metadata"], resourceVersion="7"))
    model = type(workload_for(job("a")))
    cache.set_workload(model.from_dict(newer))
    cache.set_workload(model.from_dict(older))
    (stored,) = cache.workloads.values()
    assert stored.metadata.resource_version == "20"


def test_workloads_of_job_match_owner_name_and_uid() -> None:
    cache = cache_with_queue()
    mine = workload_for(job("a", uid="u1"))
    cache.set_workload(mine)
    assert cache.workloads_of_job("ns/a", "u1") == [mine]
    assert cache.workloads_of_job("ns/a", "other-uid") == []
    assert cache.workloads_of_job("other/a") == []


def test_workloads_of_job_follow_owner_changes_and_deletions() -> None:
    cache = cache_with_queue()
    first = workload_for(job("a", uid="u1"))
    cache.set_workload(first)
    refs = first.metadata.owner_references or ()
    moved_refs = tuple(r.model_copy(update={"name": "b"}) for r in refs)
    moved = first.model_copy(
        update={"metadata": first.metadata.model_copy(update={"owner_references": moved_refs})}
    )
    cache.set_workload(moved)
    assert cache.workloads_of_job("ns/a") == []
    assert cache.workloads_of_job("ns/b") == [moved]
    cache.delete_workload(wls.wl_key(moved))
    assert cache.workloads_of_job("ns/b") == []


def _heads(cache: Cache) -> list[str]:
    return [w.name for w in select_heads(cache.pending_by_queue(NOW), cache.parked_keys())]


def test_a_preemptor_stays_the_head_of_a_best_effort_queue_until_admitted() -> None:
    cache = cache_with_queue()
    big = workload_for(job("big", pods=8), created="2026-12-01T00:00:00Z")
    small = workload_for(job("small"), created="2026-12-01T00:01:00Z")
    urgent = workload_for(job("urgent"), priority=5, created="2026-12-01T00:02:00Z")
    for wl in (big, small):
        cache.set_workload(wl)
    big_key, small_key = wls.wl_key(big), wls.wl_key(small)
    cache.park(big_key)  # inadmissible: small is the head and preempts
    assert _heads(cache) == [small.name]
    cache.preempting(small_key, "cq")
    cache.wake_parked()  # its victims' quota is released: big is back in the queue...
    cache.set_workload(urgent)
    assert _heads(cache) == [small.name]  # ...but small keeps its turn, even over urgent
    cache.assume(small_key, _admission(2))
    assert cache.preemptors == {}
    assert _heads(cache) == [urgent.name]


def test_a_parked_or_deleted_preemptor_gives_up_the_head() -> None:
    cache = cache_with_queue()
    big = workload_for(job("big", pods=8), created="2026-12-01T00:00:00Z")
    small = workload_for(job("small"), created="2026-12-01T00:01:00Z")
    for wl in (big, small):
        cache.set_workload(wl)
    cache.preempting(wls.wl_key(small), "cq")
    cache.park(wls.wl_key(small))
    assert _heads(cache) == [big.name]
    cache.wake_parked()
    assert _heads(cache) == [small.name]
    cache.delete_workload(wls.wl_key(small))
    assert cache.preemptors == {}
    assert _heads(cache) == [big.name]


def test_a_strict_fifo_queue_has_no_sticky_preemptor() -> None:
    cache = cache_with_queue(queueingStrategy="StrictFIFO")
    small = workload_for(job("small"))
    cache.set_workload(small)
    cache.preempting(wls.wl_key(small), "cq")
    assert cache.preemptors == {}


# -- the batched requeue of parked workloads (Kueue's requeueBatchPeriod) -----------------
P = REQUEUE_BATCH_PERIOD


def _parked(cache: Cache, name: str) -> str:
    wl = workload_for(job(name))
    cache.set_workload(wl)
    key = wls.wl_key(wl)
    cache.park(key)
    return key


def test_a_change_wakes_parked_workloads_a_period_after_the_step_that_sees_it() -> None:
    cache = _settled(cache_with_queue())
    key = _parked(cache, "a")
    cache.bump()
    assert cache.next_requeue(NOW) == NOW + P  # the loop's timer, before any step
    cache.queue_heads(NOW)
    assert key in cache.parked_keys()
    assert cache.next_requeue(NOW + P / 2) == NOW + P
    assert cache.queue_heads(NOW + P / 2) == []
    assert key in cache.parked_keys()
    (head,) = cache.queue_heads(NOW + P)
    assert head[1].key == key
    assert cache.next_requeue(NOW + P) is None


def test_changes_within_one_period_wake_parked_workloads_once() -> None:
    cache = _settled(cache_with_queue())
    key = _parked(cache, "a")
    epoch = cache.epoch
    cache.bump()
    cache.queue_heads(NOW)
    cache.bump()  # a second release before the requeue: it joins the batch
    cache.queue_heads(NOW + P / 2)
    assert cache.next_wake(NOW + P / 2) == NOW + P
    cache.queue_heads(NOW + P)
    assert cache.epoch == epoch + 1
    assert not cache.requeue_requested
    assert cache.next_wake(NOW + P) is None
    cache.park(key)
    cache.queue_heads(NOW + 3 * P)  # no change since: it stays parked
    assert key in cache.parked_keys()


def test_a_change_after_the_requeue_starts_a_new_period() -> None:
    cache = _settled(cache_with_queue())
    key = _parked(cache, "a")
    cache.bump()
    cache.queue_heads(NOW)
    cache.queue_heads(NOW + P)
    cache.park(key)  # tried again, still does not fit
    cache.bump()
    cache.queue_heads(NOW + 1.5 * P)
    assert key in cache.parked_keys()
    assert cache.next_wake(NOW + 1.5 * P) == NOW + 2.5 * P
    cache.queue_heads(NOW + 2.5 * P)
    assert key not in cache.parked_keys()


def test_a_zero_period_wakes_parked_workloads_at_the_next_step() -> None:
    cache = _settled(cache_with_queue())
    cache.requeue_period = 0.0
    key = _parked(cache, "a")
    cache.bump()
    assert cache.next_requeue(NOW) == NOW
    cache.queue_heads(NOW)
    assert key not in cache.parked_keys()


def test_the_long_requeue_interval_gate_gives_kueues_ten_seconds() -> None:
    assert requeue_period(batched=False, long_interval=True) == 0.0
    assert requeue_period(batched=True, long_interval=False) == 1.0
    assert requeue_period(batched=True, long_interval=True) == 10.0


def test_a_release_that_covers_what_a_parked_workload_lacks_admits_it_at_once() -> None:
    cache = _settled(cache_with_queue(gpus=8))
    holder = workload_for(job("holder", pods=8), created="2026-12-01T00:00:00Z")
    waiting = workload_for(job("waiting", pods=4), created="2026-12-01T00:01:00Z")
    cache.set_workload(holder)
    cache.set_workload(waiting)
    decider = Decider(cache)
    assert [type(x) for x in decider.decide(NOW)] == [d.Admit]
    (pending,) = decider.decide(NOW)
    assert isinstance(pending, d.Pending)
    assert pending.requeue is d.Requeue.INADMISSIBLE
    assert wls.wl_key(waiting) in cache.parked_keys()
    cache.delete_workload(wls.wl_key(holder))  # 8 GPUs released: it lacked 4
    (admit,) = decider.decide(NOW + 60)  # not a batch period later
    assert isinstance(admit, d.Admit)
    assert admit.workload == wls.wl_key(waiting)


def test_a_release_smaller_than_what_a_parked_workload_lacks_waits_for_the_batch() -> None:
    cache = _settled(cache_with_queue(gpus=8))
    big = workload_for(job("big", pods=6), created="2026-12-01T00:00:00Z")
    small = workload_for(job("small", pods=2), created="2026-12-01T00:00:30Z")
    waiting = workload_for(job("waiting", pods=4), created="2026-12-01T00:01:00Z")
    for wl in (big, small, waiting):
        cache.set_workload(wl)
    decider = Decider(cache)
    decisions = decider.decide(NOW) + decider.decide(NOW) + decider.decide(NOW)
    assert [type(x) for x in decisions] == [d.Admit, d.Admit, d.Pending]
    key = wls.wl_key(waiting)
    t = NOW + 60
    cache.delete_workload(wls.wl_key(small))  # 2 GPUs: it lacks 4
    assert decider.decide(t) == ()  # it waits for the batch...
    assert key in cache.parked_keys()
    assert cache.next_requeue(t) == t + P
    (again,) = decider.decide(t + P)  # ...is tried a period later, and lacks 2 now
    assert isinstance(again, d.Pending)
    assert key in cache.parked_keys()
    cache.delete_workload(wls.wl_key(big))  # 6 GPUs cover it
    (admit,) = decider.decide(t + P + 1)
    assert isinstance(admit, d.Admit)
    assert admit.workload == key


Step = tuple[float, str]
"""(seconds since the previous step, what happens: "bump", "park" or "step")"""


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.5]),
            st.sampled_from(["bump", "park", "step"]),
        ),
        max_size=30,
    )
)
def test_the_requeue_is_batched_and_nothing_stays_parked_after_a_change(
    steps: list[Step],
) -> None:
    """Wakes are a period apart at least, each follows a change, and a workload parked
    before a change is awake at the first step a period after the step that saw it."""
    cache = _settled(cache_with_queue())
    key = _parked(cache, "a")
    t, epoch = NOW, cache.epoch
    last_wake: float | None = None
    changed_since_wake = False
    seen: float | None = None  # the first step after a change that is not served yet
    for dt, what in steps:
        t += dt
        if what == "bump":
            cache.bump()
            changed_since_wake = True
        elif what == "park":
            if key not in cache.parked_keys():
                cache.park(key)
        else:
            if changed_since_wake and seen is None:
                seen = t
            cache.queue_heads(t)
            if cache.epoch != epoch:
                assert cache.epoch == epoch + 1
                assert changed_since_wake
                assert seen is not None
                assert t >= seen + P
                assert last_wake is None or t - last_wake >= P
                assert key not in cache.parked_keys()
                epoch, last_wake, changed_since_wake, seen = cache.epoch, t, False, None
            elif seen is not None:
                assert t < seen + P  # due: it would have woken
    if changed_since_wake:
        at = cache.next_requeue(t)
        assert at is not None
        assert at <= max(t, seen or t) + P
        cache.queue_heads(t)
        cache.queue_heads(max(t, seen or t) + P)
        assert key not in cache.parked_keys()
