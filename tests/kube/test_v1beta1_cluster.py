"""Kueue's deprecated v1beta1 on the sandbox: an admin's v1beta1 manifests apply unchanged
(through atoll's conversion webhook for ClusterQueue and LocalQueue; by the API server alone
for the kinds alike in both versions), a Job is admitted through them, and each queue object
reads back in either version with Kueue's v1beta1 fields (spec.cohort, flavorUsage).
Workloads are served in v1beta2 only, so that no Workload change goes through the webhook."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from atoll.api import v1beta1
from atoll.kube import webhook
from atoll.sandbox.crds import apply_crds
from tests.conftest import REPO, KubeCluster
from tests.kube import builders as b
from tests.kube.conftest import OperatorProcess, apply, create, get_json, is_true, workload_of

pytestmark = pytest.mark.cluster

V1 = "kueue.x-k8s.io/v1beta1"


def _v1beta1_manifests(ns: str) -> str:
    """What an admin of an older Kueue has: a flavor, a priority class, a ClusterQueue with
    v1beta1's `cohort` and fungibility values, and a LocalQueue."""
    docs: list[dict[str, Any]] = [
        {"apiVersion": V1, "kind": "ResourceFlavor", "metadata": {"name": f"rf-{ns}"}},
        {
            "apiVersion": V1,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": f"high-{ns}"},
            "value": 1000,
        },
        {
            "apiVersion": V1,
            "kind": "ClusterQueue",
            "metadata": {"name": f"cq-{ns}"},
            "spec": {
                "cohort": f"co-{ns}",
                "namespaceSelector": {},
                "flavorFungibility": {"whenCanBorrow": "Borrow", "whenCanPreempt": "Preempt"},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", b.GPU],
                        "flavors": [
                            {
                                "name": f"rf-{ns}",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": 100},
                                    {"name": b.GPU, "nominalQuota": 4},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": V1,
            "kind": "LocalQueue",
            "metadata": {"name": "q", "namespace": ns},
            "spec": {"clusterQueue": f"cq-{ns}"},
        },
    ]
    return yaml.safe_dump_all(docs)


def _read(cluster: KubeCluster, plural: str, version: str, *args: str) -> dict[str, Any]:
    got = get_json(cluster, "get", f"{plural}.{version}.kueue.x-k8s.io", *args)
    assert isinstance(got, dict)
    return got


def test_v1beta1_queues_apply_unchanged_admit_a_job_and_read_back_in_both_versions(
    cluster: KubeCluster, operator: OperatorProcess, namespace: str
) -> None:
    ns = namespace
    cq = f"cq-{ns}"
    try:
        done = cluster.kubectl("apply", "-f", "-", input=_v1beta1_manifests(ns))
        assert "kueue.x-k8s.io/v1beta1 is deprecated" in done.stderr

        stored = _read(cluster, "clusterqueues", "v1beta2", cq)
        assert stored["apiVersion"] == v1beta1.V1BETA2
        assert stored["spec"]["cohortName"] == f"co-{ns}"
        assert "cohort" not in stored["spec"]
        assert stored["spec"]["flavorFungibility"] == {
            "whenCanBorrow": "MayStopSearch",
            "whenCanPreempt": "MayStopSearch",
        }
        old = _read(cluster, "clusterqueues", "v1beta1", cq)
        assert old["apiVersion"] == V1
        assert old["spec"]["cohort"] == f"co-{ns}"
        assert "cohortName" not in old["spec"]
        table = cluster.kubectl("get", "clusterqueues.v1beta1.kueue.x-k8s.io", cq).stdout
        assert table.split("\n")[1].split()[:2] == [cq, f"co-{ns}"]

        job = b.job("j", ns, queue="q", pods=2, run="600s", priority=f"high-{ns}")
        create(cluster, job)
        cluster.wait_for("j admitted", lambda: is_true(workload_of(cluster, ns, "j"), "Admitted"))
        wl = workload_of(cluster, ns, "j")
        assert wl is not None
        assert wl["spec"]["priorityClassRef"] == {
            "group": "kueue.x-k8s.io",
            "kind": "WorkloadPriorityClass",
            "name": f"high-{ns}",
        }
        assert wl["apiVersion"] == v1beta1.V1BETA2
        no = cluster.kubectl("get", "workloads.v1beta1.kueue.x-k8s.io", "-n", ns, check=False)
        assert no.returncode != 0
        assert "doesn't have a resource type" in no.stderr

        def flavor_usage() -> list[dict[str, Any]]:
            status = _read(cluster, "localqueues", "v1beta1", "q", "-n", ns).get("status") or {}
            assert "flavorsUsage" not in status
            return list(status.get("flavorUsage") or [])

        cluster.wait_for(
            "the v1beta1 LocalQueue shows its flavorUsage",
            lambda: any(
                r["name"] == b.GPU and r["total"] == "2"
                for f in flavor_usage()
                for r in f.get("resources") or ()
            ),
        )

        # The admin edits and re-applies the v1beta1 manifest: the change goes through.
        edited = _v1beta1_manifests(ns).replace("nominalQuota: 4", "nominalQuota: 6")
        assert edited != _v1beta1_manifests(ns)
        cluster.kubectl("apply", "-f", "-", input=edited)
        quota = _read(cluster, "clusterqueues", "v1beta2", cq)["spec"]["resourceGroups"][0]
        assert quota["flavors"][0]["resources"][1] == {"name": b.GPU, "nominalQuota": 6}
    finally:
        cluster.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)
        cluster.kubectl("delete", "resourceflavor", f"rf-{ns}", "--wait=false", check=False)
        cluster.kubectl("delete", "workloadpriorityclass", f"high-{ns}", check=False)


@pytest.fixture
def probe(cluster: KubeCluster, namespace: str) -> Iterator[str]:
    """A ClusterQueue in cohort `probe` (v1beta2), to read as v1beta1 through the webhook."""
    name = f"probe-{namespace}"
    cq = {
        "apiVersion": v1beta1.V1BETA2,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {"cohortName": "probe"},
    }
    apply(cluster, cq)
    yield name
    cluster.kubectl("delete", "clusterqueue", name, "--wait=false", check=False)


def _converts(cluster: KubeCluster, cq: str) -> bool:
    """A v1beta1 read of the ClusterQueue `cq` went through the webhook."""
    old = _read(cluster, "clusterqueues", "v1beta1", cq)
    return old["apiVersion"] == V1 and old["spec"].get("cohort") == "probe"


def test_the_conversion_webhook_points_at_the_operator_and_survives_reapplying_crds(
    cluster: KubeCluster, operator: OperatorProcess, probe: str
) -> None:
    """The sandbox's operator points each converting CRD at its own URL with its CA;
    applying crds/ again (`atoll sandbox crds`, the tests' and the demo's way) keeps that URL,
    where a plain `kubectl apply --server-side -f crds/` would ask for a Service as well."""
    for name in v1beta1.CONVERTED_CRDS:
        crd = get_json(cluster, "get", "crd", name)
        config = crd["spec"]["conversion"]["webhook"]["clientConfig"]
        assert config["url"].startswith("https://127.0.0.1:")
        assert config["url"].endswith("/convert")
        assert config["caBundle"]
        assert "service" not in config
    before = {
        n: get_json(cluster, "get", "crd", n)["spec"]["conversion"] for n in v1beta1.CONVERTED_CRDS
    }
    apply_crds(cluster.kubectl, REPO / "crds")
    after = {
        n: get_json(cluster, "get", "crd", n)["spec"]["conversion"] for n in v1beta1.CONVERTED_CRDS
    }
    assert after == before
    assert _converts(cluster, probe)


def _conversion_configs(cluster: KubeCluster) -> dict[str, dict[str, Any]]:
    return {
        n: get_json(cluster, "get", "crd", n)["spec"]["conversion"]["webhook"]["clientConfig"]
        for n in v1beta1.CONVERTED_CRDS
    }


async def test_the_conversion_config_moves_between_a_service_and_a_url_and_back(
    cluster: KubeCluster, operator: OperatorProcess, api: client.ApiClient, probe: str
) -> None:
    """What a replica in a cluster writes (the Service of deploy/ and its CA), what a sandbox
    replica writes (its URL), each replacing the other; nothing is written when the CRDs
    already say it, a sandbox replica leaves a URL where another replica listens, and its
    periodic check leaves a Service alone (so the session operator does not undo this)."""
    before = _conversion_configs(cluster)
    (session,) = {json.dumps(c, sort_keys=True) for c in before.values()}
    ca = base64.b64decode(json.loads(session)["caBundle"])  # the API server wants a real one
    service = webhook.conversion_service("atoll-system/atoll-webhook-service", ca)
    try:
        other = webhook.conversion_url("https://127.0.0.1:1", ca)
        assert await webhook.point_conversion(api, other, take_from_live=False) == []
        assert _conversion_configs(cluster) == before

        changed = await webhook.point_conversion(api, service, take_from_live=True)
        assert changed == list(v1beta1.CONVERTED_CRDS)
        for config in _conversion_configs(cluster).values():
            assert config == {
                "service": {
                    "namespace": "atoll-system",
                    "name": "atoll-webhook-service",
                    "path": "/convert",
                    "port": 443,
                },
                "caBundle": base64.b64encode(ca).decode(),
            }
        assert await webhook.point_conversion(api, service, take_from_live=True) == []
        periodic = await webhook.point_conversion(
            api, other, take_from_live=False, take_from_service=False, attempts=1
        )
        assert periodic == []
        assert not _conversion_configs(cluster)[v1beta1.CONVERTED_CRDS[0]].get("url")
    finally:
        restored = await webhook.point_conversion(api, json.loads(session), take_from_live=True)
    assert restored == list(v1beta1.CONVERTED_CRDS)
    assert _conversion_configs(cluster) == before
    assert _converts(cluster, probe)


def _store_as(cluster: KubeCluster, plural: str, version: str) -> None:
    """Make `version` the stored version of the CRD of `plural`."""
    crd = f"{plural}.kueue.x-k8s.io"
    versions = get_json(cluster, "get", "crd", crd)["spec"]["versions"]
    patch = [
        {"op": "replace", "path": f"/spec/versions/{i}/storage", "value": v["name"] == version}
        for i, v in enumerate(versions)
    ]
    cluster.kubectl("patch", "crd", crd, "--type=json", "-p", json.dumps(patch))


STORED = ("clusterqueues", "localqueues")


def test_a_replica_lists_queues_stored_in_v1beta1_with_no_other_running_and_admits_through_them(
    cluster: KubeCluster, solo: None, namespace: str, tmp_path: Path
) -> None:
    """A cluster that ran Kueue v0.15 or older stores its ClusterQueues and LocalQueues as
    v1beta1, which the API server converts through the webhook for every v1beta2 read, the
    operator's initial listing included. With no replica running, the first one serves
    /convert before it lists (it used to serve it only after: the listing then failed until it
    timed out), and admits a Job through those queues: they need no storage migration."""
    ns = namespace
    cq = f"old-{ns}"
    docs = yaml.safe_load_all(_v1beta1_manifests(ns))
    old_cq = next(d for d in docs if d["kind"] == "ClusterQueue")
    old_cq["metadata"]["name"] = cq
    old_lq = {
        "apiVersion": V1,
        "kind": "LocalQueue",
        "metadata": {"name": "q", "namespace": ns},
        "spec": {"clusterQueue": cq},
    }
    apply(cluster, {"apiVersion": v1beta1.V1BETA2, "kind": "ResourceFlavor",
                    "metadata": {"name": f"rf-{ns}"}})  # fmt: skip
    replica = OperatorProcess(cluster, tmp_path / "atoll.log")
    try:
        try:
            for plural in STORED:
                _store_as(cluster, plural, "v1beta1")
            for obj in (old_cq, old_lq):
                cluster.kubectl("create", "-f", "-", input=json.dumps(obj))
        finally:
            for plural in STORED:
                _store_as(cluster, plural, "v1beta2")
        # the premise: stored as v1beta1, so a v1beta2 read needs the (absent) converter
        read = cluster.kubectl("get", "clusterqueues.v1beta2.kueue.x-k8s.io", cq, check=False)
        assert read.returncode != 0
        assert "conversion webhook" in read.stderr
        replica.start()  # raises unless ready (its listing done) within a minute
        assert _read(cluster, "clusterqueues", "v1beta2", cq)["spec"]["cohortName"] == f"co-{ns}"
        create(cluster, b.job("j", ns, queue="q", pods=2, run="600s"))
        cluster.wait_for("j admitted", lambda: is_true(workload_of(cluster, ns, "j"), "Admitted"))
        wl = workload_of(cluster, ns, "j")
        assert wl is not None
        assert wl["status"]["admission"]["clusterQueue"] == cq
    finally:
        if replica.proc is None or replica.proc.poll() is not None:
            replica.start(wait_ready=False)  # deleting the objects needs a converter too
        cluster.kubectl("delete", "job", "j", "-n", ns, "--wait=false", check=False)
        cluster.kubectl("delete", "localqueue", "q", "-n", ns, "--timeout=60s", check=False)
        cluster.kubectl("delete", "clusterqueue", cq, "--timeout=60s", check=False)
        replica.stop()
        cluster.kubectl("delete", "resourceflavor", f"rf-{ns}", "--wait=false", check=False)
        # nothing is stored as v1beta1 any more: the CRDs as they were (Kueue's migration step)
        stored_only = json.dumps({"status": {"storedVersions": ["v1beta2"]}})
        for plural in STORED:
            cluster.kubectl(
                "patch", "crd", f"{plural}.kueue.x-k8s.io", "--subresource=status",
                "--type=merge", "-p", stored_only,
            )  # fmt: skip
