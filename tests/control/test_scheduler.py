"""The scheduling loop on a fake API server: assume before writing, forget on failure, write
Kueue's conditions, preempt whole workloads, never rewrite an unchanged pending status."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt

import pytest
from prometheus_client import CollectorRegistry

from atoll.api.localqueue import LocalQueue
from atoll.api.workload import Workload, WorkloadStatus
from atoll.control.explain import explain
from atoll.control.metrics import Metrics
from atoll.control.scheduler import PENDING_DEFER_MAX, Scheduler
from atoll.engine import decisions as d
from atoll.engine import model as m
from atoll.state import workloads as wls
from atoll.state.lifecycle import without_reservation
from tests.control.builders import cache_with_queue, cluster_queue, job, workload_for
from tests.control.fakes import FakeCluster

NOW = 1_796_000_000.0
BACKFILL = {"atoll.dev/backfill": "true"}


def _setup(gpus: int = 8, **cq: object) -> tuple[Scheduler, FakeCluster]:
    cache = cache_with_queue(gpus, **cq)
    fake = FakeCluster()
    sched = Scheduler(cache=cache, store=fake, emit=fake.emit, clock=lambda: NOW)
    return sched, fake


async def _add(sched: Scheduler, fake: FakeCluster, name: str, **kw: object) -> str:
    pods = int(kw.pop("pods", 2))  # type: ignore[call-overload]
    wl = workload_for(job(name, pods=pods), **kw)  # type: ignore[arg-type]
    created = await fake.create_workload(wl)
    sched.cache.set_workload(created)
    return wls.wl_key(created)


async def test_admission_writes_quota_reserved_admitted_and_the_admission() -> None:
    sched, fake = _setup()
    key = await _add(sched, fake, "a", pods=4)
    result = await sched.run_once()
    assert result.admitted == 1
    wl = fake.workloads[key]
    assert wls.is_admitted(wl)
    assert wl.status.admission is not None
    (ps,) = wl.status.admission.pod_set_assignments
    assert ps.count == 4
    assert ps.flavors == {"nvidia.com/gpu": "rf"}
    reasons = [e[1] for e in fake.events]
    assert reasons == ["QuotaReserved", "Admitted"]


async def test_second_gang_that_does_not_fit_waits_whole_with_numbers() -> None:
    sched, fake = _setup(gpus=8)
    first = await _add(sched, fake, "a", pods=6)
    second = await _add(sched, fake, "b", pods=4)
    await sched.run_once()
    await sched.run_once()
    assert wls.is_admitted(fake.workloads[first])
    b = fake.workloads[second]
    assert not wls.has_quota(b)
    cond = wls.condition(b, wls.QUOTA_RESERVED)
    assert cond is not None
    assert cond.reason == "Pending"
    assert "insufficient unused quota for nvidia.com/gpu" in cond.message


async def test_a_pending_workload_gets_kueues_reason_and_explain_keeps_atolls() -> None:
    """The condition and the Warning Event say Kueue's `Pending` with the engine's message;
    `atoll explain` still gives the engine's finer reason (WaitingForQuota)."""
    sched, fake = _setup(gpus=8)
    await _add(sched, fake, "a", pods=6)
    await sched.run_once()
    second = await _add(sched, fake, "b", pods=4)
    await sched.run_once()
    cond = wls.condition(fake.workloads[second], wls.QUOTA_RESERVED)
    assert cond is not None
    assert (cond.status.value, cond.reason) == ("False", "Pending")
    assert "insufficient unused quota for nvidia.com/gpu in flavor rf" in cond.message
    assert fake.warnings == [(f"Workload/{second}", "Pending", cond.message)]
    ex = explain(sched.cache, second, NOW)
    assert ex.condition == ("Pending", cond.message)
    assert isinstance(ex.decision, d.Pending)
    assert ex.decision.reason is d.PendingReason.WAITING_FOR_QUOTA
    assert f"pending, WaitingForQuota: {cond.message}" in ex.describe()


async def test_a_workload_of_a_missing_local_queue_is_inadmissible() -> None:
    """Kueue's workload controller writes `Inadmissible` for a missing LocalQueue."""
    sched, fake = _setup()
    raw = workload_for(job("lost", pods=1)).to_dict()
    raw["spec"]["queueName"] = "nowhere"
    created = await fake.create_workload(Workload.from_dict(raw))
    sched.cache.set_workload(created)
    key = wls.wl_key(created)
    await sched.run_once()
    cond = wls.condition(fake.workloads[key], wls.QUOTA_RESERVED)
    assert cond is not None
    assert (cond.reason, cond.message) == ("Inadmissible", "LocalQueue nowhere doesn't exist")
    assert fake.warnings == [(f"Workload/{key}", "Inadmissible", cond.message)]


