"""The queue objects of a benchmark: a namespace, one ResourceFlavor, one ClusterQueue whose
only resource group covers `quota`'s resources with that flavor, and one LocalQueue on it;
and `create_all` for many objects at once."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

KUEUE = "kueue.x-k8s.io/v1beta2"


def queue_manifests(
    *,
    namespace: str,
    flavor: str,
    cluster_queue: str,
    local_queue: str,
    quota: Mapping[str, Any],
    flavor_spec: Mapping[str, Any] | None = None,
    create_namespace: bool = True,
) -> list[dict[str, Any]]:
    """The manifests, in the order they can be created (`quota`: nominal quota by resource)."""
    rf: dict[str, Any] = {
        "apiVersion": KUEUE,
        "kind": "ResourceFlavor",
        "metadata": {"name": flavor},
    }
    if flavor_spec is not None:
        rf["spec"] = dict(flavor_spec)
    resources = [{"name": name, "nominalQuota": value} for name, value in quota.items()]
    cq = {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": cluster_queue},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": list(quota),
                    "flavors": [{"name": flavor, "resources": resources}],
                }
            ],
        },
    }
    lq = {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": local_queue, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue},
    }
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    return [*([ns] if create_namespace else []), rf, cq, lq]


def create_all(
    kubectl: Callable[..., Any], objects: Iterable[dict[str, Any]], *, chunk: int = 200
) -> None:
    """`kubectl create` of `objects`, `chunk` at a time (`Sandbox.kubectl`)."""
    batch: list[dict[str, Any]] = []
    for obj in [*objects, None]:
        if obj is not None:
            batch.append(obj)
        if batch and (obj is None or len(batch) == chunk):
            body = json.dumps({"apiVersion": "v1", "kind": "List", "items": batch})
            kubectl("create", "-f", "-", input=body, timeout=300)
            batch = []
