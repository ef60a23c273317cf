"""A one-shot copy of a live cluster in a `Cache`, for `atoll explain` and `atoll what-if`.

The same LISTs the operator makes at start (`bootstrap.load`: queue objects, Workloads,
Jobs, priority classes, namespaces) plus what placement reads (Nodes, Pods, Topologies and
the DRA objects), each parsed by the `atoll.api` models and stored through the same cache
setters as the watch handlers. Read-only: nothing is written to the cluster.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from pydantic import ValidationError

from atoll.api.core import Node, Pod
from atoll.api.meta import KubeObject
from atoll.api.resource import DeviceClass, ResourceClaim, ResourceSlice
from atoll.api.topology import Topology
from atoll.kube import bootstrap
from atoll.state.cache import Cache

K = TypeVar("K", bound=KubeObject)
DRA = ("resource.k8s.io", "v1")


class ClusterReadError(RuntimeError):
    """The cluster could not be read (no kubeconfig, unreachable, forbidden)."""


def _each(model: type[K], items: list[dict[str, Any]], store: Callable[[K], None]) -> None:
    for raw in items:
        try:
            store(model.from_dict(raw))
        except ValidationError:
            continue  # the operator logs and ignores what it cannot parse; so do we


async def _optional(call: Callable[[], Any]) -> list[dict[str, Any]]:
    """Items of a LIST of a kind the cluster may not serve (DRA, Kueue's Topology): none."""
    try:
        raw = await call()
    except ApiException as e:
        if e.status == 404:
            return []
        raise
    items = raw.get("items", []) if isinstance(raw, dict) else []
    return list(items)


async def _inventory(api: client.ApiClient, cache: Cache) -> None:
    inv = cache.inventory
    core = client.CoreV1Api(api)
    nodes = api.sanitize_for_serialization(await core.list_node())
    _each(Node, nodes.get("items", []), inv.upsert_node)
    pods = api.sanitize_for_serialization(await core.list_pod_for_all_namespaces())
    _each(Pod, pods.get("items", []), inv.upsert_pod)
    custom = client.CustomObjectsApi(api)
    kueue = (bootstrap.GROUP, bootstrap.VERSION)
    topologies = await _optional(lambda: custom.list_cluster_custom_object(*kueue, "topologies"))
    _each(Topology, topologies, inv.upsert_topology)

    def dra(plural: str) -> Callable[[], Any]:
        return lambda: custom.list_cluster_custom_object(*DRA, plural)

    _each(DeviceClass, await _optional(dra("deviceclasses")), inv.upsert_device_class)
    _each(ResourceSlice, await _optional(dra("resourceslices")), inv.upsert_slice)
    _each(ResourceClaim, await _optional(dra("resourceclaims")), inv.upsert_claim)


async def read(kubeconfig: Path | None, cache: Cache | None = None) -> tuple[Cache, float]:
    """Everything atoll reads, from the cluster of `kubeconfig` (else $KUBECONFIG or
    ~/.kube/config), into `cache` (default: an empty one); returns the cache and the time it
    was read."""
    try:
        if kubeconfig is not None:
            await config.load_kube_config(config_file=str(kubeconfig))
        else:
            await config.load_kube_config()
    except (config.ConfigException, OSError, TypeError) as e:
        raise ClusterReadError(f"cannot load the kubeconfig: {e}") from e
    cache = cache if cache is not None else Cache()
    try:
        async with client.ApiClient() as api:
            await bootstrap.load(api, cache, attempts=3)
            await _inventory(api, cache)
    except ApiException as e:
        raise ClusterReadError(f"cannot read the cluster: {e.status} {e.reason}") from e
    except (TimeoutError, OSError) as e:
        raise ClusterReadError(f"cannot reach the cluster: {e}") from e
    return cache, time.time()
