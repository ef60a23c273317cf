"""Topology-aware preemption in the scheduling loop, on the dgx-h100 shape (16 nodes of 8
GPUs, racks of 4): a rack-required gang that fits quota but finds no rack with room evicts
whole gangs inside one rack only, the fewest and lowest allowed by its ClusterQueue's policy,
waits for them without preempting again, and lands in the rack they free; a gang that may
not preempt says what would change the answer."""

from __future__ import annotations

import datetime as dt
from typing import Any

from atoll.api.cohort import Cohort
from atoll.api.core import Job
from atoll.api.localqueue import LocalQueue
from atoll.api.resourceflavor import ResourceFlavor
from atoll.control.scheduler import Scheduler
from atoll.engine import decisions as d
from atoll.state import lifecycle as adm
from atoll.state import workloads as wls
from atoll.state.cache import Cache
from tests.control.builders import cluster_queue, job, workload_for
from tests.control.fakes import FakeCluster
from tests.engine.placement_builders import RACK, cluster

NOW = 1_796_000_000.0
NODES = [f"dgx-{i:02d}" for i in range(16)]
RACKS = {f"rack-{r}": NODES[4 * r : 4 * r + 4] for r in range(4)}
WITHIN = {"withinClusterQueue": "LowerPriority"}


def _setup(
    preemption: dict[str, Any] | None = WITHIN,
    *,
    cohort: bool = False,
    lender_preemption: dict[str, Any] | None = None,
    strategy: str | None = None,
) -> tuple[Scheduler, FakeCluster]:
    cache = Cache()
    cache.inventory = cluster("dgx-h100")
    cache.set_flavor(
        ResourceFlavor.from_dict({"metadata": {"name": "rf"}, "spec": {"topologyName": "default"}})
    )
    spec: dict[str, Any] = {"preemption": preemption} if preemption else {}
    if strategy:
        spec["queueingStrategy"] = strategy
    if cohort:
        # cq lends nothing and borrows all it uses from cq-b's large quota.
        cache.set_cohort(Cohort.from_dict({"metadata": {"name": "co"}, "spec": {}}))
        spec["cohortName"] = "co"
        cache.set_cluster_queue(cluster_queue("cq", gpus=0, **spec))
        lender: dict[str, Any] = {"cohortName": "co"}
        if lender_preemption:
            lender["preemption"] = lender_preemption
        cache.set_cluster_queue(cluster_queue("cq-b", gpus=1000, **lender))
        cache.set_local_queue(
            LocalQueue.from_dict(
                {"metadata": {"name": "lq-b", "namespace": "ns"}, "spec": {"clusterQueue": "cq-b"}}
            )
        )
    else:
        cache.set_cluster_queue(cluster_queue("cq", gpus=1000, **spec))
    cache.set_local_queue(
        LocalQueue.from_dict(
            {"metadata": {"name": "lq", "namespace": "ns"}, "spec": {"clusterQueue": "cq"}}
        )
    )
    cache.set_namespace("ns", {"kubernetes.io/metadata.name": "ns"})
    fake = FakeCluster()
    return Scheduler(cache=cache, store=fake, emit=fake.emit, clock=lambda: NOW), fake


