"""Admission checks on fakes, with the scheduler and the Job reconciler: a ClusterQueue that
names a check reserves quota and waits for the check's controller; Ready admits and starts
the Job with the check's podSetUpdates, Retry evicts and requeues (after its
requeueAfterSeconds), Rejected deactivates. A check that is missing or not Active keeps the
ClusterQueue from admitting anything."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from atoll.api.admissioncheck import AdmissionCheck, CheckState
from atoll.api.core import Job
from atoll.api.workload import AdmissionCheckState, PodSetUpdate, Workload
from atoll.control.jobs import JobController, JobSettings
from atoll.control.metrics import Metrics
from atoll.control.queue_status import tally
from atoll.control.scheduler import Scheduler
from atoll.state import lifecycle as lc
from atoll.state import workloads as wls
from tests.control.builders import (
    Clock,
    admission_check,
    cache_with_queue,
    cluster_queue,
    gpu_admit,
    job,
    workload_for,
)
from tests.control.fakes import FakeCluster

T0 = 1_796_000_000.0
STRATEGY = {"admissionChecksStrategy": {"admissionChecks": [{"name": "prov"}]}}


def _setup(**cq_spec: Any) -> tuple[JobController, Scheduler, FakeCluster, Clock]:
    cache = cache_with_queue(**(cq_spec or STRATEGY))
    cache.set_admission_check(admission_check())
    fake = FakeCluster()
    clock = Clock()
    ctl = JobController(cache, fake, fake, fake.emit, settings=JobSettings(), clock=clock)
    sched = Scheduler(cache=cache, store=fake, emit=fake.emit, clock=clock)
    return ctl, sched, fake, clock


def _sync(ctl: JobController, fake: FakeCluster) -> None:
    for j in fake.jobs.values():
        ctl.cache.set_job(j)
    for wl in fake.workloads.values():
        ctl.cache.set_workload(wl)


async def _reserved(ctl: JobController, sched: Scheduler, fake: FakeCluster) -> str:
    fake.jobs["ns/a"] = job("a")
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")
    _sync(ctl, fake)
    await sched.run_once()
    _sync(ctl, fake)
    (key,) = fake.workloads
    return key


def _set_check(
    fake: FakeCluster,
    key: str,
    state: CheckState,
    at: float,
    *,
    updates: tuple[PodSetUpdate, ...] = (),
    requeue_after: int | None = None,
) -> None:
    """What the check's controller writes."""
    wl = fake.workloads[key]
    check = AdmissionCheckState(
        name="prov",
        state=state,
        last_transition_time=dt.datetime.fromtimestamp(at, dt.UTC),
        message=f"the provisioner says {state.value}",
        pod_set_updates=updates or None,
        requeue_after_seconds=requeue_after,
    )
    status = wls.status_with(wl, admission_checks=(check,))
    fake.workloads[key] = wl.model_copy(update={"status": status})


async def _after_check(ctl: JobController, sched: Scheduler, fake: FakeCluster) -> None:
    """The Workload event that follows a check's write: the scheduler looks at the checks,
    then the Job reconciler at the Workload it wrote."""
    _sync(ctl, fake)
    await sched.run_once()
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")
    _sync(ctl, fake)


def _checks(wl: Workload) -> list[tuple[str, str]]:
    return [(s.name, s.state.value) for s in wl.status.admission_checks or ()]


async def test_quota_is_reserved_and_the_job_waits_for_its_checks() -> None:
    ctl, sched, fake, _ = _setup()
    key = await _reserved(ctl, sched, fake)
    wl = fake.workloads[key]
    assert wls.has_quota(wl)
    assert not wls.is_admitted(wl)
    admitted = wls.condition(wl, wls.ADMITTED)
    assert admitted is not None
    assert (admitted.reason, admitted.message) == (
        "UnsatisfiedChecks",
        "The workload has not all checks ready",
    )
    assert _checks(wl) == [("prov", "Pending")]
    await ctl.reconcile("ns/a")
    assert fake.started == []
    assert fake.jobs["ns/a"].spec.suspend is True
    reasons = [r for o, r, _ in fake.events if o == f"Workload/{key}"]
    assert "QuotaReserved" in reasons
    assert "Admitted" not in reasons


