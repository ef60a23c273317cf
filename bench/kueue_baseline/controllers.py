"""The two controllers under test, each started on its own fresh sandbox: Kueue's manager
(built from the pinned sigs.k8s.io/kueue Go module) and `atoll run`. Both get the same client
budget (qps/burst), no webhooks, no leader election, waitForPodsReady off, and metrics/health
on 127.0.0.1. Processes are ours: started here, stopped here by pid.
"""

from __future__ import annotations

import abc
import contextlib
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from atoll import pki
from atoll.sandbox import binaries
from atoll.sandbox.cluster import Sandbox
from atoll.sandbox.processes import free_port

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
KUEUE_MODULE_DIR = HERE / "kueue"
KUEUE_NAMESPACE = "kueue-system"
ATOLL_NAMESPACE = "atoll-system"
GO_ENV = {"GOWORK": "off", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-trimpath"}
METRICS_READER_NAME = "bench-metrics-reader"
METRICS_READER = [
    {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": METRICS_READER_NAME, "namespace": KUEUE_NAMESPACE},
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": METRICS_READER_NAME},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": METRICS_READER_NAME},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": METRICS_READER_NAME,
        },
        "subjects": [
            {"kind": "ServiceAccount", "name": METRICS_READER_NAME, "namespace": KUEUE_NAMESPACE}
        ],
    },
]
"""Who may read Kueue's /metrics (`Kueue.metrics_text`)."""
# Kueue features the baseline shape does not use; off so that their controllers, servers and
# CRD lookups do not run (MultiKueue, TAS, the visibility API server).
KUEUE_FEATURE_GATES = "VisibilityOnDemand=false,MultiKueue=false,TopologyAwareScheduling=false"


@dataclass(frozen=True, slots=True)
class Budget:
    qps: int
    burst: int

    @classmethod
    def parse(cls, text: str) -> Budget:
        qps, burst = text.split("/")
        return cls(int(qps), int(burst))

    def __str__(self) -> str:
        return f"{self.qps}/{self.burst}"


# -- process accounting ----------------------------------------------------------------------
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of a process (from /proc/<pid>/stat)."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def peak_rss_mib(pid: int) -> float:
    """VmHWM (peak resident set) of a process, in MiB."""
    m = re.search(r"VmHWM:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(m.group(1)) / 1024 if m else float("nan")


def _http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return int(r.status)
    except OSError:
        return 0


def counters(text: str, name: str) -> dict[str, float]:
    """The samples of the metric `name` in a Prometheus text exposition, by their labels
    (`{a="b"}`)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, _, value = line.rpartition(" ")
            out[labels.removeprefix(name)] = float(value)
    return out


class Controller(abc.ABC):
    """A controller process on a sandbox: start, wait ready, sample, stop. Subclasses (Kueue,
    atoll) say how the process is started."""

    name = "controller"

    def __init__(self, sandbox: Sandbox, budget: Budget, workdir: Path) -> None:
        self.sandbox = sandbox
        self.budget = budget
        self.workdir = workdir
        self.log = workdir / f"{self.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.health_port = free_port()
        self.metrics_port = free_port()
        self.cpu_at_ready = 0.0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @abc.abstractmethod
    def argv(self) -> list[str]:
        """The controller's command line."""

    def env(self) -> dict[str, str]:
        return dict(os.environ, KUBECONFIG=str(self.sandbox.kubeconfig))

    @abc.abstractmethod
    def prepare(self) -> None:
        """Install what the controller needs on its fresh sandbox."""

    def start(self, timeout: float = 120) -> None:
        self.prepare()
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.argv(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env(),
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}):\n{self.tail()}")
            if _http_status(f"http://127.0.0.1:{self.health_port}/readyz") == 200:
                self.cpu_at_ready = cpu_seconds(self.pid)
                return
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready in {timeout:.0f}s:\n{self.tail()}")

    def sample(self) -> dict[str, float]:
        return {
            "cpu_s": cpu_seconds(self.pid) - self.cpu_at_ready,
            "cpu_total_s": cpu_seconds(self.pid),
            "peak_rss_mib": peak_rss_mib(self.pid),
        }

    def metrics_text(self) -> str | None:
        """The controller's /metrics now (None when it does not answer)."""
        try:
            url = f"http://127.0.0.1:{self.metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as r:
                return str(r.read().decode())
        except OSError:
            return None

    def scrape(self) -> dict[str, dict[str, float]]:
        """From /metrics (also saved next to the log): `requests`, atoll's own API request
        counters (`atoll_api_requests_total`; Kueue has none such), and `attempts`, the
        scheduling cycles by result (`kueue_admission_attempts_total`, which both export)."""
        text = self.metrics_text()
        if text is None:
            return {}
        (self.workdir / f"{self.name}.metrics.txt").write_text(text)
        attempts: dict[str, float] = {}
        for labels, v in counters(text, "kueue_admission_attempts_total").items():
            result = re.sub(r'.*result="([^"]*)".*', r"\1", labels)
            attempts[result] = attempts.get(result, 0.0) + v  # summed over the other labels
        return {"requests": counters(text, "atoll_api_requests_total"), "attempts": attempts}

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


