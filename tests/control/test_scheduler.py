"""The scheduling loop on a fake API server: assume before writing, forget on failure, write
Kueue's conditions, preempt whole workloads, never rewrite an unchanged pending status."""

from __future__ import annotations

import pytest

from atoll.control.scheduler import Scheduler
from atoll.state import workloads as wls
from tests.control.builders import cache_with_queue, job, workload_for
from tests.control.fakes import FakeCluster

NOW = 1_796_000_000.0


def _setup(gpus: int = 8, **cq: object) -> tuple[Scheduler, FakeCluster]:
    cache = cache_with_queue(gpus, **cq)  # type: ignore[arg-type]
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
    assert cond.reason == "WaitingForQuota"
    assert "nvidia.com/gpu" in cond.message


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
    assert waiting.reason == "WaitingForPreemptedWorkloads"


@pytest.mark.parametrize("strategy", ["StrictFIFO", "BestEffortFIFO"])
async def test_inadmissible_heads_are_parked_only_under_best_effort(strategy: str) -> None:
    sched, fake = _setup(gpus=2, queueingStrategy=strategy)
    key = await _add(sched, fake, "big", pods=4)
    await sched.run_once()
    parked = key in sched.cache.parked_keys()
    assert parked is (strategy == "BestEffortFIFO")
