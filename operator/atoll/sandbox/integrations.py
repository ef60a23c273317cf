"""The job integrations' own controllers in the sandbox (JobSet, LWS, MPIJob, Trainer).

Each controller is built from its Go module, pinned by a wrapper module under
`deploy/sandbox/<name>`, into the binary cache keyed by its version, niced, and only when
missing. `start` installs its CRDs from the same module (server-side apply), runs it as one
more sandbox process on loopback (no leader election, metrics off, its own cert management
off), and registers its admission webhooks from the module's webhook manifests with a
loopback URL and a self-signed CA (`atoll.pki`), so no cert-manager and no Service is needed.

A controller whose upstream command cannot be confined to loopback is built from the
wrapper module's own small main instead (`package="."`). mpi-operator (v0.8.2 included)
serves /healthz on `:8080`, hard-coded: its main opens no port, takes no config file, and
writes a ready file once its informer caches are synced. Kubeflow Trainer's command listens
for webhooks on every interface and keeps its certificates in a Secret behind a Service: its
main reads the same Configuration file as JobSet's and LWS's commands (webhook host, port and
certificate folder, health address) and serves only there.
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from atoll import pki
from atoll.sandbox import binaries
from atoll.sandbox.cluster import Sandbox
from atoll.sandbox.processes import Proc, free_port, http_ok, http_served, wait_until


@dataclass(frozen=True, slots=True)
class Integration:
    """How one integration's controller is built, configured and started."""

    name: str
    module_path: str
    version: str
    package: str
    version_var: str | None
    crd_dir: str
    """A folder of the module's CRD manifests, or one CRD file."""
    webhook_manifest: str | None
    config_api: str | None
    """None: the controller takes no config file and serves nothing; it is ready when it has
    written the file passed as `--ready-file` (the wrapper module's own main)."""
    pod_label: str
    """Pod webhooks are narrowed to pods with this label: the sandbox's other pods never
    depend on this controller being up."""
    needs: tuple[str, ...] = ()
    """Integrations whose controller (and CRDs) must run first: Trainer creates JobSets."""

    @property
    def process(self) -> str:
        return f"{self.name}-controller"

    def binary(self) -> Path:
        return (
            binaries.cache_root()
            / "sandbox"
            / f"{self.name}-{self.version}"
            / "bin"
            / (self.process)
        )

    def source(self) -> Path:
        return binaries.module_source(self.name, self.module_path, self.version)


INTEGRATIONS = {
    "jobset": Integration(
        name="jobset",
        module_path="sigs.k8s.io/jobset",
        version="v0.11.0",
        package="sigs.k8s.io/jobset",
        version_var="sigs.k8s.io/jobset/pkg/version.GitVersion",
        crd_dir="config/components/crd/bases",
        webhook_manifest="config/components/webhook/manifests.yaml",
        config_api="config.jobset.x-k8s.io/v1alpha1",
        pod_label="jobset.sigs.k8s.io/jobset-name",
    ),
    "lws": Integration(
        name="lws",
        module_path="sigs.k8s.io/lws",
        version="v0.7.0",
        package="sigs.k8s.io/lws/cmd",
        version_var="sigs.k8s.io/lws/pkg/version.GitVersion",
        crd_dir="config/crd/bases",
        webhook_manifest="config/webhook/manifests.yaml",
        config_api="config.lws.x-k8s.io/v1alpha1",
        pod_label="leaderworkerset.sigs.k8s.io/name",
    ),
    "mpi": Integration(
        name="mpi",
        module_path="github.com/kubeflow/mpi-operator",
        version="v0.8.2",
        package=".",
        version_var=None,
        crd_dir="manifests/base/kubeflow.org_mpijobs.yaml",
        webhook_manifest=None,
        config_api=None,
        pod_label="training.kubeflow.org/job-name",
    ),
    "trainer": Integration(
        name="trainer",
        module_path="github.com/kubeflow/trainer/v2",
        version="v2.0.0",
        package=".",
        version_var=None,
        crd_dir="manifests/base/crds",
        webhook_manifest="manifests/base/webhook/manifests.yaml",
        config_api="sandbox.atoll.dev/v1alpha1",  # read by deploy/sandbox/trainer/main.go
        pod_label="jobset.sigs.k8s.io/jobset-name",
        needs=("jobset",),
    ),
}


def parse(names: str | None) -> list[Integration]:
    """`jobset,lws` → the integrations, in order, each once and after those it needs (`trainer`
    brings `jobset` before it); unknown names raise ValueError."""
    out: list[Integration] = []
    for name in (n.strip() for n in (names or "").split(",")):
        if not name:
            continue
        if name not in INTEGRATIONS:
            known = ", ".join(INTEGRATIONS)
            raise ValueError(f"unknown integration {name!r} (known: {known})")
        for wanted in (*INTEGRATIONS[name].needs, name):
            if INTEGRATIONS[wanted] not in out:
                out.append(INTEGRATIONS[wanted])
    return out


