"""The ungater on fakes: gated pods are pinned to the domains of their gang's topology
assignment, counting the gang's other pods where they are bound; a pod ungated by hand is
waited for, counted where it lands, and one that lands outside the assignment gets the whole
gang evicted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from atoll.api.core import Node, Pod
from atoll.api.workload import Workload
from atoll.control.jobframework import TOPOLOGY_GATE
from atoll.control.ungater import Ungater
from atoll.state import workloads as wls
from atoll.state.lifecycle import OUTSIDE_ASSIGNMENT
from tests.control.builders import cache_with_queue, job, workload_for
from tests.control.fakes import FakeCluster

HOST = "kubernetes.io/hostname"
T0 = 1_796_000_000.0


class FakePods:
    def __init__(self) -> None:
        self.ungated: dict[str, dict[str, str]] = {}

    async def ungate_pod(
        self, key: str, node_selector: Mapping[str, str], gates: tuple[str, ...]
    ) -> None:
        assert TOPOLOGY_GATE not in gates
        self.ungated[key] = dict(node_selector)


def _admitted(counts: dict[str, int]) -> Workload:
    raw = workload_for(job("a", pods=sum(counts.values()))).to_dict()
    stamp = "2026-12-01T00:00:00Z"
    raw["status"] = {
        "conditions": [
            {"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": stamp}
            for t in ("QuotaReserved", "Admitted")
        ],
        "admission": {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {
                    "name": "main",
                    "count": sum(counts.values()),
                    "topologyAssignment": {
                        "levels": [HOST],
                        "slices": [
                            {
                                "domainCount": len(counts),
                                "valuesPerLevel": [{"individual": {"roots": list(counts)}}],
                                "podCounts": {"individual": list(counts.values())},
                            }
                        ],
                    },
                }
            ],
        },
    }
    return Workload.from_dict(raw)


def _pod(name: str, wl: Workload, *, gated: bool, node: str | None = None) -> Pod:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
    if gated:
        spec["schedulingGates"] = [{"name": TOPOLOGY_GATE}]
    if node:
        spec["nodeName"] = node
    return Pod.from_dict(
        {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "annotations": {"kueue.x-k8s.io/workload": wl.name},
                "labels": {"kueue.x-k8s.io/podset": "main"},
            },
            "spec": spec,
        }
    )


def _setup(counts: dict[str, int]) -> tuple[Ungater, FakePods, FakeCluster, Workload]:
    cache = cache_with_queue()
    for n in ("n1", "n2", "n3"):
        cache.inventory.upsert_node(Node.from_dict({"metadata": {"name": n, "labels": {HOST: n}}}))
    wl = _admitted(counts)
    fake = FakeCluster(workloads={wls.wl_key(wl): wl})
    cache.set_workload(wl)
    pods = FakePods()
    return Ungater(cache, pods, fake, fake.emit, clock=lambda: T0), pods, fake, wl


async def _ungate_all(u: Ungater, wl: Workload, names: list[str]) -> None:
    for name in names:
        key = u.observe(_pod(name, wl, gated=True))
        assert key is not None
        assert await u.reconcile(key) is None


async def test_gated_pods_fill_the_assigned_domains_in_order() -> None:
    u, pods, _, wl = _setup({"n1": 2, "n2": 2})
    await _ungate_all(u, wl, ["p0", "p1", "p2", "p3"])
    hosts = [sel[HOST] for sel in pods.ungated.values()]
    assert hosts == ["n1", "n1", "n2", "n2"]


async def test_a_pod_ungated_by_hand_counts_where_it_is_bound() -> None:
    u, pods, fake, wl = _setup({"n1": 2, "n2": 2})
    for name in ("p0", "p1"):  # a user removed their gates; kube-scheduler put them on n1
        u.observe(_pod(name, wl, gated=False, node="n1"))
    await _ungate_all(u, wl, ["p2", "p3"])
    assert [sel[HOST] for sel in pods.ungated.values()] == ["n2", "n2"]
    assert not wls.is_evicted(fake.workloads[wls.wl_key(wl)])


async def test_the_others_wait_until_a_pod_ungated_by_hand_is_bound() -> None:
    u, pods, _, wl = _setup({"n1": 2, "n2": 2})
    u.observe(_pod("p0", wl, gated=False))
    key = u.observe(_pod("p1", wl, gated=True))
    assert key is not None
    assert await u.reconcile(key) == 1.0
    assert pods.ungated == {}
    u.observe(_pod("p0", wl, gated=False, node="n2"))
    assert await u.reconcile(key) is None
    assert pods.ungated == {"ns/p1": {HOST: "n1"}}


async def test_a_pod_bound_outside_the_assignment_evicts_the_whole_gang() -> None:
    u, pods, fake, wl = _setup({"n1": 2, "n2": 2})
    stray = u.observe(_pod("p0", wl, gated=False, node="n3"))
    assert stray == "ns/p0"
    assert await u.reconcile(stray) is None
    written = fake.workloads[wls.wl_key(wl)]
    evicted = wls.condition(written, wls.EVICTED)
    assert evicted is not None
    assert evicted.reason == OUTSIDE_ASSIGNMENT
    assert "ns/p0" in evicted.message
    assert "n3" in evicted.message
    assert fake.events == [
        (f"Workload/ns/{wl.name}", f"EvictedDueTo{OUTSIDE_ASSIGNMENT}", evicted.message)
    ]
    assert pods.ungated == {}


async def test_pods_of_a_gang_without_topology_are_left_alone() -> None:
    u, _, fake, _ = _setup({"n1": 1})
    plain = workload_for(job("b"))
    u.cache.set_workload(plain)
    key = u.observe(_pod("q0", plain, gated=False, node="n3"))
    assert key is not None
    assert await u.reconcile(key) is None
    assert fake.events == []


async def test_a_pod_gated_before_its_gang_is_started_waits_for_its_start() -> None:
    """A pod group's pod carries the topology gate from creation, before its start names its
    Workload: it is not looked at again until an event shows it named."""
    u, pods, _, wl = _setup({"n1": 1})
    unnamed = _pod("p0", wl, gated=True)
    meta = unnamed.metadata.model_copy(update={"annotations": None})
    key = u.observe(unnamed.model_copy(update={"metadata": meta}))
    assert key is not None
    assert await u.reconcile(key) is None  # no retry timer
    assert pods.ungated == {}
    await _ungate_all(u, wl, ["p0"])  # its start named the Workload
    assert pods.ungated == {"ns/p0": {HOST: "n1"}}
