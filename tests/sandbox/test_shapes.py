"""Cluster shapes: the shipped files load, produce the right objects, and bad files say why."""

from __future__ import annotations

from pathlib import Path

import pytest

from atoll.sandbox.shapes import (
    DRA_DRIVER,
    GPU_RESOURCE,
    NVIDIA_DRIVER,
    ShapeError,
    device_classes,
    load_shape,
    node_names,
    nodes,
    resource_slices,
)

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"


@pytest.mark.parametrize(
    ("file", "node_count", "gpus", "islands_per_node"),
    [
        pytest.param("lab-2x3090.yaml", 1, 2, 1, id="lab"),
        pytest.param("pcie-bridged-pairs.yaml", 4, 32, 4, id="bridged-pairs"),
        pytest.param("dgx-h100.yaml", 16, 128, 1, id="dgx"),
        pytest.param("gb200-nvl72.yaml", 36, 144, 1, id="nvl72"),
    ],
)
def test_shipped_shapes_describe_their_hardware(
    file: str, node_count: int, gpus: int, islands_per_node: int
) -> None:
    shape = load_shape(CLUSTERS / file)
    made = nodes(shape)
    assert len(made) == node_count
    assert shape.gpu_count() == gpus
    assert sum(int(n["status"]["allocatable"][GPU_RESOURCE]) for n in made) == gpus
    for rs in resource_slices(shape):
        islands = {d["attributes"]["island"]["int"] for d in rs["spec"]["devices"]}
        assert len(islands) == islands_per_node
        assert rs["spec"]["driver"] == DRA_DRIVER
        assert rs["spec"]["pool"]["name"] == rs["spec"]["nodeName"]


def test_bridged_pairs_put_consecutive_gpus_in_one_island() -> None:
    shape = load_shape(CLUSTERS / "pcie-bridged-pairs.yaml")
    devices = resource_slices(shape)[0]["spec"]["devices"]
    by_island: dict[int, list[str]] = {}
    for d in devices:
        by_island.setdefault(d["attributes"]["island"]["int"], []).append(d["name"])
    assert by_island == {
        0: ["gpu-0", "gpu-1"],
        1: ["gpu-2", "gpu-3"],
        2: ["gpu-4", "gpu-5"],
        3: ["gpu-6", "gpu-7"],
    }


def test_topology_labels_group_consecutive_nodes() -> None:
    shape = load_shape(CLUSTERS / "dgx-h100.yaml")
    labels = [n["metadata"]["labels"] for n in nodes(shape)]
    racks = [lab["topology.atoll.dev/rack"] for lab in labels]
    blocks = [lab["topology.atoll.dev/block"] for lab in labels]
    assert racks[:5] == ["rack-0"] * 4 + ["rack-1"]
    assert len(set(racks)) == 4
    assert blocks.count("block-0") == 8
    assert all(lab["kubernetes.io/hostname"] for lab in labels)


def test_nvl72_cliques_span_eighteen_nodes() -> None:
    shape = load_shape(CLUSTERS / "gb200-nvl72.yaml")
    cliques = [n["metadata"]["labels"]["nvidia.com/gpu.clique"] for n in nodes(shape)]
    assert cliques.count("nvl72-0") == 18
    assert cliques.count("nvl72-1") == 18


def test_node_names_are_zero_padded_for_sorting() -> None:
    shape = load_shape(CLUSTERS / "dgx-h100.yaml")
    names = node_names(shape.spec.node_groups[0])
    assert names[0] == "dgx-00"
    assert names == sorted(names)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param("kind: ClusterShape\n", "apiVersion", id="missing-api-version"),
        pytest.param(
            "apiVersion: atoll.dev/v1alpha1\nkind: ClusterShape\nmetadata: {name: x}\n"
            "spec: {nodeGroups: [{name: a, count: 1, gpus: {count: 8, islandSize: 3}}]}\n",
            "spec.nodeGroups[0].gpus",
            id="island-does-not-divide",
        ),
        pytest.param(
            "apiVersion: atoll.dev/v1alpha1\nkind: ClusterShape\nmetadata: {name: x}\n"
            "spec: {nodeGroups: [{name: a, count: 0}]}\n",
            "spec.nodeGroups[0].count",
            id="zero-nodes",
        ),
        pytest.param(
            "apiVersion: atoll.dev/v1alpha1\nkind: ClusterShape\nmetadata: {name: x}\n"
            "spec: {nodeGroups: [{name: a, count: 1, gpu: 8}]}\n",
            "spec.nodeGroups[0].gpu",
            id="unknown-field",
        ),
        pytest.param("{", "cannot read shape", id="not-yaml"),
    ],
)
def test_invalid_shape_names_the_field(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "shape.yaml"
    path.write_text(body)
    with pytest.raises(ShapeError, match=r"shape\.yaml") as err:
        load_shape(path)
    assert message in str(err.value)


def test_nvidia_format_publishes_the_drivers_attributes_and_class() -> None:
    shape = load_shape(CLUSTERS / "nvidia-dra.yaml")
    slices = resource_slices(shape)
    assert {rs["spec"]["driver"] for rs in slices} == {NVIDIA_DRIVER}
    rs = slices[0]
    assert rs["spec"]["pool"] == {"name": "nvh100-0", "generation": 1, "resourceSliceCount": 1}
    dev = rs["spec"]["devices"][3]
    attrs = dev["attributes"]
    assert dev["name"] == "gpu-3"
    assert attrs["type"] == {"string": "gpu"}
    assert attrs["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert attrs["cudaComputeCapability"] == {"version": "9.0.0"}
    assert attrs["resource.kubernetes.io/pciBusID"] == attrs["pcieBusID"]
    assert attrs["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:01"}
    assert "island" not in attrs
    assert dev["capacity"] == {"memory": {"value": "80Gi"}}
    classes = {c["metadata"]["name"]: c for c in device_classes(shape)}
    (selector,) = classes[NVIDIA_DRIVER]["spec"]["selectors"]
    assert "device.attributes['gpu.nvidia.com'].type == 'gpu'" in selector["cel"]["expression"]


def test_device_plugin_shape_has_gfd_labels_and_no_slices() -> None:
    shape = load_shape(CLUSTERS / "gfd-device-plugin.yaml")
    assert resource_slices(shape) == []
    labels = nodes(shape)[5]["metadata"]["labels"]
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["nvidia.com/gpu.memory"] == str(186 * 1024)
    assert labels["nvidia.com/gpu.clique"] == "9f3c2a71-nvl-1"
    assert [c["metadata"]["name"] for c in device_classes(shape)] == [DRA_DRIVER]
