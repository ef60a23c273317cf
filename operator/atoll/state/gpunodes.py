"""What atoll reads about the GPUs of each node, for `atoll topology show`: the counted
`nvidia.com/gpu` resource, GPU Feature Discovery labels, the NVLink islands published by
`atoll topology discover` (with how many GPUs of each are free), and DRA devices per driver
grouped by their island attribute — all taken from the same inventory snapshot placement
uses, so what it prints is what admission sees."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from atoll.api.islands import IslandsFormatError
from atoll.state.inventory import ClusterInventory
from atoll.state.islands import GPU_RESOURCE

GFD_LABELS = (
    "nvidia.com/gpu.product",
    "nvidia.com/gpu.count",
    "nvidia.com/gpu.memory",
    "nvidia.com/gpu.clique",
)
"""GPU Feature Discovery's labels atoll shows (any of them may be a Topology level)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeGpus:
    node: str
    gpus: int
    """Allocatable `nvidia.com/gpu`."""
    gpus_free: int
    labels: dict[str, str]
    """The GFD labels the node has."""
    island_sizes: tuple[int, ...] = ()
    island_free: tuple[int, ...] = ()
    island_error: str | None = None
    devices: dict[str, int] | None = None
    """DRA devices per driver (None: no ResourceSlice reaches the node)."""
    device_islands: dict[str, int] | None = None
    """Devices per value of the island attribute (when devices carry it)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "gpus": self.gpus,
            "gpusFree": self.gpus_free,
            "labels": self.labels,
            "islands": {"sizes": list(self.island_sizes), "free": list(self.island_free)},
            "islandError": self.island_error,
            "draDevices": self.devices or {},
            "draDeviceIslands": self.device_islands or {},
        }

    def describe(self) -> str:
        lines = [f"{self.node}: nvidia.com/gpu {self.gpus_free} free of {self.gpus}"]
        if self.labels:
            lines.append("  labels: " + ", ".join(f"{k}={v}" for k, v in self.labels.items()))
        if self.island_error:
            lines.append(f"  NVLink islands: unreadable ({self.island_error})")
        elif self.island_sizes:
            pairs = ", ".join(
                f"{f}/{s}" for f, s in zip(self.island_free, self.island_sizes, strict=True)
            )
            lines.append(f"  NVLink islands (free/size): {pairs}")
        else:
            lines.append("  NVLink islands: none published (atoll topology discover --publish)")
        if self.devices:
            lines.append("  DRA devices: " + ", ".join(f"{d} {n}" for d, n in self.devices.items()))
        if self.device_islands:
            groups = ", ".join(f"{v}: {n}" for v, n in self.device_islands.items())
            lines.append(f"  DRA devices per island: {groups}")
        return "\n".join(lines)


def gpu_nodes(inventory: ClusterInventory) -> list[NodeGpus]:
    """Every node with counted GPUs, GFD labels, published islands or DRA devices."""
    snapshot = inventory.snapshot()
    published = inventory.published_islands()
    out = []
    for node in snapshot.nodes:
        labels = {k: node.labels[k] for k in GFD_LABELS if k in node.labels}
        doc = published.get(node.name)
        devices: dict[str, int] = {}
        islands: dict[str, int] = {}
        for d in node.devices.all:
            devices[d.driver] = devices.get(d.driver, 0) + 1
            attr = snapshot.island_attribute
            value = d.attributes.get(attr) if attr else None
            if value is not None:
                islands[str(value)] = islands.get(str(value), 0) + 1
        gpus = node.allocatable.get(GPU_RESOURCE, 0)
        if not (gpus or labels or doc or devices):
            continue
        out.append(
            NodeGpus(
                node=node.name,
                gpus=gpus,
                gpus_free=node.free.get(GPU_RESOURCE, 0),
                labels=labels,
                island_sizes=node.islands.sizes if node.islands else (),
                island_free=node.islands.free if node.islands else (),
                island_error=str(doc) if isinstance(doc, IslandsFormatError) else None,
                devices=devices or None,
                device_islands=islands or None,
            )
        )
    return out
