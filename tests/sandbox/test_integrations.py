"""The integrations' real controllers run in the sandbox: built from their pinned Go modules,
CRDs installed from the module, webhooks on loopback; objects atoll does not manage work."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from atoll.sandbox import binaries, integrations
from atoll.sandbox.processes import Proc, is_ours
from tests.conftest import KubeCluster, missing_component

JOBSET = integrations.INTEGRATIONS["jobset"]


def test_with_names_parse_in_order_and_unknown_names_are_refused() -> None:
    assert integrations.parse("jobset, ") == [JOBSET]
    assert integrations.parse(None) == []
    with pytest.raises(ValueError, match="unknown integration 'kubeflow'"):
        integrations.parse("jobset,kubeflow")


def test_controller_binary_is_cached_by_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATOLL_CACHE_DIR", "/tmp/atoll-cache-test")
    path = JOBSET.binary()
    assert path.parts[:3] == ("/", "tmp", "atoll-cache-test")
    assert f"jobset-{JOBSET.version}" in path.parts


def test_wrapper_module_pins_the_controller_version() -> None:
    go_mod = (binaries.modules_dir() / JOBSET.name / "go.mod").read_text()
    assert f"tool {JOBSET.package}" in go_mod
    assert f"{JOBSET.module_path} {JOBSET.version}" in go_mod


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


@pytest.fixture(scope="session")
def jobset_controller(cluster: KubeCluster) -> Iterator[Proc | None]:
    """JobSet's controller inside the session's sandbox, started on first use."""
    if cluster.sandbox is None:
        found = cluster.kubectl("get", "crd", "jobsets.jobset.x-k8s.io", check=False)
        if found.returncode != 0:
            missing_component("the JobSet controller on ATOLL_TEST_KUBECONFIG's cluster")
        yield None
        return
    if not JOBSET.binary().exists():
        missing_component("the JobSet controller: run `atoll sandbox build --with jobset`")
    yield integrations.start(cluster.sandbox, JOBSET, log=lambda _m: None)


def _jobset(name: str, namespace: str) -> str:
    def replicated(rj: str, replicas: int, pods: int) -> dict:  # type: ignore[type-arg]
        container = {
            "name": "main",
            "image": "registry.invalid/atoll/sleep:1",
            "resources": {"requests": {"cpu": "100m"}},
        }
        job_spec = {
            "parallelism": pods,
            "completions": pods,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
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
