"""The cache's snapshot, kept up to date between cycles (structure memoized, admitted
workloads and their usage updated one change at a time), equals the snapshot built from
scratch from the same cache, after any sequence of the changes the scheduler, the handlers
and `explain` make; a snapshot handed out never changes afterwards; and the pending queues
(memoized per Workload version) are those computed from scratch (hypothesis)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from atoll.api.cohort import Cohort
from atoll.api.localqueue import LocalQueue
from atoll.api.resourceflavor import ResourceFlavor
from atoll.api.workload import Workload
from atoll.engine import decisions as d
from atoll.engine import model as m
from atoll.engine.snapshot import Snapshot, build_snapshot
from atoll.sim import workloads as sw
from atoll.state import lifecycle as lc
from atoll.state import workloads as wls
from atoll.state.cache import UNKNOWN_QUEUE_PREFIX, Cache
from atoll.state.decide import admission_of
from tests.control.builders import GPU, cluster_queue, job, workload_for

QUEUES = ("a", "b")


def from_scratch(cache: Cache, fair_sharing: m.FairSharing | None = None) -> Snapshot:
    """What `Cache.snapshot` computed before it was incremental: every holding workload,
    converted and charged to a tree built again."""
    admitted = []
    for key, adm, evicted in cache.holding():
        ew = cache.engine_workload(key)
        if ew is not None:
            admitted.append(
                m.AdmittedWorkload(
                    workload=ew,
                    admission=adm,
                    evicted=evicted,
                    reserved_at=cache._reserved_at(key),
                )
            )
    return build_snapshot(
        flavors=cache._e_flavors.values(),
        cluster_queues=cache._e_cluster_queues.values(),
        cohorts=cache._e_cohorts.values(),
        local_queues=cache._e_local_queues.values(),
        admitted=admitted,
        fair_sharing=fair_sharing,
    )


def pending_from_scratch(cache: Cache, now: float) -> dict[m.ClusterQueueName, list[m.Workload]]:
    """`Cache.pending_by_queue` before its per-version memo: every check on every call."""
    groups: dict[m.ClusterQueueName, list[m.Workload]] = {}
    for key in cache._waiting:
        wl = cache.workloads[key]
        if not cache.is_pending(wl, now):
            continue
        ew = cache.engine_workload(key)
        assert ew is not None
        lq = cache.local_queues.get(wls.key_of(wl.namespace, wl.spec.queue_name or ""))
        cq = lq.spec.cluster_queue if lq is not None else None
        known = cq and cq in cache.cluster_queues
        group = cq if known else f"{UNKNOWN_QUEUE_PREFIX}{ew.local_queue}"
        if cache.preemptors.get(group) == key:
            ew = replace(ew, sticky=True)
        groups.setdefault(m.ClusterQueueName(group), []).append(ew)
    return groups


def _local_queue(name: str, cq: str) -> LocalQueue:
    return LocalQueue.from_dict(
        {"metadata": {"name": name, "namespace": "ns"}, "spec": {"clusterQueue": cq}}
    )


def _cq(name: str, gpus: int, lend: int | None, stop: str = "None") -> Any:
    quota: dict[str, Any] = {"name": GPU, "nominalQuota": gpus}
    if lend is not None:
        quota["lendingLimit"] = lend
    return cluster_queue(
        name,
        cohortName="all",
        stopPolicy=stop,
        resourceGroups=[
            {
                "coveredResources": [GPU],
                "flavors": [
                    {"name": "rf", "resources": [quota]},
                    {"name": "rf2", "resources": [{"name": GPU, "nominalQuota": 2}]},
                ],
            }
        ],
    )


def _cache() -> Cache:
    cache = Cache()
    for f in ("rf", "rf2"):
        cache.set_flavor(ResourceFlavor.from_dict({"metadata": {"name": f}}))
    cache.set_cohort(Cohort.from_dict({"metadata": {"name": "all"}, "spec": {}}))
    for i, name in enumerate(QUEUES):
        cache.set_cluster_queue(_cq(name, 4 + i, 2))
        cache.set_local_queue(_local_queue(name, name))
    cache.set_namespace("ns", {"kubernetes.io/metadata.name": "ns"})
    return cache


def _workload(i: int, queue: str, pods: int) -> Workload:
    raw = workload_for(job(f"j{i}", pods=pods), priority=i % 3).to_dict()
    raw["spec"]["queueName"] = queue
    return Workload.from_dict(raw)


def _admit(wl: Workload, flavor: str) -> d.Admit:
    count = wl.spec.pod_sets[0].count
    return d.Admit(
        workload=m.WorkloadKey(wls.wl_key(wl)),
        cluster_queue=m.ClusterQueueName(wl.spec.queue_name or ""),
        pod_sets=(
            d.PodSetAdmission(
                name=m.PodSetName(wl.spec.pod_sets[0].name),
                count=count,
                flavors=((m.ResourceName(GPU), m.FlavorName(flavor)),),
                resource_usage=((m.ResourceName(GPU), count),),
            ),
        ),
        borrowing=False,
    )


def _with(wl: Workload, type_: str, *, status: bool = True) -> Workload:
    conds = wls.with_condition(
        wl.status.conditions or (),
        type_,
        status=status,
        reason="Test",
        message="test",
        now=sw.at(5),
    )
    return wl.model_copy(update={"status": wls.status_with(wl, conditions=conds)})


def _same_memo_same_workloads(a: Snapshot, b: Snapshot) -> None:
    """A queue's memo may be shared by two snapshots only if its workloads are the same."""
    for cq, memo in b.cq_memo.items():
        if a.cq_memo.get(cq) is memo:
            assert a.workloads_by_cq[cq] == b.workloads_by_cq[cq]
            for key in b.workloads_by_cq[cq]:
                assert a.admitted[key] is b.admitted[key]
                assert a.workload_usage[key] == b.workload_usage[key]


