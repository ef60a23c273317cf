"""The GPU topology of one node and its NVLink islands.

An island is a connected component of the graph whose edges are NVLink connections between
GPUs (`NV#` in `nvidia-smi topo -m`, a bonded set of # links; through an NVSwitch every pair of
GPUs shows the links of one GPU). GPUs without any NVLink are islands of one. Both readers
(atoll.agent.nvidiasmi, atoll.agent.nvml) produce a `GpuTopology`; `islands()` is the same
for both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from atoll.api.islands import IslandGpu, NodeIslands, PublishedIsland, normalize_bus_id


class LinkKind(Enum):
    """How two devices are connected, fastest first (`nvidia-smi topo -m`'s legend)."""

    SELF = "X"
    NVLINK = "NV"
    PIX = "PIX"
    """At most one PCIe bridge."""
    PXB = "PXB"
    """Several PCIe bridges, no host bridge."""
    PHB = "PHB"
    """Through a PCIe host bridge (the CPU)."""
    NODE = "NODE"
    """Between host bridges inside one NUMA node."""
    SYS = "SYS"
    """Across the interconnect between NUMA nodes (older drivers print SOC)."""


@dataclass(frozen=True, slots=True)
class Link:
    kind: LinkKind
    nvlinks: int = 0
    """Bonded NVLinks (NVLINK only)."""

    def __str__(self) -> str:
        return f"NV{self.nvlinks}" if self.kind is LinkKind.NVLINK else self.kind.value


@dataclass(frozen=True, slots=True, kw_only=True)
class Gpu:
    index: int
    bus_id: str | None = None
    """PCI bus ID as the DRA driver writes it (`0000:18:00.0`); unknown from topo -m."""
    uuid: str | None = None
    cpu_affinity: str | None = None
    numa_affinity: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuTopology:
    gpus: tuple[Gpu, ...]
    """In index order."""
    links: Mapping[tuple[int, int], Link] = field(default_factory=dict)
    """GPU index pair (both orders) → link; the diagonal is left out."""
    source: str = ""
    """Where it was read: `nvidia-smi`, `nvml`, or a file name."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Island:
    gpus: tuple[int, ...]
    """GPU indices, ascending."""
    nvlinks: int
    """Fewest bonded NVLinks between two directly linked GPUs of the island; 0: no NVLink."""
    all_pairs: bool
    """Every pair of GPUs is directly linked (NVSwitch boards, bridged pairs)."""

    @property
    def link(self) -> str:
        return f"NV{self.nvlinks}" if self.nvlinks else "none"


def islands(topology: GpuTopology) -> tuple[Island, ...]:
    """The NVLink islands, ordered by their lowest GPU index."""
    parent = {g.index: g.index for g in topology.gpus}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for (a, b), link in topology.links.items():
        if link.kind is LinkKind.NVLINK and a in parent and b in parent:
            parent[root(a)] = root(b)
    groups: dict[int, list[int]] = {}
    for g in topology.gpus:
        groups.setdefault(root(g.index), []).append(g.index)
    out = []
    for members in groups.values():
        members.sort()
        counts = [
            pair.nvlinks
            for a in members
            for b in members
            if a < b and (pair := topology.links.get((a, b))) and pair.kind is LinkKind.NVLINK
        ]
        pairs = len(members) * (len(members) - 1) // 2
        out.append(
            Island(
                gpus=tuple(members),
                nvlinks=min(counts, default=0),
                all_pairs=len(counts) == pairs,
            )
        )
    return tuple(sorted(out, key=lambda isl: isl.gpus[0]))


def published(topology: GpuTopology) -> NodeIslands:
    """The islands as atoll publishes them on the Node (atoll.api.islands)."""
    by_index = {g.index: g for g in topology.gpus}
    return NodeIslands(
        source=topology.source,
        islands=tuple(
            PublishedIsland(
                gpus=tuple(
                    IslandGpu(
                        index=i,
                        bus_id=normalize_bus_id(b) if (b := by_index[i].bus_id) else None,
                        uuid=by_index[i].uuid,
                    )
                    for i in island.gpus
                ),
                nvlinks=island.nvlinks,
                all_pairs=island.all_pairs,
            )
            for island in islands(topology)
        ),
    )


def describe(found: NodeIslands) -> str:
    """The islands for people: one line each (GPU indices, link, size)."""
    sizes = found.sizes()
    gpus = sum(sizes)
    of = ", ".join(map(str, sizes))
    lines = [f"{found.source}: {gpus} GPU(s) in {len(sizes)} NVLink island(s) of {of}"]
    for k, island in enumerate(found.islands):
        link = f"NV{island.nvlinks}" if island.nvlinks else "no NVLink"
        shape = "" if island.all_pairs or len(island.gpus) < 2 else ", not every pair linked"
        indices = ",".join(str(g.index) for g in island.gpus)
        lines.append(f"  island {k}: GPUs {indices} ({len(island.gpus)}), {link}{shape}")
    return "\n".join(lines)
