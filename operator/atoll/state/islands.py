"""NVLink islands published on Nodes by `atoll topology discover` (atoll.api.islands), turned
into what placement reads: per node, how many GPUs of each island are free.

On device-plugin nodes the kubelet, not atoll, picks which GPUs a pod gets, so which island a
running pod uses is not known. atoll assumes the device plugin keeps each pod's GPUs in one
island when one has room (NVIDIA's plugin prefers NVLinked sets) and counts running pods into
islands the way placement does (`take_from_islands`: the tightest island that holds them,
largest pods first); pods of gangs atoll placed but that are not running yet hold the island
placement chose.
"""

from __future__ import annotations

from collections.abc import Sequence

from atoll.api.core import Node
from atoll.api.islands import (
    ISLANDS_ANNOTATION,
    IslandsFormatError,
    NodeIslands,
    parse_node_islands,
)
from atoll.engine.inventory import Islands, take_from_islands

GPU_RESOURCE = "nvidia.com/gpu"
"""The device plugin's counted GPU resource that published islands describe."""


def published_islands(node: Node) -> NodeIslands | IslandsFormatError | None:
    """The node's published islands, the error in its annotation, or None (none published)."""
    text = (node.metadata.annotations or {}).get(ISLANDS_ANNOTATION)
    if text is None:
        return None
    try:
        return parse_node_islands(node.name, text)
    except IslandsFormatError as e:
        return e


def free_islands(
    doc: NodeIslands, gpu_pods: Sequence[tuple[int, int | None]], resource: str = GPU_RESOURCE
) -> Islands:
    """Free GPUs per island once `gpu_pods` (GPUs, planned island or None) took theirs."""
    sizes = tuple(len(i.gpus) for i in doc.islands)
    free = list(sizes)
    unknown = []
    for q, island in gpu_pods:
        if island is not None and 0 <= island < len(free) and free[island] >= q:
            free[island] -= q
        else:
            unknown.append(q)
    got = tuple(free)
    for q in sorted(unknown, reverse=True):
        got, _ = take_from_islands(got, q)
    return Islands(resource=resource, sizes=sizes, free=got)
