"""The Job reconciler when users edit their Jobs (Kueue's Job update rules, for the case where
the webhook was bypassed): invalid queue names, queue moves, parallelism raised on an admitted
Job, the queue-name label removed from a running one."""

from __future__ import annotations

from atoll.api.core import Job
from atoll.state import workloads as wls
from tests.control.builders import job
from tests.control.fakes import FakeCluster
from tests.control.test_jobs import _admitted, _setup, _sync

QUEUE = "kueue.x-k8s.io/queue-name"


def _edited(j: Job, *, labels: dict[str, str] | None = None, **spec: object) -> Job:
    raw = j.to_dict()
    if labels is not None:
        raw["metadata"]["labels"] = labels
    raw["spec"] |= spec
    return Job.from_dict(raw)


def _running(fake: FakeCluster, key: str, active: int) -> None:
    j = fake.jobs[key]
    fake.jobs[key] = j.model_copy(
        update={
            "spec": j.spec.model_copy(update={"suspend": False}),
            "status": j.status.model_copy(update={"active": active}),
        }
    )


def _pods_gone(fake: FakeCluster, key: str) -> None:
    j = fake.jobs[key]
    fake.jobs[key] = j.model_copy(update={"status": j.status.model_copy(update={"active": 0})})


async def test_an_invalid_queue_name_gets_a_warning_and_no_retry() -> None:
    ctl, fake, _ = _setup()
    fake.jobs["ns/a"] = _edited(job("a"), labels={QUEUE: "UPPER_case"})
    _sync(ctl, fake)
    assert await ctl.reconcile("ns/a") is None
    assert fake.workloads == {}
    ((where, _, message),) = [e for e in fake.events if e[1] == "ErrWorkloadCompose"]
    assert where == "Job/ns/a"
    assert f'metadata.labels[{QUEUE}]: Invalid value: "UPPER_case"' in message


async def test_a_suspended_jobs_new_queue_name_moves_its_workload() -> None:
    ctl, fake, _ = _setup()
    fake.jobs["ns/a"] = job("a")
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")
    (key,) = fake.workloads
    fake.jobs["ns/a"] = _edited(fake.jobs["ns/a"], labels={QUEUE: "missing"})
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")
    assert fake.workloads[key].spec.queue_name == "missing"
    assert any(e[1] == "UpdatedWorkload" and "missing" in e[2] for e in fake.events)


async def test_raising_parallelism_of_a_running_job_stops_it_and_rebuilds_its_workload() -> None:
    ctl, fake, _ = _setup()
    key = await _admitted(ctl, fake)
    await ctl.reconcile("ns/a")  # starts the Job
    _running(fake, "ns/a", active=2)
    fake.jobs["ns/a"] = _edited(fake.jobs["ns/a"], parallelism=8)
    _sync(ctl, fake)
    assert await ctl.reconcile("ns/a") == 1.0
    assert fake.stopped == ["ns/a"]
    assert wls.has_quota(fake.workloads[key])  # pods still active: quota kept
    _sync(ctl, fake)
    assert await ctl.reconcile("ns/a") == 1.0  # suspended, pods not gone yet
    _pods_gone(fake, "ns/a")
    _sync(ctl, fake)
    assert await ctl.reconcile("ns/a") is None
    wl = fake.workloads[key]
    assert not wls.has_quota(wl)
    assert wl.spec.pod_sets[0].count == 8
    assert any(e[1] == "UpdatedWorkload" and "8 pods" in e[2] for e in fake.events)
    assert fake.jobs["ns/a"].spec.suspend is True


async def test_a_matching_running_job_is_left_alone() -> None:
    ctl, fake, _ = _setup()
    key = await _admitted(ctl, fake)
    await ctl.reconcile("ns/a")
    _running(fake, "ns/a", active=2)
    _sync(ctl, fake)
    await ctl.reconcile("ns/a")
    assert fake.stopped == []
    assert wls.has_quota(fake.workloads[key])


async def test_a_running_job_losing_its_label_is_stopped_and_its_workload_deleted() -> None:
    ctl, fake, _ = _setup()
    key = await _admitted(ctl, fake)
    await ctl.reconcile("ns/a")
    _running(fake, "ns/a", active=2)
    fake.jobs["ns/a"] = _edited(fake.jobs["ns/a"], labels={})
    _sync(ctl, fake)
    assert await ctl.reconcile("ns/a") == 1.0
    assert fake.stopped == ["ns/a"]
    assert key in fake.workloads  # pods still active: quota kept
    _pods_gone(fake, "ns/a")
    _sync(ctl, fake)
    assert await ctl.reconcile("ns/a") is None
    assert key not in fake.workloads
    assert any(e[1] == "DeletedWorkload" for e in fake.events)


async def test_an_unlabelled_job_without_workload_is_ignored() -> None:
    ctl, fake, _ = _setup()
    fake.jobs["ns/a"] = _edited(job("a"), labels={}, suspend=False)
    _sync(ctl, fake)
    assert await ctl.reconcile("ns/a") is None
    assert fake.stopped == []
    assert fake.workloads == {}
    assert fake.events == []
