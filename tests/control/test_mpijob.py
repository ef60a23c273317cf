"""The MPIJob integration on fakes: a `launcher` and a `worker` pod set, admitted together,
started with each replica type's admission merged into its template, stopped with both
templates restored; the launcher's batch/v1 Job is left to the MPIJob."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from atoll.api.core import Job
from atoll.api.mpijob import MPIJob
from atoll.control import jobframework as jf
from atoll.control import mpijob as mpi
from atoll.control.integrations import enabled
from tests.control.builders import GPU, job
from tests.control.fakes import FakeOwners


def mpijob(
    name: str = "pi",
    *,
    workers: int | None = 4,
    gpus: int = 8,
    labels: Mapping[str, str] | None = None,
    launcher_priority: str | None = None,
    policy_priority: str | None = None,
    **status: Any,
) -> MPIJob:
    def replica(g: int, replicas: int | None, priority: str | None) -> dict[str, Any]:
        pod: dict[str, Any] = {
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {GPU: str(g)}}}]
        }
        if priority:
            pod["priorityClassName"] = priority
        out: dict[str, Any] = {"template": {"spec": pod}}
        if replicas is not None:
            out["replicas"] = replicas
        return out

    run_policy: dict[str, Any] = {"suspend": True}
    if policy_priority:
        run_policy["schedulingPolicy"] = {"priorityClass": policy_priority}
    return MPIJob.from_dict(
        {
            "apiVersion": "kubeflow.org/v2beta1",
            "kind": "MPIJob",
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": f"uid-{name}",
                "labels": dict(labels or {"kueue.x-k8s.io/queue-name": "lq"}),
            },
            "spec": {
                "runPolicy": run_policy,
                "mpiReplicaSpecs": {
                    "Worker": replica(gpus, workers, None),
                    "Launcher": replica(0, 1, launcher_priority),
                },
            },
            "status": status,
        }
    )


def test_launcher_then_worker_pod_sets_named_in_lower_case() -> None:
    launcher, worker = mpi.pod_sets(mpijob(workers=4))
    assert (launcher.name, launcher.count) == ("launcher", 1)
    assert (worker.name, worker.count) == ("worker", 4)


def test_replicas_default_to_one_and_a_missing_launcher_has_no_pod_set() -> None:
    (worker,) = mpi.pod_sets(
        MPIJob.from_dict({"spec": {"mpiReplicaSpecs": {"Worker": {"template": {}}}}})
    )
    assert (worker.name, worker.count) == ("worker", 1)
    assert mpi.pod_sets(mpijob(workers=None))[1].count == 1


def test_an_mpijob_without_replica_specs_gets_no_workload() -> None:
    with pytest.raises(jf.ComposeError, match=r"spec\.mpiReplicaSpecs"):
        mpi.build_workload(MPIJob.from_dict({"metadata": {"name": "x"}}), {}, {})


def test_the_workload_is_named_and_owned_as_kueue_does() -> None:
    wl = mpi.build_workload(mpijob(), {}, {})
    assert wl.name == jf.workload_name("pi", "uid-pi", kind="MPIJob", group="kubeflow.org")
    assert wl.name.startswith("mpijob-pi-")
    (owner,) = wl.metadata.owner_references or ()
    assert (owner.api_version, owner.kind, owner.controller) == (
        "kubeflow.org/v2beta1",
        "MPIJob",
        True,
    )
    assert wl.spec.queue_name == "lq"


def test_priority_class_of_the_run_policy_wins_over_the_launchers() -> None:
    with pytest.raises(jf.ComposeError, match=r"'p1' \(spec.runPolicy.schedulingPolicy"):
        mpi.build_workload(mpijob(policy_priority="p1", launcher_priority="p2"), {}, {})
    with pytest.raises(jf.ComposeError, match=r"'p2' \(spec.mpiReplicaSpecs\[Launcher\]"):
        mpi.build_workload(mpijob(launcher_priority="p2"), {}, {})


def test_finished_from_succeeded_and_failed_conditions() -> None:
    done = mpijob(conditions=[{"type": "Succeeded", "status": "True", "message": "ok"}])
    failed = mpijob(conditions=[{"type": "Failed", "status": "True", "message": "boom"}])
    assert mpi.finished(done) == (True, "Succeeded", "ok")
    assert mpi.finished(failed) == (True, "Failed", "boom")
    assert mpi.finished(mpijob(conditions=[{"type": "Running", "status": "True"}]))[0] is False


def test_ready_once_running_and_active_over_both_replica_types() -> None:
    assert not mpi.pods_ready(mpijob(conditions=[{"type": "Created", "status": "True"}]))
    assert mpi.pods_ready(mpijob(conditions=[{"type": "Running", "status": "True"}]))
    statuses = {"Launcher": {"active": 1}, "Worker": {"active": 3, "succeeded": 1}}
    assert mpi.active_pods(mpijob(replicaStatuses=statuses)) == 4
    assert mpi.active_pods(mpijob()) == 0


def test_a_changed_worker_count_no_longer_matches_its_workload() -> None:
    wl = mpi.build_workload(mpijob(workers=4), {}, {})
    assert mpi.workload_mismatch(mpijob(workers=4), wl) is None
    assert "replica type worker has 5 pods" in (mpi.workload_mismatch(mpijob(workers=5), wl) or "")
    assert mpi.workload_mismatch(mpijob(gpus=4), wl) == (
        "the containers' resources of replica type worker changed"
    )


def _launcher_job(owner_kind: str, api_version: str) -> Job:
    raw = job("pi-launcher").to_dict()
    raw["metadata"]["ownerReferences"] = [
        {
            "apiVersion": api_version,
            "kind": owner_kind,
            "name": "pi",
            "uid": "u",
            "controller": True,
        }
    ]
    return Job.from_dict(raw)


def test_the_launcher_job_of_an_mpijob_belongs_to_it_when_mpijobs_are_managed() -> None:
    fake = FakeOwners()
    launcher = _launcher_job("MPIJob", "kubeflow.org/v2beta1")
    managed = enabled(("batch/job", "kubeflow.org/mpijob"), fake)
    assert [i.framework for i in managed] == ["batch/job", "kubeflow.org/mpijob"]
    assert managed[0].owned_elsewhere(launcher)
    # MPIJobs not managed: the launcher Job is a Job like any other.
    assert not enabled(("batch/job",), fake)[0].owned_elsewhere(launcher)
    # A kind of another group with the same name is not an MPIJob.
    assert not managed[0].owned_elsewhere(_launcher_job("MPIJob", "example.com/v1"))
