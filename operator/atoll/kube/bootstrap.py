"""The initial listing: before the scheduler admits anything, every queue object, Workload and
Job is read into the cache, so the ledger is rebuilt from Workload statuses after a restart
and no quota is handed out twice."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from pydantic import ValidationError

from atoll.api.clusterqueue import ClusterQueue
from atoll.api.cohort import Cohort
from atoll.api.core import Job, PriorityClass
from atoll.api.localqueue import LocalQueue
from atoll.api.meta import KubeObject
from atoll.api.priority import WorkloadPriorityClass
from atoll.api.resource import ResourceClaimTemplate
from atoll.api.resourceflavor import ResourceFlavor
from atoll.api.workload import Workload
from atoll.kube import retry
from atoll.kube.kinds import CustomKind
from atoll.kube.rest import Rest
from atoll.state import workloads as wls
from atoll.state.cache import Cache

log = structlog.get_logger("atoll.bootstrap")
K = TypeVar("K", bound=KubeObject)
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"


def each(model: type[K], items: list[dict[str, Any]], store: Callable[[K], None]) -> int:
    """Parse and store each listed object; one that cannot be parsed is logged and skipped
    (as the watch handlers do); returns how many were stored."""
    n = 0
    for raw in items:
        try:
            store(model.from_dict(raw))
            n += 1
        except ValidationError as e:
            log.warning("object not understood, ignored", kind=model.KIND, error=str(e))
    return n


async def load(
    api: client.ApiClient,
    cache: Cache,
    *,
    attempts: int | None = None,
    versions: dict[tuple[str, str, str], str] | None = None,
) -> dict[str, int]:
    """List everything atoll reads, retrying while the API server is unreachable or warming
    up (e.g. a CRD whose storage initializes), at most `attempts` times (None: until it
    answers); return how many objects of each kind were loaded. `versions` receives the
    resourceVersion of the list of each Kueue kind and of Jobs, by (group, version, plural):
    their watches start there, so that a watch's own start-up listing cannot hand the cache
    an older state than the one the reconcilers already acted on."""
    return await retry.call(
        lambda: _load(api, cache, versions if versions is not None else {}),
        what="initial listing",
        attempts=attempts,
    )


async def _load(
    api: client.ApiClient, cache: Cache, versions: dict[tuple[str, str, str], str]
) -> dict[str, int]:
    rest = Rest(api)
    counts: dict[str, int] = {}

    async def kueue(plural: str, model: type[K], store: Callable[[K], None]) -> None:
        raw = await rest.list(GROUP, VERSION, plural)
        counts[plural] = each(model, raw.get("items", []), store)
        versions[GROUP, VERSION, plural] = _version(raw)

    await kueue("resourceflavors", ResourceFlavor, cache.set_flavor)
    await kueue("cohorts", Cohort, cache.set_cohort)
    await kueue("clusterqueues", ClusterQueue, cache.set_cluster_queue)
    await kueue("localqueues", LocalQueue, cache.set_local_queue)
    await kueue("workloadpriorityclasses", WorkloadPriorityClass, cache.set_workload_class)
    await kueue("workloads", Workload, cache.set_workload)
    pcs = await rest.list("scheduling.k8s.io", "v1", "priorityclasses")
    counts["priorityclasses"] = each(PriorityClass, pcs.get("items", []), cache.set_priority_class)
    nss = await rest.list("", "v1", "namespaces")
    for ns in nss.get("items", []):
        meta = ns.get("metadata", {})
        cache.set_namespace(meta["name"], dict(meta.get("labels") or {}))
    counts["namespaces"] = len(nss.get("items", []))
    jobs = await rest.list("batch", "v1", "jobs")
    counts["jobs"] = each(Job, jobs.get("items", []), cache.set_job)
    versions["batch", "v1", "jobs"] = _version(jobs)
    counts["resourceclaimtemplates"] = await _claim_templates(rest, cache)
    return counts


def _version(listed: dict[str, Any]) -> str:
    return str((listed.get("metadata") or {}).get("resourceVersion") or "")


async def _claim_templates(rest: Rest, cache: Cache) -> int:
    """ResourceClaimTemplates, so that device quota is counted from the first cycle on (a
    cluster without resource.k8s.io/v1 has none)."""
    try:
        raw = await rest.list("resource.k8s.io", "v1", "resourceclaimtemplates")
    except ApiException as e:
        if e.status == 404:
            return 0
        raise
    return each(ResourceClaimTemplate, raw.get("items", []), cache.set_claim_template)


async def serves(api: client.ApiClient, cache: Cache, kind: CustomKind) -> bool:
    """List the kind's objects into the cache; False when the cluster does not serve the
    kind (its CRD is not installed)."""
    rest = Rest(api)
    try:
        raw = await retry.call(
            lambda: rest.list(kind.group, kind.version, kind.plural), what=f"{kind.kind} listing"
        )
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    objects = kind.objects(cache)

    def store(obj: KubeObject) -> None:
        objects[wls.key_of(obj.namespace, obj.name)] = obj

    each(kind.model, raw.get("items", []), store)
    return True
