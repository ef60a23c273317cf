"""`atoll explain [KIND] NS/NAME`: the Workload of a Job (the default), JobSet, MPIJob, TrainJob,
single pod or pod group, and the Workloads of a LeaderWorkerSet's replica groups."""

from __future__ import annotations

import pytest

from atoll.api.workload import Workload
from atoll.cli.explain_cmd import _find_workloads
from atoll.cli.main import main
from atoll.state.cache import Cache


def _workload(
    name: str, owner_kind: str | None, owner: str = "x", *, group: int | None = None
) -> Workload:
    meta: dict[str, object] = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if owner_kind is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": owner_kind, "name": owner, "uid": "u", "controller": True}
        ]
    if group is not None:  # a LeaderWorkerSet's group: owned, not as controller
        meta["ownerReferences"] = [
            {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": owner_kind, "name": owner,
             "uid": "u"}
        ]  # fmt: skip
        meta["annotations"] = {"kueue.x-k8s.io/component-workload-index": str(group)}
    else:
        meta["annotations"] = {"kueue.x-k8s.io/is-group-workload": "true"}
    pod_set = {"name": "main", "count": 1, "template": {"spec": {"containers": []}}}
    return Workload.from_dict({"metadata": meta, "spec": {"podSets": [pod_set]}})


@pytest.mark.parametrize(
    ("kind", "target", "found"),
    [
        pytest.param("Job", "ns/train", "ns/job-train-1", id="job"),
        pytest.param("JobSet", "ns/train", "ns/jobset-train-2", id="jobset-of-the-same-name"),
        pytest.param("MPIJob", "ns/train", None, id="no-mpijob"),
        pytest.param("TrainJob", "ns/train", "ns/trainjob-train-4", id="trainjob"),
        pytest.param(
            "LeaderWorkerSet",
            "ns/serve",
            ["ns/leaderworkerset-serve-0-b", "ns/leaderworkerset-serve-1-a"],
            id="lws-every-group-in-index-order",
        ),
        pytest.param("Pod", "ns/eval", "ns/eval", id="pod-group-by-its-name"),
        pytest.param("Pod", "ns/solo", "ns/pod-solo-3", id="single-pod"),
    ],
)
def test_the_workload_of_each_kind(kind: str, target: str, found: str | list[str] | None) -> None:
    cache = Cache()
    cache.set_workload(_workload("job-train-1", "Job", "train"))
    cache.set_workload(_workload("jobset-train-2", "JobSet", "train"))
    cache.set_workload(_workload("trainjob-train-4", "TrainJob", "train"))
    cache.set_workload(_workload("leaderworkerset-serve-1-a", "LeaderWorkerSet", "serve", group=1))
    cache.set_workload(_workload("leaderworkerset-serve-0-b", "LeaderWorkerSet", "serve", group=0))
    cache.set_workload(_workload("eval", None))
    cache.set_workload(_workload("pod-solo-3", "Pod", "solo"))
    expected = [found] if isinstance(found, str) else (found or [])
    assert _find_workloads(cache, target, kind) == expected


def test_an_unknown_kind_is_refused_before_the_cluster_is_read(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["explain", "deployment", "ns/x", "--kubeconfig", "/nonexistent"]) == 2
    err = capsys.readouterr().err
    assert (
        "KIND 'deployment': one of job, jobset, mpijob, trainjob, leaderworkerset, lws, pod, "
        "podgroup" in err
    )
