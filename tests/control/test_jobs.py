"""The Job reconciler on fakes: create, start, stop, release, finish, orphan, PodsReady."""

from __future__ import annotations

import datetime as dt

from prometheus_client import CollectorRegistry

from atoll.api.core import Job
from atoll.control.integrations import JobIntegration
from atoll.control.jobs import JobController, JobSettings, PodsReadySettings
from atoll.control.metrics import Metrics
from atoll.control.scheduler import Scheduler
from atoll.state import lifecycle as admission
from atoll.state import workloads as wls
from tests.control.builders import GPU, Clock, cache_with_queue, job, workload_for
from tests.control.fakes import FakeCluster

T0 = 1_796_000_000.0


def _setup(timeout: float = 60.0) -> tuple[JobController, FakeCluster, Clock]:
    cache = cache_with_queue()
    fake = FakeCluster()
    clock = Clock()
    settings = JobSettings(pods_ready=PodsReadySettings(timeout=timeout, backoff_base=10))
    ctl = JobController(cache, fake, fake, fake.emit, settings=settings, clock=clock)
    return ctl, fake, clock


def _sync(ctl: JobController, fake: FakeCluster) -> None:
    for j in fake.jobs.values():
        ctl.cache.set_job(j)
    for wl in fake.workloads.values():
        ctl.cache.set_workload(wl)


async def _admitted(
    ctl: JobController, fake: FakeCluster, name: str = "a", the_job: Job | None = None
) -> str:
    fake.jobs[f"ns/{name}"] = the_job or job(name)
    _sync(ctl, fake)
    await ctl.reconcile(f"ns/{name}")
    _sync(ctl, fake)
    sched = Scheduler(cache=ctl.cache, store=fake, emit=fake.emit, clock=ctl.clock)
    await sched.run_once()
    _sync(ctl, fake)
    (key,) = [k for k, w in fake.workloads.items() if w.metadata.owner_references[0].name == name]  # type: ignore[index]
    return key


async def test_a_labelled_job_gets_its_workload_and_stays_suspended() -> None:
    ctl, fake, _ = _setup()
    fake.jobs["ns/a"] = job("a")
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")
    (wl,) = fake.workloads.values()
    assert wl.name.startswith("job-a-")
    assert fake.jobs["ns/a"].spec.suspend is True
    assert ("Job/ns/a", "CreatedWorkload", f"Created Workload: ns/{wl.name}") in fake.events


async def test_a_running_labelled_job_without_workload_is_suspended_first() -> None:
    ctl, fake, _ = _setup()
    running = job("a", active=2)
    fake.jobs["ns/a"] = running.model_copy(
        update={"spec": running.spec.model_copy(update={"suspend": False})}
    )
    _sync(ctl, fake)
    again = await ctl.reconcile("ns/a")
    assert fake.jobs["ns/a"].spec.suspend is True
    assert fake.workloads == {}  # created only once no pod of it is active
    assert again == 1.0


async def test_a_job_found_running_unadmitted_is_counted_once_when_stopped() -> None:
    registry = CollectorRegistry()
    ctl, fake, _ = _setup()
    ctl.metrics = Metrics(registry)
    running = job("a", active=2)
    fake.jobs["ns/a"] = running.model_copy(
        update={"spec": running.spec.model_copy(update={"suspend": False})}
    )
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")  # already suspended: not counted again

    assert registry.get_sample_value("atoll_unadmitted_jobs_stopped_total") == 1
    assert registry.get_sample_value("atoll_unadmitted_pods_stopped_total") == 2


async def test_a_stop_the_watch_has_not_shown_yet_is_not_counted_twice() -> None:
    """The reconciler looks again a second after stopping an unadmitted Job; on a busy API
    server the watch may still show it running: it is stopped again, not counted again."""
    registry = CollectorRegistry()
    ctl, fake, _ = _setup()
    ctl.metrics = Metrics(registry)
    running = job("a", active=2)
    running = running.model_copy(
        update={"spec": running.spec.model_copy(update={"suspend": False})}
    )
    fake.jobs["ns/a"] = running
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")
    ctl.cache.set_job(running)  # the cache still has the Job as it was before the stop
    await ctl.reconcile("ns/a")
    assert registry.get_sample_value("atoll_unadmitted_jobs_stopped_total") == 1


async def test_an_admitted_workload_starts_its_job() -> None:
    ctl, fake, _ = _setup()
    await _admitted(ctl, fake)
    await ctl.reconcile("ns/a")
    assert [k for k, _ in fake.started] == ["ns/a"]
    assert fake.jobs["ns/a"].spec.suspend is False


