"""The integrations' real controllers run in the sandbox: built from their pinned Go modules,
CRDs installed from the module, webhooks on loopback; objects atoll does not manage work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from atoll.sandbox import binaries, integrations
from atoll.sandbox.processes import Proc, is_ours
from tests.conftest import KubeCluster, missing_component

JOBSET = integrations.INTEGRATIONS["jobset"]
LWS = integrations.INTEGRATIONS["lws"]
MPI = integrations.INTEGRATIONS["mpi"]
TRAINER = integrations.INTEGRATIONS["trainer"]
SLEEPER = {
    "name": "main",
    "image": "registry.invalid/atoll/sleep:1",
    "resources": {"requests": {"cpu": "100m"}},
}


def test_with_names_parse_in_order_and_unknown_names_are_refused() -> None:
    assert integrations.parse("jobset, lws") == [JOBSET, LWS]
    assert integrations.parse("mpi,jobset") == [MPI, JOBSET]
    assert integrations.parse(None) == []
    assert integrations.parse("jobset,jobset") == [JOBSET]


def test_trainer_brings_the_jobset_controller_first() -> None:
    """Kubeflow Trainer creates JobSets: their CRD and controller must be there before it."""
    assert integrations.parse("trainer") == [JOBSET, TRAINER]
    assert integrations.parse("mpi,trainer,jobset") == [MPI, JOBSET, TRAINER]
    with pytest.raises(ValueError, match="unknown integration 'kubeflow'"):
        integrations.parse("jobset,kubeflow")


def test_controller_binary_is_cached_by_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATOLL_CACHE_DIR", "/tmp/atoll-cache-test")
    path = JOBSET.binary()
    assert path.parts[:3] == ("/", "tmp", "atoll-cache-test")
    assert f"jobset-{JOBSET.version}" in path.parts


@pytest.mark.parametrize(
    "integration", list(integrations.INTEGRATIONS.values()), ids=lambda i: i.name
)
def test_wrapper_module_pins_the_controller_version(integration: integrations.Integration) -> None:
    module = binaries.modules_dir() / integration.name
    go_mod = (module / "go.mod").read_text()
    if integration.package == ".":  # the wrapper module's own main, on the library
        assert f"{integration.module_path}/pkg/controller" in (module / "main.go").read_text()
    else:
        assert f"tool {integration.package}" in go_mod
    assert f"{integration.module_path} {integration.version}" in go_mod


def test_webhooks_point_at_loopback_and_pod_hooks_only_at_the_kinds_pods(tmp_path: Path) -> None:
    manifest = tmp_path / JOBSET.webhook_manifest
    manifest.parent.mkdir(parents=True)
    hook = {
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"service": {"name": "webhook-service", "path": "/mutate--v1-pod"}},
        "name": "mpod.kb.io",
        "rules": [{"apiGroups": [""], "resources": ["pods"], "operations": ["CREATE"]}],
    }
    other = dict(hook, name="mjobset.kb.io", rules=[{"resources": ["jobsets"]}])
    doc = {
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "mutating-webhook-configuration"},
        "webhooks": [hook, other],
    }
    manifest.write_text(yaml.safe_dump(doc))
    [out] = integrations.webhooks(JOBSET, tmp_path, 9443, b"CA")
    assert out["metadata"]["name"] == "jobset-mutating-webhook-configuration"
    pod, jobset = out["webhooks"]
    assert pod["clientConfig"] == {
        "url": "https://127.0.0.1:9443/mutate--v1-pod",
        "caBundle": "Q0E=",
    }
    assert pod["objectSelector"]["matchExpressions"][0]["key"] == JOBSET.pod_label
    assert "objectSelector" not in jobset


def test_the_mpi_controller_opens_no_port() -> None:
    """mpi-operator's own command serves /healthz on :8080 on every interface; the sandbox's
    main has no server, no metrics and no leader election (nothing to bind)."""
    main = (binaries.modules_dir() / MPI.name / "main.go").read_text()
    code = "\n".join(line for line in main.splitlines() if not line.lstrip().startswith("//"))
    for server in ("net/http", "ListenAndServe", "leaderelection", "net.Listen"):
        assert server not in code
    assert MPI.config_api is None
    assert integrations.webhooks(MPI, Path("/nonexistent"), 1, b"CA") == []


def test_the_trainer_controller_serves_on_the_configured_loopback_address_only() -> None:
    """Trainer's own command listens for webhooks on every interface and rotates certificates
    through a Secret and a Service; the sandbox's main takes host, port and certificates from
    the Configuration file the sandbox writes, and has no metrics or leader election."""
    main = (binaries.modules_dir() / TRAINER.name / "main.go").read_text()
    code = "\n".join(line for line in main.splitlines() if not line.lstrip().startswith("//"))
    assert "Host:    cfg.Webhook.Host" in code
    assert 'BindAddress: "0"' in code
    for absent in ("ManageCerts", "cert-controller", "LeaderElection:         true"):
        assert absent not in code
    assert TRAINER.config_api is not None
    assert f"{TRAINER.module_path}/pkg/controller" in main


def test_crds_come_from_a_folder_or_from_one_file(tmp_path: Path) -> None:
    crd = tmp_path / MPI.crd_dir
    crd.parent.mkdir(parents=True)
    crd.write_text("kind: CustomResourceDefinition\n")
    (crd.parent / "deployment.yaml").write_text("kind: Deployment\n")
    assert integrations.crd_files(MPI, tmp_path) == [crd]  # not the deployment next to it
    (tmp_path / JOBSET.crd_dir).mkdir(parents=True)
    (tmp_path / JOBSET.crd_dir / "b.yaml").write_text("")
    (tmp_path / JOBSET.crd_dir / "a.yaml").write_text("")
    (tmp_path / JOBSET.crd_dir / "kustomization.yaml").write_text("kind: Kustomization\n")
    assert [p.name for p in integrations.crd_files(JOBSET, tmp_path)] == ["a.yaml", "b.yaml"]


def _controller(
    cluster: KubeCluster, integration: integrations.Integration, crd: str
) -> Proc | None:
    """The integration's controller inside the session's sandbox, started on first use (on
    ATOLL_TEST_KUBECONFIG's cluster it must already run)."""
    if cluster.sandbox is None:
        if cluster.kubectl("get", "crd", crd, check=False).returncode != 0:
            missing_component(f"the {integration.process} on ATOLL_TEST_KUBECONFIG's cluster")
        return None
    if not integration.binary().exists():
        missing_component(
            f"the {integration.process}: run `atoll sandbox build --with {integration.name}`"
        )
    return integrations.start(cluster.sandbox, integration, log=lambda _m: None)


@pytest.fixture(scope="session")
def jobset_controller(cluster: KubeCluster) -> Proc | None:
    return _controller(cluster, JOBSET, "jobsets.jobset.x-k8s.io")


@pytest.fixture(scope="session")
def lws_controller(cluster: KubeCluster) -> Proc | None:
    return _controller(cluster, LWS, "leaderworkersets.leaderworkerset.x-k8s.io")


@pytest.fixture(scope="session")
def mpi_controller(cluster: KubeCluster) -> Proc | None:
    return _controller(cluster, MPI, "mpijobs.kubeflow.org")


@pytest.fixture(scope="session")
def trainer_controller(cluster: KubeCluster, jobset_controller: Proc | None) -> Proc | None:
    """Kubeflow Trainer, after the JobSet controller it creates JobSets for."""
    del jobset_controller
    return _controller(cluster, TRAINER, "trainjobs.trainer.kubeflow.org")


def _jobset(name: str, namespace: str) -> str:
    def replicated(rj: str, replicas: int, pods: int) -> dict:  # type: ignore[type-arg]
        job_spec = {
            "parallelism": pods,
            "completions": pods,
            "template": {"spec": {"restartPolicy": "Never", "containers": [SLEEPER]}},
        }
        return {"name": rj, "replicas": replicas, "template": {"spec": job_spec}}

    body = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicatedJobs": [replicated("leader", 1, 1), replicated("workers", 2, 2)]},
    }
    return json.dumps(body)


