"""The operator under test: `atoll run` as a real process against the test cluster, with short
waitForPodsReady and leader-election timings so that stories finish in seconds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from atoll.sandbox.processes import free_port
from tests.conftest import REPO, KubeCluster
from tests.kube import builders as b

OPERATOR_NAMESPACE = "atoll-system"
FAST_SETTINGS = (
    f"namespace={OPERATOR_NAMESPACE}",
    "waitForPodsReady.timeout=20s",
    "waitForPodsReady.requeuingStrategy.backoffBaseSeconds=2",
    "waitForPodsReady.requeuingStrategy.backoffMaxSeconds=4",
    "leaderElection.leaseDuration=4s",
    "leaderElection.renewDeadline=3s",
    "leaderElection.retryPeriod=1s",
)


class OperatorProcess:
    """One `atoll run` process; start, stop (SIGTERM), kill (SIGKILL), read its metrics."""

    def __init__(self, cluster: KubeCluster, log: Path, *extra: str) -> None:
        self.cluster = cluster
        self.log = log
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None
        self.metrics_port = 0
        self.health_port = 0

    def start(self, *, wait_ready: bool = True) -> None:
        self.metrics_port, self.health_port = free_port(), free_port()
        args = [
            sys.executable,
            "-m",
            "atoll",
            "run",
            "--kubeconfig",
            str(self.cluster.kubeconfig),
            "--metrics-bind-address",
            f"127.0.0.1:{self.metrics_port}",
            "--health-bind-address",
            f"127.0.0.1:{self.health_port}",
            "--webhook-bind-address",
            f"127.0.0.1:{free_port()}",
            *[a for s in FAST_SETTINGS for a in ("--set", s)],
            *self.extra,
        ]
        env = dict(os.environ, PYTHONPATH=str(REPO / "operator"))
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
        if wait_ready:
            try:
                self.wait_ready()
            except AssertionError:
                self.stop()  # a replica that never got ready must not outlive its test
                raise

    def _get(self, port: int, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as e:
            return int(e.code), e.read().decode(errors="replace")
        except OSError:
            return 0, ""

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"operator exited: {self.tail()}")
            if self._get(self.health_port, "/readyz")[0] == 200:
                return
            time.sleep(0.2)
        raise AssertionError(f"operator not ready in {timeout}s: {self.tail()}")

    def health(self, path: str = "/readyz") -> tuple[int, str]:
        """(status, body) of the health endpoint `path` (0 when it does not answer)."""
        return self._get(self.health_port, path)

    def metrics(self) -> str:
        return self._get(self.metrics_port, "/metrics")[1]

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@contextmanager
def replacing_operator(
    cluster: KubeCluster, operator: OperatorProcess, log_dir: Path, *extra: str
) -> Iterator[OperatorProcess]:
    """`atoll run` with `extra` arguments in place of the session's operator (two leaders
    would both admit); the session's operator is started again afterwards."""
    operator.stop()
    op = OperatorProcess(cluster, log_dir / "atoll.log", *extra)
    try:
        op.start()
        yield op
    finally:
        op.stop()
        operator.start()


