"""A held gang counts once: its placed pods as themselves (node, claims), its other pods as
planned, whatever node and devices kube-scheduler chose; planned devices taken by another
allocation are replaced, never counted as free twice."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from atoll.api.core import Pod
from atoll.api.resource import ResourceClaim
from atoll.engine.inventory import Placement
from atoll.engine.placement import place
from atoll.sandbox.shapes import DRA_DRIVER, ISLAND_ATTRIBUTE
from atoll.state.inventory import ClusterInventory
from tests.engine.placement_builders import cluster, dra_claim, gang, placed, pod_set

PAIRS = 16  # pcie-bridged-pairs: 4 nodes x 4 NVLink pairs


def _pod(
    name: str, node: str | None, *, workload: str | None, claim: str | None, phase: str = "Running"
) -> Pod:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if workload:
        meta["annotations"] = {"kueue.x-k8s.io/workload": workload}
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "pair"}],
    }
    if node:
        spec["nodeName"] = node
    status: dict[str, Any] = {"phase": phase}
    if claim:
        status["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": claim}]
    return Pod.from_dict({"metadata": meta, "spec": spec, "status": status})


def _claim(name: str, node: str, devices: list[int]) -> ResourceClaim:
    results = [
        {"request": "gpu", "driver": DRA_DRIVER, "pool": node, "device": f"gpu-{i}"}
        for i in devices
    ]
    return ResourceClaim.from_dict(
        {
            "metadata": {"name": name, "namespace": "ns"},
            "status": {"allocation": {"devices": {"results": results}}},
        }
    )


def _pairs_gang(inv: ClusterInventory, pods: int, key: str) -> Placement:
    return placed(place(inv.snapshot(), gang(pod_set(pods, claims=(dra_claim(inv, 2),)), key=key)))


def _free_pairs(inv: ClusterInventory) -> int:
    """How many one-pair pods the inventory admits now (placement's own answer)."""
    claim = dra_claim(inv, 2)
    n = 0
    while isinstance(place(inv.snapshot(), gang(pod_set(n + 1, claims=(claim,)))), Placement):
        n += 1
    return n


def _free_devices(inv: ClusterInventory, node: str) -> list[str]:
    return [d.name for d in inv.snapshot().by_name[node].devices.free]


def test_a_gang_placed_elsewhere_than_planned_is_counted_once() -> None:
    """Pods of a gang without a topology assignment are not pinned: kube-scheduler may put
    them on other nodes than planned. Their claims' devices replace the plan."""
    inv = cluster("pcie-bridged-pairs")
    plan = _pairs_gang(inv, 2, "ns/job-a")
    inv.hold(plan)
    assert _free_pairs(inv) == PAIRS - 2
    planned = {p.node for p in plan.pods}
    elsewhere = [n for n in ("pcie-0", "pcie-1", "pcie-2", "pcie-3") if n not in planned][:2]
    for i, node in enumerate(elsewhere):
        inv.upsert_claim(_claim(f"a-{i}-gpus", node, [0, 1]))
        inv.upsert_pod(_pod(f"a-{i}", node, workload="job-a", claim=f"a-{i}-gpus"))
    assert _free_pairs(inv) == PAIRS - 2
    for node in elsewhere:
        assert _free_devices(inv, node) == ["gpu-2", "gpu-3", "gpu-4", "gpu-5", "gpu-6", "gpu-7"]
    for node in planned:
        assert len(_free_devices(inv, node)) == 8
    inv.release("ns/job-a")
    assert _free_pairs(inv) == PAIRS - 2  # the running pods' claims still hold their pairs


def test_a_bound_pod_keeps_its_plan_until_its_claims_are_seen_allocated() -> None:
    inv = cluster("pcie-bridged-pairs")
    plan = _pairs_gang(inv, 1, "ns/job-a")
    inv.hold(plan)
    node = "pcie-3" if plan.pods[0].node != "pcie-3" else "pcie-2"
    inv.upsert_pod(_pod("a-0", node, workload="job-a", claim=None))
    assert _free_pairs(inv) == PAIRS - 1
    inv.upsert_pod(_pod("a-0", node, workload="job-a", claim="a-0-gpus"))
    assert _free_pairs(inv) == PAIRS - 1  # the claim exists but is not allocated yet
    inv.upsert_claim(_claim("a-0-gpus", node, [2, 3]))
    assert _free_pairs(inv) == PAIRS - 1
    assert len(_free_devices(inv, plan.pods[0].node)) == 8
    assert _free_devices(inv, node) == ["gpu-0", "gpu-1", "gpu-4", "gpu-5", "gpu-6", "gpu-7"]


def test_planned_devices_taken_by_another_allocation_are_replaced() -> None:
    """The allocator picks devices in listing order, not the plan's: when a pod that is not
    the gang's takes the planned pair, the gang still needs a pair on that node."""
    inv = cluster("pcie-bridged-pairs")
    plan = _pairs_gang(inv, 1, "ns/job-a")
    inv.hold(plan)
    node = plan.pods[0].node
    taken = sorted(int(a.device.rsplit("-", 1)[1]) for a in plan.pods[0].devices)
    inv.upsert_claim(_claim("other-gpus", node, taken))
    inv.upsert_pod(_pod("other", node, workload=None, claim="other-gpus"))
    free = inv.snapshot().by_name[node].devices.free
    assert len(free) == 4
    islands: dict[object, int] = {}
    for d in free:
        islands[d.attributes[ISLAND_ATTRIBUTE]] = islands.get(d.attributes[ISLAND_ATTRIBUTE], 0) + 1
    assert sorted(islands.values()) == [2, 2], "whole pairs stay free"
    assert _free_pairs(inv) == PAIRS - 2


def test_a_finished_pod_gives_its_place_back_to_the_plan_until_the_release() -> None:
    """A Job may start another pod after one succeeds (completions > parallelism): until the
    gang is released, the plan holds the place of each pod that is not running."""
    inv = cluster("pcie-bridged-pairs")
    plan = _pairs_gang(inv, 2, "ns/job-a")
    inv.hold(plan)
    nodes = [p.node for p in plan.pods]
    for i, node in enumerate(nodes):
        inv.upsert_claim(_claim(f"a-{i}-gpus", node, [2 * i, 2 * i + 1]))
        inv.upsert_pod(_pod(f"a-{i}", node, workload="job-a", claim=f"a-{i}-gpus"))
    assert _free_pairs(inv) == PAIRS - 2
    inv.upsert_pod(_pod("a-0", nodes[0], workload="job-a", claim="a-0-gpus", phase="Succeeded"))
    inv.delete_claim("ns", "a-0-gpus")
    assert _free_pairs(inv) == PAIRS - 2
    inv.upsert_claim(_claim("a-2-gpus", "pcie-3", [6, 7]))
    inv.upsert_pod(_pod("a-2", "pcie-3", workload="job-a", claim="a-2-gpus"))
    assert _free_pairs(inv) == PAIRS - 2
    inv.release("ns/job-a")
    assert _free_pairs(inv) == PAIRS - 2  # a-1 and a-2 still run
    inv.delete_pod("ns", "a-1")
    inv.delete_claim("ns", "a-1-gpus")
    assert _free_pairs(inv) == PAIRS - 1


def test_a_placed_pod_uses_cpu_on_its_own_node_not_the_planned_one() -> None:
    inv = cluster("pcie-bridged-pairs")
    plan = _pairs_gang(inv, 1, "ns/job-a")
    inv.hold(plan)
    planned = plan.pods[0].node
    other = "pcie-3" if planned != "pcie-3" else "pcie-2"
    before = {n.name: n.free["cpu"] for n in inv.snapshot().nodes}
    inv.upsert_claim(_claim("a-0-gpus", other, [0, 1]))
    inv.upsert_pod(_pod("a-0", other, workload="job-a", claim="a-0-gpus"))
    after = {n.name: n.free["cpu"] for n in inv.snapshot().nodes}
    assert after[planned] == before[planned] + 1000
    assert after[other] == before[other] - 1000


def test_a_pod_landing_on_a_node_planned_full_moves_the_plan_it_displaced() -> None:
    """Every pair is planned; a pod of a gang that is not pinned lands on another gang's
    planned node: the plan it displaced needs a pair elsewhere, none is counted free."""
    inv = cluster("pcie-bridged-pairs")
    plans = []
    for i in range(PAIRS // 2):
        plans.append(_pairs_gang(inv, 2, f"ns/job-{i}"))
        inv.hold(plans[-1])
    assert _free_pairs(inv) == 0
    mover = next(p for p in plans if "pcie-0" not in {pod.node for pod in p.pods})
    name = mover.gang.split("/", 1)[1]
    inv.upsert_claim(_claim("m-0-gpus", "pcie-0", [0, 1]))
    inv.upsert_pod(_pod("m-0", "pcie-0", workload=name, claim="m-0-gpus"))
    assert _free_pairs(inv) == 0
    assert sum(len(n.devices.free) for n in inv.snapshot().nodes) == 0


def test_a_plan_displaced_by_a_pod_off_its_plan_takes_the_room_that_pod_left() -> None:
    """One rack of 8-GPU nodes: gang 0 planned on node X lands on gang 1's node Y; gang 1
    will get X (kube-scheduler finds it free), so X, not a node outside the rack, holds it."""
    inv = cluster("dgx-h100")
    rack = frozenset({("topology.atoll.dev/rack", "rack-3")})
    claim = dra_claim(inv, 8)
    plans = []
    for i in range(2):
        ps = replace(pod_set(1, claims=(claim,)), node_selector=rack)
        plans.append(placed(place(inv.snapshot(), gang(ps, key=f"ns/job-{i}"))))
        inv.hold(plans[-1])
    x, y = plans[0].pods[0].node, plans[1].pods[0].node
    assert x != y
    inv.upsert_claim(_claim("g0-gpus", y, list(range(8))))
    inv.upsert_pod(_pod("g0", y, workload="job-0", claim="g0-gpus"))
    free = {n.name: len(n.devices.free) for n in inv.snapshot().nodes if n.devices.all}
    assert free[x] == 0
    assert free[y] == 0
    assert sum(1 for n, f in free.items() if f == 8) == 16 - 2