def _job(name: str, pods: int, *, node: str | None, level: str | None, queue: str) -> Job:
    raw = job(name, pods=pods, gpus=8).to_dict()
    raw["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = queue
    template = raw["spec"]["template"]
    if node is not None:
        template["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    if level is not None:
        template["metadata"] = {"annotations": {"kueue.x-k8s.io/podset-required-topology": level}}
    return Job.from_dict(raw)


async def _add(
    sched: Scheduler,
    fake: FakeCluster,
    name: str,
    *,
    pods: int = 1,
    priority: int = 0,
    node: str | None = None,
    level: str | None = None,
    queue: str = "lq",
) -> str:
    wl = workload_for(_job(name, pods, node=node, level=level, queue=queue), priority=priority)
    created = await fake.create_workload(wl)
    sched.cache.set_workload(created)
    return wls.wl_key(created)


async def _settle(sched: Scheduler) -> None:
    for _ in range(40):
        if not (await sched.run_once()).progress:
            return
    raise AssertionError("the scheduler never settled")


async def _fill(sched: Scheduler, fake: FakeCluster, priorities: list[int]) -> list[str]:
    """One single-node gang `low-NN` on each node, pinned, with these priorities."""
    keys = [
        await _add(sched, fake, f"low-{i:02d}", priority=p, node=node)
        for i, (node, p) in enumerate(zip(NODES, priorities, strict=True))
    ]
    await _settle(sched)
    assert all(wls.has_quota(fake.workloads[k]) for k in keys)
    return keys


def _nodes(sched: Scheduler, key: str) -> set[str]:
    return {p.node for p in sched.cache.inventory.held()[key].pods}


def _reason(fake: FakeCluster, key: str) -> str:
    cond = wls.condition(fake.workloads[key], wls.QUOTA_RESERVED)
    assert cond is not None
    return cond.reason


def _message(fake: FakeCluster, key: str) -> str:
    cond = wls.condition(fake.workloads[key], wls.QUOTA_RESERVED)
    assert cond is not None
    return cond.message


def _evicted(fake: FakeCluster) -> set[str]:
    return {k for k, wl in fake.workloads.items() if wls.is_evicted(wl)}


async def _release(sched: Scheduler, fake: FakeCluster, keys: set[str]) -> None:
    """What the Job side does once an evicted gang has no active pod: quota released."""
    for key in sorted(keys):

        def mutate(wl: Any) -> Any:
            conds = adm.without_reservation(
                wl.status.conditions or (),
                "Pending",
                "Preempted",
                dt.datetime.fromtimestamp(NOW, dt.UTC),
            )
            return wls.status_with(wl, conditions=conds, admission=None)

        written = await fake.update_workload_status(key, mutate)
        assert written is not None
        sched.cache.set_workload(written)


async def test_evicts_the_lowest_priority_rack_whole_and_nothing_else() -> None:
    sched, fake = _setup()
    # rack-0: 5s, rack-1: 1s but one 9, rack-2: 2s, rack-3: 1s but one 6
    lows = await _fill(sched, fake, [5, 5, 5, 5, 1, 1, 9, 1, 2, 2, 2, 2, 1, 6, 1, 1])
    big = await _add(sched, fake, "big", pods=4, priority=100, level=RACK)
    result = await sched.run_once()
    (preempt,) = [x for x in result.decisions if isinstance(x, d.Preempt)]
    assert preempt.workload == big
    assert {v.reason for v in preempt.victims} == {d.PreemptionReason.IN_CLUSTER_QUEUE}
    # rack-2's victims top out at 2; rack-1 and rack-3 would need a 9 or a 6
    assert {str(v.workload) for v in preempt.victims} == set(lows[8:12])
    assert _evicted(fake) == set(lows[8:12])
    for key in lows[8:12]:
        preempted = wls.condition(fake.workloads[key], wls.PREEMPTED)
        assert preempted is not None
        assert preempted.reason == "InClusterQueue"
    assert _reason(fake, big) == "Pending"
    assert "Pending the preemption of 4 workload(s) in topology.atoll.dev/rack rack-2" in (
        _message(fake, big)
    )


async def test_a_whole_multi_node_gang_is_one_minimal_victim() -> None:
    sched, fake = _setup()
    keys = await _fill(sched, fake, [3] * 4 + [4] * 4 + [3] * 8)
    # replace rack-1's singles by one 3-node gang and one single, both of priority 1
    for key in keys[4:8]:
        await fake.delete_workload(key)
        sched.cache.delete_workload(key)
    single = await _add(sched, fake, "single", priority=1, node=NODES[7])
    await _settle(sched)
    wide = await _add(sched, fake, "wide", pods=3, priority=1, level=RACK)
    await _settle(sched)
    assert _nodes(sched, wide) == set(NODES[4:7])
    big = await _add(sched, fake, "big", pods=3, priority=100, level=RACK)
    await _settle(sched)
    # one whole gang frees three nodes of one rack: not the single, not three priority-3s
    assert _evicted(fake) == {wide}
    assert wls.has_quota(fake.workloads[single])
    await _release(sched, fake, {wide})
    await _settle(sched)
    assert wls.has_quota(fake.workloads[big])
    assert _nodes(sched, big) == set(NODES[4:7])


async def test_waits_for_its_victims_without_preempting_again_then_lands_in_their_rack() -> None:
    sched, fake = _setup()
    lows = await _fill(sched, fake, [5] * 4 + [1] * 4 + [5] * 8)
    big = await _add(sched, fake, "big", pods=4, priority=100, level=RACK)
    first = await sched.run_once()
    assert first.preempted == 4
    events = len(fake.events)
    for _ in range(3):  # the victims still hold their quota: nothing more to evict
        sched.cache.bump()
        again = await sched.run_once()
        assert again.preempted == 0
        assert not any(isinstance(x, d.Preempt) for x in again.decisions)
        assert _reason(fake, big) == "Pending"
    assert _evicted(fake) == set(lows[4:8])
    assert [e for e in fake.events[events:] if e[1] == "Preempted"] == []
    assert "Waiting for 4 preempted workload(s) to leave topology.atoll.dev/rack rack-1" in (
        _message(fake, big)
    )
    await _release(sched, fake, set(lows[4:8]))
    await _settle(sched)
    assert wls.has_quota(fake.workloads[big])
    assert _nodes(sched, big) == set(RACKS["rack-1"])
    # the victims queue again behind it: no room left for them anywhere
    for key in lows[4:8]:
        assert not wls.has_quota(fake.workloads[key])
    assert set(lows) - set(lows[4:8]) <= {k for k in lows if wls.has_quota(fake.workloads[k])}


async def test_the_freed_rack_is_kept_for_the_preemptor() -> None:
    # The preemptor borrows (its queue has no quota of its own) from a StrictFIFO queue (so it
    # is no sticky preemptor, which would go first), so a gang of the lending queue goes first
    # in every cycle; the rack being freed must not go to it.
    sched, fake = _setup(cohort=True, strategy="StrictFIFO")
    lows = await _fill(sched, fake, [5] * 4 + [5] * 4 + [1] * 4 + [5] * 4)
    big = await _add(sched, fake, "big", pods=4, priority=100, level=RACK)
    await sched.run_once()
    assert _evicted(fake) == set(lows[8:12])
    other = await _add(sched, fake, "other", priority=0, queue="lq-b")
    await _release(sched, fake, set(lows[8:12]))
    result = await sched.run_once()
    order = [str(x.workload) for x in result.decisions]
    assert order.index(other) < order.index(big)  # decided first, yet did not take the rack
    assert wls.has_quota(fake.workloads[big])
    assert _nodes(sched, big) == set(RACKS["rack-2"])
    assert not wls.has_quota(fake.workloads[other])
    assert _reason(fake, other) == "Pending"
    assert "eligible node(s) have room for 0" in _message(fake, other)


async def test_policy_never_preempts_nothing_and_says_what_would_help() -> None:
    sched, fake = _setup(preemption=None)
    lows = await _fill(sched, fake, [0] * 16)
    # free one node in each of three racks: 3 free nodes, no rack with 2
    for key in (lows[0], lows[4], lows[8]):
        await fake.delete_workload(key)
        sched.cache.delete_workload(key)
    big = await _add(sched, fake, "big", pods=2, priority=100, level=RACK)
    result = await sched.run_once()
    assert result.preempted == 0
    assert _evicted(fake) == set()
    assert _reason(fake, big) == "Pending"
    message = _message(fake, big)
    assert "needs 2 pods in one topology.atoll.dev/rack; the largest has room for 1" in message
    # the fewest running gangs of one rack whose end makes room: one, in rack-0 (first)
    assert f"would fit after workload {lows[1]} finishes" in message
    assert "would fit now as preferred instead of required" in message


async def test_without_a_rack_to_free_it_waits_with_a_hint_naming_several() -> None:
    sched, fake = _setup(preemption={"withinClusterQueue": "LowerPriority"})
    # everything runs at the preemptor's priority: nothing may be evicted
    lows = await _fill(sched, fake, [100] * 16)
    big = await _add(sched, fake, "big", pods=4, priority=100, level=RACK)
    result = await sched.run_once()
    assert result.preempted == 0
    message = _message(fake, big)
    assert _reason(fake, big) == "Pending"
    assert f"would fit after workloads {lows[0]}, {lows[1]}, {lows[2]} and 1 more finish" in (
        message
    )
    assert "would fit now as preferred" not in message  # no free node at all


async def test_a_lender_reclaims_one_rack_from_a_borrowing_queue() -> None:
    sched, fake = _setup(cohort=True, lender_preemption={"reclaimWithinCohort": "Any"})
    lows = await _fill(sched, fake, [5] * 16)  # all in cq, all borrowed from cq-b
    big = await _add(sched, fake, "big", pods=4, priority=0, level=RACK, queue="lq-b")
    result = await sched.run_once()
    (preempt,) = [x for x in result.decisions if isinstance(x, d.Preempt)]
    assert preempt.workload == big
    assert {v.reason for v in preempt.victims} == {d.PreemptionReason.IN_COHORT_RECLAMATION}
    assert {str(v.cluster_queue) for v in preempt.victims} == {"cq"}
    assert _evicted(fake) == set(lows[:4])  # one rack (the first of equals), whole gangs


async def test_two_preemptors_in_one_cycle_free_two_different_racks() -> None:
    sched, fake = _setup(cohort=True, lender_preemption={"reclaimWithinCohort": "Any"})
    lows = await _fill(sched, fake, [1] * 4 + [2] * 4 + [5] * 8)
    mine = await _add(sched, fake, "mine", pods=4, priority=100, level=RACK)
    lender = await _add(sched, fake, "lender", pods=4, priority=100, level=RACK, queue="lq-b")
    result = await sched.run_once()
    preempts = {str(x.workload): x for x in result.decisions if isinstance(x, d.Preempt)}
    assert set(preempts) == {mine, lender}
    # the lender goes first (it does not borrow) and takes the cheapest rack; the other
    # preemptor does not name the same victims but frees the next rack
    assert {str(v.workload) for v in preempts[lender].victims} == set(lows[0:4])
    assert {str(v.workload) for v in preempts[mine].victims} == set(lows[4:8])
    assert _evicted(fake) == set(lows[0:8])
    await _release(sched, fake, set(lows[0:8]))
    await _settle(sched)
    assert _nodes(sched, lender) == set(RACKS["rack-0"])
    assert _nodes(sched, mine) == set(RACKS["rack-1"])
