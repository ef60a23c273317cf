"""Scenarios of every kind the operator admits: JobSets, MPIJobs and pod groups become the
Workloads the operator's adapters compose, and are admitted whole, as Jobs are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from atoll.control import jobframework as jf
from atoll.engine import decisions as d
from atoll.sim.gang import GangSimulator, Settings
from atoll.sim.greedy import GreedySimulator
from atoll.sim.results import JobState
from atoll.sim.scenario import ScenarioError, load_job
from atoll.sim.whatif import what_if
from atoll.sim.workloads import uid_of
from atoll.state import workloads as wls
from tests.sim import builders as b

FRAMEWORKS = ["batch/job", "jobset.x-k8s.io/jobset", "kubeflow.org/mpijob", "pod"]
Doc = dict[str, Any]


def _config(frameworks: list[str] = FRAMEWORKS) -> Doc:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "integrations": {"frameworks": frameworks},
    }


def _container(gpus: int) -> Doc:
    return {
        "name": "main",
        "image": "trainer",
        "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus}},
    }


def _timing(arrival: float, duration: str) -> dict[str, str]:
    return {"atoll.dev/arrival": str(arrival), "atoll.dev/run-duration": duration}


def jobset(name: str, *groups: tuple[str, int, int], arrival: float = 0, **labels: str) -> Doc:
    """A JobSet of replicated jobs (name, replicas, GPUs per pod), one pod per Job."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"kueue.x-k8s.io/queue-name": "lq", **labels},
            "annotations": _timing(arrival, "10m"),
        },
        "spec": {
            "replicatedJobs": [
                {
                    "name": rj,
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "template": {
                                "spec": {"restartPolicy": "Never", "containers": [_container(g)]}
                            }
                        }
                    },
                }
                for rj, replicas, g in groups
            ]
        },
    }


def mpijob(name: str, workers: int, gpus: int) -> Doc:
    def spec(replicas: int, g: int) -> Doc:
        return {"replicas": replicas, "template": {"spec": {"containers": [_container(g)]}}}

    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"kueue.x-k8s.io/queue-name": "lq"},
            "annotations": _timing(0, "10m"),
        },
        "spec": {"mpiReplicaSpecs": {"Launcher": spec(1, 0), "Worker": spec(workers, gpus)}},
    }


def pods(group: str, count: int, gpus: int, *, total: int | None = None) -> list[Doc]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{group}-{i}",
                "namespace": "default",
                "labels": {
                    "kueue.x-k8s.io/queue-name": "lq",
                    "kueue.x-k8s.io/pod-group-name": group,
                },
                "annotations": {
                    "kueue.x-k8s.io/pod-group-total-count": str(total or count),
                    **_timing(0, "10m"),
                },
            },
            "spec": {"restartPolicy": "Never", "containers": [_container(gpus)]},
        }
        for i in range(count)
    ]


def _records(*docs: Doc | list[Doc], gpus: int = 8, config: Doc | None = None) -> dict[str, Any]:
    scn = b.scenario(
        config or _config(),
        b.nodes(4, 2),
        b.flavor(),
        b.cluster_queue(gpus=gpus),
        b.local_queue(),
        b.priority_class("high", 1000),
        *docs,
    )
    result = GangSimulator(scn, Settings.of(scn.config)).run()
    return {r.name: r for r in result.jobs} | {"notes": result.notes}


def test_a_jobset_is_admitted_whole_with_one_pod_set_per_replicated_job() -> None:
    got = _records(jobset("train", ("leader", 1, 1), ("workers", 3, 2)))
    rec = got["JobSet default/train"]
    assert (rec.pods, rec.gpus, rec.state) == (4, 7, JobState.FINISHED)
    assert rec.admitted == 0
    assert rec.flavor == "gpu"


def test_a_jobset_larger_than_the_quota_is_never_admitted_in_part() -> None:
    got = _records(jobset("big", ("leader", 1, 2), ("workers", 4, 2)))
    rec = got["JobSet default/big"]
    assert rec.admitted is None
    assert rec.state == JobState.PENDING
    assert rec.reason == d.PendingReason.EXCEEDS_MAX_QUOTA.value
    assert "requests (2) + current podset request (8) > maximum capacity (8)" in (rec.message or "")


def test_an_mpijob_launcher_and_workers_are_admitted_together() -> None:
    got = _records(mpijob("mpi", 2, 2), b.job("after", pods=2, gpus=2, arrival=1))
    mpi, after = got["MPIJob default/mpi"], got["default/after"]
    assert (mpi.pods, mpi.gpus, mpi.admitted) == (3, 4, 0)
    assert after.admitted == 1  # 4 of 8 GPUs left: the Job fits beside it


def test_a_pod_group_is_one_gang_and_waits_whole_behind_a_higher_priority_jobset() -> None:
    got = _records(
        jobset("first", ("workers", 3, 2), arrival=0, **{"kueue.x-k8s.io/priority-class": "high"}),
        pods("eval", 2, 2),
    )
    group, first = got["pod group default/eval"], got["JobSet default/first"]
    assert (group.pods, group.gpus) == (2, 4)
    assert first.admitted == 0
    assert group.admitted == first.finished  # its lack freed: tried at once


def test_a_pod_group_missing_pods_is_refused_with_the_count() -> None:
    with pytest.raises(ScenarioError, match=r"pod group default/eval: 1 Pods, but .* says 3"):
        b.scenario(b.nodes(1, 2), b.flavor(), b.cluster_queue(), pods("eval", 1, 1, total=3))


