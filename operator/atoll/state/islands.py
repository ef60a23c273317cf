"""NVLink islands published on Nodes by `atoll topology discover` (atoll.api.islands), turned
into what placement reads: per node, how many GPUs of each island are free.

DRA drivers that publish no island attribute (NVIDIA's) get one from the same document: a
device whose bus ID (`resource.kubernetes.io/pciBusID`, or the driver's `pcieBusID`), else
UUID, else `index` attribute names a GPU of an island is grouped into that island, so that
best fit keeps islands whole and pending reasons say island sizes. kube-scheduler does not see
that attribute: claims should not name it in `matchAttribute`.

On device-plugin nodes the kubelet, not atoll, picks which GPUs a pod gets, so which island a
running pod uses is not known. atoll assumes the device plugin keeps each pod's GPUs in one
island when one has room (NVIDIA's plugin prefers NVLinked sets) and counts running pods into
islands the way placement does (`take_from_islands`: the tightest island that holds them,
largest pods first); pods of gangs atoll placed but that are not running yet hold the island
placement chose.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from atoll.api.core import Node
from atoll.api.islands import (
    ISLANDS_ANNOTATION,
    IslandsFormatError,
    NodeIslands,
    normalize_bus_id,
    parse_node_islands,
)
from atoll.engine.devices import Device
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


def _keys(doc: NodeIslands) -> dict[tuple[str, str], int]:
    keys: dict[tuple[str, str], int] = {}
    for k, island in enumerate(doc.islands):
        for gpu in island.gpus:
            keys[("index", str(gpu.index))] = k
            if gpu.bus_id:
                keys[("bus", normalize_bus_id(gpu.bus_id))] = k
            if gpu.uuid:
                keys[("uuid", gpu.uuid)] = k
    return keys


def with_islands(doc: NodeIslands, devices: Sequence[Device], attribute: str) -> list[Device]:
    """The devices, those without `attribute` given the island the document puts them in."""
    keys = _keys(doc)
    out = []
    for d in devices:
        island = None if attribute in d.attributes else _island_of(d, keys)
        out.append(
            d if island is None else replace(d, attributes={**d.attributes, attribute: island})
        )
    return out


def _island_of(d: Device, keys: dict[tuple[str, str], int]) -> int | None:
    a = d.attributes
    bus = a.get("resource.kubernetes.io/pciBusID", a.get(f"{d.driver}/pcieBusID"))
    candidates = [
        ("bus", normalize_bus_id(bus)) if isinstance(bus, str) else None,
        ("uuid", u) if isinstance(u := a.get(f"{d.driver}/uuid"), str) else None,
        ("index", str(i)) if isinstance(i := a.get(f"{d.driver}/index"), int) else None,
    ]
    for key in candidates:
        if key is not None and key in keys:
            return keys[key]
    return None
