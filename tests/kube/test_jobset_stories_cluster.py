"""The deadlock story once more, with JobSets (how most distributed training is submitted):
two JobSets of a leader and 3 workers (4 pods of 1 GPU each, in one all-reduce) on 6 GPUs.
Placed pod by pod and interleaved, as kube-scheduler alone places them, they end 3 + 3 and
neither can ever finish; admitted whole by atoll, they run one after the other and both
complete."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from atoll.sandbox.allreduce import AllReduceAgent
from atoll.sandbox.processes import Proc
from tests.conftest import KubeCluster
from tests.kube.builders import GPU
from tests.kube.conftest import OperatorProcess, charged, create, get_json, is_true
from tests.kube.owners import JOBSET
from tests.kube.test_jobset_cluster import jobset, jobset_controller, jobset_operator
from tests.kube.test_stories_cluster import SIX, allreduce, six_gpu_queue

pytestmark = pytest.mark.cluster
__all__ = ["allreduce", "jobset_controller", "jobset_operator"]
STORY_GATE = "atoll.dev/story"
"""A scheduling gate the test lifts pod by pod, to interleave the two JobSets' pods."""
NAMES = ("a", "bb")


def story_jobset(name: str, ns: str, *, queue: str | None, gated: bool) -> dict[str, Any]:
    """A leader and 3 workers, 1 GPU each, on the 6-GPU nodes, in one all-reduce of 4 pods."""
    out = jobset(name, ns, queue=queue, workers=3, gpus=1, leader_gpus=1)
    for rj in out["spec"]["replicatedJobs"]:
        pod = rj["template"]["spec"]["template"]
        pod["metadata"]["annotations"].update(
            {"atoll.dev/allreduce-seconds": "2", "atoll.dev/gang-size": "4"}
        )
        pod["spec"]["nodeSelector"] = SIX
        if gated:
            pod["spec"]["schedulingGates"] = [{"name": STORY_GATE}]
    return out


def _running(cluster: KubeCluster, ns: str, name: str) -> int:
    return sum(
        1
        for p in JOBSET.pods_of(cluster, ns, name)
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    )


def _completed(cluster: KubeCluster, ns: str, name: str) -> bool:
    return is_true(JOBSET.get(cluster, ns, name), "Completed")


def test_interleaved_jobsets_deadlock_without_atoll(
    cluster: KubeCluster, jobset_controller: Proc | None, namespace: str, allreduce: AllReduceAgent
) -> None:
    """Without a queue label atoll leaves them alone: each pod is placed when its gate lifts,
    one of `a`, one of `bb`, in turns; the last pod of each finds no GPU."""
    del jobset_controller
    create(cluster, *(story_jobset(n, namespace, queue=None, gated=True) for n in NAMES))
    cluster.wait_for(
        "both JobSets' 4 pods to exist, gated",
        lambda: all(len(JOBSET.pods_of(cluster, namespace, n)) == 4 for n in NAMES),
    )
    order = {
        n: sorted(p["metadata"]["name"] for p in JOBSET.pods_of(cluster, namespace, n))
        for n in NAMES
    }
    for k in range(4):
        for n in NAMES:
            cluster.kubectl(
                "patch",
                "pod",
                order[n][k],
                "-n",
                namespace,
                "--type=json",
                "-p",
                json.dumps([{"op": "remove", "path": "/spec/schedulingGates"}]),
            )
            if k < 3:  # the first three of each fit on 6 GPUs
                cluster.wait_for(
                    f"{n} to run {k + 1} pods",
                    lambda n=n, k=k: _running(cluster, namespace, n) == k + 1,
                )
    # All 6 GPUs are held; each gang needs one more. Watch well past the 2 s all-reduce step.
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        assert [_running(cluster, namespace, n) for n in NAMES] == [3, 3]
        time.sleep(0.5)
    assert not any(_completed(cluster, namespace, n) for n in NAMES)
    assert not [g for g in allreduce.completed if g[0] == namespace]
    cluster.kubectl("delete", "jobset", *NAMES, "-n", namespace, "--wait=true", timeout=90)


def test_atoll_runs_the_same_jobsets_one_after_the_other(
    cluster: KubeCluster,
    jobset_operator: OperatorProcess,
    namespace: str,
    allreduce: AllReduceAgent,
) -> None:
    del jobset_operator
    six_gpu_queue(cluster, namespace)
    create(cluster, *(story_jobset(n, namespace, queue="q", gated=False) for n in NAMES))
    most = 0
    deadline = time.monotonic() + 180
    done: set[str] = set()
    while time.monotonic() < deadline and len(done) < len(NAMES):
        # One list, so that both Workloads are read at the same moment. What they hold is
        # what Kueue charges: a JobSet whose Jobs succeeded gives their pods' GPUs back
        # (reclaimable pods), so the next one may be admitted before the first is Finished.
        wls = get_json(cluster, "get", "workloads", "-n", namespace)["items"]
        most = max(most, sum(charged(w, GPU) for w in wls))
        done |= {n for n in NAMES if _completed(cluster, namespace, n)}
        time.sleep(0.3)
    assert done == set(NAMES), f"both JobSets must complete; {allreduce.completed}"
    assert most <= 6, f"gangs must never be charged more than the 6 GPUs: {most}"
    assert {g for g in allreduce.completed if g[0] == namespace} == {(namespace, n) for n in NAMES}
    pods = get_json(cluster, "get", "pods", "-n", namespace)["items"]
    assert len(pods) == 2 * 4
