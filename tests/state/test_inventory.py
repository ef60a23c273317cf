"""The live inventory: what counts as used, which slices count, claims, ledger, gangs from
Workload pod sets, and Kueue's topologyAssignment."""

from __future__ import annotations

from typing import Any

import pytest

from atoll.api.core import Node, Pod
from atoll.api.resource import ResourceClaim, ResourceClaimTemplate, ResourceSlice
from atoll.api.workload import PodSet, Workload
from atoll.engine.inventory import Placement, TopologyMode
from atoll.engine.placement import place
from atoll.sandbox.shapes import DRA_DRIVER, ISLAND_ATTRIBUTE
from atoll.state.cache import Cache
from atoll.state.gangs import GangError, gang_pod_set, topology_request
from atoll.state.topologyassignment import topology_assignment
from tests.engine.placement_builders import (
    GPU,
    HOSTNAME,
    RACK,
    cluster,
    compiler,
    dra_claim,
    gang,
    placed,
    pod_set,
)


def _pod(
    name: str,
    node: str | None,
    *,
    gpus: int = 1,
    phase: str = "Running",
    workload: str | None = None,
) -> Pod:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if workload:
        meta["annotations"] = {"kueue.x-k8s.io/workload": workload}
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", GPU: str(gpus)}}}]
    }
    if node:
        spec["nodeName"] = node
    return Pod.from_dict({"metadata": meta, "spec": spec, "status": {"phase": phase}})


def _slice(
    node: str, *, generation: int, count: int, devices: int, name: str | None = None
) -> ResourceSlice:
    return ResourceSlice.from_dict(
        {
            "metadata": {"name": name or f"{node}-g{generation}"},
            "spec": {
                "driver": DRA_DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": generation, "resourceSliceCount": count},
                "devices": [
                    {"name": f"gpu-{i}", "attributes": {"island": {"int": 0}}}
                    for i in range(devices)
                ],
            },
        }
    )


@pytest.mark.parametrize(
    ("pod", "free"),
    [
        pytest.param(_pod("a", "lab-0"), 1, id="bound-running-pod-counts"),
        pytest.param(_pod("a", None), 2, id="unbound-pod-does-not"),
        pytest.param(_pod("a", "lab-0", phase="Succeeded"), 2, id="finished-pod-does-not"),
    ],
)
def test_pods_use_node_allocatable(pod: Pod, free: int) -> None:
    inv = cluster("lab-2x3090")
    inv.upsert_pod(pod)
    assert inv.snapshot().nodes[0].free[GPU] == free


def test_pods_of_a_held_gang_are_counted_once() -> None:
    inv = cluster("lab-2x3090")
    held = placed(place(inv.snapshot(), gang(pod_set(1, gpus=1), key="ns/job-a")))
    inv.hold(held)
    inv.upsert_pod(_pod("a-0", "lab-0", workload="job-a"))
    assert inv.snapshot().nodes[0].free[GPU] == 1
    inv.release("ns/job-a")
    assert inv.snapshot().nodes[0].free[GPU] == 1  # now the running pod itself counts
    inv.delete_pod("ns", "a-0")
    assert inv.snapshot().nodes[0].free[GPU] == 2


def test_cordoned_or_not_ready_nodes_are_not_schedulable() -> None:
    inv = cluster("lab-2x3090")
    node = inv.snapshot().nodes[0]
    assert node.schedulable
    raw = {
        "metadata": {"name": "lab-0", "labels": dict(node.labels)},
        "spec": {"unschedulable": True},
        "status": {"allocatable": {GPU: "2"}},
    }
    inv.upsert_node(Node.from_dict(raw))
    assert not inv.snapshot().nodes[0].schedulable
    assert not isinstance(place(inv.snapshot(), gang(pod_set(1, gpus=1))), Placement)


def test_only_the_newest_complete_generation_of_a_pool_counts() -> None:
    inv = cluster("lab-2x3090")
    inv.delete_slice(f"lab-0-{DRA_DRIVER}")
    inv.upsert_slice(_slice("lab-0", generation=1, count=1, devices=4))
    assert len(inv.snapshot().nodes[0].devices.free) == 4
    # generation 2 announces two slices but only one arrived: the pool is incomplete
    inv.upsert_slice(_slice("lab-0", generation=2, count=2, devices=3, name="a"))
    devices = inv.snapshot().nodes[0].devices
    assert devices.incomplete
    assert devices.free == ()
    inv.upsert_slice(_slice("lab-0", generation=2, count=2, devices=3, name="b"))
    devices = inv.snapshot().nodes[0].devices
    assert not devices.incomplete
    assert len(devices.free) == 6
    assert {d.generation for d in devices.free} == {2}


def test_allocated_claims_take_their_devices() -> None:
    inv = cluster("lab-2x3090")
    claim = ResourceClaim.from_dict(
        {
            "metadata": {"name": "c", "namespace": "ns"},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "gpu",
                                "driver": DRA_DRIVER,
                                "pool": "lab-0",
                                "device": "gpu-0",
                            }
                        ]
                    }
                }
            },
        }
    )
    inv.upsert_claim(claim)
    free = [d.name for d in inv.snapshot().nodes[0].devices.free]
    assert free == ["gpu-1"]
    got = place(inv.snapshot(), gang(pod_set(1, claims=(dra_claim(inv, 2),))))
    assert not isinstance(got, Placement)
    inv.delete_claim("ns", "c")
    assert len(inv.snapshot().nodes[0].devices.free) == 2