async def test_a_ready_check_admits_the_workload_and_its_updates_reach_the_job() -> None:
    ctl, sched, fake, clock = _setup()
    registry = CollectorRegistry()
    ctl.metrics = sched.metrics = Metrics(registry)
    key = await _reserved(ctl, sched, fake)
    admitted = {"cluster_queue": "cq", "priority_class": "", "replica_role": "standalone"}
    assert registry.get_sample_value("kueue_admitted_workloads_total", admitted) is None
    clock.now += 30
    update = PodSetUpdate.model_validate(
        {
            "name": "main",
            "labels": {"provisioned": "yes"},
            "annotations": {"example.com/request": "r-1"},
            "nodeSelector": {"pool": "new"},
            "tolerations": [{"key": "new-pool", "operator": "Exists", "effect": "NoSchedule"}],
        }
    )
    _set_check(fake, key, CheckState.READY, clock.now, updates=(update,))
    await _after_check(ctl, sched, fake)
    wl = fake.workloads[key]
    assert wls.is_admitted(wl)
    (started,) = fake.started
    assert started[0] == "ns/a"
    plan = started[1]
    assert plan.labels["provisioned"] == "yes"
    assert plan.annotations["example.com/request"] == "r-1"
    assert plan.node_selector["pool"] == "new"
    assert [t.key for t in plan.tolerations] == ["new-pool"]
    assert (
        f"Workload/{key}",
        "Admitted",
        "Admitted by ClusterQueue cq, wait time since reservation was 30s",
    ) in fake.events
    assert registry.get_sample_value("kueue_admitted_workloads_total", admitted) == 1
    checks_wait = "kueue_admission_checks_wait_time_seconds_sum"
    assert registry.get_sample_value(checks_wait, admitted) == pytest.approx(30)


async def test_a_retry_evicts_releases_and_requeues_after_its_delay() -> None:
    ctl, sched, fake, clock = _setup()
    key = await _reserved(ctl, sched, fake)
    _set_check(fake, key, CheckState.RETRY, clock.now, requeue_after=60)
    _sync(ctl, fake)
    await sched.admission_checks()
    wl = fake.workloads[key]
    evicted = wls.condition(wl, wls.EVICTED)
    assert evicted is not None
    assert (evicted.reason, evicted.message) == (
        "AdmissionCheck",
        "At least one admission check is false",
    )
    (state,) = wl.status.admission_checks or ()
    assert (state.state, state.retry_count) == (CheckState.PENDING, 1)
    assert state.message == "Reset to Pending after eviction. Previously: Retry"
    _sync(ctl, fake)
    wait = await ctl.reconcile("ns/a")  # no pod active: the quota goes back
    wl = fake.workloads[key]
    assert not wls.has_quota(wl)
    assert wls.is_false(wl, wls.REQUEUED)
    admitted = wls.condition(wl, wls.ADMITTED)
    assert admitted is not None
    assert admitted.reason == "NoReservationUnsatisfiedChecks"  # Kueue's, checks Pending
    evicted_at = wls.condition(wl, wls.EVICTED).last_transition_time.timestamp()  # type: ignore[union-attr]
    assert wls.queue_order_time(wl) == evicted_at  # queued again by its eviction, as Kueue
    _sync(ctl, fake)
    wait = await ctl.reconcile("ns/a")
    assert wait == pytest.approx(60)  # the check's requeueAfterSeconds
    clock.now += 61
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")
    assert wls.is_true(fake.workloads[key], wls.REQUEUED)
    _sync(ctl, fake)
    await sched.run_once()  # reserved again, the check Pending again
    wl = fake.workloads[key]
    assert wls.has_quota(wl)
    assert _checks(wl) == [("prov", "Pending")]


async def test_a_rejected_check_deactivates_the_workload() -> None:
    ctl, sched, fake, clock = _setup()
    key = await _reserved(ctl, sched, fake)
    _set_check(fake, key, CheckState.REJECTED, clock.now)
    _sync(ctl, fake)
    await sched.admission_checks()
    wl = fake.workloads[key]
    assert wl.spec.active is False
    target = wls.condition(wl, wls.DEACTIVATION_TARGET)
    assert target is not None
    assert (target.reason, target.message) == (
        "AdmissionCheck",
        "Admission check(s): prov, were rejected",
    )
    assert (
        "AdmissionCheckRejected",
        "Deactivating workload because AdmissionCheck for prov was Rejected: "
        "the provisioner says Rejected",
    ) in [(r, m) for _, r, m in fake.warnings]
    _sync(ctl, fake)
    await sched.run_once()  # the scheduler evicts the deactivated Workload
    evicted = wls.condition(fake.workloads[key], wls.EVICTED)
    assert evicted is not None
    assert evicted.reason == "DeactivatedDueToAdmissionCheck"


