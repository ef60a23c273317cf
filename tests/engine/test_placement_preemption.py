"""Topology-aware preemption frees one domain, whole gangs only, fewest and lowest first."""

from __future__ import annotations

from atoll.engine.domainpreemption import Victim, preempt_in_one_domain, release
from atoll.engine.inventory import Placement
from atoll.engine.placement import place
from atoll.state.inventory import ClusterInventory
from tests.engine.placement_builders import (
    RACK,
    cluster,
    dra_claim,
    gang,
    labels_of,
    placed,
    pod_set,
)

NODES = [f"dgx-{i:02d}" for i in range(16)]


def _full(priorities: list[int]) -> tuple[ClusterInventory, list[Victim]]:
    """Every node runs one 8-GPU gang `v<node index>` with the given priority."""
    inv = cluster("dgx-h100")
    victims = []
    for i, (node, prio) in enumerate(zip(NODES, priorities, strict=True)):
        p = placed(
            place(
                inv.snapshot(), gang(pod_set(1, gpus=8), key=f"ns/v{i}"), within=frozenset({node})
            )
        )
        inv.hold(p)
        victims.append(Victim(key=f"ns/v{i}", priority=prio, placement=p))
    return inv, victims


def test_frees_the_rack_with_the_lowest_priority_victims() -> None:
    inv, victims = _full([5, 5, 5, 5, 1, 1, 1, 1, 1, 1, 1, 9, 0, 0, 0, 0])
    job = gang(pod_set(4, gpus=8, level=RACK), key="ns/big")
    got = preempt_in_one_domain(inv.snapshot(), job, victims)
    assert got is not None
    assert got.domain == ("block-1", "rack-3")
    assert got.victims == ("ns/v12", "ns/v13", "ns/v14", "ns/v15")
    assert {p.node for p in got.placement.pods} == set(NODES[12:])


def test_takes_only_as_many_victims_as_the_gang_needs() -> None:
    inv, victims = _full([3, 7, 7, 7, 2, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9])
    job = gang(pod_set(2, gpus=8, level=RACK), key="ns/two")
    got = preempt_in_one_domain(inv.snapshot(), job, victims)
    assert got is not None
    # rack-0 costs {3, 7}, rack-1 costs {2, 8}: the lower top priority wins
    assert got.domain == ("block-0", "rack-0")
    assert got.victims == ("ns/v0", "ns/v1")
    snap = inv.snapshot()
    assert {labels_of(snap, p.node, RACK) for p in got.placement.pods} == {"rack-0"}


def test_a_victim_spanning_racks_counts_only_where_it_frees_room() -> None:
    inv = cluster("dgx-h100")
    wide = placed(place(inv.snapshot(), gang(pod_set(8, gpus=8), key="ns/wide")))
    inv.hold(wide)
    rest = []
    for i, node in enumerate(NODES[8:]):
        p = placed(
            place(
                inv.snapshot(), gang(pod_set(1, gpus=8), key=f"ns/s{i}"), within=frozenset({node})
            )
        )
        inv.hold(p)
        rest.append(Victim(key=f"ns/s{i}", priority=0, placement=p))
    victims = [Victim(key="ns/wide", priority=0, placement=wide), *rest]
    job = gang(pod_set(4, gpus=8, level=RACK), key="ns/big")
    got = preempt_in_one_domain(inv.snapshot(), job, victims)
    assert got is not None
    # evicting the one wide gang frees a whole rack: one victim beats four
    assert got.victims == ("ns/wide",)


def test_returns_none_when_no_single_domain_can_be_freed() -> None:
    inv, victims = _full([0] * 16)
    job = gang(pod_set(5, gpus=8, level=RACK), key="ns/too-big")
    assert preempt_in_one_domain(inv.snapshot(), job, victims) is None
    assert preempt_in_one_domain(inv.snapshot(), job, []) is None


def test_release_gives_back_requests_and_devices() -> None:
    inv = cluster("lab-2x3090")
    before = inv.snapshot()
    p = placed(place(before, gang(pod_set(1, gpus=1, claims=(dra_claim(inv, 2),)))))
    inv.hold(p)
    held = inv.snapshot()
    assert len(held.nodes[0].devices.free) == 0
    back = release(held, [p])
    assert back.nodes[0].free == before.nodes[0].free
    assert [d.id for d in back.nodes[0].devices.free] == [
        d.id for d in before.nodes[0].devices.free
    ]
    assert isinstance(place(back, gang(pod_set(1, gpus=1))), Placement)