def test_device_attributes_are_fully_qualified_with_the_driver_domain() -> None:
    d = cluster("lab-2x3090").snapshot().nodes[0].devices.free[0]
    assert d.attributes[ISLAND_ATTRIBUTE] == 0
    assert d.attributes["resource.kubernetes.io/pcieRoot"] == "pci0000:00"
    assert d.capacity[f"{DRA_DRIVER}/memory"] == 24 * 2**30 * 1000


def _template(count: int, expression: str | None = None) -> ResourceClaimTemplate:
    exactly: dict[str, Any] = {"deviceClassName": DRA_DRIVER, "count": count}
    if expression:
        exactly["selectors"] = [{"cel": {"expression": expression}}]
    return ResourceClaimTemplate.from_dict(
        {
            "metadata": {"name": "pair", "namespace": "ns"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [{"name": "gpu", "exactly": exactly}],
                        "constraints": [{"matchAttribute": ISLAND_ATTRIBUTE}],
                    }
                }
            },
        }
    )


def _workload_pod_set(**spec: Any) -> PodSet:
    return PodSet.model_validate(
        {
            "name": "main",
            "count": 2,
            "template": {
                "spec": {
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "500m"}}}],
                    "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "pair"}],
                    **spec,
                }
            },
            "topologyRequest": {"required": RACK},
        }
    )


def test_gang_pod_set_from_a_workload_places_on_bridged_pairs() -> None:
    inv = cluster("pcie-bridged-pairs")
    ps = gang_pod_set(
        _workload_pod_set(),
        templates={"pair": _template(2)},
        compiler=compiler(),
        inventory=inv,
        topology="default",
    )
    assert ps.requests == (("cpu", 500),)
    assert ps.topology is not None
    assert (ps.topology.mode, ps.topology.level) == (TopologyMode.REQUIRED, RACK)
    got = placed(place(inv.snapshot(), gang(ps)))
    assert all(len(p.devices) == 2 for p in got.pods)


@pytest.mark.parametrize(
    ("templates", "message"),
    [
        pytest.param({}, "ResourceClaimTemplate pair not found", id="missing-template"),
        pytest.param({"pair": _template(1, "device.attributes[")}, "compiling", id="bad-cel"),
    ],
)
def test_gang_errors_say_what_is_wrong(
    templates: dict[str, ResourceClaimTemplate], message: str
) -> None:
    inv = cluster("pcie-bridged-pairs")
    with pytest.raises(GangError, match=message):
        gang_pod_set(
            _workload_pod_set(),
            templates=templates,
            compiler=compiler(),
            inventory=inv,
            topology="default",
        )


def test_topology_request_without_a_topology_is_none() -> None:
    assert topology_request(_workload_pod_set().topology_request, None) is None


def test_topology_assignment_uses_hostname_only_and_compacts_values() -> None:
    inv = cluster("dgx-h100").snapshot()
    got = placed(place(inv, gang(pod_set(6, gpus=4, level=RACK))))
    ta = topology_assignment(got.pod_sets[0])
    assert ta is not None
    assert ta.levels == (HOSTNAME,)
    (s,) = ta.slices
    assert s.domain_count == 3
    values = s.values_per_level[0].individual
    assert values is not None
    assert (values.prefix, values.roots) == ("dgx-0", ("0", "1", "2"))
    assert s.pod_counts.universal == 2
    assert ta.to_dict()["slices"][0]["podCounts"] == {"universal": 2}


def test_no_topology_assignment_without_a_topology_request() -> None:
    inv = cluster("dgx-h100").snapshot()
    got = placed(place(inv, gang(pod_set(1, gpus=8))))
    assert topology_assignment(got.pod_sets[0]) is None


def test_a_restarted_cache_holds_admitted_placements_from_the_status() -> None:
    """After a restart, a gang admitted with a host-level topologyAssignment holds its
    nodes again (its pods may not be bound yet), exactly as the placement did."""
    inv = cluster("dgx-h100")
    got = placed(place(inv.snapshot(), gang(pod_set(6, gpus=4, level=RACK), key="ns/job-r")))
    ta = topology_assignment(got.pod_sets[0])
    assert ta is not None
    container = {"name": "c", "resources": {"requests": {GPU: "4"}}}
    wl = Workload.from_dict(
        {
            "metadata": {"name": "job-r", "namespace": "ns", "resourceVersion": "2"},
            "spec": {
                "queueName": "q",
                "podSets": [
                    {"name": "main", "count": 6, "template": {"spec": {"containers": [container]}}}
                ],
            },
            "status": {
                "conditions": [
                    {
                        "type": "QuotaReserved",
                        "status": "True",
                        "reason": "QuotaReserved",
                        "message": "",
                        "lastTransitionTime": "2026-12-01T00:00:00Z",
                    }
                ],
                "admission": {
                    "clusterQueue": "cq",
                    "podSetAssignments": [
                        {
                            "name": "main",
                            "count": 6,
                            "flavors": {GPU: "rf"},
                            "topologyAssignment": ta.to_dict(),
                        }
                    ],
                },
            },
        }
    )
    cache = Cache(inventory=inv)
    cache.set_workload(wl)
    assert cache.inventory.holds("ns/job-r")
    after_restart = {n.name: n.free[GPU] for n in inv.snapshot().nodes}
    fresh = cluster("dgx-h100")
    fresh.hold(got)
    assert after_restart == {n.name: n.free[GPU] for n in fresh.snapshot().nodes}
    assert sum(after_restart.values()) == 16 * 8 - 24
    # quota released (evicted and gone): the hold goes with it
    cache.delete_workload("ns/job-r")
    assert not cache.inventory.holds("ns/job-r")
