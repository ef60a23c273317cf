"""The initial listing: before the scheduler admits anything, every queue object, Workload and
Job is read into the cache, so the ledger is rebuilt from Workload statuses after a restart
and no quota is handed out twice.

Each kind is listed a page at a time (`Rest.list`) and each object parsed as its page
arrives; the objects of a kind are stored once its last page is read (a continue token that
expired restarts the kind's listing, which must then not have stored half of it). Workloads
and Jobs are parsed by the watches' own parsers (`handlers.Parsers`): equal pod-set
templates and pod specs are parsed and held once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from pydantic import ValidationError

from atoll.api.admissioncheck import AdmissionCheck
from atoll.api.clusterqueue import ClusterQueue
from atoll.api.cohort import Cohort
from atoll.api.core import PriorityClass
from atoll.api.localqueue import LocalQueue
from atoll.api.meta import KubeObject
from atoll.api.priority import WorkloadPriorityClass
from atoll.api.resource import ResourceClaimTemplate
from atoll.api.resourceflavor import ResourceFlavor
from atoll.kube import retry
from atoll.kube.handlers import Parsers, warned, warned_check
from atoll.kube.kinds import CustomKind
from atoll.kube.rest import Resource, Rest, raw
from atoll.state import workloads as wls
from atoll.state.cache import Cache

log = structlog.get_logger("atoll.bootstrap")
K = TypeVar("K", bound=KubeObject)
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"


def parser(model: type[K]) -> Callable[[dict[str, Any]], K | None]:
    """`model.from_dict`, but an object that cannot be parsed is logged and None (skipped, as
    the watch handlers skip it)."""

    def parse(obj: dict[str, Any]) -> K | None:
        try:
            return model.from_dict(obj)
        except ValidationError as e:
            log.warning("object not understood, ignored", kind=model.KIND, error=str(e))
            return None

    return parse


async def load(
    api: client.ApiClient,
    cache: Cache,
    *,
    attempts: int | None = None,
    versions: dict[tuple[str, str, str], str] | None = None,
    parsers: Parsers | None = None,
    on_retry: Callable[[int, BaseException], None] | None = None,
) -> dict[str, int]:
    """List everything atoll reads, retrying while the API server is unreachable or warming
    up (e.g. a CRD whose storage initializes), at most `attempts` times (None: until it
    answers); return how many objects of each kind were loaded. `versions` receives the
    resourceVersion of the list of each Kueue kind and of Jobs, by (group, version, plural):
    their watches start there, so that a watch's own start-up listing cannot hand the cache
    an older state than the one the reconcilers already acted on. `parsers`: those of the
    watches that follow (the operator's), so that what they share is shared with the
    listed objects (default: new ones). `on_retry(attempt, error)` is told of each failure
    that is retried (then it logs, not `retry.call`)."""
    parse = parsers or Parsers()
    return await retry.call(
        lambda: _load(api, cache, versions if versions is not None else {}, parse),
        what="initial listing",
        attempts=attempts,
        on_retry=on_retry,
    )


async def _load(
    api: client.ApiClient,
    cache: Cache,
    versions: dict[tuple[str, str, str], str],
    parsers: Parsers,
) -> dict[str, int]:
    rest = Rest(api)
    counts: dict[str, int] = {}

    async def kind(
        resource: Resource,
        parse: Callable[[dict[str, Any]], K | None],
        store: Callable[[K], None],
        *,
        watched_from: bool = True,
    ) -> None:
        listed, version = await rest.list(resource, parse)
        for obj in listed:
            store(obj)
        counts[resource.plural] = len(listed)
        if watched_from:
            versions[resource.group, resource.version, resource.plural] = version

    def kueue(plural: str) -> Resource:
        return Resource(GROUP, VERSION, plural)

    await kind(kueue("resourceflavors"), parser(ResourceFlavor), cache.set_flavor)
    await kind(kueue("cohorts"), parser(Cohort), cache.set_cohort)
    await kind(kueue("admissionchecks"), parser(AdmissionCheck), warned_check(cache))
    await kind(kueue("clusterqueues"), parser(ClusterQueue), warned(cache))
    await kind(kueue("localqueues"), parser(LocalQueue), cache.set_local_queue)
    await kind(
        kueue("workloadpriorityclasses"), parser(WorkloadPriorityClass), cache.set_workload_class
    )
    await kind(kueue("workloads"), parsers.workload, cache.set_workload)
    pcs = Resource("scheduling.k8s.io", "v1", "priorityclasses")
    await kind(pcs, parser(PriorityClass), cache.set_priority_class, watched_from=False)
    nss, _ = await rest.list(Resource("", "v1", "namespaces"), raw)
    for ns in nss:
        meta = ns.get("metadata", {})
        cache.set_namespace(meta["name"], dict(meta.get("labels") or {}))
    counts["namespaces"] = len(nss)
    await kind(Resource("batch", "v1", "jobs"), parsers.job, cache.set_job)
    counts["resourceclaimtemplates"] = await _claim_templates(rest, cache)
    return counts


async def _claim_templates(rest: Rest, cache: Cache) -> int:
    """ResourceClaimTemplates, so that device quota is counted from the first cycle on (a
    cluster without resource.k8s.io/v1 has none)."""
    try:
        listed, _ = await rest.list(
            Resource("resource.k8s.io", "v1", "resourceclaimtemplates"),
            parser(ResourceClaimTemplate),
        )
    except ApiException as e:
        if e.status == 404:
            return 0
        raise
    for template in listed:
        cache.set_claim_template(template)
    return len(listed)


async def serves(api: client.ApiClient, cache: Cache, kind: CustomKind) -> bool:
    """List the kind's objects into the cache; False when the cluster does not serve the
    kind (its CRD is not installed)."""
    rest = Rest(api)
    resource = Resource(kind.group, kind.version, kind.plural)
    try:
        listed, _ = await retry.call(
            lambda: rest.list(resource, parser(kind.model)), what=f"{kind.kind} listing"
        )
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    objects = kind.objects(cache)
    for obj in listed:
        objects[wls.key_of(obj.namespace, obj.name)] = obj
    return True