async def test_an_unchanged_pending_status_is_not_rewritten() -> None:
    sched, fake = _setup(gpus=1)
    key = await _add(sched, fake, "big", pods=4)
    await sched.run_once()
    version = fake.workloads[key].metadata.resource_version
    sched.cache.bump()  # something changed: the workload is tried again
    await sched.run_once()
    assert fake.workloads[key].metadata.resource_version == version


async def test_a_failed_status_write_forgets_the_assumption() -> None:
    sched, fake = _setup()
    key = await _add(sched, fake, "a", pods=4)
    fake.fail_status_writes = True
    result = await sched.run_once()
    assert result.failed_writes == 1
    assert key not in sched.cache.assumed
    fake.fail_status_writes = False
    await sched.run_once()
    assert wls.is_admitted(fake.workloads[key])


async def test_assumed_quota_counts_before_the_status_is_observed() -> None:
    sched, fake = _setup(gpus=4)
    a = await _add(sched, fake, "a", pods=4)
    decisions = sched.decide()  # decided and assumed, nothing written yet
    assert a in sched.cache.assumed
    b = await _add(sched, fake, "b", pods=4)
    second = sched.decide()
    assert [type(d).__name__ for d in decisions] == ["Admit"]
    assert all(getattr(d, "workload", None) != b or type(d).__name__ == "Pending" for d in second)


async def test_higher_priority_preempts_a_whole_lower_priority_gang() -> None:
    sched, fake = _setup(gpus=4, preemption={"withinClusterQueue": "LowerPriority"})
    low = await _add(sched, fake, "low", pods=4, priority=1)
    await sched.run_once()
    high = await _add(sched, fake, "high", pods=2, priority=100)
    result = await sched.run_once()
    assert result.preempted == 1
    victim = fake.workloads[low]
    evicted = wls.condition(victim, wls.EVICTED)
    preempted = wls.condition(victim, wls.PREEMPTED)
    assert evicted is not None
    assert evicted.reason == "Preempted"
    assert preempted is not None
    assert preempted.reason == "InClusterQueue"
    assert wls.has_quota(victim)  # quota is released by the Job side, when pods are gone
    waiting = wls.condition(fake.workloads[high], wls.QUOTA_RESERVED)
    assert waiting is not None
    assert waiting.reason == "Pending"
    assert waiting.message.endswith("Pending the preemption of 1 workload(s)")


@pytest.mark.parametrize("strategy", ["StrictFIFO", "BestEffortFIFO"])
async def test_inadmissible_heads_are_parked_only_under_best_effort(strategy: str) -> None:
    sched, fake = _setup(gpus=2, queueingStrategy=strategy)
    key = await _add(sched, fake, "big", pods=4)
    await sched.run_once()
    parked = key in sched.cache.parked_keys()
    assert parked is (strategy == "BestEffortFIFO")


async def test_a_reclaiming_preemptor_is_admitted_before_its_victim_returns() -> None:
    # cq and other (4 GPUs each) share a cohort; other's v borrows cq's quota. In cq, big
    # (6 GPUs) can't get in even by reclaiming v; small (4 GPUs) reclaims v. When v's quota
    # is released, big is unparked, but small keeps the head of cq and gets the quota: v,
    # requeued, does not take it back (which would have small reclaim it again, forever).
    sched, fake = _setup(4, cohortName="co", preemption={"reclaimWithinCohort": "Any"})
    sched.cache.set_cluster_queue(cluster_queue("other", 4, cohortName="co"))
    sched.cache.set_local_queue(
        LocalQueue.from_dict(
            {"metadata": {"name": "lq2", "namespace": "ns"}, "spec": {"clusterQueue": "other"}}
        )
    )

    async def add(name: str, pods: int, queue: str, created: str) -> str:
        raw = workload_for(job(name, pods=pods), created=created).to_dict()
        raw["spec"]["queueName"] = queue
        created_wl = await fake.create_workload(Workload.from_dict(raw))
        sched.cache.set_workload(created_wl)
        return wls.wl_key(created_wl)

    await add("w", 4, "lq2", "2026-12-01T00:00:00Z")
    await sched.run_once()
    v = await add("v", 4, "lq2", "2026-12-01T00:00:01Z")  # its uid sorts first: reclaimed
    await sched.run_once()
    assert wls.is_admitted(fake.workloads[v])  # borrowing cq's idle quota
    big = await add("big", 6, "lq", "2026-12-01T00:00:02Z")
    await sched.run_once()
    assert big in sched.cache.parked_keys()
    small = await add("small", 4, "lq", "2026-12-01T00:00:03Z")
    result = await sched.run_once()
    assert result.preempted == 1
    assert wls.condition(fake.workloads[v], wls.EVICTED) is not None

    def release(w: Workload) -> WorkloadStatus:  # what the Job side does once pods are gone
        at = dt.datetime.fromtimestamp(NOW, dt.UTC)
        conds = without_reservation(w.status.conditions or (), "Pending", "", at)
        conds = wls.with_condition(
            conds, wls.REQUEUED, status=True, reason="Preempted", message="", now=at
        )
        return wls.status_with(w, conditions=conds, admission=None)

    released = await fake.update_workload_status(v, release)
    assert released is not None
    sched.cache.set_workload(released)
    assert sched.cache.requeue_requested  # big is woken by the next step's requeue
    await sched.run_once()
    await sched.run_once()
    assert wls.is_admitted(fake.workloads[small])
    assert not wls.has_quota(fake.workloads[v])


