"""Gang placement on the sandbox's cluster shapes: topology levels, best fit, no-fit reasons."""

from __future__ import annotations

from collections import Counter

import pytest

from atoll.engine.inventory import NoFit, NoFitReason, Placement, TopologyMode
from atoll.engine.placement import place
from atoll.sandbox.shapes import ISLAND_ATTRIBUTE
from tests.engine.placement_builders import (
    CLIQUE,
    GPU,
    HOSTNAME,
    RACK,
    cluster,
    dra_claim,
    gang,
    labels_of,
    nodes_of,
    placed,
    pod_set,
    shape_inventory,
)


def test_dgx_8gpu_single_pod_gangs_each_take_one_whole_node() -> None:
    inv = cluster("dgx-h100")
    used = []
    for i in range(16):
        p = placed(place(inv.snapshot(), gang(pod_set(1, gpus=8), key=f"ns/j{i}")))
        inv.hold(p)
        used.append(p.pods[0].node)
    assert sorted(used) == sorted(n.name for n in inv.snapshot().nodes)
    extra = place(inv.snapshot(), gang(pod_set(1, gpus=8), key="ns/more"))
    assert isinstance(extra, NoFit)
    assert extra.reason is NoFitReason.INSUFFICIENT
    assert extra.available == 0


def test_dgx_rack_required_gang_lands_inside_one_rack() -> None:
    inv = shape_inventory("dgx-h100")
    p = placed(place(inv, gang(pod_set(16, gpus=2, level=RACK))))
    racks = {labels_of(inv, n, RACK) for n in nodes_of(p)}
    assert len(racks) == 1
    assert p.pod_sets[0].level == RACK
    assert p.pod_sets[0].domain == ("block-0", racks.pop())


def test_dgx_rack_required_gang_waits_when_every_rack_is_partly_used() -> None:
    inv = cluster("dgx-h100")
    # one 8-GPU job on the first node of every rack: each rack keeps 24 of 32 GPUs free
    for i, node in enumerate(("dgx-00", "dgx-04", "dgx-08", "dgx-12")):
        job = gang(pod_set(1, gpus=8), key=f"ns/r{i}")
        inv.hold(placed(place(inv.snapshot(), job, within=frozenset({node}))))
    got = place(inv.snapshot(), gang(pod_set(16, gpus=2, level=RACK)))
    assert isinstance(got, NoFit)
    assert got.reason is NoFitReason.NO_DOMAIN
    assert (got.needed, got.available, got.level) == (16, 12, RACK)
    assert got.fits_unconstrained
    preferred = place(
        inv.snapshot(), gang(pod_set(16, gpus=2, level=RACK, mode=TopologyMode.PREFERRED))
    )
    assert isinstance(preferred, Placement)


def test_best_fit_picks_the_partly_used_rack() -> None:
    inv = cluster("dgx-h100")
    first = placed(place(inv.snapshot(), gang(pod_set(4, gpus=8, level=RACK), key="ns/a")))
    inv.hold(first)
    second = placed(place(inv.snapshot(), gang(pod_set(2, gpus=8, level=RACK), key="ns/b")))
    inv.hold(second)
    third = placed(place(inv.snapshot(), gang(pod_set(2, gpus=8, level=RACK), key="ns/c")))
    snap = inv.snapshot()
    rack_of = {labels_of(snap, n, RACK) for n in nodes_of(second) + nodes_of(third)}
    # the two 2-node gangs share one rack, leaving the other racks whole
    assert len(rack_of) == 1
    assert rack_of != {labels_of(snap, nodes_of(first)[0], RACK)}


def test_pcie_pairs_two_gpu_claim_always_gets_a_bridged_pair() -> None:
    inv = cluster("pcie-bridged-pairs")
    claim = dra_claim(inv, 2)
    p = placed(place(inv.snapshot(), gang(pod_set(16, claims=(claim,)))))
    snap = inv.snapshot()
    for pod in p.pods:
        devices = snap.by_name[pod.node].devices.all
        islands = {
            d.attributes[ISLAND_ATTRIBUTE]
            for d in devices
            if d.id in {a.device for a in pod.devices}
        }
        assert len(pod.devices) == 2
        assert len(islands) == 1
    ids = [a.device for pod in p.pods for a in pod.devices]
    assert len(ids) == len(set(ids)) == 32


def test_pcie_single_gpu_pods_fill_broken_pairs_first() -> None:
    inv = cluster("pcie-bridged-pairs")
    one = dra_claim(inv, 1, match=None)
    first = placed(place(inv.snapshot(), gang(pod_set(1, claims=(one,)), key="ns/a")))
    inv.hold(first)
    second = placed(place(inv.snapshot(), gang(pod_set(1, claims=(one,)), key="ns/b")))
    a, b = first.pods[0], second.pods[0]
    assert a.node == b.node
    # gpu-0 and gpu-1 form island 0: the second single-GPU pod completes it
    assert {a.devices[0].device.rsplit("/", 1)[1], b.devices[0].device.rsplit("/", 1)[1]} == {
        "gpu-0",
        "gpu-1",
    }


