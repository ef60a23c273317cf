"""The cache: the ledger of quota (observed and assumed), parked workloads, stale events."""

from __future__ import annotations

from atoll.engine import model as m
from atoll.engine.ordering import select_heads
from atoll.state import workloads as wls
from atoll.state.cache import Cache
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
    assert cache.epoch > epoch  # freed quota wakes parked workloads


def test_parked_workloads_are_released_by_any_change() -> None:
    cache = cache_with_queue()
    wl = workload_for(job("a"))
    cache.set_workload(wl)
    cache.park(wls.wl_key(wl))
    assert cache.parked_keys() == {wls.wl_key(wl)}
    cache.set_cluster_queue(cache.cluster_queues["cq"].model_copy(deep=True))
    assert cache.parked_keys() == {wls.wl_key(wl)}  # same spec: nothing changed
    cache.bump()
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
    cache.bump()  # its victims' quota is released: big is back in the queue...
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
    cache.bump()
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