@pytest.mark.cluster
def test_unlabelled_jobset_runs_its_jobs_and_pods(
    cluster: KubeCluster, namespace: str, jobset_controller: Proc | None
) -> None:
    cluster.kubectl("create", "-f", "-", input=_jobset("plain", namespace))
    cluster.kubectl(
        "wait",
        "--for=condition=Completed",
        "jobset/plain",
        "-n",
        namespace,
        "--timeout=120s",
        timeout=130,
    )
    label = "jobset.sigs.k8s.io/jobset-name=plain"
    jobs = json.loads(
        cluster.kubectl("get", "jobs", "-n", namespace, "-l", label, "-o", "json").stdout
    )
    assert sorted(j["metadata"]["name"] for j in jobs["items"]) == [
        "plain-leader-0",
        "plain-workers-0",
        "plain-workers-1",
    ]
    assert all(not j["spec"].get("suspend") for j in jobs["items"])
    pods = json.loads(
        cluster.kubectl("get", "pods", "-n", namespace, "-l", label, "-o", "json").stdout
    )
    assert len(pods["items"]) == 5
    assert all(p["spec"].get("nodeName") for p in pods["items"])
    assert all(p["status"]["phase"] == "Succeeded" for p in pods["items"])
    if jobset_controller is not None:
        assert is_ours(jobset_controller)


