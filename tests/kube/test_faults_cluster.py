"""Fault injection on the test sandbox while Jobs are admitted: a graceful kube-apiserver
restart, etcd paused, the operator started while the API server is down, a replica stopping,
and the webhook-down window. Every test watches the namespace's pods (`PodWatch`: each event,
not samples) and checks the invariants: never more GPUs bound than the quota, no gang only
partly bound, no pod running unadmitted (except where a test says so). Each prints the time
to recover and the pods that ran unadmitted, as `FAULT <name>: ...`.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from atoll.api.configuration import Configuration
from atoll.sandbox.cluster import Sandbox
from tests.conftest import KubeCluster, missing_component
from tests.kube import builders as b
from tests.kube.conftest import OperatorProcess, create, holder, one_queue, replica
from tests.kube.watches import PodWatch

pytestmark = pytest.mark.cluster
QUOTA = 8
PODS = 2
GPUS = 2
WEBHOOK = Configuration().atoll.webhook_configuration_name


@pytest.fixture
def sandbox(cluster: KubeCluster, solo: None) -> Sandbox:
    """The test sandbox, with the session's operator stopped (`solo`)."""
    if cluster.sandbox is None:
        missing_component(
            "the test sandbox: fault tests stop and pause its processes, which a cluster "
            "given by ATOLL_TEST_KUBECONFIG does not let them do"
        )
    return cluster.sandbox


@pytest.fixture
def report(capsys: pytest.CaptureFixture[str]) -> Iterator[dict[str, object]]:
    """Numbers a test records; printed (uncaptured) as one line when it ends."""
    numbers: dict[str, object] = {}
    yield numbers
    if "fault" not in numbers:
        return  # the test failed before it measured anything
    with capsys.disabled():
        print(
            f"\nFAULT {numbers.pop('fault', '?')}: "
            + ", ".join(f"{k}={v}" for k, v in numbers.items())
        )


def _jobs(cluster: KubeCluster, namespace: str, names: list[str]) -> None:
    create(
        cluster, *[b.job(n, namespace, queue="q", pods=PODS, gpus=GPUS, run="1s") for n in names]
    )


def _try_job(cluster: KubeCluster, namespace: str, name: str) -> subprocess.CompletedProcess[str]:
    return create(cluster, b.job(name, namespace, queue="q", pods=PODS, gpus=GPUS), check=False)


def _succeeded(cluster: KubeCluster, namespace: str) -> int:
    done = cluster.kubectl("get", "jobs", "-n", namespace, "-o", "json", check=False)
    if done.returncode != 0:
        return -1  # the API server is not answering (yet)
    jobs = json.loads(done.stdout)["items"]
    return sum(1 for j in jobs if (j.get("status") or {}).get("succeeded") == PODS)


def _wait_done(cluster: KubeCluster, namespace: str, count: int, timeout: float = 300) -> None:
    cluster.wait_for(
        f"{count} Jobs succeeded",
        lambda: _succeeded(cluster, namespace) >= count,
        timeout=timeout,
        interval=1.0,
    )


def _alive(op: OperatorProcess) -> None:
    assert op.proc is not None
    assert op.proc.poll() is None, f"the operator exited: {op.tail()}"
    assert "Traceback" not in op.log.read_text(errors="replace"), op.tail(60)


def _invariants(watch: PodWatch, *, unadmitted_allowed: int = 0) -> None:
    record = watch.record
    assert record.over_quota == []
    partial = {job: n for job, n in record.max_bound.items() if job and 0 < n < PODS}
    assert partial == {}, f"gangs only partly bound: {partial}"
    assert len(record.unadmitted) <= unadmitted_allowed, sorted(record.unadmitted)


def _webhooks(cluster: KubeCluster) -> list[dict[str, object]]:
    done = cluster.kubectl(
        "get", "mutatingwebhookconfiguration", WEBHOOK, "-o", "json", check=False
    )
    if done.returncode != 0:
        return []
    return list(json.loads(done.stdout).get("webhooks") or [])


