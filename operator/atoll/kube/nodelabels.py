"""Writing the islands `atoll topology discover` found onto a Node, and reading them back for
`atoll topology show`.

One JSON merge patch of the Node's metadata (labels and annotation together, so a reader
never sees one without the other); conflicts cannot happen with a merge patch, transient
errors (429, 5xx, connection) are retried with backoff. Needs `get` and `patch` on nodes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from atoll.api.core import Node
from atoll.kube.live import ClusterReadError, load_config

_ATTEMPTS = 5
_RETRIED = frozenset({429, 500, 502, 503, 504})


class PublishError(RuntimeError):
    """The Node could not be patched; says which node and why."""


async def publish(
    kubeconfig: Path | None, node: str, labels: Mapping[str, str], annotations: Mapping[str, str]
) -> None:
    """Set these labels and annotations on the Node (others are left as they are)."""
    try:
        await load_config(kubeconfig, in_cluster=True)
    except ClusterReadError as e:
        raise PublishError(str(e)) from e
    body = {"metadata": {"labels": dict(labels), "annotations": dict(annotations)}}
    async with client.ApiClient() as api:
        core = client.CoreV1Api(api)
        delay = 0.5
        for attempt in range(_ATTEMPTS):
            try:
                await core.patch_node(node, body, _content_type="application/merge-patch+json")
                return
            except ApiException as e:
                if e.status not in _RETRIED or attempt == _ATTEMPTS - 1:
                    raise PublishError(f"cannot patch node {node}: {e.status} {e.reason}") from e
            except (TimeoutError, OSError) as e:
                if attempt == _ATTEMPTS - 1:
                    raise PublishError(f"cannot reach the cluster: {e}") from e
            await asyncio.sleep(delay)
            delay *= 2


async def nodes(kubeconfig: Path | None) -> list[Node]:
    """Every Node, parsed; raises ClusterReadError."""
    await load_config(kubeconfig)
    try:
        async with client.ApiClient() as api:
            raw: dict[str, Any] = api.sanitize_for_serialization(
                await client.CoreV1Api(api).list_node()
            )
    except ApiException as e:
        raise ClusterReadError(f"cannot list nodes: {e.status} {e.reason}") from e
    except (TimeoutError, OSError) as e:
        raise ClusterReadError(f"cannot reach the cluster: {e}") from e
    return [Node.from_dict(item) for item in raw.get("items", [])]
