"""What every custom owner kind (JobSet, MPIJob) does on fakes, one table row per kind: admitted
whole and started per pod template, never started in part, suspended with its templates
restored when evicted, left alone without a queue label."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from atoll.api.jobset import JobSet
from atoll.api.mpijob import MPIJob
from atoll.control.integrations import Integration, JobSetIntegration, MPIJobIntegration
from atoll.control.jobs import JobController
from atoll.control.scheduler import Scheduler
from atoll.state import workloads as wls
from tests.control.builders import controller_for, preempted
from tests.control.fakes import FakeOwners
from tests.control.test_jobset import jobset
from tests.control.test_mpijob import mpijob

Owner = JobSet | MPIJob


@dataclass(frozen=True, slots=True, kw_only=True)
class Kind:
    integration: Callable[[FakeOwners], Integration[Any]]
    make: Callable[..., Owner]
    """Builder taking `workers`, `gpus` and `labels`; suspended, as the webhook leaves it."""
    key: str
    objects: Callable[[FakeOwners], dict[str, Any]]
    suspended: Callable[[Any], bool]
    running: Callable[[Any], Owner]
    """The object as created without atoll: not suspended."""
    templates: Mapping[str, str]
    """Pod template (start plan key) → its pod set."""


def _running_jobset(obj: JobSet) -> JobSet:
    return obj.model_copy(update={"spec": obj.spec.model_copy(update={"suspend": False})})


def _running_mpijob(obj: MPIJob) -> MPIJob:
    policy = obj.spec.run_policy.model_copy(update={"suspend": False})
    return obj.model_copy(update={"spec": obj.spec.model_copy(update={"run_policy": policy})})


KINDS = [
    pytest.param(
        Kind(
            integration=JobSetIntegration,
            make=jobset,
            key="ns/train",
            objects=lambda f: f.jobsets,
            suspended=lambda o: bool(o.spec.suspend),
            running=_running_jobset,
            templates={"leader": "leader", "workers": "workers"},
        ),
        id="jobset",
    ),
    pytest.param(
        Kind(
            integration=MPIJobIntegration,
            make=mpijob,
            key="ns/pi",
            objects=lambda f: f.mpijobs,
            suspended=lambda o: bool(o.spec.run_policy.suspend),
            running=_running_mpijob,
            templates={"Launcher": "launcher", "Worker": "worker"},
        ),
        id="mpijob",
    ),
]


def _setup(kind: Kind, gpus: int = 64) -> tuple[JobController, FakeOwners]:
    fake = FakeOwners()
    return controller_for(kind.integration(fake), fake, gpus=gpus), fake


async def _round(ctl: JobController, fake: FakeOwners, key: str) -> None:
    """Reconcile the owner, run the scheduler once, reconcile again."""
    fake.sync(ctl.cache)
    await ctl.reconcile(key)
    fake.sync(ctl.cache)
    await Scheduler(cache=ctl.cache, store=fake, emit=fake.emit).run_once()
    fake.sync(ctl.cache)
    await ctl.reconcile(key)
    fake.sync(ctl.cache)


@pytest.mark.parametrize("kind", KINDS)
async def test_admitted_whole_and_started_per_pod_template(kind: Kind) -> None:
    ctl, fake = _setup(kind, gpus=64)
    kind.objects(fake)[kind.key] = kind.make(workers=4, gpus=8)
    await _round(ctl, fake, kind.key)
    (wl,) = fake.workloads.values()
    assert wls.is_admitted(wl)
    assert [a.count for a in wl.status.admission.pod_set_assignments] == [1, 4]  # type: ignore[union-attr]
    ((key, plans),) = fake.starts
    assert key == kind.key
    assert set(plans) == set(kind.templates)
    for template, pod_set in kind.templates.items():
        assert plans[template].labels["kueue.x-k8s.io/podset"] == pod_set
        assert plans[template].annotations["kueue.x-k8s.io/workload"] == wl.name
    assert not kind.suspended(kind.objects(fake)[kind.key])


@pytest.mark.parametrize("kind", KINDS)
async def test_beyond_capacity_is_never_started_in_part(kind: Kind) -> None:
    ctl, fake = _setup(kind, gpus=24)
    kind.objects(fake)[kind.key] = kind.make(workers=4, gpus=8)  # 32 GPUs
    await _round(ctl, fake, kind.key)
    (wl,) = fake.workloads.values()
    assert not wls.has_quota(wl)
    assert fake.starts == []
    assert kind.suspended(kind.objects(fake)[kind.key])


@pytest.mark.parametrize("kind", KINDS)
async def test_evicted_is_suspended_with_its_templates_restored(kind: Kind) -> None:
    ctl, fake = _setup(kind, gpus=64)
    kind.objects(fake)[kind.key] = kind.make()
    await _round(ctl, fake, kind.key)
    (key,) = fake.workloads
    fake.workloads[key] = preempted(fake.workloads[key])
    fake.sync(ctl.cache)
    await ctl.reconcile(kind.key)
    ((_, templates),) = fake.stops
    assert set(templates) == set(kind.templates)
    for template in templates.values():
        assert "kueue.x-k8s.io/workload" not in (template.metadata.annotations or {})  # type: ignore[union-attr]
    assert kind.suspended(kind.objects(fake)[kind.key])
    assert not wls.has_quota(fake.workloads[key])  # no pod active: quota released


@pytest.mark.parametrize("kind", KINDS)
async def test_unlabelled_are_left_alone(kind: Kind) -> None:
    ctl, fake = _setup(kind)
    kind.objects(fake)[kind.key] = kind.running(kind.make(labels={"team": "a"}))
    await _round(ctl, fake, kind.key)
    assert fake.workloads == {}
    assert fake.starts == []
    assert not kind.suspended(kind.objects(fake)[kind.key])