def test_pcie_pair_claim_reports_the_largest_free_island() -> None:
    inv = cluster("pcie-bridged-pairs")
    even = 'device.attributes["gpu.atoll.dev"].index % 2 == 0'
    one = dra_claim(inv, 1, match=None, selectors=(even,))
    # one GPU of every pair on every node: 16 pods of one even-numbered GPU
    inv.hold(placed(place(inv.snapshot(), gang(pod_set(16, claims=(one,)), key="ns/spread"))))
    got = place(inv.snapshot(), gang(pod_set(1, claims=(dra_claim(inv, 2),))))
    assert isinstance(got, NoFit)
    assert got.reason is NoFitReason.INSUFFICIENT
    assert (got.devices_per_pod, got.largest_island) == (2, 1)
    assert "the largest free island has 1" in got.message


def test_gb200_clique_required_gang_lands_in_one_clique() -> None:
    inv = shape_inventory("gb200-nvl72")
    p = placed(place(inv, gang(pod_set(18, gpus=4, level=CLIQUE))))
    assert len({labels_of(inv, n, CLIQUE) for n in nodes_of(p)}) == 1
    too_big = place(inv, gang(pod_set(19, gpus=4, level=CLIQUE)))
    assert isinstance(too_big, NoFit)
    assert too_big.reason is NoFitReason.NO_DOMAIN
    assert too_big.available == 18


def test_lab_two_gpu_job_lands_on_the_bridged_pair() -> None:
    inv = cluster("lab-2x3090")
    p = placed(place(inv.snapshot(), gang(pod_set(1, claims=(dra_claim(inv, 2),)))))
    assert [a.device for a in p.pods[0].devices] == [
        "gpu.atoll.dev/lab-0/gpu-0",
        "gpu.atoll.dev/lab-0/gpu-1",
    ]
    assert isinstance(place(inv.snapshot(), gang(pod_set(1, gpus=3))), NoFit)


@pytest.mark.parametrize(
    ("slice_size", "fits"),
    [
        pytest.param(4, True, id="slices-of-a-node"),
        pytest.param(8, False, id="slice-larger-than-a-node"),
    ],
)
def test_slices_each_fit_one_host(slice_size: int, fits: bool) -> None:
    inv = shape_inventory("dgx-h100")
    ps = pod_set(8, gpus=2, level=RACK, slice_level=HOSTNAME, slice_size=slice_size)
    got = place(inv, gang(ps))
    assert isinstance(got, Placement) is fits
    if isinstance(got, Placement):
        per_node: dict[str, int] = {}
        for n in nodes_of(got):
            per_node[n] = per_node.get(n, 0) + 1
        assert all(c % slice_size == 0 for c in per_node.values())


@pytest.mark.parametrize(
    ("count", "size", "per_node"),
    [
        pytest.param(5, 4, [1, 4], id="a-slice-and-one-pod"),
        pytest.param(3, 4, [3], id="fewer-pods-than-a-slice"),
        pytest.param(7, 2, [3, 4], id="three-slices-and-one-pod"),
    ],
)
def test_a_count_no_multiple_of_the_slice_size_ends_in_a_short_slice(
    count: int, size: int, per_node: list[int]
) -> None:
    got = place(
        shape_inventory("dgx-h100"),
        gang(pod_set(count, gpus=2, level=RACK, slice_level=HOSTNAME, slice_size=size)),
    )
    assert isinstance(got, Placement)
    assert sorted(Counter(nodes_of(got)).values()) == per_node


def test_a_short_slice_says_so_when_it_does_not_fit() -> None:
    got = place(
        shape_inventory("dgx-h100"),
        gang(pod_set(5, gpus=2, level=HOSTNAME, slice_level=HOSTNAME, slice_size=4)),
    )
    assert isinstance(got, NoFit)
    assert "needs 2 slices of 4 pods (the last one of 1) in one" in got.message


@pytest.mark.parametrize(
    ("ps", "reason"),
    [
        pytest.param(
            pod_set(1, gpus=1, level="no/such-level"), NoFitReason.INVALID_REQUEST, id="level"
        ),
        pytest.param(
            pod_set(4, gpus=1, level=RACK, slice_level=HOSTNAME, slice_size=0),
            NoFitReason.INVALID_REQUEST,
            id="slice-size-zero",
        ),
    ],
)
def test_invalid_topology_requests_are_reported(ps: object, reason: NoFitReason) -> None:
    got = place(shape_inventory("dgx-h100"), gang(ps))  # type: ignore[arg-type]
    assert isinstance(got, NoFit)
    assert got.reason is reason


def test_multi_pod_set_gang_is_all_or_nothing() -> None:
    inv = shape_inventory("lab-2x3090")
    ok = pod_set(1, gpus=1, name="launcher")
    too_big = pod_set(2, gpus=1, name="workers")
    got = place(inv, gang(ok, too_big))
    assert isinstance(got, NoFit)
    assert got.pod_set == "workers"


def test_node_selector_and_taints_limit_eligible_nodes() -> None:
    inv = shape_inventory("dgx-h100")
    ps = pod_set(1, gpus=1)
    pinned = type(ps)(
        name="main", count=1, requests=ps.requests, node_selector=frozenset({("x", "y")})
    )
    got = place(inv, gang(pinned))
    assert isinstance(got, NoFit)
    assert got.reason is NoFitReason.NO_ELIGIBLE_NODE


def test_gpu_resource_counts_follow_the_ledger() -> None:
    inv = cluster("lab-2x3090")
    p = placed(place(inv.snapshot(), gang(pod_set(1, gpus=1), key="ns/a")))
    inv.hold(p)
    assert inv.snapshot().nodes[0].free[GPU] == 1
    inv.release("ns/a")
    assert inv.snapshot().nodes[0].free[GPU] == 2
