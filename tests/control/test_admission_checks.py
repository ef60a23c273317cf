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
from atoll.api.workload import AdmissionCheckState, PodSetUpdate, Workload
from atoll.control.jobs import JobController, JobSettings
from atoll.control.metrics import Metrics
from atoll.control.scheduler import Scheduler
from atoll.state import lifecycle as lc
from atoll.state import workloads as wls
from tests.control.builders import Clock, cache_with_queue, job
from tests.control.fakes import FakeCluster

T0 = 1_796_000_000.0
STRATEGY = {"admissionChecksStrategy": {"admissionChecks": [{"name": "prov"}]}}


def a_check(name: str = "prov", *, active: bool = True) -> AdmissionCheck:
    status = "True" if active else "False"
    return AdmissionCheck.from_dict(
        {
            "metadata": {"name": name},
            "spec": {"controllerName": "example.com/provisioner"},
            "status": {
                "conditions": [
                    {
                        "type": "Active",
                        "status": status,
                        "reason": "Ready" if active else "NotReady",
                        "message": "",
                        "lastTransitionTime": "2026-12-01T00:00:00Z",
                    }
                ]
            },
        }
    )


def _setup(**cq_spec: Any) -> tuple[JobController, Scheduler, FakeCluster, Clock]:
    cache = cache_with_queue(**(cq_spec or STRATEGY))
    cache.set_admission_check(a_check())
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
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")
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
    await ctl.reconcile("ns/a")
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
    await ctl.reconcile("ns/a")
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
        pytest.param((a_check(active=False),), "AdmissionCheckInactive", id="inactive"),
        pytest.param((a_check(),), None, id="active"),
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
    assert lc.checks_passed(wls.dt_now())(wl) is None
