"""Shared fixtures. `cluster` is a real Kubernetes API server for tests marked `cluster`.

By default it is a fresh sandbox (etcd, kube-apiserver, controller-manager, scheduler, KWOK)
brought up once per test session with the `pcie-bridged-pairs` shape and torn down at the end.
Set `ATOLL_TEST_KUBECONFIG=/path/to/kubeconfig` to run the same tests on another cluster
(kind, for instance); it must have the same fake-GPU nodes, DeviceClass and ResourceSlices.
Under `CI=true` a missing component fails the tests instead of skipping them.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from hypothesis import settings

from atoll.sandbox import binaries
from atoll.sandbox.cluster import Sandbox
from atoll.sandbox.crds import apply_crds
from atoll.sandbox.shapes import device_classes, load_shape, nodes, resource_slices

settings.register_profile("atoll", deadline=None)
settings.load_profile("atoll")
"""No per-example time limit for property tests (hypothesis's default is 200 ms): on a shared,
busy machine an example may wait that long for a core, and speed is measured in bench/,
never asserted in tests."""

REPO = Path(__file__).resolve().parents[1]
TEST_SHAPE = REPO / "examples" / "clusters" / "pcie-bridged-pairs.yaml"


class KubeCluster:
    """A kubeconfig plus a kubectl to drive it."""

    def __init__(self, kubeconfig: Path, kubectl_path: str, sandbox: Sandbox | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.kubectl_path = kubectl_path
        self.sandbox = sandbox
        """The test sandbox (None on a cluster given by ATOLL_TEST_KUBECONFIG): fault tests stop
        and pause its processes, integration tests add controllers to it."""
        self._crds_applied = False

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))
        done = subprocess.run(
            [self.kubectl_path, *args],
            input=input,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}"
            )
        return done

    def apply_crds(self) -> None:
        """Apply `crds/` server-side once per session and wait until they are Established."""
        if self._crds_applied:
            return
        apply_crds(self.kubectl, REPO / "crds")
        self._crds_applied = True

    def add_shape(self, path: Path) -> list[str]:
        """Create the Nodes (and DeviceClasses, ResourceSlices) of another shape; return the
        node names."""
        shape = load_shape(path)
        made = nodes(shape)
        names = [n["metadata"]["name"] for n in made]
        have = set(self.kubectl("get", "nodes", "-o", "name").stdout.split())
        new = [n for n in made if f"node/{n['metadata']['name']}" not in have]
        if new:
            self.kubectl(
                "create",
                "-f",
                "-",
                input=json.dumps({"apiVersion": "v1", "kind": "List", "items": new}),
            )
        slices = [*device_classes(shape), *resource_slices(shape)]
        if slices:
            self.kubectl(
                "apply",
                "--server-side",
                "-f",
                "-",
                input=json.dumps({"apiVersion": "v1", "kind": "List", "items": slices}),
            )
        self.kubectl(
            "wait", "--for=condition=Ready", "--timeout=60s", *[f"node/{n}" for n in names]
        )
        return names

    def wait_for(
        self, what: str, check: object, *, timeout: float = 60, interval: float = 0.3
    ) -> None:
        """Poll `check()` (a callable returning truthy) until it holds; fail naming `what`."""
        assert callable(check)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def missing_component(reason: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(f"cluster tests need {reason} (CI never skips them)", pytrace=False)
    pytest.skip(f"cluster tests need {reason}")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    external = os.environ.get("ATOLL_TEST_KUBECONFIG")
    if external:
        kubectl = str(binaries.bin_dir() / "kubectl")
        if not os.access(kubectl, os.X_OK):
            kubectl = shutil.which("kubectl") or ""
        if not kubectl:
            missing_component("kubectl")
        yield KubeCluster(Path(external), kubectl)
        return
    missing = binaries.missing()
    if missing:
        missing_component(f"the sandbox binaries ({', '.join(missing)}): run `make sandbox-bin`")
    sandbox = Sandbox(root=tmp_path_factory.mktemp("sandbox"))
    sandbox.up(load_shape(TEST_SHAPE), log=lambda _m: None)
    try:
        yield KubeCluster(sandbox.kubeconfig, str(sandbox.kubectl_path), sandbox)
    finally:
        sandbox.down(log=lambda _m: None)


@pytest.fixture
def namespace(cluster: KubeCluster) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (without waiting), its Workloads first:
    a pod group's pods keep the `kueue.x-k8s.io/managed` finalizer until their Workload is
    finished or deleted (as in Kueue), and the namespace controller deletes pods before
    anything else."""
    name = f"t-{secrets.token_hex(4)}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "workloads", "--all", "-n", name, "--wait=false", check=False)
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