# -- atoll -----------------------------------------------------------------------------------
class Atoll(Controller):
    name = "atoll"

    def __init__(
        self, sandbox: Sandbox, budget: Budget, workdir: Path, *, tracemalloc: bool = False
    ) -> None:
        super().__init__(sandbox, budget, workdir)
        self.tracemalloc = tracemalloc
        self.tracemalloc_out = workdir / "atoll.tracemalloc.txt"

    def dump_tracemalloc(self, timeout: float = 120) -> str | None:
        """With `tracemalloc`: the live allocations report (see traced.py), else None."""
        if not self.tracemalloc or not self.alive():
            return None
        self.proc.send_signal(signal.SIGUSR1)  # type: ignore[union-attr]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.tracemalloc_out.exists():
                time.sleep(1.0)  # being written
                return self.tracemalloc_out.read_text()
            time.sleep(0.5)
        return None

    def prepare(self) -> None:
        self.sandbox.kubectl("apply", "--server-side", "-f", str(REPO / "crds"))
        self.sandbox.kubectl(
            "wait", "--for=condition=Established", "crd", "--all", "--timeout=300s"
        )
        self.sandbox.kubectl("create", "namespace", ATOLL_NAMESPACE)

    def argv(self) -> list[str]:
        sets = (
            f"namespace={ATOLL_NAMESPACE}",
            f"clientConnection.qps={self.budget.qps}",
            f"clientConnection.burst={self.budget.burst}",
            "featureGates.DisableWaitForPodsReady=true",
        )
        entry = [str(HERE / "traced.py")] if self.tracemalloc else ["-m", "atoll"]
        return [
            sys.executable,
            *entry,
            "run",
            "--kubeconfig",
            str(self.sandbox.kubeconfig),
            "--no-leader-elect",
            "--webhook",
            "off",
            "--metrics-bind-address",
            f"127.0.0.1:{self.metrics_port}",
            "--health-bind-address",
            f"127.0.0.1:{self.health_port}",
            *[a for s in sets for a in ("--set", s)],
        ]

    def env(self) -> dict[str, str]:
        return dict(
            super().env(),
            PYTHONPATH=str(REPO / "operator"),
            ATOLL_TRACEMALLOC_OUT=str(self.tracemalloc_out),
        )


# -- Kueue -----------------------------------------------------------------------------------
def kueue_version() -> str:
    text = (KUEUE_MODULE_DIR / "go.mod").read_text()
    m = re.search(r"sigs\.k8s\.io/kueue (v\S+)", text)
    if m is None:
        raise RuntimeError(f"no sigs.k8s.io/kueue requirement in {KUEUE_MODULE_DIR / 'go.mod'}")
    return m.group(1)


def kueue_binary(version: str) -> Path:
    return binaries.cache_root() / "kueue" / version / "bin" / "kueue"


def build_kueue(version: str, log: object = print) -> Path:
    """Build Kueue's manager (cmd/kueue) into the cache only when it is missing (niced)."""
    out = kueue_binary(version)
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    print(f"building Kueue {version} manager into {out} (first time: several minutes)")
    ldflags = f"-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion={version}"
    subprocess.run(
        [
            "nice",
            "-n",
            "19",
            "go",
            "build",
            "-ldflags",
            ldflags,
            "-o",
            str(tmp),
            "sigs.k8s.io/kueue/cmd/kueue",
        ],
        cwd=KUEUE_MODULE_DIR,
        env=dict(os.environ, **GO_ENV),
        check=True,
    )
    tmp.replace(out)
    return out


def kueue_module_dir(version: str) -> Path:
    """Kueue's source at `version`, as the bench's wrapper module pins it."""
    return binaries.module_source("kueue", "sigs.k8s.io/kueue", version, cwd=KUEUE_MODULE_DIR)