def build(integration: Integration, *, log: Callable[[str], None] = print) -> float | None:
    """Build the controller into the cache if missing; the seconds spent, None when cached."""
    out = integration.binary()
    if out.exists():
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    what = f"{integration.module_path} {integration.version}"
    log(f"building {what} into {out} (first time: minutes; cached afterwards)")
    ldflags = "-s -w"
    if integration.version_var:
        ldflags += f" -X {integration.version_var}={integration.version}"
    seconds = binaries.go_build(
        what, integration.name, (integration.package,), str(tmp), ldflags=ldflags
    )
    tmp.replace(out)
    return seconds


def webhooks(integration: Integration, source: Path, port: int, ca: bytes) -> list[dict[str, Any]]:
    """The module's webhook configurations, pointed at the controller on 127.0.0.1:`port`."""
    if integration.webhook_manifest is None:
        return []
    bundle = base64.b64encode(ca).decode()
    docs = [d for d in yaml.safe_load_all((source / integration.webhook_manifest).read_text()) if d]
    for doc in docs:
        doc["metadata"] = {"name": f"{integration.name}-{doc['metadata']['name']}"}
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
            if any("pods" in rule.get("resources", ()) for rule in hook.get("rules", ())):
                hook["objectSelector"] = {
                    "matchExpressions": [{"key": integration.pod_label, "operator": "Exists"}]
                }
    return docs


def crd_files(integration: Integration, source: Path) -> list[Path]:
    """The module's CRD manifests: every YAML file of `crd_dir` but a kustomization (Trainer
    keeps one beside its CRDs), or `crd_dir` itself when it names one file (mpi-operator keeps
    its CRD next to its deployment manifests)."""
    where = source / integration.crd_dir
    if where.is_file():
        return [where]
    return sorted(p for p in where.glob("*.yaml") if p.name != "kustomization.yaml")


def start(
    sandbox: Sandbox, integration: Integration, *, log: Callable[[str], None] = print
) -> Proc:
    """CRDs, the controller process (once it is ready) and its webhooks."""
    binary = integration.binary()
    if not binary.exists():
        raise binaries.BuildError(
            f"{integration.process} not built: run `atoll sandbox build --with {integration.name}`"
        )
    source = integration.source()
    files = crd_files(integration, source)
    log(f"installing {integration.name} CRDs from {source / integration.crd_dir}")
    sandbox.kubectl(
        "apply", "--server-side", "--force-conflicts", *(f"--filename={f}" for f in files)
    )
    crds = [
        f"crd/{doc['metadata']['name']}"
        for path in files
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc.get("kind") == "CustomResourceDefinition"
    ]
    sandbox.kubectl("wait", "--for=condition=Established", "--timeout=60s", *crds)
    workdir = sandbox.root / integration.name
    if integration.config_api is None:
        return _start_plain(sandbox, integration, workdir, log)
    certs = pki.write_serving_pki(workdir / "certs", dns=("localhost",), ips=("127.0.0.1",))
    health, webhook = free_port(), free_port()
    config = {
        "apiVersion": integration.config_api,
        "kind": "Configuration",
        "webhook": {
            "host": "127.0.0.1",
            "port": webhook,
            "certDir": str(certs.serving_cert.parent),
        },
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
        "metrics": {"bindAddress": "0"},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
    }
    config_path = workdir / "config.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    log(f"starting {integration.process} (webhooks on https://127.0.0.1:{webhook})")
    argv = [str(binary), f"--kubeconfig={sandbox.kubeconfig}", f"--config={config_path}"]
    proc = sandbox.add_process(integration.process, argv)
    ready = f"http://127.0.0.1:{health}/readyz"
    wait_until(proc, lambda: http_ok(ready), timeout=120, what="/readyz")
    hooks = webhooks(integration, source, webhook, certs.ca_cert.read_bytes())
    # /readyz can answer before the webhook handlers are registered (then the API server
    # gets a 404 for the first JobSet): wait until every hook's path is served.
    urls = [h["clientConfig"]["url"] for doc in hooks for h in doc["webhooks"]]
    tls = ssl.create_default_context(cafile=str(certs.ca_cert))
    wait_until(
        proc, lambda: all(http_served(u, tls) for u in urls), timeout=60, what="its webhook paths"
    )
    sandbox.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        "-",
        input=yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": hooks}),
    )
    return proc


def _start_plain(
    sandbox: Sandbox, integration: Integration, workdir: Path, log: Callable[[str], None]
) -> Proc:
    """A controller that serves nothing: ready once it has written its ready file."""
    workdir.mkdir(parents=True, exist_ok=True)
    ready = workdir / "ready"
    ready.unlink(missing_ok=True)
    log(f"starting {integration.process} (no listening port)")
    argv = [str(integration.binary()), f"--kubeconfig={sandbox.kubeconfig}"]
    proc = sandbox.add_process(integration.process, [*argv, f"--ready-file={ready}"])
    wait_until(proc, ready.exists, timeout=120, what="its informer caches to sync")
    return proc