@pytest.mark.cluster
def test_unlabelled_leaderworkerset_runs_its_leader_and_workers(
    cluster: KubeCluster, namespace: str, lws_controller: Proc | None
) -> None:
    body = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "serve", "namespace": namespace},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": 3,
                "workerTemplate": {"spec": {"containers": [SLEEPER]}},
            },
        },
    }
    cluster.kubectl("create", "-f", "-", input=json.dumps(body))
    label = "leaderworkerset.sigs.k8s.io/name=serve"

    def running() -> list[dict]:  # type: ignore[type-arg]
        out = cluster.kubectl("get", "pods", "-n", namespace, "-l", label, "-o", "json").stdout
        return [p for p in json.loads(out)["items"] if p["status"].get("phase") == "Running"]

    cluster.wait_for("the leader and 2 workers Running", lambda: len(running()) == 3, timeout=120)
    names = sorted(p["metadata"]["name"] for p in running())
    assert names == ["serve-0", "serve-0-1", "serve-0-2"]
    if lws_controller is not None:
        assert is_ours(lws_controller)


@pytest.mark.cluster
def test_unlabelled_trainjob_runs_its_jobset_from_a_cluster_training_runtime(
    cluster: KubeCluster, namespace: str, trainer_controller: Proc | None
) -> None:
    """A TrainJob of 2 nodes on a ClusterTrainingRuntime: Trainer builds a JobSet from the
    runtime's template (its `node` job with 2 pods), JobSet runs it, the TrainJob completes."""
    runtime = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": f"sleep-{namespace}"},
        "spec": {
            "mlPolicy": {"numNodes": 1},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {
                                    "labels": {
                                        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
                                    }
                                },
                                "spec": {
                                    "template": {
                                        "spec": {"containers": [dict(SLEEPER, name="node")]}
                                    }
                                },
                            },
                        }
                    ]
                }
            },
        },
    }
    trainjob = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "plain", "namespace": namespace},
        "spec": {
            "runtimeRef": {"name": f"sleep-{namespace}", "kind": "ClusterTrainingRuntime"},
            "trainer": {"numNodes": 2},
        },
    }
    cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(runtime))
    try:
        cluster.kubectl("create", "-f", "-", input=json.dumps(trainjob))
        cluster.kubectl(
            "wait",
            "--for=condition=Complete",
            "trainjob/plain",
            "-n",
            namespace,
            "--timeout=180s",
            timeout=190,
        )
        jobset = json.loads(
            cluster.kubectl("get", "jobset", "plain", "-n", namespace, "-o", "json").stdout
        )
        assert jobset["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
        [node] = jobset["spec"]["replicatedJobs"]
        assert (node["name"], node["replicas"]) == ("node", 1)
        assert node["template"]["spec"]["parallelism"] == 2  # the TrainJob's numNodes
        label = "jobset.sigs.k8s.io/jobset-name=plain"
        pods = json.loads(
            cluster.kubectl("get", "pods", "-n", namespace, "-l", label, "-o", "json").stdout
        )
        assert len(pods["items"]) == 2
        assert all(p["status"]["phase"] == "Succeeded" for p in pods["items"])
    finally:
        # Trainer keeps a finalizer on a runtime while a TrainJob uses it.
        cluster.kubectl("delete", "trainjob", "plain", "-n", namespace, check=False)
        cluster.kubectl(
            "delete", "clustertrainingruntime", f"sleep-{namespace}", "--wait=false", check=False
        )
    if trainer_controller is not None:
        assert is_ours(trainer_controller)