def _start_while_admitting(
    cluster: KubeCluster, namespace: str, op: OperatorProcess, jobs: int
) -> PodWatch:
    one_queue(cluster, namespace, QUOTA)
    op.start()
    watch = PodWatch(cluster, namespace, QUOTA).start()
    _jobs(cluster, namespace, [f"j{i:02d}" for i in range(jobs)])
    cluster.wait_for("admissions under way", lambda: len(watch.record.added) >= 2 * PODS)
    return watch


def test_apiserver_graceful_restart_while_admitting(
    cluster: KubeCluster,
    sandbox: Sandbox,
    namespace: str,
    tmp_path: Path,
    report: dict[str, object],
) -> None:
    op = replica(cluster, tmp_path, "restart")
    jobs = 24
    watch = _start_while_admitting(cluster, namespace, op, jobs)
    try:
        began = time.monotonic()
        sandbox.restart("kube-apiserver")
        back = time.monotonic()
        _wait_done(cluster, namespace, jobs)
        _alive(op)
        recovered = watch.first_added_after(back)
    finally:
        watch.stop()
        op.stop()
    _invariants(watch)
    report.update(
        fault="apiserver-graceful-restart",
        outage_s=round(back - began, 1),
        first_pod_after_s=None if recovered is None else round(recovered, 1),
        **watch.numbers(),
    )


def test_etcd_paused_while_admitting(
    cluster: KubeCluster,
    sandbox: Sandbox,
    namespace: str,
    tmp_path: Path,
    report: dict[str, object],
) -> None:
    op = replica(cluster, tmp_path, "etcd-pause")
    jobs = 24
    watch = _start_while_admitting(cluster, namespace, op, jobs)
    try:
        sandbox.signal("etcd", signal.SIGSTOP)
        try:
            time.sleep(10)  # the fault itself: etcd frozen for 10 s
        finally:
            sandbox.signal("etcd", signal.SIGCONT)
        back = time.monotonic()
        _wait_done(cluster, namespace, jobs)
        _alive(op)
        recovered = watch.first_added_after(back)
    finally:
        watch.stop()
        op.stop()
    _invariants(watch)
    report.update(
        fault="etcd-paused-10s",
        first_pod_after_s=None if recovered is None else round(recovered, 1),
        **watch.numbers(),
    )


def test_operator_started_while_the_apiserver_is_down_waits_then_admits(
    cluster: KubeCluster,
    sandbox: Sandbox,
    namespace: str,
    tmp_path: Path,
    report: dict[str, object],
) -> None:
    one_queue(cluster, namespace, QUOTA)
    op = replica(cluster, tmp_path, "early")
    sandbox.stop_component("kube-apiserver")
    try:
        op.start(wait_ready=False)
        deadline = time.monotonic() + 60
        while "waiting for the API server" not in op.log.read_text(errors="replace"):
            assert time.monotonic() < deadline, op.tail()
            assert op.proc is not None
            assert op.proc.poll() is None, op.tail()
            time.sleep(0.2)
        assert op.health("/healthz")[0] == 200  # alive while it waits: no restart by the kubelet
        assert op.health("/readyz")[0] == 503
    finally:
        sandbox.start_component("kube-apiserver")
    try:
        up = time.monotonic()
        op.wait_ready(timeout=120)
        ready_after = time.monotonic() - up
        with PodWatch(cluster, namespace, QUOTA) as watch:
            _jobs(cluster, namespace, [f"j{i:02d}" for i in range(8)])
            _wait_done(cluster, namespace, 8)
            _alive(op)
        waits = op.log.read_text(errors="replace").count("waiting for the API server")
    finally:
        op.stop()
    _invariants(watch)
    assert 1 <= waits <= 12  # one line per backoff window, not one per attempt
    report.update(
        fault="unreachable-start",
        ready_after_apiserver_s=round(ready_after, 1),
        wait_log_lines=waits,
        **watch.numbers(),
    )


