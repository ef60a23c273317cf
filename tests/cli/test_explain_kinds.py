"""`atoll explain [KIND] NS/NAME`: the Workload of a Job (the default), JobSet, MPIJob, single
pod or pod group."""

from __future__ import annotations

import pytest

from atoll.api.workload import Workload
from atoll.cli.explain_cmd import _find_workload
from atoll.cli.main import main
from atoll.state.cache import Cache


def _workload(name: str, owner_kind: str | None, owner: str = "x") -> Workload:
    meta: dict[str, object] = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if owner_kind is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": owner_kind, "name": owner, "uid": "u", "controller": True}
        ]
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
        pytest.param("Pod", "ns/eval", "ns/eval", id="pod-group-by-its-name"),
        pytest.param("Pod", "ns/solo", "ns/pod-solo-3", id="single-pod"),
    ],
)
def test_the_workload_of_each_kind(kind: str, target: str, found: str | None) -> None:
    cache = Cache()
    cache.set_workload(_workload("job-train-1", "Job", "train"))
    cache.set_workload(_workload("jobset-train-2", "JobSet", "train"))
    cache.set_workload(_workload("eval", None))
    cache.set_workload(_workload("pod-solo-3", "Pod", "solo"))
    assert _find_workload(cache, target, kind) == found


def test_an_unknown_kind_is_refused_before_the_cluster_is_read(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["explain", "deployment", "ns/x", "--kubeconfig", "/nonexistent"]) == 2
    err = capsys.readouterr().err
    assert "KIND 'deployment': one of job, jobset, mpijob, pod, podgroup" in err
