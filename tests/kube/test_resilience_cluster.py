"""Two replicas and crashes: only the leader admits, a follower takes over, and SIGKILL at any
moment neither over-commits quota nor leaves a labelled Job running unadmitted."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import KubeCluster
from tests.kube import builders as b
from tests.kube.conftest import charged, get_json, holder, is_true, one_queue, replica

pytestmark = pytest.mark.cluster


def test_only_the_leader_admits_and_a_follower_takes_over(
    cluster: KubeCluster, namespace: str, tmp_path: Path, solo: None
) -> None:
    one_queue(cluster, namespace, 8)
    one, two = (
        replica(cluster, tmp_path, "replica-one"),
        replica(cluster, tmp_path, "replica-two"),
    )
    one.start()
    cluster.wait_for("replica-one to lead", lambda: holder(cluster) == "replica-one", timeout=30)
    two.start()
    try:
        cluster.kubectl(
            "create", "-f", "-", input=json.dumps(b.job("j1", namespace, queue="q", pods=2))
        )
        cluster.wait_for(
            "j1 admitted",
            lambda: any(
                is_true(w, "Admitted")
                for w in get_json(cluster, "get", "workloads", "-n", namespace)["items"]
            ),
        )
        # counted once the status write's answer is back: a moment after the API shows it
        cluster.wait_for(
            "replica-one to count the admission",
            lambda: "kueue_admitted_workloads_total{" in one.metrics(),
            timeout=10,
        )
        assert "kueue_admitted_workloads_total{" not in two.metrics()
        assert "atoll_leader 0.0" in two.metrics() or "atoll_leader" not in two.metrics()
        one.kill()
        cluster.wait_for(
            "replica-two to take over", lambda: holder(cluster) == "replica-two", timeout=30
        )
        cluster.kubectl(
            "create", "-f", "-", input=json.dumps(b.job("j2", namespace, queue="q", pods=2))
        )
        cluster.wait_for(
            "j2 admitted by the new leader",
            lambda: (
                sum(
                    is_true(w, "Admitted")
                    for w in get_json(cluster, "get", "workloads", "-n", namespace)["items"]
                )
                == 2
            ),
        )
        cluster.wait_for(
            "replica-two to count the admission",
            lambda: "kueue_admitted_workloads_total{" in two.metrics(),
            timeout=10,
        )
    finally:
        one.kill()
        two.stop()


def _gpu_usage(workloads: list[dict[str, Any]]) -> int:
    """GPUs charged to unfinished Workloads (a Job's pods done for good are not: they are
    its reclaimable pods)."""
    return sum(charged(w, b.GPU) for w in workloads)


def _violations(cluster: KubeCluster, ns: str, quota: int) -> list[str]:
    # Jobs first, then Workloads: a Job seen running must have been admitted before it ran,
    # and an admission (or its Finished successor) is still there when Workloads are read.
    jobs = get_json(cluster, "get", "jobs", "-n", ns)["items"]
    workloads = get_json(cluster, "get", "workloads", "-n", ns)["items"]
    problems = []
    used = _gpu_usage(workloads)
    if used > quota:
        problems.append(f"quota over-committed: {used} > {quota} GPUs")
    admitted = {
        ref["name"]
        for w in workloads
        if is_true(w, "QuotaReserved") or is_true(w, "Finished")
        for ref in w["metadata"].get("ownerReferences", [])
    }
    for w in workloads:
        if is_true(w, "QuotaReserved"):
            for ps, spec in zip(
                w["status"]["admission"]["podSetAssignments"], w["spec"]["podSets"], strict=True
            ):
                if ps["count"] != spec["count"]:
                    problems.append(f"{w['metadata']['name']} admitted partly")
    for job in jobs:
        running = not job["spec"].get("suspend")
        if (
            running
            and job["metadata"]["name"] not in admitted
            and (job["status"].get("active") or 0)
        ):
            problems.append(f"job {job['metadata']['name']} runs pods without an admitted Workload")
    return problems


def test_sigkill_at_random_moments_loses_nothing_and_overcommits_nothing(
    cluster: KubeCluster, namespace: str, tmp_path: Path, solo: None
) -> None:
    quota, jobs = 16, 200
    one_queue(cluster, namespace, quota)
    op = replica(cluster, tmp_path, "crashy")
    op.start()
    items = [b.job(f"j{i:03d}", namespace, queue="q", pods=2, run="1s") for i in range(jobs)]
    cluster.kubectl(
        "create",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
        timeout=180,
    )
    rng = random.Random(20261203)
    observed: list[str] = []
    try:
        for _ in range(4):
            end = time.monotonic() + rng.uniform(1.0, 6.0)
            while time.monotonic() < end:
                observed += _violations(cluster, namespace, quota)
                time.sleep(0.2)
            op.kill()
            observed += _violations(cluster, namespace, quota)
            op.start()
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            observed += _violations(cluster, namespace, quota)
            done = get_json(cluster, "get", "jobs", "-n", namespace)["items"]
            if sum(1 for j in done if j["status"].get("succeeded") == 2) == jobs:
                break
            time.sleep(1.0)
    finally:
        op.stop()
    assert observed == []
    done = get_json(cluster, "get", "jobs", "-n", namespace)["items"]
    assert sum(1 for j in done if j["status"].get("succeeded") == 2) == jobs
    finished = get_json(cluster, "get", "workloads", "-n", namespace)["items"]
    assert sum(1 for w in finished if is_true(w, "Finished")) == jobs


def test_a_workload_whose_job_went_while_no_replica_ran_releases_its_quota_at_start(
    cluster: KubeCluster, namespace: str, tmp_path: Path, solo: None
) -> None:
    """The Workload watch resumes after the start-up listing, so it replays none of the
    listed Workloads: their owners are queued once at start, and a Job deleted while no
    replica ran finishes its Workload (OwnerNotFound) instead of holding the quota forever."""
    one_queue(cluster, namespace, 8)
    op = replica(cluster, tmp_path, "orphans")
    op.start()
    try:
        create_job = ("create", "-f", "-")
        cluster.kubectl(
            *create_job,
            input=json.dumps(b.job("gone", namespace, queue="q", pods=2, gpus=4, run="1h")),
        )
        cluster.wait_for(
            "the first Job admitted",
            lambda: any(
                is_true(w, "Admitted")
                for w in get_json(cluster, "get", "workloads", "-n", namespace)["items"]
            ),
        )
        op.stop()
        cluster.kubectl("delete", "job", "gone", "-n", namespace, "--wait=false")
        cluster.wait_for(
            "the Job gone",
            lambda: (
                cluster.kubectl("get", "job", "gone", "-n", namespace, check=False).returncode != 0
            ),
        )
        op.start()
        cluster.kubectl(
            *create_job, input=json.dumps(b.job("next", namespace, queue="q", pods=2, gpus=4))
        )
        cluster.wait_for(
            "the second Job admitted in the quota the first one held",
            lambda: any(
                is_true(w, "Admitted") and w["metadata"]["name"].startswith("job-next-")
                for w in get_json(cluster, "get", "workloads", "-n", namespace)["items"]
            ),
            timeout=60,
        )
    finally:
        op.stop()
