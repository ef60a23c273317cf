"""Which integrations the operator wires up: `integrations.frameworks` names them, and one
whose CRD the cluster does not serve is skipped instead of crashing the operator."""

from __future__ import annotations

import dataclasses

import pytest
from kubernetes_asyncio import client, config

from atoll.api.configuration import Configuration, Integrations
from atoll.api.core import Job
from atoll.api.jobset import JobSet
from atoll.api.leaderworkerset import LeaderWorkerSet
from atoll.api.mpijob import MPIJob
from atoll.api.priority import WorkloadPriorityClass
from atoll.kube import bootstrap
from atoll.kube.kinds import CUSTOM_KINDS, CustomKind
from atoll.kube.operator import Operator, RunOptions, new_cache
from atoll.state.cache import Cache
from tests.conftest import KubeCluster

BOTH = ("batch/job", "jobset.x-k8s.io/jobset")
ALL = (*BOTH, "kubeflow.org/mpijob", "leaderworkerset.x-k8s.io/leaderworkerset")


def _watched(op: Operator) -> set[str]:
    """The plurals watched, by kopf or by atoll's own loops."""
    return {
        h.selector.any_name or h.selector.plural or ""
        for h in op._kopf._watching.get_all_handlers()
    } | {resource.plural for resource in op.watches.watches}


def _operator(api: client.ApiClient, frameworks: tuple[str, ...]) -> Operator:
    cfg = Configuration(integrations=Integrations(frameworks=frameworks))
    return Operator(RunOptions(configuration=cfg, webhook="off", leader_elect=False), api)


@pytest.mark.parametrize("served", [True, False], ids=["crd-installed", "crd-missing"])
async def test_jobsets_are_watched_only_when_their_crd_is_served(
    monkeypatch: pytest.MonkeyPatch, served: bool
) -> None:
    async def serves(_api: client.ApiClient, _cache: Cache, _kind: CustomKind) -> bool:
        return served

    monkeypatch.setattr(bootstrap, "serves", serves)
    async with client.ApiClient() as api:
        op = _operator(api, BOTH)
        await op._watch_kinds()
    assert ("jobsets" in _watched(op)) is served
    assert "jobs" in _watched(op)
    assert set(op.kinds) == {JobSet.KIND}


async def test_only_the_named_frameworks_are_managed() -> None:
    async with client.ApiClient() as api:
        op = _operator(api, ("batch/job",))
        assert op.kinds == {}
        assert op.jobs.settings.enabled
        off = _operator(api, ("jobset.x-k8s.io/jobset",))
        assert not off.jobs.settings.enabled  # Jobs are then left alone
        assert set(off.kinds) == {JobSet.KIND}


async def test_jobs_owned_by_an_enabled_kind_are_not_the_job_integrations() -> None:
    """A JobSet's or MPIJob's Jobs belong to their owner's Workload: the operator's Job
    integration (its webhook and reconciler) leaves them alone, labelled or not, and so does
    not give them a default LocalQueue; with the JobSet framework off, a JobSet's Job is an
    ordinary Job."""
    owned = Job.model_validate(
        {
            "metadata": {
                "name": "j",
                "namespace": "ns",
                "labels": {"kueue.x-k8s.io/queue-name": "q"},
                "ownerReferences": [
                    {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "s",
                     "uid": "u", "controller": True}
                ],
            }
        }
    )  # fmt: skip
    async with client.ApiClient() as api:
        assert not _operator(api, ALL).jobs.manages(owned)
        assert _operator(api, ("batch/job",)).jobs.manages(owned)


async def test_each_custom_kind_is_watched_only_when_its_crd_is_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def serves(_api: client.ApiClient, _cache: Cache, kind: CustomKind) -> bool:
        return kind.kind == MPIJob.KIND

    monkeypatch.setattr(bootstrap, "serves", serves)
    async with client.ApiClient() as api:
        op = _operator(api, ALL)
        await op._watch_kinds()
    assert set(op.kinds) == {JobSet.KIND, MPIJob.KIND, LeaderWorkerSet.KIND}
    assert "mpijobs" in _watched(op)
    assert "jobsets" not in _watched(op)
    assert "leaderworkersets" not in _watched(op)


async def test_leaderworkersets_gate_pods_through_the_pod_webhook_without_the_pod_framework() -> (
    None
):
    cfg = Configuration(
        integrations=Integrations(frameworks=("leaderworkerset.x-k8s.io/leaderworkerset",))
    )
    async with client.ApiClient() as api:
        op = Operator(RunOptions(configuration=cfg, leader_elect=False), api)
    ids = {h.id for h in op.webhooks}
    assert "mutate--v1-pod" in ids
    assert "mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset" in ids
    assert op._wiring.group_pod is not None


@pytest.mark.cluster
async def test_a_kind_the_api_server_does_not_serve_is_reported_not_raised(
    cluster: KubeCluster,
) -> None:
    """The real API server's answer for a group it does not serve (404) makes `serves` say
    False, so `_watch_kinds` skips the integration instead of failing the start: the
    deploy config enables every kind, installed or not."""
    conf = client.Configuration()
    await config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=conf)
    async with client.ApiClient(conf) as api:
        for kind in CUSTOM_KINDS.values():
            absent = dataclasses.replace(kind, group=f"absent.{kind.group}")
            assert await bootstrap.serves(api, Cache(), absent) is False, kind.kind


@pytest.mark.parametrize("gate", [True, False])
def test_the_default_workloadpriorityclass_applies_with_its_gate_and_the_class(gate: bool) -> None:
    """The operator's cache (`new_cache`, which the webhooks and live what-if read) answers
    WorkloadPriorityClass defaulting: only with Kueue's gate on and a class named `default`."""
    cfg = Configuration.model_validate({"featureGates": {"WorkloadPriorityClassDefaulting": gate}})
    cache = new_cache(cfg)
    assert cache.has_default_priority_class() is False
    cache.set_workload_class(
        WorkloadPriorityClass.from_dict({"metadata": {"name": "default"}, "value": 100})
    )
    assert cache.has_default_priority_class() is gate
    assert new_cache(Configuration()).priority_class_defaulting is False  # off as in Kueue v0.19