class Kueue(Controller):
    name = "kueue"

    def __init__(
        self, sandbox: Sandbox, budget: Budget, workdir: Path, *, atoll_crds: bool = False
    ) -> None:
        super().__init__(sandbox, budget, workdir)
        self.atoll_crds = atoll_crds
        self.version = kueue_version()
        self.binary = build_kueue(self.version)
        self.webhook_port = free_port()

    def prepare(self) -> None:
        # Kueue's own CRDs by default. With atoll_crds, atoll's (same group and v1beta2
        # schema, but the pod template is not expanded: ~37 kB instead of ~1.4 MB for
        # Workloads), to separate the controller's cost from the API server's per-write cost.
        crd_dir = kueue_module_dir(self.version) / "config" / "components" / "crd" / "bases"
        if self.atoll_crds:
            crd_dir = REPO / "crds"
        for path in sorted(crd_dir.glob("*.yaml")):
            self.sandbox.kubectl("apply", "--server-side", "-f", str(path))
        self.sandbox.kubectl(
            "wait", "--for=condition=Established", "crd", "--all", "--timeout=300s"
        )
        self.sandbox.kubectl("create", "namespace", KUEUE_NAMESPACE)
        self.sandbox.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(METRICS_READER))
        certs = pki.write_serving_pki(
            self.workdir / "kueue-certs", dns=("localhost",), ips=("127.0.0.1",)
        )
        config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": KUEUE_NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": f"127.0.0.1:{self.metrics_port}"},
            "webhook": {
                "host": "127.0.0.1",
                "port": self.webhook_port,
                "certDir": str(certs.serving_cert.parent),
            },
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "clientConnection": {"qps": self.budget.qps, "burst": self.budget.burst},
            "integrations": {"frameworks": ["batch/job"]},
        }
        self.config = self.workdir / "kueue-config.yaml"
        self.config.write_text(yaml.safe_dump(config, sort_keys=False))
        self.certs = certs

    def metrics_text(self) -> str | None:
        """Kueue serves /metrics over HTTPS to authenticated and authorized clients only
        (controller-runtime's filter, which reviews a bearer token): read with a token of the
        ServiceAccount `METRICS_READER` makes (the serving certificate is ours, not checked)."""
        made = self.sandbox.kubectl(
            "create", "token", METRICS_READER_NAME, "-n", KUEUE_NAMESPACE, check=False
        )
        if made.returncode != 0:
            return None
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        request = urllib.request.Request(
            f"https://127.0.0.1:{self.metrics_port}/metrics",
            headers={"Authorization": f"Bearer {made.stdout.strip()}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=5, context=context) as r:
                return str(r.read().decode())
        except OSError:
            return None

    def argv(self) -> list[str]:
        # With internalCertManagement off, Kueue v0.17's main.go reads the metrics serving
        # certificate from the fixed path /etc/kueue/metrics/certs. Give it one in a private
        # mount namespace (a tmpfs over /etc, seen only by this process), so that nothing is
        # written outside our temp dir. `exec` keeps the pid: /proc stats are Kueue's own.
        script = (
            "set -e; mount -t tmpfs -o size=1m,mode=0755 bench-etc /etc; "
            'mkdir -p /etc/kueue/metrics/certs; cp "$1" /etc/kueue/metrics/certs/tls.crt; '
            'cp "$2" /etc/kueue/metrics/certs/tls.key; shift 2; exec "$@"'
        )
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "/bin/sh",
            "-c",
            script,
            "kueue-wrapper",
            str(self.certs.serving_cert),
            str(self.certs.serving_key),
            str(self.binary),
            f"--config={self.config}",
            f"--feature-gates={KUEUE_FEATURE_GATES}",
        ]


def teardown(
    sandbox: Sandbox, controller: Controller | None, spy: subprocess.Popen[bytes] | None
) -> None:
    """After a run: the profiler, the controller and the run's fresh sandbox stopped, and the
    sandbox's folder removed."""
    stop_py_spy(spy)
    if controller is not None:
        controller.stop()
    sandbox.down(log=lambda _m: None)
    shutil.rmtree(sandbox.root.parent, ignore_errors=True)


def start_py_spy(pid: int, out: Path, rate: int = 100) -> subprocess.Popen[bytes] | None:
    """Sample `pid` with py-spy (raw collapsed stacks) until the process is stopped."""
    exe = Path(sys.executable).parent / "py-spy"
    if not exe.exists():
        return None
    log = out.with_suffix(".log")
    with open(log, "ab") as f:
        return subprocess.Popen(
            [
                str(exe),
                "record",
                "--pid",
                str(pid),
                "--rate",
                str(rate),
                "--format",
                "raw",
                "--output",
                str(out),
                "--nonblocking",
            ],
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_py_spy(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# Leaf frames where a thread waits rather than runs: the event loop's epoll and idle
# thread-pool workers. py-spy counts them; they are left out of the shares below.
IDLE_LEAVES = (
    "select (selectors.py",
    "_worker (concurrent/futures/thread.py",
    "wait (threading.py",
)


def profile_top(raw: Path, n: int = 25) -> dict[str, list[tuple[str, float]]]:
    """Top frames by self and by inclusive share of the non-idle samples of a py-spy raw file."""
    self_counts: dict[str, int] = {}
    total_counts: dict[str, int] = {}
    samples = 0
    with contextlib.suppress(OSError):
        for line in raw.read_text(errors="replace").splitlines():
            stack, _, count_s = line.rpartition(" ")
            if not stack or not count_s.isdigit():
                continue
            count = int(count_s)
            frames = stack.split(";")
            if any(idle in frames[-1] for idle in IDLE_LEAVES):
                continue
            samples += count
            self_counts[frames[-1]] = self_counts.get(frames[-1], 0) + count
            for fr in set(frames):
                total_counts[fr] = total_counts.get(fr, 0) + count
    if samples == 0:
        return {"self": [], "total": []}

    def top(d: dict[str, int]) -> list[tuple[str, float]]:
        return [(k, 100 * v / samples) for k, v in sorted(d.items(), key=lambda kv: -kv[1])[:n]]

    return {"self": top(self_counts), "total": top(total_counts), "samples": [("n", samples)]}
