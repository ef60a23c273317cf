"""Cluster shapes: YAML descriptions of fake GPU node groups, turned into Kubernetes objects.

A shape (see `examples/clusters/`) lists node groups: how many nodes, their CPU, memory and
GPUs, how the GPUs of one node are joined into NVLink islands, and which topology labels
(block, rack, `nvidia.com/gpu.clique`, ...) group the nodes. From it the sandbox makes the
Nodes (with `nvidia.com/gpu` capacity) and, for DRA, one DeviceClass and one ResourceSlice per
node whose devices carry the island as an attribute.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

DRA_DRIVER = "gpu.atoll.dev"
"""Driver name of the sandbox's fake GPU devices (also the DeviceClass name)."""
ISLAND_ATTRIBUTE = f"{DRA_DRIVER}/island"
"""Fully qualified device attribute naming the NVLink island inside a node."""
GPU_RESOURCE = "nvidia.com/gpu"
FAKE_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")


class ShapeError(ValueError):
    """A cluster shape file is invalid; the message names the file and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Gpus(_Strict):
    count: int = Field(ge=0, le=64)
    """GPUs per node."""
    product: str = "NVIDIA-GPU"
    """GPU product name (the `nvidia.com/gpu.product` label and `productName` attribute)."""
    memory: str = "16Gi"
    """Memory of one GPU (a Kubernetes quantity)."""
    island_size: int = Field(default=1, ge=1, alias="islandSize")
    """GPUs per NVLink island inside a node (8 for NVSwitch boards, 2 for bridged pairs)."""

    @model_validator(mode="after")
    def _islands_divide_count(self) -> Gpus:
        if self.count and self.count % self.island_size:
            raise ValueError(f"islandSize {self.island_size} must divide count {self.count}")
        return self


class TopologyLevel(_Strict):
    label: str
    """Node label key of this level, e.g. `topology.atoll.dev/rack`."""
    nodes_per_domain: int = Field(ge=1, alias="nodesPerDomain")
    """How many consecutive nodes of the group share one value."""
    prefix: str
    """Value prefix: domain k of this level gets the value `<prefix>-<k>`."""


class NodeGroup(_Strict):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)
    """Node names are `<name>-<index>`."""
    count: int = Field(ge=1, le=5000)
    cpu: str = "64"
    memory: str = "512Gi"
    pods: int = Field(default=256, ge=1)
    gpus: Gpus = Gpus(count=0)
    topology: tuple[TopologyLevel, ...] = ()
    labels: dict[str, str] = {}
    taints: tuple[dict[str, str], ...] = ()


class ShapeSpec(_Strict):
    node_groups: tuple[NodeGroup, ...] = Field(alias="nodeGroups", min_length=1)
    description: str = ""


class ShapeMeta(_Strict):
    name: str


class ClusterShape(_Strict):
    api_version: str = Field(alias="apiVersion", pattern=r"^atoll\.dev/v1alpha1$")
    kind: str = Field(pattern=r"^ClusterShape$")
    metadata: ShapeMeta
    spec: ShapeSpec

    @property
    def name(self) -> str:
        return self.metadata.name

    def gpu_count(self) -> int:
        return sum(g.count * g.gpus.count for g in self.spec.node_groups)


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def load_shape(path: Path) -> ClusterShape:
    """Read and validate a shape file; errors name the file and the offending field."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ShapeError(f"{path}: cannot read shape: {e}") from e
    try:
        return ClusterShape.model_validate(raw)
    except ValidationError as e:
        problems = "; ".join(f"{_loc(err['loc'])}: {err['msg']}" for err in e.errors())
        raise ShapeError(f"{path}: invalid cluster shape: {problems}") from e


def node_names(group: NodeGroup) -> list[str]:
    width = len(str(group.count - 1))
    return [f"{group.name}-{i:0{width}d}" for i in range(group.count)]


def _node(group: NodeGroup, index: int, name: str) -> dict[str, Any]:
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        "atoll.dev/node-group": group.name,
        **group.labels,
    }
    for level in group.topology:
        labels[level.label] = f"{level.prefix}-{index // level.nodes_per_domain}"
    resources: dict[str, str] = {
        "cpu": group.cpu,
        "memory": group.memory,
        "pods": str(group.pods),
    }
    if group.gpus.count:
        resources[GPU_RESOURCE] = str(group.gpus.count)
        labels["nvidia.com/gpu.product"] = group.gpus.product
        labels["nvidia.com/gpu.count"] = str(group.gpus.count)
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {FAKE_NODE_ANNOTATION[0]: FAKE_NODE_ANNOTATION[1]},
        },
        "spec": {"taints": [dict(t) for t in group.taints]} if group.taints else {},
        "status": {"capacity": resources, "allocatable": dict(resources)},
    }
    return node


def _slice(group: NodeGroup, name: str) -> dict[str, Any]:
    gpus = group.gpus
    devices = []
    for i in range(gpus.count):
        island = i // gpus.island_size
        devices.append(
            {
                "name": f"gpu-{i}",
                "attributes": {
                    "index": {"int": i},
                    "island": {"int": island},
                    "productName": {"string": gpus.product},
                    "uuid": {"string": f"GPU-{name}-{i}"},
                    "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{i // 2:02x}"},
                },
                "capacity": {"memory": {"value": gpus.memory}},
            }
        )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{name}-{DRA_DRIVER}"},
        "spec": {
            "driver": DRA_DRIVER,
            "nodeName": name,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def device_class() -> dict[str, Any]:
    """The DeviceClass selecting every fake GPU of the sandbox."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRA_DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}]},
    }


def nodes(shape: ClusterShape) -> list[dict[str, Any]]:
    """The Node objects of a shape, status included (KWOK keeps the given capacity)."""
    out = []
    for group in shape.spec.node_groups:
        for index, name in enumerate(node_names(group)):
            out.append(_node(group, index, name))
    return out


def resource_slices(shape: ClusterShape) -> list[dict[str, Any]]:
    """One ResourceSlice per GPU node, its devices carrying the island attribute."""
    out: list[dict[str, Any]] = []
    for group in shape.spec.node_groups:
        if group.gpus.count:
            out.extend(_slice(group, name) for name in node_names(group))
    return out