OPS = (
    "new",
    "admit",
    "assume",
    "forget",
    "mark",
    "unmark",
    "evicted",
    "release",
    "finish",
    "delete",
    "deactivate",
    "quota",
    "stop",
    "namespace",
    "backoff",
    "requeue",
    "repoint",
    "sticky",
    "fork",
)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_the_incremental_snapshot_equals_one_built_from_scratch(data: st.DataObject) -> None:
    cache = _cache()
    handed_out: list[tuple[Snapshot, Snapshot]] = []
    for step in range(data.draw(st.integers(1, 40))):
        op = data.draw(st.sampled_from(OPS))
        keys = sorted(cache.workloads)
        key = data.draw(st.sampled_from(keys)) if keys else None
        wl = cache.workloads[key] if key is not None else None
        flavor = data.draw(st.sampled_from(["rf", "rf2"]))
        if op == "new" or wl is None or key is None:
            queue = data.draw(st.sampled_from(QUEUES))
            cache.set_workload(_workload(step, queue, data.draw(st.integers(1, 4))))
        elif op == "admit":
            cache.set_workload(lc.applied(wl, lc.admit(_admit(wl, flavor), sw.at(1.0))))
        elif op == "assume":
            cache.assume(key, admission_of(_admit(wl, flavor)))
        elif op == "forget":
            cache.forget(key)
        elif op == "mark":
            cache.evicting.add(key)
        elif op == "unmark":
            cache.evicting.discard(key)
        elif op == "evicted":
            cache.set_workload(_with(wl, wls.EVICTED))
        elif op == "release":
            preempted = lc.evict("Preempted", "test", sw.at(2.0))
            cache.set_workload(sw.released(wl, preempted, 2.0, backoff=None))
        elif op == "finish":
            cache.set_workload(_with(wl, wls.FINISHED))
        elif op == "delete":
            cache.delete_workload(key)
        elif op == "deactivate":
            cache.set_workload(
                wl.model_copy(update={"spec": wl.spec.model_copy(update={"active": False})})
            )
        elif op in ("quota", "stop"):
            queue = data.draw(st.sampled_from(QUEUES))
            lend = data.draw(st.none() | st.integers(0, 3))
            stop = "HoldAndDrain" if op == "stop" else "None"
            cache.set_cluster_queue(_cq(queue, data.draw(st.integers(0, 8)), lend, stop))
        elif op == "namespace":
            cache.set_namespace("ns", {"kubernetes.io/metadata.name": "ns", "step": str(step)})
        elif op == "backoff":  # a PodsReady timeout: requeued after a backoff
            timeout = lc.pods_ready_timeout(sw.at(2.0))
            cache.set_workload(sw.released(wl, timeout, 2.0, backoff=(60.0, 3600.0)))
        elif op == "requeue":
            cache.set_workload(sw.backoff_finished(wl, 100.0))
        elif op == "repoint":  # a LocalQueue moves to another (maybe missing) ClusterQueue
            target = data.draw(st.sampled_from([*QUEUES, "missing"]))
            cache.set_local_queue(_local_queue(data.draw(st.sampled_from(QUEUES)), target))
        elif op == "sticky":
            cache.preempting(key, data.draw(st.sampled_from(QUEUES)))
        elif op == "fork":
            cache = cache.fork()  # a copy with the original's ledger: rebuilt, not shared
        if data.draw(st.booleans()):
            fair = data.draw(st.sampled_from([None, m.FairSharing()]))
            got = cache.snapshot(fair)
            want = from_scratch(cache, fair)
            assert got == want
            assert got.cq_memo.keys() == got.workloads_by_cq.keys()
            for earlier, _ in handed_out:
                _same_memo_same_workloads(earlier, got)
            handed_out.append((got, want))
        now = sw.EPOCH + data.draw(st.sampled_from([0.0, 30.0, 200.0, 1e6]))
        assert cache.pending_by_queue(now) == pending_from_scratch(cache, now)
    assert cache.snapshot() == from_scratch(cache)
    for got, want in handed_out:  # nothing the cache did later changed them
        assert got == want


def test_a_snapshot_is_reused_while_nothing_changes_and_not_after() -> None:
    cache = _cache()
    wl = _workload(1, "a", 2)
    cache.set_workload(wl)
    first = cache.snapshot()
    assert cache.snapshot() is first
    admitted = lc.applied(wl, lc.admit(_admit(wl, "rf"), sw.at(1.0)))
    cache.set_workload(admitted)
    second = cache.snapshot()
    assert second is not first
    assert not first.admitted
    assert second.base_usage[second.tree.cluster_queues[m.ClusterQueueName("a")]] == {
        (m.FlavorName("rf"), m.ResourceName(GPU)): 2
    }
    cache.evicting.add(wls.wl_key(admitted))  # the scheduler marks victims directly
    (victim,) = cache.snapshot().admitted.values()
    assert victim.evicted
    assert not next(iter(second.admitted.values())).evicted


def test_a_fork_gets_its_own_ledger() -> None:
    cache = _cache()
    wl = _workload(1, "a", 2)
    cache.set_workload(lc.applied(wl, lc.admit(_admit(wl, "rf"), sw.at(1.0))))
    cache.snapshot()
    copy = cache.fork()
    copy.delete_workload(wls.wl_key(wl))
    assert not copy.snapshot().admitted
    assert list(cache.snapshot().admitted) == [wls.wl_key(wl)]
