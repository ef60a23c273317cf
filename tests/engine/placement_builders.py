"""Builders for placement tests: inventories from the sandbox's cluster shapes, GPU pod sets
and DRA claims written as the user would write a ResourceClaimTemplate."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from atoll.api.core import Node
from atoll.api.resource import DeviceClaim, DeviceClass, ResourceSlice
from atoll.api.topology import Topology
from atoll.engine.devices import Claim
from atoll.engine.inventory import (
    Gang,
    GangPodSet,
    Inventory,
    Placement,
    PlacementResult,
    TopologyMode,
    TopologyRequest,
)
from atoll.sandbox.shapes import (
    DRA_DRIVER,
    GPU_RESOURCE,
    ISLAND_ATTRIBUTE,
    device_class,
    load_shape,
    nodes,
    resource_slices,
)
from atoll.state.cel import SelectorCompiler
from atoll.state.gangs import claim
from atoll.state.inventory import ClusterInventory

SHAPES = Path(__file__).resolve().parents[2] / "examples" / "clusters"
HOSTNAME = "kubernetes.io/hostname"
BLOCK = "topology.atoll.dev/block"
RACK = "topology.atoll.dev/rack"
CLIQUE = "nvidia.com/gpu.clique"
GPU = GPU_RESOURCE


@cache
def compiler() -> SelectorCompiler:
    return SelectorCompiler()


def topology(name: str, levels: list[str]) -> Topology:
    return Topology.from_dict(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Topology",
            "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": lv} for lv in levels]},
        }
    )


def cluster(shape: str, *, island: str | None = ISLAND_ATTRIBUTE) -> ClusterInventory:
    """A ClusterInventory of a shape file, with Topology `default` = the shape's levels +
    hostname."""
    s = load_shape(SHAPES / f"{shape}.yaml")
    inv = ClusterInventory(island_attribute=island)
    for raw in nodes(s):
        inv.upsert_node(Node.from_dict(raw))
    for raw in resource_slices(s):
        inv.upsert_slice(ResourceSlice.from_dict(raw))
    inv.upsert_device_class(DeviceClass.from_dict(device_class()))
    levels = [lv.label for lv in s.spec.node_groups[0].topology]
    inv.upsert_topology(topology("default", [*levels, HOSTNAME]))
    return inv


@cache
def shape_inventory(shape: str) -> Inventory:
    return cluster(shape).snapshot()


def dra_claim(
    inv: ClusterInventory,
    count: int,
    *,
    match: str | None = ISLAND_ATTRIBUTE,
    selectors: tuple[str, ...] = (),
    name: str = "gpus",
) -> Claim:
    """A claim of `count` sandbox GPUs, all sharing `match` when given."""
    spec: dict[str, Any] = {
        "requests": [
            {
                "name": "gpu",
                "exactly": {
                    "deviceClassName": DRA_DRIVER,
                    "count": count,
                    "selectors": [{"cel": {"expression": e}} for e in selectors],
                },
            }
        ]
    }
    if match:
        spec["constraints"] = [{"matchAttribute": match}]
    return claim(name, DeviceClaim.model_validate(spec), compiler=compiler(), inventory=inv)


def pod_set(
    count: int,
    *,
    gpus: int = 0,
    name: str = "main",
    level: str | None = None,
    mode: TopologyMode = TopologyMode.REQUIRED,
    claims: tuple[Claim, ...] = (),
    cpu: int = 1000,
    slice_level: str | None = None,
    slice_size: int | None = None,
) -> GangPodSet:
    requests = [("cpu", cpu)] + ([(GPU, gpus)] if gpus else [])
    topo = None
    if level is not None or slice_level is not None or mode is TopologyMode.UNCONSTRAINED:
        topo = TopologyRequest(
            topology="default",
            mode=mode,
            level=level,
            slice_level=slice_level,
            slice_size=slice_size,
        )
    return GangPodSet(
        name=name, count=count, requests=tuple(requests), claims=claims, topology=topo
    )


def gang(*pod_sets: GangPodSet, key: str = "ns/job") -> Gang:
    return Gang(key=key, pod_sets=pod_sets)


def placed(result: PlacementResult) -> Placement:
    assert isinstance(result, Placement), getattr(result, "message", result)
    return result


def nodes_of(p: Placement) -> list[str]:
    return [pod.node for pod in p.pods]


def labels_of(inv: Inventory, node: str, key: str) -> str:
    return inv.by_name[node].labels[key]
