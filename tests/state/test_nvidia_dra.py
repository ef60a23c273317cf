"""Placement on ResourceSlices in NVIDIA's GPU DRA driver format (examples/clusters/
nvidia-dra.yaml): `matchAttribute: resource.kubernetes.io/pcieRoot`, CEL selectors on the
driver's attributes, and islands discovered on the node grouping its devices."""

from __future__ import annotations

from typing import Any

from atoll.agent.gputopology import Gpu, GpuTopology, Link, LinkKind, published
from atoll.api.core import Node
from atoll.api.islands import ISLANDS_ANNOTATION
from atoll.api.resource import DeviceClaim, DeviceClass, ResourceSlice
from atoll.engine.devices import Claim
from atoll.engine.inventory import NoFit
from atoll.engine.placement import place
from atoll.sandbox.shapes import (
    ISLAND_ATTRIBUTE,
    NVIDIA_DRIVER,
    bus_id,
    device_classes,
    load_shape,
    nodes,
    resource_slices,
)
from atoll.state.gangs import claim
from atoll.state.inventory import ClusterInventory
from tests.engine.placement_builders import SHAPES, compiler, gang, placed, pod_set

PCIE_ROOT = "resource.kubernetes.io/pcieRoot"


def _inventory(annotate: dict[str, str] | None = None) -> ClusterInventory:
    shape = load_shape(SHAPES / "nvidia-dra.yaml")
    inv = ClusterInventory(island_attribute=ISLAND_ATTRIBUTE)
    for raw in nodes(shape):
        if annotate and raw["metadata"]["name"] in annotate:
            raw["metadata"]["annotations"][ISLANDS_ANNOTATION] = annotate[raw["metadata"]["name"]]
        inv.upsert_node(Node.from_dict(raw))
    for raw in resource_slices(shape):
        inv.upsert_slice(ResourceSlice.from_dict(raw))
    for raw in device_classes(shape):
        inv.upsert_device_class(DeviceClass.from_dict(raw))
    return inv


def _claim(
    inv: ClusterInventory, count: int, *, match: str | None = None, selector: str | None = None
) -> Claim:
    exactly: dict[str, Any] = {"deviceClassName": NVIDIA_DRIVER, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    spec: dict[str, Any] = {"requests": [{"name": "gpu", "exactly": exactly}]}
    if match:
        spec["constraints"] = [{"matchAttribute": match}]
    return claim("gpus", DeviceClaim.model_validate(spec), compiler=compiler(), inventory=inv)


def _attr(inv: ClusterInventory, node: str, device: str, name: str) -> object:
    (d,) = [d for d in inv.snapshot().by_name[node].devices.all if d.name == device]
    return d.attributes.get(name)


def test_pcie_root_pairs_are_matched() -> None:
    inv = _inventory()
    got = placed(place(inv.snapshot(), gang(pod_set(8, claims=(_claim(inv, 2, match=PCIE_ROOT),)))))
    for pod in got.pods:
        roots = {_attr(inv, pod.node, a.device.rsplit("/", 1)[1], PCIE_ROOT) for a in pod.devices}
        assert len(roots) == 1
    assert [len(p.devices) for p in got.pods] == [2] * 8


def test_three_gpus_never_share_a_pcie_root() -> None:
    inv = _inventory()
    got = place(inv.snapshot(), gang(pod_set(1, claims=(_claim(inv, 3, match=PCIE_ROOT),))))
    assert isinstance(got, NoFit)
    assert "sharing resource.kubernetes.io/pcieRoot, the largest free island has 2" in got.message


def test_cel_selector_on_product_name_picks_the_l40s_node() -> None:
    inv = _inventory()
    l40s = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA L40S'"
    got = placed(place(inv.snapshot(), gang(pod_set(2, claims=(_claim(inv, 2, selector=l40s),)))))
    assert {p.node for p in got.pods} == {"nvl40s-0"}
    too_many = place(inv.snapshot(), gang(pod_set(3, claims=(_claim(inv, 2, selector=l40s),))))
    assert isinstance(too_many, NoFit)


def test_cel_selector_on_versions_and_capacity() -> None:
    inv = _inventory()
    hopper = (
        "device.attributes['gpu.nvidia.com'].cudaComputeCapability.isGreaterThan(semver('8.9.0'))"
        " && device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('64Gi')) >= 0"
    )
    got = placed(place(inv.snapshot(), gang(pod_set(2, claims=(_claim(inv, 8, selector=hopper),)))))
    assert sorted(p.node for p in got.pods) == ["nvh100-0", "nvh100-1"]


def _two_islands_doc() -> str:
    """An 8-GPU node discovered as two NVLink islands of 4 (bus IDs as the shape's slices)."""
    links = {
        (a, b): Link(LinkKind.NVLINK, 6) if a // 4 == b // 4 else Link(LinkKind.SYS)
        for a in range(8)
        for b in range(8)
        if a != b
    }
    gpus = tuple(Gpu(index=i, bus_id=f"0000{bus_id(i)}") for i in range(8))
    return published(GpuTopology(gpus=gpus, links=links, source="test")).annotation()


def test_discovered_islands_group_the_drivers_devices_by_bus_id() -> None:
    doc = _two_islands_doc()
    inv = _inventory({"nvh100-0": doc, "nvh100-1": doc})
    assert _attr(inv, "nvh100-0", "gpu-1", ISLAND_ATTRIBUTE) == 0
    assert _attr(inv, "nvh100-0", "gpu-6", ISLAND_ATTRIBUTE) == 1
    assert _attr(inv, "nvl40s-0", "gpu-1", ISLAND_ATTRIBUTE) is None  # nothing published there
    # best fit by island: each 3-GPU pod inside one island of 4, 4 pods on 4 islands
    h100 = "device.attributes['gpu.nvidia.com'].architecture == 'Hopper'"
    got = placed(place(inv.snapshot(), gang(pod_set(4, claims=(_claim(inv, 3, selector=h100),)))))
    for pod in got.pods:
        names = [a.device.rsplit("/", 1)[1] for a in pod.devices]
        assert len({_attr(inv, pod.node, n, ISLAND_ATTRIBUTE) for n in names}) == 1, names
