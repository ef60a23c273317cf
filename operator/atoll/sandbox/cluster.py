"""The sandbox control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
KWOK on loopback, started in that order, recorded by pid, stopped in reverse order.

State (PKI, kubeconfig, logs, pids) lives in one folder, `$ATOLL_SANDBOX_DIR` or
`~/.cache/atoll/run/default`; etcd's data lives on tmpfs (`/dev/shm`) when there is one.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from atoll import pki
from atoll.sandbox import binaries, kwok, shapes
from atoll.sandbox.processes import (
    Proc,
    StartError,
    client_tls,
    free_port,
    http_ok,
    insecure_tls,
    is_ours,
    spawn,
    stop,
    wait_until,
)

OPERATOR = "atoll-operator"
"""Name of the operator's process in the sandbox (`start_operator`)."""
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
KCM_CONTROLLERS = (
    "job-controller",
    "garbage-collector-controller",
    "resourceclaim-controller",
    "namespace-controller",
    "pod-garbage-collector-controller",
    "ttl-after-finished-controller",
    "statefulset-controller",  # LeaderWorkerSet's leader and worker groups are StatefulSets
)


def default_root() -> Path:
    if env := os.environ.get("ATOLL_SANDBOX_DIR"):
        return Path(env)
    return binaries.cache_root() / "run" / "default"


@dataclass(slots=True)
class SandboxState:
    """What `up` recorded: processes, ports and paths (saved as JSON in the state folder)."""

    procs: list[Proc] = field(default_factory=list)
    apiserver_port: int = 0
    etcd_dir: str = ""
    shapes: list[str] = field(default_factory=list)
    started_at: float = 0.0
    startup_seconds: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> SandboxState:
        raw = json.loads(text)
        raw["procs"] = [Proc(**p) for p in raw.get("procs", [])]
        return cls(**raw)


@dataclass(frozen=True, slots=True)
class ComponentStatus:
    name: str
    pid: int
    running: bool
    log: str