async def test_eviction_stops_the_job_then_releases_quota_when_no_pod_is_active() -> None:
    ctl, fake, _ = _setup()
    key = await _admitted(ctl, fake)
    fake.workloads[key] = fake.workloads[key].model_copy(
        update={"status": admission.evict("Preempted", "by b", wls.dt_now())(fake.workloads[key])}
    )
    running = fake.jobs["ns/a"]
    fake.jobs["ns/a"] = running.model_copy(
        update={
            "spec": running.spec.model_copy(update={"suspend": False}),
            "status": running.status.model_copy(update={"active": 2}),
        }
    )
    _sync(ctl, fake)
    assert await ctl.reconcile("ns/a") == 1.0
    assert fake.stopped == ["ns/a"]
    assert wls.has_quota(fake.workloads[key])  # pods still active: quota kept
    stopped = fake.jobs["ns/a"]
    fake.jobs["ns/a"] = stopped.model_copy(
        update={"status": stopped.status.model_copy(update={"active": 0})}
    )
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")
    wl = fake.workloads[key]
    assert not wls.has_quota(wl)
    requeued = wls.condition(wl, wls.REQUEUED)
    assert requeued is not None
    assert requeued.status.value == "True"


async def test_finished_job_finishes_the_workload_and_drops_the_finalizer() -> None:
    ctl, fake, _ = _setup()
    key = await _admitted(ctl, fake)
    done = fake.jobs["ns/a"]
    fake.jobs["ns/a"] = done.model_copy(
        update={
            "status": done.status.model_copy(update={"conditions": (done.status.conditions or ())})
        }
    )
    raw = fake.jobs["ns/a"].to_dict()
    raw["status"]["conditions"] = [{"type": "Complete", "status": "True", "message": "done"}]
    fake.jobs["ns/a"] = Job.from_dict(raw)
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")
    wl = fake.workloads[key]
    assert wls.is_finished(wl)
    assert wls.condition(wl, wls.FINISHED).reason == "Succeeded"  # type: ignore[union-attr]
    assert not wl.metadata.finalizers


async def test_a_deleted_job_finishes_its_workload_as_orphaned() -> None:
    ctl, fake, _ = _setup()
    key = await _admitted(ctl, fake)
    ctl.cache.delete_job("ns/a")
    await ctl.reconcile("ns/a")
    wl = fake.workloads[key]
    assert wls.condition(wl, wls.FINISHED).reason == "OwnerNotFound"  # type: ignore[union-attr]
    assert not wl.metadata.finalizers


async def test_an_orphaned_workload_is_counted_finished_admitted_or_not() -> None:
    """Finished (OwnerNotFound) counts in `kueue_finished_workloads_total` as Kueue's
    `reportFinishedWorkload` does: by its ClusterQueue, or "" when it was never admitted."""
    registry = CollectorRegistry()
    ctl, fake, _ = _setup()
    ctl.metrics = Metrics(registry)
    await _admitted(ctl, fake)
    fake.jobs["ns/b"] = job("b", gpus=100)  # more than the queue has: stays pending
    _sync(ctl, fake)
    await ctl.reconcile("ns/b")
    _sync(ctl, fake)
    for name in ("a", "b"):
        ctl.cache.delete_job(f"ns/{name}")
        await ctl.reconcile(f"ns/{name}")
    assert all(wls.is_finished(wl) for wl in fake.workloads.values())

    def finished(cq: str) -> float | None:
        return registry.get_sample_value(
            "kueue_finished_workloads_total",
            {"cluster_queue": cq, "priority_class": "", "replica_role": "standalone"},
        )

    assert (finished("cq"), finished("")) == (1, 1)
    await ctl.reconcile("ns/a")  # already finished: not counted again
    assert finished("cq") == 1


async def test_pods_not_ready_in_time_evict_the_gang_with_backoff() -> None:
    ctl, fake, clock = _setup(timeout=30)
    key = await _admitted(ctl, fake)
    await ctl.reconcile("ns/a")  # starts the Job
    _sync(ctl, fake)
    wait = await ctl.reconcile("ns/a")
    assert wait is not None
    assert 0 < wait <= 30
    assert wls.condition(fake.workloads[key], wls.PODS_READY).reason == "WaitForStart"  # type: ignore[union-attr]
    clock.now += 31
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")
    evicted = wls.condition(fake.workloads[key], wls.EVICTED)
    assert evicted is not None
    assert evicted.reason == "PodsReadyTimeout"
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")  # stops the Job, no pod active: quota released with backoff
    wl = fake.workloads[key]
    assert not wls.has_quota(wl)
    assert wl.status.requeue_state is not None
    assert wl.status.requeue_state.count == 1
    assert wls.requeue_at(wl) == clock.now + 10
    assert wls.is_false(wl, wls.REQUEUED)