def test_two_replicas_one_stopping_the_survivor_serves_and_admits(
    cluster: KubeCluster,
    namespace: str,
    tmp_path: Path,
    solo: None,
    report: dict[str, object],
) -> None:
    one_queue(cluster, namespace, QUOTA)
    one, two = replica(cluster, tmp_path, "fault-one"), replica(cluster, tmp_path, "fault-two")
    one.start()
    cluster.wait_for("fault-one to lead", lambda: holder(cluster) == "fault-one", timeout=30)
    two.start()
    watch = PodWatch(cluster, namespace, QUOTA).start()
    try:
        _jobs(cluster, namespace, [f"a{i:02d}" for i in range(8)])
        cluster.wait_for("admissions under way", lambda: len(watch.record.added) >= PODS)
        one.stop()
        stopped = time.monotonic()
        assert _webhooks(cluster), "the webhook configuration was emptied by a stopping replica"
        refused, deadline = 0, stopped + 60
        while _try_job(cluster, namespace, "after").returncode != 0:
            refused += 1
            assert time.monotonic() < deadline, "no replica serves the webhook"
            time.sleep(0.2)
        accepted_after = time.monotonic() - stopped
        _wait_done(cluster, namespace, 9)
        _alive(two)
        assert holder(cluster) == "fault-two"
    finally:
        watch.stop()
        one.stop()
        two.stop()
    _invariants(watch)
    report.update(
        fault="leader-replica-stops",
        job_create_accepted_after_s=round(accepted_after, 1),
        creates_refused_meanwhile=refused,
        **watch.numbers(),
    )


def test_webhook_down_window_refuses_jobs_and_bypassed_ones_are_stopped_at_start(
    cluster: KubeCluster,
    namespace: str,
    tmp_path: Path,
    solo: None,
    report: dict[str, object],
) -> None:
    one_queue(cluster, namespace, QUOTA)
    op = replica(cluster, tmp_path, "window")
    op.start()
    op.stop()
    watch = PodWatch(cluster, namespace, QUOTA).start()
    try:
        # No operator: the configuration stays, so a labelled Job is refused (failurePolicy
        # Fail), never let through to run unadmitted.
        assert _webhooks(cluster)
        refused = _try_job(cluster, namespace, "refused")
        assert refused.returncode != 0
        assert "webhook" in refused.stderr
        # An admin removing the configuration bypasses the webhook: the Job runs unadmitted
        # until an operator starts, suspends it (counted) and admits it properly.
        cluster.kubectl("delete", "mutatingwebhookconfiguration", WEBHOOK)
        create(cluster, b.job("bypass", namespace, queue="q", pods=PODS, gpus=GPUS, run="1h"))
        cluster.wait_for(
            "the bypassing pods bound", lambda: watch.bound_of("bypass", admitted=False) == PODS
        )
        started = time.monotonic()
        op.start()
        cluster.wait_for("the unadmitted pods gone", lambda: watch.bound_unadmitted() == [])
        stopped_after = time.monotonic() - started
        cluster.wait_for(
            "the Job admitted and running again",
            lambda: watch.bound_of("bypass", admitted=True) == PODS,
        )
        counted = [
            line for line in op.metrics().splitlines() if line.startswith("atoll_unadmitted_")
        ]
        assert "atoll_unadmitted_jobs_stopped_total 1.0" in counted, counted
        assert _webhooks(cluster), "the operator did not restore the configuration"
        _alive(op)
    finally:
        watch.stop()
        op.stop()
    _invariants(watch, unadmitted_allowed=PODS)
    report.update(
        fault="webhook-down-window",
        labelled_create_refused=True,
        bypass_unadmitted_pods=len(watch.record.unadmitted),
        stopped_after_operator_start_s=round(stopped_after, 1),
    )


def test_a_missing_lease_namespace_is_created_and_the_replica_leads(
    cluster: KubeCluster, namespace: str, tmp_path: Path, solo: None
) -> None:
    lease_ns = f"{namespace}-lease"
    op = OperatorProcess(
        cluster,
        tmp_path / "lease.log",
        "--identity",
        "lease-ns",
        "--set",
        f"leaderElection.resourceNamespace={lease_ns}",
    )
    try:
        op.start()
        lease = cluster.kubectl("get", "lease", "-n", lease_ns, "-o", "name")
        assert lease.stdout.strip()
        _alive(op)
    finally:
        op.stop()
        cluster.kubectl("delete", "namespace", lease_ns, "--wait=false", check=False)
