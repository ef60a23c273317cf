"""Cluster shapes: YAML descriptions of fake GPU node groups, turned into Kubernetes objects.

A shape (see `examples/clusters/`) lists node groups: how many nodes, their CPU, memory and
GPUs, how the GPUs of one node are joined into NVLink islands, and which topology labels
(block, rack, `nvidia.com/gpu.clique`, ...) group the nodes. From it the sandbox makes the
Nodes (with `nvidia.com/gpu` capacity and GPU Feature Discovery's labels) and, for DRA, the
DeviceClasses and one ResourceSlice per node, in one of two formats (`gpus.dra`):
- `atoll`: the sandbox's own driver `gpu.atoll.dev`, whose devices carry the island as an
  attribute;
- `nvidia`: what NVIDIA's GPU DRA driver (`gpu.nvidia.com`, kubernetes-sigs/dra-driver-nvidia-gpu)
  publishes for full GPUs: one pool per node named after it, devices `gpu-<minor>` with the
  attributes `type`, `uuid`, `productName`, `brand`, `architecture`, the versions
  `cudaComputeCapability`, `driverVersion`, `cudaDriverVersion`, the bus ID as `pcieBusID` and
  `resource.kubernetes.io/pciBusID`, `resource.kubernetes.io/pcieRoot`, and a `memory`
  capacity; no island attribute (the driver publishes none). MIG devices are not published.
or `none` (device plugin only: no ResourceSlice).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

DRA_DRIVER = "gpu.atoll.dev"
"""Driver name of the sandbox's fake GPU devices (also the DeviceClass name)."""
NVIDIA_DRIVER = "gpu.nvidia.com"
"""NVIDIA's GPU DRA driver (and the DeviceClass of its full GPUs)."""
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
    memory: str = Field(default="16Gi", pattern=r"^[1-9][0-9]*(Mi|Gi|Ti)$")
    """Memory of one GPU (a Kubernetes quantity in Mi, Gi or Ti)."""
    island_size: int = Field(default=1, ge=1, alias="islandSize")
    """GPUs per NVLink island inside a node (8 for NVSwitch boards, 2 for bridged pairs)."""
    dra: Literal["atoll", "nvidia", "none"] = "atoll"
    """ResourceSlice format: the sandbox's driver, NVIDIA's driver, or none (device plugin)."""
    product_name: str | None = Field(default=None, alias="productName")
    """NVML's product name (the DRA `productName`); default: `product` with spaces."""
    architecture: str = "Hopper"
    """GPU architecture (`nvidia` format)."""
    compute_capability: str = Field(default="9.0", alias="computeCapability")
    """CUDA compute capability (`nvidia` format)."""
    gpus_per_pcie_root: int = Field(default=2, ge=1, alias="gpusPerPcieRoot")
    """Consecutive GPUs sharing one `resource.kubernetes.io/pcieRoot`."""

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


def _mib(memory: str) -> int:
    """MiB of a validated GPU memory quantity (GFD's `nvidia.com/gpu.memory` is in MiB)."""
    scale = {"Mi": 1, "Gi": 2**10, "Ti": 2**20}[memory[-2:]]
    return int(memory[:-2]) * scale


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
        labels["nvidia.com/gpu.present"] = "true"
        labels["nvidia.com/gpu.product"] = group.gpus.product
        labels["nvidia.com/gpu.count"] = str(group.gpus.count)
        labels["nvidia.com/gpu.memory"] = str(_mib(group.gpus.memory))
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


def _atoll_device(gpus: Gpus, name: str, i: int) -> dict[str, Any]:
    return {
        "name": f"gpu-{i}",
        "attributes": {
            "index": {"int": i},
            "island": {"int": i // gpus.island_size},
            "productName": {"string": gpus.product},
            "uuid": {"string": f"GPU-{name}-{i}"},
            "resource.kubernetes.io/pcieRoot": {"string": _pcie_root(gpus, i)},
        },
        "capacity": {"memory": {"value": gpus.memory}},
    }


def _pcie_root(gpus: Gpus, i: int) -> str:
    return f"pci0000:{i // gpus.gpus_per_pcie_root:02x}"


def bus_id(i: int) -> str:
    """The fake PCI bus ID of GPU `i` of a node (as the DRA driver writes it)."""
    return f"0000:{0x18 + i:02x}:00.0"


def _nvidia_device(gpus: Gpus, name: str, i: int) -> dict[str, Any]:
    bus = bus_id(i)
    return {
        "name": f"gpu-{i}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{name}/{i}')}"},
            "productName": {"string": gpus.product_name or gpus.product.replace("-", " ")},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": gpus.architecture},
            "cudaComputeCapability": {"version": f"{gpus.compute_capability}.0"},
            "driverVersion": {"version": "580.95.5"},
            "cudaDriverVersion": {"version": "13.0.0"},
            "pcieBusID": {"string": bus},
            "resource.kubernetes.io/pciBusID": {"string": bus},
            "resource.kubernetes.io/pcieRoot": {"string": _pcie_root(gpus, i)},
        },
        "capacity": {"memory": {"value": gpus.memory}},
    }


def _slice(group: NodeGroup, name: str) -> dict[str, Any]:
    gpus = group.gpus
    nvidia = gpus.dra == "nvidia"
    driver = NVIDIA_DRIVER if nvidia else DRA_DRIVER
    make = _nvidia_device if nvidia else _atoll_device
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{name}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": name,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": [make(gpus, name, i) for i in range(gpus.count)],
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


def nvidia_device_class() -> dict[str, Any]:
    """NVIDIA's DeviceClass of full GPUs (as its Helm chart installs it)."""
    selector = (
        f"device.driver == '{NVIDIA_DRIVER}' && device.attributes['{NVIDIA_DRIVER}'].type == 'gpu'"
    )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": NVIDIA_DRIVER},
        "spec": {"selectors": [{"cel": {"expression": selector}}]},
    }


def device_classes(shape: ClusterShape) -> list[dict[str, Any]]:
    """The sandbox's DeviceClass, and NVIDIA's when a node group publishes its format."""
    out = [device_class()]
    if any(g.gpus.count and g.gpus.dra == "nvidia" for g in shape.spec.node_groups):
        out.append(nvidia_device_class())
    return out


def nodes(shape: ClusterShape) -> list[dict[str, Any]]:
    """The Node objects of a shape, status included (KWOK keeps the given capacity)."""
    out = []
    for group in shape.spec.node_groups:
        for index, name in enumerate(node_names(group)):
            out.append(_node(group, index, name))
    return out


def resource_slices(shape: ClusterShape) -> list[dict[str, Any]]:
    """One ResourceSlice per GPU node of each group that publishes DRA devices."""
    out: list[dict[str, Any]] = []
    for group in shape.spec.node_groups:
        if group.gpus.count and group.gpus.dra != "none":
            out.extend(_slice(group, name) for name in node_names(group))
    return out