def _limited(name: str, seconds: int) -> Job:
    raw = job(name).to_dict()
    raw["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] = str(seconds)
    return Job.from_dict(raw)


async def test_maximum_execution_time_deactivates_then_evicts_with_the_cause() -> None:
    ctl, fake, clock = _setup(timeout=600)
    key = await _admitted(ctl, fake, the_job=_limited("a", 60))
    assert fake.workloads[key].spec.maximum_execution_time_seconds == 60
    await ctl.reconcile("ns/a")  # starts the Job
    _sync(ctl, fake)
    clock.now += 15
    wait = await ctl.reconcile("ns/a")
    assert wait == 45  # the budget left comes before the PodsReady timeout
    clock.now += 46
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")
    wl = fake.workloads[key]
    target = wls.condition(wl, wls.DEACTIVATION_TARGET)
    assert target is not None
    assert (target.reason, target.message) == (
        "MaximumExecutionTimeExceeded",
        "exceeding the maximum execution time",
    )
    assert wl.spec.active is False
    assert (
        f"Workload/{key}",
        "MaximumExecutionTimeExceeded",
        "The maximum execution time (60s) exceeded",
    ) in fake.events
    _sync(ctl, fake)
    sched = Scheduler(cache=ctl.cache, store=fake, emit=fake.emit, clock=clock)
    await sched.run_once()
    wl = fake.workloads[key]
    evicted = wls.condition(wl, wls.EVICTED)
    assert evicted is not None
    assert (evicted.reason, evicted.message) == (
        "DeactivatedDueToMaximumExecutionTimeExceeded",
        "The workload is deactivated due to exceeding the maximum execution time",
    )
    assert wls.condition(wl, wls.DEACTIVATION_TARGET) is None


async def test_time_admitted_accumulates_across_evictions() -> None:
    ctl, fake, clock = _setup(timeout=600)
    key = await _admitted(ctl, fake, the_job=_limited("a", 60))
    await ctl.reconcile("ns/a")
    clock.now += 20
    at = dt.datetime.fromtimestamp(clock.now, dt.UTC)
    fake.workloads[key] = fake.workloads[key].model_copy(
        update={"status": admission.evict("Preempted", "by b", at)(fake.workloads[key])}
    )
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")  # stops the Job; no pod is active: quota released
    wl = fake.workloads[key]
    assert not wls.has_quota(wl)
    assert wl.status.accumulated_past_execution_time_seconds == 20
    assert wl.spec.active is True


def _with_status(j: Job, **status: object) -> Job:
    return j.model_copy(update={"status": j.status.model_copy(update=status)})


async def test_pods_done_for_good_give_their_quota_back_while_the_job_runs() -> None:
    # Kueue's reclaimable pods: a (4 pods × 2 GPUs) fills the 8-GPU queue and b (2 × 2)
    # waits; when 2 of a's pods succeeded, only 2 are left to run: 4 GPUs go back and b
    # is admitted beside a, which keeps running
    ctl, fake, _ = _setup()
    a = await _admitted(ctl, fake, "a", job("a", pods=4, gpus=2))
    await ctl.reconcile("ns/a")
    fake.jobs["ns/b"] = job("b", pods=2, gpus=2)
    _sync(ctl, fake)
    await ctl.reconcile("ns/b")
    _sync(ctl, fake)
    sched = Scheduler(cache=ctl.cache, store=fake, emit=fake.emit, clock=ctl.clock)
    await sched.run_once()
    (b,) = [k for k in fake.workloads if k != a]
    assert not wls.has_quota(fake.workloads[b])

    fake.jobs["ns/a"] = _with_status(fake.jobs["ns/a"], active=2, succeeded=2)
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")
    reclaimable = fake.workloads[a].status.reclaimable_pods
    assert [(p.name, p.count) for p in reclaimable or ()] == [("main", 2)]
    _sync(ctl, fake)
    await sched.run_once()
    assert wls.has_quota(fake.workloads[b])
    assert wls.has_quota(fake.workloads[a])
    assert not wls.is_finished(fake.workloads[a])

    version = fake.workloads[a].metadata.resource_version
    await ctl.reconcile("ns/a")  # unchanged: nothing more to write
    assert fake.workloads[a].metadata.resource_version == version


async def test_a_requeued_job_asks_only_for_the_pods_it_has_left() -> None:
    # Kueue's podSetsCountsAfterReclaim: a (4 pods x 2 GPUs) ran 2 pods to success and was
    # preempted; c (2 x 2) came meanwhile. Requeued, a asks for its 2 pods left (4 GPUs),
    # not 8, so both fit the 8-GPU queue; a runs again with its own parallelism, matched.
    ctl, fake, _ = _setup()
    a = await _admitted(ctl, fake, "a", job("a", pods=4, gpus=2))
    await ctl.reconcile("ns/a")
    fake.jobs["ns/a"] = _with_status(fake.jobs["ns/a"], active=2, succeeded=2)
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")
    assert wls.reclaimable_counts(fake.workloads[a].status.reclaimable_pods) == {"main": 2}
    fake.workloads[a] = fake.workloads[a].model_copy(
        update={"status": admission.evict("Preempted", "by c", wls.dt_now())(fake.workloads[a])}
    )
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")  # stops the Job
    fake.jobs["ns/a"] = _with_status(fake.jobs["ns/a"], active=0)
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")  # no pod active: the quota goes back
    assert not wls.has_quota(fake.workloads[a])
    engine_form = ctl.cache.engine_workload(a)
    assert engine_form is not None
    assert [ps.count for ps in engine_form.pod_sets] == [2]

    c = await _admitted(ctl, fake, "c", job("c", pods=2, gpus=2))  # a is older: first
    await Scheduler(cache=ctl.cache, store=fake, emit=fake.emit, clock=ctl.clock).run_once()
    assert wls.has_quota(fake.workloads[c])
    adm = fake.workloads[a].status.admission
    assert adm is not None  # 4 + 4 GPUs: a was admitted beside c for its 2 pods left
    (assignment,) = adm.pod_set_assignments
    assert assignment.count == 2
    assert assignment.resource_usage is not None
    assert str(assignment.resource_usage[GPU]) == "4"
    started = len(fake.started)
    await ctl.reconcile("ns/a")
    assert len(fake.started) == started + 1
    assert fake.started[-1][1].parallelism is None  # not a partial admission: kept
    stopped = len(fake.stopped)
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")  # its Job matches its Workload: not stopped again
    assert len(fake.stopped) == stopped
    assert wls.has_quota(fake.workloads[a])
    # PodsReady counts the Job's own 4 pods (Kueue's podsCount), not the 2 admitted: its 2
    # succeeded ones and 2 ready
    jobs = JobIntegration(fake)
    assert not jobs.ready(_with_status(fake.jobs["ns/a"], ready=1), fake.workloads[a])
    assert jobs.ready(_with_status(fake.jobs["ns/a"], ready=2), fake.workloads[a])


def test_a_partially_admitted_jobs_pods_ready_counts_the_parallelism_it_was_given() -> None:
    # a partial admission sets the Job's parallelism to the admitted count: 2 of 4
    j = job("p", pods=4)
    wl = workload_for(j)
    cut = j.model_copy(update={"spec": j.spec.model_copy(update={"parallelism": 2})})
    jobs = JobIntegration(FakeCluster())
    assert not jobs.ready(_with_status(cut, ready=1), wl)
    assert jobs.ready(_with_status(cut, ready=2), wl)


async def test_a_job_whose_remaining_pods_fill_its_parallelism_reclaims_nothing() -> None:
    ctl, fake, _ = _setup()
    j = job("a", pods=2, gpus=2)
    j = j.model_copy(update={"spec": j.spec.model_copy(update={"completions": 6})})
    a = await _admitted(ctl, fake, "a", j)
    await ctl.reconcile("ns/a")
    fake.jobs["ns/a"] = _with_status(fake.jobs["ns/a"], active=2, succeeded=4)
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")  # 2 left to run on 2 slots
    assert fake.workloads[a].status.reclaimable_pods is None
    fake.jobs["ns/a"] = _with_status(fake.jobs["ns/a"], active=1, succeeded=5)
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")  # 1 left: one slot is free for good
    assert [(p.name, p.count) for p in fake.workloads[a].status.reclaimable_pods or ()] == [
        ("main", 1)
    ]


async def test_pods_seen_succeeded_are_reclaimed_before_the_jobs_status_counts_them() -> None:
    ctl, fake, _ = _setup()
    a = await _admitted(ctl, fake, "a", job("a", pods=4, gpus=2))
    await ctl.reconcile("ns/a")
    uid = fake.jobs["ns/a"].metadata.uid or ""
    assert ctl.cache.pod_succeeded(uid, "a-0", None)
    assert not ctl.cache.pod_succeeded(uid, "a-0", None)  # seen once
    assert ctl.cache.pod_succeeded(uid, "a-1", None)
    await ctl.reconcile("ns/a")  # the Job's status still counts none
    assert wls.reclaimable_counts(fake.workloads[a].status.reclaimable_pods) == {"main": 2}
    ctl.cache.delete_job("ns/a")
    assert uid not in ctl.cache.succeeded_pods
