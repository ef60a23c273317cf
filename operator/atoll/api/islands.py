"""atoll's Node labels and annotation for the NVLink islands `atoll topology discover` finds,
and the pod-template annotation that asks for one island per pod.

A node's islands are published as:
- label `atoll.dev/nvlink-island-max`: GPUs in its largest island (`8` on an HGX H100 board,
  `2` on a box of bridged pairs, `1` without NVLink), for nodeSelectors and `Gt` affinity;
- label `atoll.dev/nvlink-island-sizes`: every island's size, largest first, joined by `.`
  (`2.2`, `8`, `1.1.1.1.1.1.1.1`);
- annotation `atoll.dev/nvlink-islands`: JSON `NodeIslands` (below): per island its GPUs by
  index with bus ID and UUID when known, and the NVLink count, so that DRA devices of NVIDIA's
  driver can be grouped by island (matched by bus ID, else UUID, else index).
"""

from __future__ import annotations

import json
from typing import Final

from pydantic import Field, ValidationError

from atoll.api.meta import ApiModel

ISLANDS_ANNOTATION: Final = "atoll.dev/nvlink-islands"
ISLAND_MAX_LABEL: Final = "atoll.dev/nvlink-island-max"
ISLAND_SIZES_LABEL: Final = "atoll.dev/nvlink-island-sizes"
ISLAND_REQUEST_ANNOTATION: Final = "atoll.dev/nvlink-island"
"""On a pod template: `required` = each pod's `nvidia.com/gpu` inside one NVLink island."""
ISLAND_REQUIRED: Final = "required"
FORMAT_VERSION: Final = 1


def normalize_bus_id(bus_id: str) -> str:
    """`00000000:18:00.0` (NVML) and `0000:18:00.0` (Kubernetes) → `0000:18:00.0`, lowercase."""
    text = bus_id.strip().lower()
    domain, sep, rest = text.partition(":")
    if not sep or not rest:
        return text
    return f"{int(domain, 16):04x}:{rest}" if domain and _is_hex(domain) else text


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


class IslandGpu(ApiModel):
    index: int = Field(ge=0)
    """The GPU's index (as nvidia-smi and NVML number them)."""
    bus_id: str | None = Field(default=None, alias="busID")
    """PCI bus ID, `0000:18:00.0` (the DRA driver's `pciBusID` form)."""
    uuid: str | None = None
    """The GPU's UUID (`GPU-…`)."""


class PublishedIsland(ApiModel):
    gpus: tuple[IslandGpu, ...] = Field(min_length=1)
    """The GPUs of the island."""
    nvlinks: int = Field(ge=0)
    """Fewest bonded NVLinks between two linked GPUs of the island; 0: no NVLink."""
    all_pairs: bool = True
    """Every pair of the island's GPUs is directly linked."""


class NodeIslands(ApiModel):
    version: int = FORMAT_VERSION
    """Format version of this annotation."""
    source: str = ""
    """What was read: `nvml`, `nvidia-smi`, or a file."""
    islands: tuple[PublishedIsland, ...] = ()
    """Every GPU of the node is in exactly one island."""

    def sizes(self) -> tuple[int, ...]:
        """Island sizes, largest first."""
        return tuple(sorted((len(i.gpus) for i in self.islands), reverse=True))

    def labels(self) -> dict[str, str]:
        sizes = self.sizes()
        return {
            ISLAND_MAX_LABEL: str(sizes[0] if sizes else 0),
            ISLAND_SIZES_LABEL: ".".join(map(str, sizes)) or "0",
        }

    def annotation(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True)


class IslandsFormatError(ValueError):
    """The node annotation is not a NodeIslands document; names the node and the field."""


def parse_node_islands(node: str, text: str) -> NodeIslands:
    """The annotation's islands; raises IslandsFormatError."""
    try:
        got = NodeIslands.model_validate_json(text)
    except ValidationError as e:
        where = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(document)'}: {err['msg']}"
            for err in e.errors()
        )
        raise IslandsFormatError(f"node {node}: annotation {ISLANDS_ANNOTATION}: {where}") from e
    seen: set[int] = set()
    for island in got.islands:
        for gpu in island.gpus:
            if gpu.index in seen:
                raise IslandsFormatError(
                    f"node {node}: annotation {ISLANDS_ANNOTATION}: GPU {gpu.index} is in two"
                    " islands"
                )
            seen.add(gpu.index)
    return got