class Sandbox:
    """One local control plane, identified by its state folder."""

    def __init__(self, root: Path | None = None, bin_dir: Path | None = None) -> None:
        self.root = (root or default_root()).resolve()
        self.bin_dir = bin_dir or binaries.bin_dir()

    # -- paths ---------------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def kubectl_path(self) -> Path:
        return self.bin_dir / "kubectl"

    @property
    def _state_file(self) -> Path:
        return self.root / "state.json"

    def _bin(self, name: str) -> str:
        return str(self.bin_dir / name)

    def _etcd_dir(self) -> Path:
        digest = hashlib.sha256(str(self.root).encode()).hexdigest()[:10]
        shm = Path("/dev/shm")
        base = shm if shm.is_dir() and os.access(shm, os.W_OK) else self.root
        return base / f"atoll-sandbox-{digest}" / "etcd"

    # -- state ---------------------------------------------------------------------------
    def load_state(self) -> SandboxState | None:
        try:
            return SandboxState.from_json(self._state_file.read_text())
        except (OSError, ValueError, TypeError):
            return None

    def _save(self, state: SandboxState) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self._state_file.with_suffix(".tmp")
        tmp.write_text(state.to_json())
        tmp.replace(self._state_file)

    def status(self) -> list[ComponentStatus]:
        state = self.load_state()
        if state is None:
            return []
        return [ComponentStatus(p.name, p.pid, is_ours(p), p.log) for p in state.procs]

    def is_running(self) -> bool:
        st = {c.name: c.running for c in self.status()}
        return all(st.get(name, False) for name in COMPONENTS)

    def add_process(self, name: str, argv: list[str]) -> Proc:
        """Start an extra process (e.g. the operator) that `down` stops with the rest."""
        state = self.load_state()
        if state is None:
            raise StartError("sandbox not running: start it with `atoll sandbox up`")
        for proc in [p for p in state.procs if p.name == name]:
            stop(proc)
            state.procs.remove(proc)
        return self._launch(state, name, argv)

    def _proc(self, name: str) -> tuple[SandboxState, Proc]:
        state = self.load_state()
        found = [p for p in state.procs if p.name == name] if state is not None else []
        if state is None or not found:
            raise StartError(f"sandbox has no process {name!r}")
        return state, found[-1]

    def signal(self, name: str, sig: int) -> None:
        """Send `sig` to the component `name` (e.g. SIGSTOP/SIGCONT to pause etcd), only if
        its recorded pid still runs the binary the sandbox started."""
        _, proc = self._proc(name)
        if not is_ours(proc):
            raise StartError(f"{name} (pid {proc.pid}) is not running")
        os.kill(proc.pid, sig)

    def stop_component(self, name: str) -> None:
        """Stop one component gracefully (SIGTERM, then SIGKILL after a grace period); it
        stays recorded so that `start_component` can start it again."""
        _, proc = self._proc(name)
        stop(proc)

    def start_component(self, name: str, *, timeout: float = 120) -> Proc:
        """Start a stopped component again with the command line it had; for the API server,
        return once it answers /readyz."""
        state, old = self._proc(name)
        if is_ours(old):
            raise StartError(f"{name} is still running (pid {old.pid})")
        if not old.argv:
            raise StartError(f"{name}: its command line was not recorded; restart the sandbox")
        state.procs[state.procs.index(old)] = proc = spawn(name, old.argv, self.root / "logs")
        self._save(state)
        if name == "kube-apiserver":

            def ready() -> bool:
                try:
                    done = self.kubectl("get", "--raw", "/readyz", check=False, timeout=10)
                except subprocess.TimeoutExpired:
                    return False
                return done.returncode == 0

            wait_until(proc, ready, timeout=timeout, what="/readyz")
        return proc

    def restart(self, name: str, *, timeout: float = 120) -> Proc:
        """`stop_component` then `start_component` (a graceful restart of one component)."""
        self.stop_component(name)
        return self.start_component(name, timeout=timeout)

    def start_operator(self, *extra: str, timeout: float = 120) -> Proc:
        """`atoll run` against this sandbox as one of its processes (no leader election,
        free loopback ports, `extra` arguments appended), once its /readyz answers."""
        health = free_port()
        argv = [
            sys.executable,
            "-m",
            "atoll",
            "run",
            "--kubeconfig",
            str(self.kubeconfig),
            "--no-leader-elect",
            "--metrics-bind-address",
            f"127.0.0.1:{free_port()}",
            "--health-bind-address",
            f"127.0.0.1:{health}",
            "--webhook-bind-address",
            f"127.0.0.1:{free_port()}",
            *extra,
        ]
        proc = self.add_process(OPERATOR, argv)
        ready = f"http://127.0.0.1:{health}/readyz"
        wait_until(proc, lambda: http_ok(ready), timeout=timeout, what="/readyz")
        return proc

    # -- kubectl -------------------------------------------------------------------------
    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))
        done = subprocess.run(
            [str(self.kubectl_path), *args],
            input=input,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise subprocess.CalledProcessError(
                done.returncode, done.args, output=done.stdout, stderr=done.stderr
            )
        return done

    # -- up / down -----------------------------------------------------------------------
    def up(
        self, shape: shapes.ClusterShape | None = None, *, log: Callable[[str], None] = print
    ) -> SandboxState:
        """Start everything (or reuse a running sandbox), then create the shape's nodes."""
        missing = binaries.missing(self.bin_dir)
        if missing:
            raise StartError(
                f"sandbox binaries missing in {self.bin_dir}: {', '.join(missing)}; "
                "run `atoll sandbox build` (or `make sandbox-bin`) first"
            )
        state = self.load_state()
        if state is not None and self.is_running():
            log(f"sandbox already running in {self.root}")
        else:
            if state is not None:
                log("sandbox partly running: stopping the rest before a fresh start")
                self.down(log=log)
            state = self._start(log)
        if shape is not None:
            self.apply_shape(shape, log=log)
            if shape.name not in state.shapes:
                state.shapes.append(shape.name)
                self._save(state)
        return state

    def _start(self, log: Callable[[str], None]) -> SandboxState:
        started = time.monotonic()
        if self.root.exists():
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True)
        state = SandboxState(started_at=time.time(), etcd_dir=str(self._etcd_dir()))
        try:
            keys = pki.write_pki(self.root / "pki")
            etcd_url = self._start_etcd(state, log)
            self._start_apiserver(state, keys, etcd_url, log)
            self._write_kubeconfig(keys, state.apiserver_port)
            self._wait_bootstrap()
            self._start_controller_manager(state, log)
            self._start_scheduler(state, log)
            self._start_kwok(state, log)
        except BaseException:
            self._save(state)
            self.down(log=lambda _m: None)
            raise
        state.startup_seconds = time.monotonic() - started
        self._save(state)
        log(f"control plane up in {state.startup_seconds:.1f}s (state in {self.root})")
        return state

    def _launch(self, state: SandboxState, name: str, argv: list[str]) -> Proc:
        proc = spawn(name, argv, self.root / "logs")
        state.procs.append(proc)
        self._save(state)
        return proc

    def _start_etcd(self, state: SandboxState, log: Callable[[str], None]) -> str:
        data = Path(state.etcd_dir)
        if data.parent.exists():
            shutil.rmtree(data.parent)
        data.mkdir(parents=True)
        client, peer = free_port(), free_port()
        url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        log(f"starting etcd on {url}")
        proc = self._launch(
            state,
            "etcd",
            [
                self._bin("etcd"),
                "--name=atoll",
                f"--data-dir={data}",
                f"--listen-client-urls={url}",
                f"--advertise-client-urls={url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=atoll={peer_url}",
                "--unsafe-no-fsync=true",
                "--auto-compaction-retention=1",
                "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ],
        )
        wait_until(proc, lambda: http_ok(f"{url}/health"), timeout=60, what="/health")
        return url

    def _start_apiserver(
        self, state: SandboxState, keys: pki.Pki, etcd_url: str, log: Callable[[str], None]
    ) -> None:
        port = free_port()
        state.apiserver_port = port
        log(f"starting kube-apiserver on https://127.0.0.1:{port}")
        proc = self._launch(
            state,
            "kube-apiserver",
            [
                self._bin("kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--tls-cert-file={keys.serving_cert}",
                f"--tls-private-key-file={keys.serving_key}",
                f"--client-ca-file={keys.ca_cert}",
                "--authorization-mode=RBAC",
                f"--service-account-issuer=https://127.0.0.1:{port}",
                f"--service-account-key-file={keys.sa_public}",
                f"--service-account-signing-key-file={keys.sa_private}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
                "--max-requests-inflight=2000",
                "--max-mutating-requests-inflight=1000",
                f"--cert-dir={self.root / 'pki' / 'apiserver'}",
                "--profiling=false",
            ],
        )
        tls = client_tls(keys.ca_cert, keys.admin_cert, keys.admin_key)
        wait_until(
            proc,
            lambda: http_ok(f"https://127.0.0.1:{port}/readyz", tls),
            timeout=120,
            what="/readyz",
        )

    def _write_kubeconfig(self, keys: pki.Pki, port: int) -> None:
        def b64(path: Path) -> str:
            return base64.b64encode(path.read_bytes()).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "atoll-sandbox",
                    "cluster": {
                        "server": f"https://127.0.0.1:{port}",
                        "certificate-authority-data": b64(keys.ca_cert),
                    },
                }
            ],
            "users": [
                {
                    "name": "atoll-admin",
                    "user": {
                        "client-certificate-data": b64(keys.admin_cert),
                        "client-key-data": b64(keys.admin_key),
                    },
                }
            ],
            "contexts": [
                {
                    "name": "atoll-sandbox",
                    "context": {"cluster": "atoll-sandbox", "user": "atoll-admin"},
                }
            ],
            "current-context": "atoll-sandbox",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
        self.kubeconfig.chmod(0o600)

    def _wait_bootstrap(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.kubectl("get", "namespace", "default", check=False).returncode == 0:
                return
            time.sleep(0.3)
        raise StartError("kube-apiserver is ready but the default namespace never appeared")

    def _start_controller_manager(self, state: SandboxState, log: Callable[[str], None]) -> None:
        port = free_port()
        log("starting kube-controller-manager")
        proc = self._launch(
            state,
            "kube-controller-manager",
            [
                self._bin("kube-controller-manager"),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                f"--controllers={','.join(KCM_CONTROLLERS)}",
                "--kube-api-qps=500",
                "--kube-api-burst=1000",
                "--concurrent-job-syncs=20",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                "--profiling=false",
            ],
        )
        wait_until(
            proc,
            lambda: http_ok(f"https://127.0.0.1:{port}/healthz", insecure_tls()),
            timeout=90,
            what="/healthz",
        )

    def _start_scheduler(self, state: SandboxState, log: Callable[[str], None]) -> None:
        port = free_port()
        config = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(self.kubeconfig), "qps": 500, "burst": 1000},
            "leaderElection": {"leaderElect": False},
        }
        path = self.root / "scheduler.yaml"
        path.write_text(yaml.safe_dump(config))
        log("starting kube-scheduler")
        proc = self._launch(
            state,
            "kube-scheduler",
            [
                self._bin("kube-scheduler"),
                f"--config={path}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
            ],
        )
        wait_until(
            proc,
            lambda: http_ok(f"https://127.0.0.1:{port}/healthz", insecure_tls()),
            timeout=90,
            what="/healthz",
        )

    def _start_kwok(self, state: SandboxState, log: Callable[[str], None]) -> None:
        port = free_port()
        path = self.root / "kwok.yaml"
        path.write_text(kwok.stages())
        key, value = shapes.FAKE_NODE_ANNOTATION
        log("starting kwok (fake nodes and pod lifecycle)")
        proc = self._launch(
            state,
            "kwok",
            [
                self._bin("kwok"),
                f"--kubeconfig={self.kubeconfig}",
                f"--config={path}",
                f"--manage-nodes-with-annotation-selector={key}={value}",
                "--node-ip=127.0.0.1",
                "--cidr=10.244.0.1/16",
                f"--server-address=127.0.0.1:{port}",
            ],
        )
        wait_until(
            proc, lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), timeout=60, what="/healthz"
        )

    def apply_shape(
        self, shape: shapes.ClusterShape, *, log: Callable[[str], None] = print
    ) -> None:
        """Create the shape's Nodes (those not there yet), the DeviceClasses and ResourceSlices,
        then wait until every node of the shape is Ready."""
        existing = set(
            self.kubectl("get", "nodes", "-o", "jsonpath={.items[*].metadata.name}").stdout.split()
        )
        new_nodes = [n for n in shapes.nodes(shape) if n["metadata"]["name"] not in existing]
        if new_nodes:
            docs = {"apiVersion": "v1", "kind": "List", "items": new_nodes}
            self.kubectl("create", "-f", "-", input=yaml.safe_dump(docs))
        dra: list[dict[str, Any]] = [*shapes.device_classes(shape), *shapes.resource_slices(shape)]
        self.kubectl(
            "apply",
            "--server-side",
            "--field-manager=atoll-sandbox",
            "-f",
            "-",
            input=yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": dra}),
        )
        names = [n["metadata"]["name"] for n in shapes.nodes(shape)]
        self.kubectl(
            "wait",
            "--for=condition=Ready",
            "--timeout=120s",
            *[f"node/{n}" for n in names],
            timeout=150,
        )
        log(f"shape {shape.name}: {len(names)} nodes Ready, {shape.gpu_count()} GPUs")

    def down(self, *, log: Callable[[str], None] = print) -> list[str]:
        """Stop every recorded process (reverse order, by pid) and remove the state."""
        state = self.load_state()
        stopped = []
        if state is not None:
            for proc in reversed(state.procs):
                if stop(proc):
                    stopped.append(proc.name)
            if state.etcd_dir:
                shutil.rmtree(Path(state.etcd_dir).parent, ignore_errors=True)
        if self.root.exists():
            shutil.rmtree(self.root, ignore_errors=True)
        log(f"sandbox down: stopped {', '.join(stopped) if stopped else 'nothing'}")
        return stopped