def test_kinds_whose_framework_is_not_enabled_are_not_simulated() -> None:
    got = _records(
        jobset("train", ("workers", 2, 1)), b.job("plain", pods=1), config=_config(["batch/job"])
    )
    assert "JobSet default/train" not in got
    assert got["default/plain"].admitted == 0
    assert any("jobset.x-k8s.io/jobset framework is not in" in n for n in got["notes"])


def test_the_simulated_workload_has_kueues_name_and_the_operators_pod_sets(
    tmp_path: Path,
) -> None:
    scn = b.scenario(_config(), b.nodes(1, 2), b.flavor(), b.cluster_queue(), b.local_queue())
    sim = GangSimulator(scn, Settings.of(scn.config))
    job = load_job_doc(b.job("train", pods=2), tmp_path)
    wl = sim.kinds.compose(job, sim.cache, created=5.0)
    assert wl.name == jf.workload_name("train", uid_of(job))
    assert wls.created_at(wl) == pytest.approx(1_767_225_605.0)
    (ps,) = wl.spec.pod_sets
    assert (ps.name, ps.count) == ("main", 2)


def load_job_doc(doc: Doc | list[Doc], tmp: Path) -> Any:
    """The object `atoll what-if` reads from a manifest of `doc`."""
    docs = doc if isinstance(doc, list) else [doc]
    path = tmp / f"{docs[0]['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return load_job(path)


def test_what_if_takes_a_jobset_and_the_pods_of_a_group(tmp_path: Path) -> None:
    scn = b.scenario(_config(), b.nodes(4, 2), b.flavor(), b.cluster_queue(gpus=8), b.local_queue())
    js = load_job_doc(jobset("js", ("leader", 1, 1), ("workers", 2, 2)), tmp_path)
    answer = what_if(scn, js)
    assert isinstance(answer.decision, d.Admit)
    assert [str(p.name) for p in answer.decision.pod_sets] == ["leader", "workers"]
    assert answer.pods_fit is True
    group = load_job_doc(pods("g", 2, 4), tmp_path)
    assert isinstance(what_if(scn, group).decision, d.Admit)
    with pytest.raises(ScenarioError, match="WaitingForPods"):
        what_if(scn, load_job_doc(pods("h", 1, 1, total=2), tmp_path))


def test_greedy_places_every_pod_set_of_a_jobset() -> None:
    scn = b.scenario(
        _config(), b.nodes(4, 2), b.flavor(), b.cluster_queue(), b.local_queue(),
        jobset("train", ("leader", 1, 1), ("workers", 3, 2)),
    )  # fmt: skip
    (rec,) = GreedySimulator(scn).run().jobs
    assert (rec.pods, rec.gpus, rec.state) == (4, 7, JobState.FINISHED)


def test_objects_without_a_queue_name_go_to_their_namespaces_default_localqueue() -> None:
    """Kueue's LocalQueue defaulting, as the operator's webhook applies it: a Job or JobSet
    created without a queue name in a namespace with a LocalQueue `default` is queued
    there; in another namespace it is not simulated, nor is a plain pod anywhere."""
    unlabelled = jobset("train", ("workers", 2, 1))
    del unlabelled["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    elsewhere = b.job("elsewhere", pods=1, queue=None)
    elsewhere["metadata"]["namespace"] = "other"
    loose = pods("loose", 1, 1)
    del loose[0]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    got = _records(
        unlabelled, b.job("plain", pods=2, queue=None), elsewhere, loose, b.local_queue("default")
    )
    assert got["JobSet default/train"].admitted == 0
    assert got["default/plain"].admitted == 0
    assert "other/elsewhere" not in got
    assert "pod group default/loose" not in got
    assert sum("no kueue.x-k8s.io/queue-name label" in n for n in got["notes"]) == 2


@pytest.mark.parametrize("gate", [True, False], ids=["gate-on", "gate-off"])
def test_an_object_without_a_priority_class_gets_the_default_workloadpriorityclass(
    gate: bool,
) -> None:
    """Kueue's WorkloadPriorityClass defaulting, as the operator's webhooks apply it: with
    the gate on, a Job created without the priority-class label has the value of the class
    `default` (listed after it: the order of documents does not matter), so it goes ahead of
    an older Job of a lower class; with the gate off (Kueue's default up to v0.19) it has
    priority 0 and waits its turn."""
    config = _config() | {"featureGates": {"WorkloadPriorityClassDefaulting": gate}}
    got = _records(
        b.job("running", pods=8),
        b.job("low", pods=8, arrival=1, priority="low"),
        b.job("plain", pods=8, arrival=2),
        b.priority_class("low", 0),
        b.priority_class("default", 500),
        config=config,
    )
    first, second = ("default/plain", "default/low") if gate else ("default/low", "default/plain")
    assert got[first].admitted == got["default/running"].finished
    assert got[second].admitted == got[first].finished


def test_what_if_gives_a_pod_group_the_default_workloadpriorityclass(tmp_path: Path) -> None:
    """The pod webhook labels each queued pod with the class `default` (gate on): what-if
    asks with the group as its pods would be, here a priority that preempts."""
    config = _config() | {"featureGates": {"WorkloadPriorityClassDefaulting": True}}
    scn = b.scenario(
        config,
        b.nodes(4, 2),
        b.flavor(),
        b.cluster_queue(gpus=8, preemption={"withinClusterQueue": "LowerPriority"}),
        b.local_queue(),
        b.priority_class("low", 0),
        b.priority_class("default", 500),
        b.job("running", pods=8, priority="low"),
    )
    group = load_job_doc(pods("g", 2, 4), tmp_path)
    assert isinstance(what_if(scn, group, at=5).decision, d.Preempt)
