"""A one-shot copy of a live cluster in a `Cache`, for `atoll explain` and `atoll what-if`.

The same LISTs the operator makes at start (`bootstrap.load`: queue objects, Workloads,
Jobs, priority classes, namespaces) plus what placement reads (Nodes, Pods, Topologies and
the DRA objects) and the kinds read for a managed kind (a TrainJob's training runtimes, so a
TrainJob's Workload can be composed), each parsed by the `atoll.api` models and stored
through the same cache setters as the watch handlers. Read-only: nothing is written to the cluster.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, TypeVar

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from atoll.api.meta import KubeObject
from atoll.api.resource import ResourceClaimTemplate
from atoll.kube import bootstrap, connection
from atoll.kube.handlers import inventory_kinds
from atoll.kube.kinds import CUSTOM_KINDS, ReadKind
from atoll.kube.rest import Resource, Rest
from atoll.state.cache import Cache

K = TypeVar("K", bound=KubeObject)
SERVICE_ACCOUNT_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


class ClusterReadError(RuntimeError):
    """The cluster could not be read (no kubeconfig, unreachable, forbidden)."""


async def _optional(rest: Rest, resource: Resource, model: type[K]) -> list[K]:
    """The objects of a LIST of a kind the cluster may not serve (DRA, Kueue's Topology):
    none."""
    try:
        listed, _ = await rest.list(resource, bootstrap.parser(model))
    except ApiException as e:
        if e.status == 404:
            return []
        raise
    return listed


async def _inventory(rest: Rest, cache: Cache) -> None:
    """One LIST of each kind the operator watches for placement (`handlers.inventory_kinds`:
    Nodes, Pods, the DRA objects, Topologies); ResourceClaimTemplates come with
    `bootstrap.load`."""
    for kind in inventory_kinds(cache):
        if kind.model is ResourceClaimTemplate:
            continue
        resource = Resource(*kind.resource)
        if resource.group:
            listed = await _optional(rest, resource, kind.model)
        else:
            listed, _ = await rest.list(resource, bootstrap.parser(kind.model))
        for obj in listed:
            kind.upsert(obj)


async def _read_kinds(rest: Rest, cache: Cache) -> None:
    """One LIST of each kind read for a managed kind (`CustomKind.reads`: TrainingRuntimes,
    ClusterTrainingRuntimes); none when the cluster does not serve it or the reader may not
    list it (a TrainJob's what-if then says its runtime is missing)."""
    for kind in CUSTOM_KINDS.values():
        for read in kind.reads:
            try:
                listed = await _optional(
                    rest, Resource(read.group, read.version, read.plural), read.model
                )
            except ApiException as e:
                if e.status != 403:
                    raise
                listed = []
            for obj in listed:
                if read.kept(obj):
                    _store(read, read.objects(cache), obj)


def _store(read: ReadKind, objects: dict[str, Any], obj: KubeObject) -> None:
    objects[read.key(obj)] = obj


async def load_config(kubeconfig: Path | None, *, in_cluster: bool = False) -> None:
    """Client configuration from `kubeconfig`, else (with `in_cluster`, inside a pod) the
    pod's service account, else $KUBECONFIG or ~/.kube/config; raises ClusterReadError."""
    try:
        await connection.load(kubeconfig, in_cluster=in_cluster)
    except connection.KubeconfigError as e:
        raise ClusterReadError(str(e)) from e


async def read(kubeconfig: Path | None, cache: Cache | None = None) -> tuple[Cache, float]:
    """Everything atoll reads, from the cluster of `kubeconfig` (else $KUBECONFIG or
    ~/.kube/config), into `cache` (default: an empty one); returns the cache and the time it
    was read."""
    await load_config(kubeconfig)
    cache = cache if cache is not None else Cache()
    try:
        async with client.ApiClient() as api:
            await bootstrap.load(api, cache, attempts=3)
            await _inventory(Rest(api), cache)
            await _read_kinds(Rest(api), cache)
    except ApiException as e:
        raise ClusterReadError(f"cannot read the cluster: {e.status} {e.reason}") from e
    except (TimeoutError, OSError) as e:
        raise ClusterReadError(f"cannot reach the cluster: {e}") from e
    return cache, time.time()
