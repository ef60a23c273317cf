"""The JobSet integration on fakes: one pod set per replicated job, admitted whole, started
with each pod set's admission merged into its template, stopped with templates restored."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from atoll.api.jobset import JobSet
from atoll.control import jobframework as jf
from atoll.control import jobset as js
from atoll.control.integrations import enabled
from tests.control.builders import GPU, job
from tests.control.fakes import FakeOwners


def jobset(
    name: str = "train",
    *,
    workers: int = 4,
    gpus: int = 8,
    labels: Mapping[str, str] | None = None,
    **status: Any,
) -> JobSet:
    def rj(rj_name: str, replicas: int, parallelism: int, completions: int | None, g: int) -> dict:  # type: ignore[type-arg]
        spec: dict[str, Any] = {
            "parallelism": parallelism,
            "template": {
                "spec": {
                    "containers": [
                        {"name": "c", "image": "x", "resources": {"requests": {GPU: str(g)}}}
                    ]
                }
            },
        }
        if completions is not None:
            spec["completions"] = completions
        return {"name": rj_name, "replicas": replicas, "template": {"spec": spec}}

    return JobSet.from_dict(
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": f"uid-{name}",
                "labels": dict(labels or {"kueue.x-k8s.io/queue-name": "lq"}),
            },
            "spec": {
                "suspend": True,
                "replicatedJobs": [rj("leader", 1, 1, 1, 0), rj("workers", workers, 2, 1, gpus)],
            },
            "status": status,
        }
    )


def test_one_pod_set_per_replicated_job_counts_replicas_times_pods_per_job() -> None:
    # workers: 4 Jobs of min(parallelism 2, completions 1) = 1 pod each
    leader, workers = js.pod_sets(jobset(workers=4))
    assert (leader.name, leader.count) == ("leader", 1)
    assert (workers.name, workers.count) == ("workers", 4)


def test_the_workload_is_named_and_owned_as_kueue_does() -> None:
    wl = js.build_workload(jobset(), {}, {})
    assert wl.name == jf.workload_name("train", "uid-train", kind="JobSet", group="jobset.x-k8s.io")
    assert wl.name.startswith("jobset-train-")
    (owner,) = wl.metadata.owner_references or ()
    assert (owner.api_version, owner.kind, owner.controller) == (
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        True,
    )
    assert wl.spec.queue_name == "lq"


def test_an_invalid_queue_name_gets_no_workload() -> None:
    with pytest.raises(jf.ComposeError, match="queue-name"):
        js.build_workload(jobset(labels={"kueue.x-k8s.io/queue-name": "Bad_Name"}), {}, {})


def test_finished_from_completed_and_failed_conditions() -> None:
    done = jobset(conditions=[{"type": "Completed", "status": "True", "message": "ok"}])
    failed = jobset(conditions=[{"type": "Failed", "status": "True", "message": "boom"}])
    assert js.finished(done) == (True, "Succeeded", "ok")
    assert js.finished(failed) == (True, "Failed", "boom")
    assert js.finished(jobset())[0] is False


def test_ready_when_every_child_job_is_ready_or_succeeded() -> None:
    status = [{"name": "leader", "ready": 1}, {"name": "workers", "ready": 3, "succeeded": 0}]
    assert not js.pods_ready(jobset(replicatedJobsStatus=status))
    status[1]["succeeded"] = 1
    assert js.pods_ready(jobset(replicatedJobsStatus=status))


def test_a_changed_replica_count_no_longer_matches_its_workload() -> None:
    wl = js.build_workload(jobset(workers=4), {}, {})
    assert js.workload_mismatch(jobset(workers=4), wl) is None
    assert "workers has 5 pods" in (js.workload_mismatch(jobset(workers=5), wl) or "")


def test_frameworks_enable_kinds_by_kueue_name() -> None:
    fake = FakeOwners()
    assert [i.framework for i in enabled(("batch/job",), fake)] == ["batch/job"]
    kinds = enabled(("jobset.x-k8s.io/jobset", "batch/job"), fake)
    assert [i.framework for i in kinds] == ["batch/job", "jobset.x-k8s.io/jobset"]
    assert [i.framework for i in enabled(("kubeflow.org/pytorchjob",), fake)] == []
    assert [i.framework for i in enabled(("pod",), fake)] == ["pod"]


def test_jobs_owned_by_a_managed_jobset_belong_to_it() -> None:
    fake = FakeOwners()
    job_kind = enabled(("batch/job", "jobset.x-k8s.io/jobset"), fake)[0]
    raw = job("train-workers-0").to_dict()
    raw["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "name": "train",
            "uid": "u",
            "controller": True,
        }
    ]
    owned, child = type(job("x")).from_dict(raw), job("train-workers-0")
    assert job_kind.owned_elsewhere(owned)
    assert not job_kind.owned_elsewhere(child)


def _done(**succeeded: int) -> dict[str, Any]:
    """A JobSet status with these replicated jobs' succeeded Job counts."""
    return {"replicatedJobsStatus": [{"name": n, "succeeded": c} for n, c in succeeded.items()]}


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({}, []),  # no status yet
        (_done(leader=0, workers=0), []),
        (_done(workers=2), [("workers", 2)]),  # 2 Jobs of 1 pod each (min(parallelism 2, 1))
        (_done(leader=1, workers=4), [("leader", 1), ("workers", 4)]),  # spec order
        (_done(workers=1, leader=1), [("leader", 1), ("workers", 1)]),
        (_done(workers=5), []),  # more than its replicas: not counted (Kueue's)
        (_done(gone=3), []),  # a replicated job no longer in the spec
    ],
)
def test_succeeded_jobs_make_their_pods_reclaimable(
    status: dict[str, Any], expected: list[tuple[str, int]]
) -> None:
    got = js.reclaimable_pods(jobset(**status))
    assert [(str(p.name), p.count) for p in got] == expected


@given(
    replicas=st.integers(1, 6),
    parallelism=st.integers(1, 4),
    completions=st.integers(1, 4),
    succeeded=st.integers(0, 8),
)
def test_reclaimable_pods_never_exceed_the_pod_set(
    replicas: int, parallelism: int, completions: int, succeeded: int
) -> None:
    """A replicated job's reclaimable pods are those of its succeeded Jobs, never more than
    its pod set (what Kueue charges for it), and none once the count is impossible."""
    obj = JobSet.from_dict(
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "j", "namespace": "ns"},
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "w",
                        "replicas": replicas,
                        "template": {
                            "spec": {
                                "parallelism": parallelism,
                                "completions": completions,
                                "template": {"spec": {"containers": [{"name": "c"}]}},
                            }
                        },
                    }
                ]
            },
            "status": _done(w=succeeded),
        }
    )
    (rj,) = obj.spec.replicated_jobs
    got = js.reclaimable_pods(obj)
    if 0 < succeeded <= replicas:
        ((name, count),) = [(str(p.name), p.count) for p in got]
        assert name == "w"
        assert count == succeeded * min(parallelism, completions)
        assert count <= js.pod_count(rj)
    else:
        assert got == ()