def _forged(wl: Workload, template: Workload, *, cluster_queue: str, at: str) -> Workload:
    """`wl` carrying `template`'s admission, as written by someone else at `at`."""
    status = template.status.model_dump(by_alias=True, exclude_none=True, mode="json")
    status["admission"]["clusterQueue"] = cluster_queue
    for c in status["conditions"]:
        c["lastTransitionTime"] = at
    return Workload.from_dict(wl.to_dict() | {"status": status})


@pytest.mark.parametrize(
    ("cluster_queue", "reason"),
    [
        pytest.param("cq", "AdmissionExceedsQuota", id="over-quota"),
        pytest.param("ghost", "ClusterQueueDoesNotExist", id="missing-cluster-queue"),
    ],
)
async def test_untrusted_admissions_read_at_start_are_evicted_with_a_warning(
    cluster_queue: str, reason: str
) -> None:
    sched, fake = _setup(gpus=8)
    honest = await _add(sched, fake, "a", pods=8)
    await sched.run_once()
    sched.cache.set_workload(fake.workloads[honest])
    other = await _add(sched, fake, "b", pods=8)
    forged = _forged(
        fake.workloads[other],
        fake.workloads[honest],
        cluster_queue=cluster_queue,
        at="2026-12-02T00:00:00Z",
    )
    fake.workloads[other] = forged
    sched.cache.set_workload(forged)

    assert await sched.evict_untrusted() == 1

    assert wls.is_evicted(fake.workloads[other])
    assert wls.condition(fake.workloads[other], wls.EVICTED).reason == reason  # type: ignore[union-attr]
    assert not wls.is_evicted(fake.workloads[honest])
    ((where, _, _),) = [e for e in fake.events if e[1] == reason]
    assert where == f"Workload/{other}"


async def test_backfill_reservation_is_told_evented_and_measured() -> None:
    """A backfill queue: the 8-GPU head waits behind a 6-GPU Job that ends for sure in
    10 min; a 2-GPU Job without a limit would hold GPUs the head needs then: refused."""
    registry = CollectorRegistry()
    cache = cache_with_queue(8)
    cq = cluster_queue(gpus=8)
    cache.set_cluster_queue(
        cq.model_copy(update={"metadata": cq.metadata.model_copy(update={"annotations": BACKFILL})})
    )
    fake = FakeCluster()
    sched = Scheduler(
        cache=cache, store=fake, emit=fake.emit, clock=lambda: NOW, metrics=Metrics(registry)
    )
    running = job("running", pods=6)
    labels = {**(running.metadata.labels or {}), "kueue.x-k8s.io/max-exec-time-seconds": "600"}
    running = running.model_copy(
        update={"metadata": running.metadata.model_copy(update={"labels": labels})}
    )
    cache.set_job(running)
    created = await fake.create_workload(workload_for(running))
    cache.set_workload(created)
    assert (await sched.run_once()).admitted == 1
    big = await _add(sched, fake, "big", pods=8)
    small = await _add(sched, fake, "small", pods=2)
    for _ in range(3):
        await sched.run_once()
    cond = wls.condition(fake.workloads[big], wls.QUOTA_RESERVED)
    assert cond is not None
    assert "reserved 8 nvidia.com/gpu in rf from " in cond.message
    assert ", in 10m" in cond.message
    refused = wls.condition(fake.workloads[small], wls.QUOTA_RESERVED)
    assert refused is not None
    assert "reserved for ns/" in refused.message
    assert "no guaranteed end" in refused.message
    made = [e for e in fake.events if e[1] == "ReservationMade"]
    assert len(made) == 1
    assert made[0][0].endswith(big.split("/")[1])
    labels_cq = {"cluster_queue": "cq", "flavor": "rf", "resource": "nvidia.com/gpu"}
    assert registry.get_sample_value("atoll_backfill_reserved_quota", labels_cq) == 8
    start = registry.get_sample_value(
        "atoll_backfill_reservation_start_seconds", {"cluster_queue": "cq"}
    )
    assert start == NOW + 600 + 15