@pytest.mark.parametrize(
    ("checks", "reason"),
    [
        pytest.param((), "AdmissionCheckNotFound", id="missing"),
        pytest.param((admission_check(active=False),), "AdmissionCheckInactive", id="inactive"),
        pytest.param((admission_check(),), None, id="active"),
    ],
)
def test_a_clusterqueue_admits_nothing_while_a_check_is_missing_or_inactive(
    checks: tuple[AdmissionCheck, ...], reason: str | None
) -> None:
    cache = cache_with_queue(**STRATEGY)
    for check in checks:
        cache.set_admission_check(check)
    assert cache.snapshot().inactive.get("cq") == reason  # type: ignore[call-overload]
    if checks:
        cache.delete("ac", "prov")
        assert cache.snapshot().inactive.get("cq") == "AdmissionCheckNotFound"  # type: ignore[call-overload]


def test_checks_apply_to_the_flavors_they_name() -> None:
    spec = {
        "admissionChecksStrategy": {
            "admissionChecks": [
                {"name": "everywhere"},
                {"name": "on-spot", "onFlavors": ["spot"]},
            ]
        }
    }
    cache = cache_with_queue(**spec)
    assert cache.admission_checks_for("cq", {"rf"}) == ("everywhere",)
    assert cache.admission_checks_for("cq", {"rf", "spot"}) == ("everywhere", "on-spot")
    assert cache.admission_checks_for("no-such-cq", {"rf"}) == ()


async def test_without_checks_one_write_reserves_and_admits() -> None:
    ctl, sched, fake, _ = _setup(namespaceSelector={})
    key = await _reserved(ctl, sched, fake)
    wl = fake.workloads[key]
    assert wls.is_admitted(wl)
    assert wl.status.admission_checks is None
    assert key not in ctl.cache.checked  # nothing for the scheduler to look at


TWO = {"admissionChecksStrategy": {"admissionChecks": [{"name": "prov"}, {"name": "second"}]}}


async def test_every_check_must_be_ready_and_a_retry_resets_them_all() -> None:
    ctl, sched, fake, _ = _setup(**TWO)
    ctl.cache.set_admission_check(admission_check("second"))
    key = await _reserved(ctl, sched, fake)
    assert _checks(fake.workloads[key]) == [("prov", "Pending"), ("second", "Pending")]
    wl = fake.workloads[key]
    ready = AdmissionCheckState(
        name="prov", state=CheckState.READY, last_transition_time=wls.dt_now(), message=""
    )
    second = wl.status.admission_checks[1]  # type: ignore[index]
    fake.workloads[key] = wl.model_copy(
        update={"status": wls.status_with(wl, admission_checks=(ready, second))}
    )
    await _after_check(ctl, sched, fake)
    assert not wls.is_admitted(fake.workloads[key])  # one Ready, one Pending
    assert fake.started == []
    retry = second.model_copy(update={"state": CheckState.RETRY})
    wl = fake.workloads[key]
    fake.workloads[key] = wl.model_copy(
        update={"status": wls.status_with(wl, admission_checks=(ready, retry))}
    )
    _sync(ctl, fake)
    await sched.admission_checks()
    wl = fake.workloads[key]
    assert wls.is_evicted(wl)
    assert _checks(wl) == [("prov", "Pending"), ("second", "Pending")]


async def test_a_retry_on_a_running_job_stops_it_then_gives_the_quota_back() -> None:
    ctl, sched, fake, clock = _setup()
    key = await _reserved(ctl, sched, fake)
    _set_check(fake, key, CheckState.READY, clock.now)
    await _after_check(ctl, sched, fake)
    assert fake.jobs["ns/a"].spec.suspend is False
    running = fake.jobs["ns/a"]
    fake.jobs["ns/a"] = running.model_copy(
        update={"status": running.status.model_copy(update={"active": 2})}
    )
    _set_check(fake, key, CheckState.RETRY, clock.now)  # e.g. the provisioned nodes went away
    await _after_check(ctl, sched, fake)
    assert fake.stopped == ["ns/a"]
    assert wls.has_quota(fake.workloads[key])  # its pods are still active
    stopped = fake.jobs["ns/a"]
    fake.jobs["ns/a"] = stopped.model_copy(
        update={"status": stopped.status.model_copy(update={"active": 0})}
    )
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")
    assert not wls.has_quota(fake.workloads[key])
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")  # no requeueAfterSeconds: requeued at once
    assert wls.is_true(fake.workloads[key], wls.REQUEUED)


