"""A pod set with podset slices whose count is no multiple of the slice size: a gang
evicted after some of its pods succeeded queues again for the pods left
(`status.reclaimablePods`), and those still go out in slices, the last one short. Before,
the scheduler called such a request invalid and the rest of the gang never ran again."""

from __future__ import annotations

from collections import Counter

from atoll.api.core import Job
from atoll.api.resourceflavor import ResourceFlavor
from atoll.api.workload import ReclaimablePod
from atoll.control.scheduler import Scheduler
from atoll.state import lifecycle as lc
from atoll.state import workloads as wls
from atoll.state.topologyassignment import domains
from tests.control.builders import cache_with_queue, job, workload_for
from tests.control.fakes import FakeCluster
from tests.engine.placement_builders import HOSTNAME, RACK, cluster

NOW = 1_796_000_000.0


def _scheduler() -> tuple[Scheduler, FakeCluster]:
    cache = cache_with_queue(gpus=1000)
    cache.inventory = cluster("dgx-h100")  # 8 GPUs a node: a slice of 4 two-GPU pods each
    cache.set_flavor(
        ResourceFlavor.from_dict({"metadata": {"name": "rf"}, "spec": {"topologyName": "default"}})
    )
    fake = FakeCluster()
    return Scheduler(cache=cache, store=fake, emit=fake.emit, clock=lambda: NOW), fake


def _sliced_job(pods: int) -> Job:
    raw = job("train", pods=pods, gpus=2).to_dict()
    raw["spec"]["template"]["metadata"] = {
        "annotations": {
            "kueue.x-k8s.io/podset-required-topology": RACK,
            "kueue.x-k8s.io/podset-slice-required-topology": HOSTNAME,
            "kueue.x-k8s.io/podset-slice-size": "4",
        }
    }
    return Job.from_dict(raw)


async def _admitted_hosts(pods: int, done: int) -> Counter[str]:
    sched, fake = _scheduler()
    wl = workload_for(_sliced_job(pods))
    if done:
        wl = lc.applied(wl, lc.reclaimable((ReclaimablePod(name="main", count=done),)))
    created = await fake.create_workload(wl)
    sched.cache.set_workload(created)
    await sched.run_once()
    got = fake.workloads[wls.wl_key(created)]
    assert wls.has_quota(got), got.status
    assignment = got.status.admission.pod_set_assignments[0]
    assert assignment.count == pods - done
    assert assignment.topology_assignment is not None
    hosts: Counter[str] = Counter()
    for values, count in domains(assignment.topology_assignment):
        hosts[values[HOSTNAME]] += count
    return hosts


async def test_a_requeued_gang_gets_the_pods_left_in_slices_with_a_short_last_one() -> None:
    hosts = await _admitted_hosts(8, done=3)  # 5 left: a slice of 4 and one of 1
    assert sorted(hosts.values()) == [1, 4]


async def test_a_count_below_the_slice_size_is_one_short_slice_on_one_host() -> None:
    hosts = await _admitted_hosts(3, done=0)
    assert list(hosts.values()) == [3]


async def test_whole_slices_are_unchanged() -> None:
    hosts = await _admitted_hosts(8, done=0)
    assert sorted(hosts.values()) == [4, 4]