class _Gate:
    """`Scheduler.defer_pending` for tests: the API budget is spare once `open` is set."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.waits = 0

    async def __call__(self) -> None:
        self.waits += 1
        await self.open.wait()


async def _drained(sched: Scheduler) -> None:
    """Let `write_pending` write what it can, then stop it."""
    writer = asyncio.create_task(sched.write_pending())
    for _ in range(20):
        await asyncio.sleep(0)
    writer.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await writer


async def test_deferred_pending_statuses_wait_for_spare_budget() -> None:
    sched, fake = _setup(gpus=8)
    gate = _Gate()
    sched.defer_pending = gate
    first = await _add(sched, fake, "a", pods=6)
    second = await _add(sched, fake, "b", pods=4)
    await sched.run_once()
    await sched.run_once()
    assert wls.is_admitted(fake.workloads[first])
    assert wls.condition(fake.workloads[second], wls.QUOTA_RESERVED) is None  # not yet
    await _drained(sched)
    assert gate.waits == 1
    assert wls.condition(fake.workloads[second], wls.QUOTA_RESERVED) is None  # no budget
    gate.open.set()
    await _drained(sched)
    cond = wls.condition(fake.workloads[second], wls.QUOTA_RESERVED)
    assert cond is not None
    assert cond.reason == "Pending"
    assert "insufficient unused quota for nvidia.com/gpu" in cond.message


async def test_a_deferred_pending_status_is_dropped_once_the_workload_is_admitted() -> None:
    sched, fake = _setup(gpus=8)
    sched.defer_pending = _Gate()  # never spare
    first = await _add(sched, fake, "a", pods=6)
    second = await _add(sched, fake, "b", pods=4)
    await sched.run_once()
    await sched.run_once()  # b told it waits: deferred
    sched.cache.delete_workload(first)
    del fake.workloads[first]
    sched.cache.requeue_due(NOW)
    result = await sched.run_once()
    while not result.admitted:  # the batched requeue: the next cycles wake b
        sched.clock = lambda: NOW + 2  # type: ignore[method-assign]
        result = await sched.run_once()
    assert wls.is_admitted(fake.workloads[second])
    sched.defer_pending = _open_gate
    await _drained(sched)
    assert wls.is_admitted(fake.workloads[second])  # the pending status was dropped
    assert not [e for e in fake.events if e[1] == "Pending"]


async def test_a_pending_status_deferred_too_long_is_written_without_spare_budget() -> None:
    sched, fake = _setup(gpus=8)
    gate = _Gate()
    sched.defer_pending = gate
    await _add(sched, fake, "a", pods=6)
    second = await _add(sched, fake, "b", pods=4)
    await sched.run_once()
    await sched.run_once()
    sched.clock = lambda: NOW + PENDING_DEFER_MAX  # type: ignore[method-assign]
    await _drained(sched)
    assert gate.waits == 0
    assert wls.condition(fake.workloads[second], wls.QUOTA_RESERVED) is not None


async def _open_gate() -> None:
    return None


def test_a_newer_pending_decision_replaces_the_deferred_one_and_keeps_its_age() -> None:
    sched, _ = _setup()
    sched.defer_pending = _open_gate
    key, cq = m.WorkloadKey("ns/b"), m.ClusterQueueName("cq")
    why, requeue = d.PendingReason.WAITING_FOR_QUOTA, d.Requeue.IMMEDIATE
    old = d.Pending(workload=key, cluster_queue=cq, reason=why, message="old", requeue=requeue)
    new = d.Pending(workload=key, cluster_queue=cq, reason=why, message="new", requeue=requeue)
    t0 = dt.datetime.fromtimestamp(NOW, dt.UTC)
    sched._defer(old, t0)
    sched.clock = lambda: NOW + 3  # type: ignore[method-assign]
    sched._defer(new, t0 + dt.timedelta(seconds=3))
    assert sched._deferred == {"ns/b": (new, t0 + dt.timedelta(seconds=3), NOW)}
