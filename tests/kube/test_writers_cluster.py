"""The writer against the sandbox API server: a Workload's finalizer is removed with the
version the writer last saw as the base (no GET), and when that base is stale (the object
changed since) the conflict is resolved on the fresh object, keeping the other change; a Job
is read and patched as raw JSON, and started from the version last seen (no GET) unless that
version is stale."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from atoll.api.core import Job
from atoll.api.labels import RESOURCE_IN_USE_FINALIZER
from atoll.api.workload import Workload
from atoll.control.jobframework import JobStart
from atoll.kube.ratelimit import TokenBucket
from atoll.kube.writers import KubeWriter
from tests.api import builders as ab
from tests.conftest import KubeCluster
from tests.kube import builders as b

pytestmark = pytest.mark.cluster
OTHER_FINALIZER = "example.com/keep"


@pytest.fixture
async def writer(cluster: KubeCluster) -> AsyncIterator[tuple[KubeWriter, list[str]]]:
    cluster.apply_crds()
    conf = client.Configuration()
    await config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=conf)
    verbs: list[str] = []
    async with client.ApiClient(conf) as api:
        yield (
            KubeWriter(api, TokenBucket(50, 100), on_request=lambda v, _c, _r, _s: verbs.append(v)),
            verbs,
        )


def _get(cluster: KubeCluster, kind: str, ns: str, name: str) -> dict[str, Any]:
    out = cluster.kubectl("get", kind, name, "-n", ns, "-o", "json").stdout
    got: dict[str, Any] = json.loads(out)
    return got


def _workload(cluster: KubeCluster, ns: str, name: str) -> dict[str, Any]:
    wl = ab.workload(name, ns, queueName="q")
    wl["metadata"]["finalizers"] = [RESOURCE_IN_USE_FINALIZER, OTHER_FINALIZER]
    cluster.kubectl("create", "-f", "-", input=json.dumps(wl))
    return _get(cluster, "workloads", ns, name)


def _seen(cluster: KubeCluster, kw: KubeWriter, ns: str, name: str) -> None:
    """A Workload with the two finalizers, seen by the writer (as the watch shows it)."""
    kw.observe_workload(Workload.from_dict(_workload(cluster, ns, name)))


def _release(cluster: KubeCluster, ns: str, name: str) -> None:
    patch = json.dumps({"metadata": {"finalizers": None}})
    cluster.kubectl("patch", "workload", name, "-n", ns, "--type=merge", "-p", patch)


async def test_the_finalizer_is_removed_from_the_last_seen_version_without_a_read(
    cluster: KubeCluster, namespace: str, writer: tuple[KubeWriter, list[str]]
) -> None:
    kw, verbs = writer
    _seen(cluster, kw, namespace, "fresh")
    await kw.remove_workload_finalizer(f"{namespace}/fresh", RESOURCE_IN_USE_FINALIZER)
    after = _get(cluster, "workloads", namespace, "fresh")
    assert after["metadata"]["finalizers"] == [OTHER_FINALIZER]
    assert verbs == ["patch"]
    # the patched version is the next base: removing it again (a second reconcile) is a
    # no-op without a request, and a later change is made on the right resourceVersion
    await kw.remove_workload_finalizer(f"{namespace}/fresh", RESOURCE_IN_USE_FINALIZER)
    assert verbs == ["patch"]
    await kw.remove_workload_finalizer(f"{namespace}/fresh", OTHER_FINALIZER)
    assert verbs == ["patch", "patch"]
    assert not _get(cluster, "workloads", namespace, "fresh")["metadata"].get("finalizers")


async def test_a_stale_base_conflicts_and_the_removal_keeps_the_change_it_missed(
    cluster: KubeCluster, namespace: str, writer: tuple[KubeWriter, list[str]]
) -> None:
    kw, verbs = writer
    _seen(cluster, kw, namespace, "stale")
    cluster.kubectl("label", "workload", "stale", "-n", namespace, "edited=yes")
    await kw.remove_workload_finalizer(f"{namespace}/stale", RESOURCE_IN_USE_FINALIZER)
    after = _get(cluster, "workloads", namespace, "stale")
    assert after["metadata"]["finalizers"] == [OTHER_FINALIZER]
    assert after["metadata"]["labels"] == {"edited": "yes"}
    assert verbs == ["patch", "get", "patch"]  # the conflict, the fresh read, the removal
    _release(cluster, namespace, "stale")


async def test_without_a_known_version_the_object_is_read_first(
    cluster: KubeCluster, namespace: str, writer: tuple[KubeWriter, list[str]]
) -> None:
    kw, verbs = writer
    _workload(cluster, namespace, "unknown")
    await kw.remove_workload_finalizer(f"{namespace}/unknown", RESOURCE_IN_USE_FINALIZER)
    after = _get(cluster, "workloads", namespace, "unknown")
    assert after["metadata"]["finalizers"] == [OTHER_FINALIZER]
    assert verbs == ["get", "patch"]
    _release(cluster, namespace, "unknown")


async def test_a_job_is_suspended_from_its_raw_json_and_a_suspended_one_is_left_alone(
    cluster: KubeCluster, namespace: str, writer: tuple[KubeWriter, list[str]]
) -> None:
    kw, verbs = writer
    job = b.job("raw", namespace, queue=None, pods=1, run="60s")  # unlabelled: left unsuspended
    job["spec"]["suspend"] = False
    cluster.kubectl("create", "-f", "-", input=json.dumps(job))
    await kw.suspend_job(f"{namespace}/raw")
    assert _get(cluster, "jobs", namespace, "raw")["spec"]["suspend"] is True
    n = len(verbs)  # a 409 (the Job controller wrote meanwhile) reads and patches again
    assert n >= 2
    assert verbs == ["get", "patch"] * (n // 2)
    await kw.suspend_job(f"{namespace}/raw")
    assert verbs[n:] == ["get"]  # already suspended: nothing to write


def _suspended_job(cluster: KubeCluster, namespace: str, name: str) -> Job:
    """A suspended Job whose template selects `old: x`, once the Job controller has marked
    it Suspended (so that nothing else writes it meanwhile), as the watch would show it."""
    job = b.job(name, namespace, queue=None, pods=1, run="60s", node_selector={"old": "x"})
    job["spec"]["suspend"] = True
    cluster.kubectl("create", "-f", "-", input=json.dumps(job))

    def marked() -> bool:
        status = _get(cluster, "jobs", namespace, name).get("status") or {}
        return any(c.get("type") == "Suspended" for c in status.get("conditions") or ())

    cluster.wait_for(f"Job {name} marked Suspended", marked)
    return Job.from_dict(_get(cluster, "jobs", namespace, name))


def _plan() -> JobStart:
    return JobStart(
        node_selector={"pool": "a"},
        tolerations=(),
        labels={"kueue.x-k8s.io/workload": "w"},
        annotations={},
        parallelism=None,
    )


async def test_a_job_is_started_from_the_version_last_seen_without_a_read(
    cluster: KubeCluster, namespace: str, writer: tuple[KubeWriter, list[str]]
) -> None:
    kw, verbs = writer
    seen = _suspended_job(cluster, namespace, "seen")
    await kw.start_job(f"{namespace}/seen", _plan(), seen)
    after = _get(cluster, "jobs", namespace, "seen")
    assert verbs == ["patch"]
    assert after["spec"]["suspend"] is False
    template = after["spec"]["template"]
    assert template["spec"]["nodeSelector"] == {"pool": "a"}  # the seen `old` key is gone
    assert template["metadata"]["labels"]["kueue.x-k8s.io/workload"] == "w"


async def test_a_stale_seen_job_conflicts_and_the_start_is_built_on_the_fresh_one(
    cluster: KubeCluster, namespace: str, writer: tuple[KubeWriter, list[str]]
) -> None:
    kw, verbs = writer
    seen = _suspended_job(cluster, namespace, "stale")
    patch = {"spec": {"template": {"spec": {"nodeSelector": {"newer": "y"}}}}}
    cluster.kubectl(
        "patch", "job", "stale", "-n", namespace, "--type=merge", "-p", json.dumps(patch)
    )
    await kw.start_job(f"{namespace}/stale", _plan(), seen)
    after = _get(cluster, "jobs", namespace, "stale")
    assert verbs == ["patch", "get", "patch"]  # the conflict, the fresh read, the start
    assert after["spec"]["suspend"] is False
    # built on the fresh Job: its `newer` key is dropped too, not only the seen `old` one
    assert after["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "a"}
