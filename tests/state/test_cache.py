"""The cache: the ledger of quota (observed and assumed), parked workloads, stale events."""

from __future__ import annotations

from atoll.engine import model as m
from atoll.state import workloads as wls
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