@pytest.fixture(scope="session")
def operator(
    cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    cluster.apply_crds()
    cluster.kubectl("create", "namespace", OPERATOR_NAMESPACE, check=False)
    op = OperatorProcess(cluster, tmp_path_factory.mktemp("operator") / "atoll.log")
    op.start()
    yield op
    op.stop()


LEASE = "c1f6bfd2.kueue.x-k8s.io"
"""The leader-election Lease (Kueue's default name)."""


@pytest.fixture
def solo(operator: OperatorProcess) -> Iterator[None]:
    """Stop the session's operator for this test (it would admit too), restart it after."""
    operator.stop()
    yield
    operator.start()


def holder(cluster: KubeCluster) -> str:
    """Who holds the leader Lease now ('' when nobody)."""
    lease = get_json(cluster, "get", "lease", LEASE, "-n", OPERATOR_NAMESPACE)
    return str(lease["spec"].get("holderIdentity") or "")


def replica(cluster: KubeCluster, tmp_path: Path, name: str) -> OperatorProcess:
    """An operator process of its own (not started) with leader-election identity `name`."""
    return OperatorProcess(cluster, tmp_path / f"{name}.log", "--identity", name)


def atoll_json(cluster: KubeCluster, *args: str) -> tuple[dict[str, Any], str]:
    """`atoll ARGS --json` against the sandbox: its answer (stdout, which must be that JSON
    alone) and its stderr (log lines)."""
    out = subprocess.run(
        [sys.executable, "-m", "atoll", *args, "--kubeconfig", str(cluster.kubeconfig), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    answer: dict[str, Any] = json.loads(out.stdout)
    return answer, out.stderr


def get_json(cluster: KubeCluster, *args: str) -> Any:
    return json.loads(cluster.kubectl(*args, "-o", "json").stdout)


def apply(cluster: KubeCluster, *objs: dict[str, Any]) -> None:
    cluster.kubectl(
        "apply",
        "--server-side",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}),
    )


def create(
    cluster: KubeCluster, *objs: dict[str, Any], check: bool = True
) -> subprocess.CompletedProcess[str]:
    """`kubectl create` of `objs` as one List (through the admission webhooks)."""
    return cluster.kubectl(
        "create",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}),
        check=check,
        timeout=120,
    )


def one_queue(cluster: KubeCluster, namespace: str, gpus: int) -> None:
    """A ResourceFlavor, a ClusterQueue of `gpus` GPUs and the LocalQueue `q` in `namespace`
    (the flavor and ClusterQueue are named after the namespace)."""
    rf, cq = f"rf-{namespace}", f"cq-{namespace}"
    apply(
        cluster, b.flavor(rf), b.cluster_queue(cq, rf, gpus=gpus), b.local_queue("q", namespace, cq)
    )


def workload_of(cluster: KubeCluster, namespace: str, job: str) -> dict[str, Any] | None:
    items = get_json(cluster, "get", "workloads", "-n", namespace)["items"]
    for wl in items:
        for ref in wl["metadata"].get("ownerReferences") or []:
            if ref["kind"] == "Job" and ref["name"] == job:
                return dict(wl)
    return None


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return dict(c)
    return None


def is_true(obj: dict[str, Any] | None, type_: str) -> bool:
    c = condition(obj, type_)
    return c is not None and c["status"] == "True"


def charged(wl: dict[str, Any], resource: str) -> int:
    """What a Workload holding quota is charged of `resource` (whole units), as Kueue counts
    it: its admission's usage, less the share of its reclaimable pods (pods done for good
    while it still runs give their quota back)."""
    status = wl.get("status") or {}
    if not is_true(wl, "QuotaReserved") or is_true(wl, "Finished"):
        return 0
    sizes = {ps["name"]: int(ps.get("count", 1)) for ps in wl["spec"]["podSets"]}
    done = {p["name"]: int(p["count"]) for p in status.get("reclaimablePods") or ()}
    total = 0
    for psa in status["admission"]["podSetAssignments"]:
        name = psa["name"]
        count = int(psa.get("count", sizes.get(name, 0)))
        usage = int(psa["resourceUsage"].get(resource, "0"))
        left = sizes.get(name, 0) - min(done.get(name, 0), sizes.get(name, 0))
        total += usage // count * left if 0 <= left < count else usage
    return total


@pytest.fixture(scope="module")
def dgx(cluster: KubeCluster) -> list[str]:
    """The dgx-h100 shape's nodes (16 x 8 GPUs, racks of 4), added to the session cluster."""
    return cluster.add_shape(REPO / "examples" / "clusters" / "dgx-h100.yaml")


@pytest.fixture
async def api(cluster: KubeCluster) -> AsyncIterator[client.ApiClient]:
    """An API client of the session cluster (what the operator's own requests go through)."""
    conf = client.Configuration()
    await config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=conf)
    async with client.ApiClient(conf) as api:
        yield api