async def test_a_check_dropped_from_the_clusterqueue_no_longer_holds_a_workload() -> None:
    """Kueue syncs a reserved Workload's checks with its ClusterQueue's: with the check
    removed, nothing is left to wait for and it is admitted; a check added is Pending."""
    ctl, sched, fake, _ = _setup()
    key = await _reserved(ctl, sched, fake)
    ctl.cache.set_cluster_queue(cluster_queue(gpus=8, **TWO))
    ctl.cache.set_admission_check(admission_check("second"))
    await _after_check(ctl, sched, fake)
    assert _checks(fake.workloads[key]) == [("prov", "Pending"), ("second", "Pending")]
    ctl.cache.set_cluster_queue(cluster_queue(gpus=8))
    await _after_check(ctl, sched, fake)
    wl = fake.workloads[key]
    assert wls.is_admitted(wl)
    assert wl.status.admission_checks is None
    assert fake.jobs["ns/a"].spec.suspend is False


async def test_a_rebuilt_workload_starts_its_checks_over() -> None:
    """A Job edited while its Workload holds quota gets a new ask: its old Ready checks (and
    their podSetUpdates) are not carried to the next reservation."""
    _, _, fake, clock = _setup()
    wl = workload_for(job("a"))
    wl = lc.applied(
        wl,
        lc.admit(gpu_admit("ns/" + wl.name, cq="cq", flavor="rf"), wls.dt_now(), None, ("prov",)),
    )
    fake.workloads[wls.wl_key(wl)] = wl
    _set_check(fake, wls.wl_key(wl), CheckState.READY, clock.now)
    rebuilt = lc.applied(
        fake.workloads[wls.wl_key(wl)], lc.release_unmatched("changed", wls.dt_now())
    )
    assert rebuilt.status.admission_checks is None
    assert not wls.has_quota(rebuilt)


async def test_podset_updates_that_contradict_the_job_do_not_start_it() -> None:
    """A check's nodeSelector that conflicts with the Job's own is refused as any other
    conflicting start (Kueue's podset merge): the Job stays suspended, its Workload finished
    as FailedToStart."""
    ctl, sched, fake, clock = _setup()
    the_job = job("a").to_dict()
    the_job["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "old"}
    fake.jobs["ns/a"] = Job.from_dict(the_job)
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")
    _sync(ctl, fake)
    await sched.run_once()
    (key,) = fake.workloads
    conflict = PodSetUpdate.model_validate({"name": "main", "nodeSelector": {"pool": "new"}})
    _set_check(fake, key, CheckState.READY, clock.now, updates=(conflict,))
    await _after_check(ctl, sched, fake)
    assert fake.started == []
    assert fake.jobs["ns/a"].spec.suspend is True
    finished = wls.condition(fake.workloads[key], wls.FINISHED)
    assert finished is not None
    assert finished.reason == "FailedToStart"
    assert "nodeSelector key 'pool'" in finished.message


async def test_a_workload_without_a_job_is_admitted_by_its_checks_too() -> None:
    """The checks are the scheduler's to act on, for every Workload (Kueue's workload
    controller), not only those of a Job atoll reconciles."""
    _, sched, fake, clock = _setup()
    wl = workload_for(job("orphan"))
    meta = wl.metadata.model_copy(update={"owner_references": None})
    created = await fake.create_workload(wl.model_copy(update={"metadata": meta}))
    sched.cache.set_workload(created)
    await sched.run_once()
    key = wls.wl_key(created)
    assert wls.has_quota(fake.workloads[key])
    assert not wls.is_admitted(fake.workloads[key])
    _set_check(fake, key, CheckState.READY, clock.now)
    sched.cache.set_workload(fake.workloads[key])
    await sched.run_once()
    assert wls.is_admitted(fake.workloads[key])


def test_a_stopped_clusterqueue_says_stopped_before_its_missing_check() -> None:
    cache = cache_with_queue(**STRATEGY, stopPolicy="Hold")
    assert cache.snapshot().inactive.get("cq") == "Stopped"  # type: ignore[call-overload]


async def test_queue_counts_a_reservation_waiting_for_checks_as_reserving_not_admitted() -> None:
    """Kueue's ClusterQueue status: `reservingWorkloads` counts it, `admittedWorkloads` does
    not, both while the decision is not written yet and once it is."""
    ctl, sched, fake, _ = _setup()
    fake.jobs["ns/a"] = job("a")
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")
    _sync(ctl, fake)
    sched.decide()  # decided, assumed in the cache, not written
    assert ctl.cache.assumed
    cqs, _ = tally(ctl.cache, T0)
    assert (cqs["cq"].reserving, cqs["cq"].admitted) == (1, 0)
    await sched.run_once()
    _sync(ctl, fake)
    cqs, _ = tally(ctl.cache, T0)
    assert (cqs["cq"].reserving, cqs["cq"].admitted) == (1, 0)
