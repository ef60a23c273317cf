"""Podset groups (Kueue's `kueue.x-k8s.io/podset-group-name`): the pod sets of one group, a
leader and its workers, share one domain of their level; placement is all or nothing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atoll.engine.inventory import (
    Gang,
    GangPodSet,
    Inventory,
    NodeInventory,
    NoFit,
    NoFitReason,
    Placement,
    PlacementPolicy,
    TopologyMode,
    TopologyRequest,
)
from atoll.engine.placement import place

BLOCK = "block"
RACK = "rack"
HOST = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"


def node(name: str, rack: str, *, gpus: int, cpu: int = 8000, block: str = "b0") -> NodeInventory:
    free = {"cpu": cpu, GPU: gpus, "pods": 10}
    return NodeInventory(
        name=name,
        labels={BLOCK: block, RACK: rack, HOST: name},
        allocatable={"cpu": 64000, GPU: 8, "pods": 10},
        free=free,
    )


def inventory(*nodes: NodeInventory) -> Inventory:
    return Inventory(
        nodes=tuple(sorted(nodes, key=lambda n: n.name)),
        topologies={"t": (BLOCK, RACK, HOST)},
    )


def member(
    name: str,
    count: int,
    *,
    gpus: int = 0,
    cpu: int = 1000,
    group: str | None = "g",
    level: str = RACK,
    mode: TopologyMode = TopologyMode.REQUIRED,
) -> GangPodSet:
    requests = (("cpu", cpu),) + (((GPU, gpus),) if gpus else ())
    return GangPodSet(
        name=name,
        count=count,
        requests=requests,
        topology=TopologyRequest(topology="t", mode=mode, level=level, group=group),
    )


def gang(*pod_sets: GangPodSet) -> Gang:
    return Gang(key="ns/train", pod_sets=pod_sets)


def racks(inv: Inventory, p: Placement, pod_set: str) -> set[str]:
    ps = next(x for x in p.pod_sets if x.name == pod_set)
    return {inv.by_name[pod.node].labels[RACK] for pod in ps.pods}


# Rack r1 is the tightest for the workers (its GPUs are all they need) but its CPU is short for
# the CPU-heavy leader; rack r2 holds both.
TIGHT_RACK_WITHOUT_ROOM_FOR_THE_LEADER = inventory(
    node("a1", "r1", gpus=8, cpu=4000),
    node("a2", "r1", gpus=8, cpu=4000),
    node("b1", "r2", gpus=8),
    node("b2", "r2", gpus=8),
    node("b3", "r2", gpus=8),
)


def test_leader_and_workers_share_the_rack_that_holds_both() -> None:
    inv = TIGHT_RACK_WITHOUT_ROOM_FOR_THE_LEADER
    leader = member("leader", 1, cpu=8000)
    workers = member("workers", 2, gpus=8, cpu=2000)
    got = place(inv, gang(leader, workers))
    assert isinstance(got, Placement), got
    assert racks(inv, got, "leader") == racks(inv, got, "workers") == {"r2"}
    assert {ps.level for ps in got.pod_sets} == {RACK}
    assert {ps.domain for ps in got.pod_sets} == {("b0", "r2")}


def test_without_a_group_the_workers_take_the_tightest_rack() -> None:
    """The counterpart of the test above: the group is what keeps them together."""
    inv = TIGHT_RACK_WITHOUT_ROOM_FOR_THE_LEADER
    leader = member("leader", 1, cpu=8000, group=None)
    workers = member("workers", 2, gpus=8, cpu=2000, group=None)
    got = place(inv, gang(workers, leader))
    assert isinstance(got, Placement), got
    assert racks(inv, got, "workers") == {"r1"}
    assert racks(inv, got, "leader") == {"r2"}


def test_group_members_keep_their_order_between_other_pod_sets() -> None:
    inv = TIGHT_RACK_WITHOUT_ROOM_FOR_THE_LEADER
    workers = member("workers", 2, gpus=8, cpu=2000)
    other = member("other", 1, cpu=1000, group=None)
    leader = member("leader", 1, cpu=8000)
    got = place(inv, gang(workers, other, leader))
    assert isinstance(got, Placement), got
    assert [ps.name for ps in got.pod_sets] == ["workers", "other", "leader"]
    assert racks(inv, got, "leader") == racks(inv, got, "workers") == {"r2"}


def test_required_group_that_fits_only_apart_waits_with_the_reason() -> None:
    inv = inventory(
        node("a1", "r1", gpus=8, cpu=1000),
        node("b1", "r2", gpus=0, cpu=8000),
    )
    got = place(inv, gang(member("leader", 1, cpu=4000), member("workers", 1, gpus=8, cpu=500)))
    assert isinstance(got, NoFit)
    assert got.reason is NoFitReason.NO_DOMAIN
    assert got.level == RACK
    assert got.needed == 2
    assert "podset group g" in got.message
    assert "no one rack domain holds them together" in got.message


def test_required_group_member_that_does_not_fit_alone_says_so() -> None:
    inv = inventory(node("a1", "r1", gpus=8))
    got = place(inv, gang(member("leader", 1), member("workers", 2, gpus=8)))
    assert isinstance(got, NoFit)
    assert got.pod_set == "workers"
    assert got.reason is not NoFitReason.NO_DOMAIN


def test_preferred_group_widens_to_the_block_then_anywhere() -> None:
    inv = inventory(
        node("a1", "r1", gpus=8, cpu=1000, block="b0"),
        node("b1", "r2", gpus=0, cpu=8000, block="b0"),
        node("c1", "r3", gpus=0, cpu=8000, block="b1"),
    )
    leader = member("leader", 1, cpu=4000, mode=TopologyMode.PREFERRED)
    workers = member("workers", 1, gpus=8, cpu=500, mode=TopologyMode.PREFERRED)
    got = place(inv, gang(leader, workers))
    assert isinstance(got, Placement), got
    assert {ps.level for ps in got.pod_sets} == {BLOCK}
    assert {ps.domain for ps in got.pod_sets} == {("b0",)}

    apart = inventory(
        node("a1", "r1", gpus=8, cpu=1000, block="b0"),
        node("c1", "r3", gpus=0, cpu=8000, block="b1"),
    )
    got = place(apart, gang(leader, workers))
    assert isinstance(got, Placement), got
    assert {pod.node for pod in got.pods} == {"a1", "c1"}


@pytest.mark.parametrize(
    ("other", "reason"),
    [
        pytest.param(member("workers", 2, level=BLOCK), NoFitReason.INVALID_REQUEST, id="level"),
        pytest.param(
            member("workers", 2, mode=TopologyMode.PREFERRED),
            NoFitReason.INVALID_REQUEST,
            id="mode",
        ),
        pytest.param(member("workers", 2, level="zone"), NoFitReason.INVALID_REQUEST, id="unknown"),
    ],
)
def test_group_asking_for_different_levels_is_invalid(
    other: GangPodSet, reason: NoFitReason
) -> None:
    got = place(TIGHT_RACK_WITHOUT_ROOM_FOR_THE_LEADER, gang(member("leader", 1), other))
    assert isinstance(got, NoFit)
    assert got.reason is reason


def test_empty_group_members_are_placed_empty() -> None:
    got = place(TIGHT_RACK_WITHOUT_ROOM_FOR_THE_LEADER, gang(member("a", 0), member("b", 0)))
    assert isinstance(got, Placement)
    assert got.pods == ()


@pytest.mark.parametrize("policy", list(PlacementPolicy), ids=lambda p: p.value)
def test_every_policy_keeps_the_group_together(policy: PlacementPolicy) -> None:
    inv = TIGHT_RACK_WITHOUT_ROOM_FOR_THE_LEADER
    got = place(
        inv, gang(member("leader", 1, cpu=8000), member("w", 2, gpus=8, cpu=2000)), policy=policy
    )
    assert isinstance(got, Placement), got
    assert racks(inv, got, "leader") == racks(inv, got, "w")


# Properties on random racks of random nodes.


@st.composite
def inventories(draw: st.DrawFn) -> Inventory:
    nodes = []
    for i in range(draw(st.integers(min_value=1, max_value=8))):
        nodes.append(
            node(
                f"n{i:02d}",
                f"r{draw(st.integers(min_value=0, max_value=3))}",
                gpus=draw(st.sampled_from((0, 4, 8))),
                cpu=draw(st.sampled_from((1000, 4000, 8000))),
            )
        )
    return inventory(*nodes)


@st.composite
def grouped_gangs(draw: st.DrawFn) -> Gang:
    mode = draw(st.sampled_from((TopologyMode.REQUIRED, TopologyMode.PREFERRED)))
    leader = member(
        "leader",
        1,
        cpu=draw(st.sampled_from((500, 4000, 8000))),
        gpus=draw(st.sampled_from((0, 4))),
        mode=mode,
    )
    workers = member(
        "workers",
        draw(st.integers(min_value=1, max_value=6)),
        gpus=draw(st.sampled_from((0, 4, 8))),
        cpu=draw(st.sampled_from((500, 2000))),
        mode=mode,
    )
    return gang(*draw(st.permutations((leader, workers))))


def _ungrouped(g: Gang) -> Gang:
    return Gang(
        key=g.key,
        pod_sets=tuple(
            GangPodSet(
                name=ps.name,
                count=ps.count,
                requests=ps.requests,
                topology=TopologyRequest(
                    topology="t", mode=TopologyMode.REQUIRED, level=RACK, group=None
                ),
            )
            for ps in g.pod_sets
        ),
    )


def _fits_in_some_rack(inv: Inventory, g: Gang) -> bool:
    by_rack: dict[str, set[str]] = {}
    for n in inv.nodes:
        by_rack.setdefault(n.labels[RACK], set()).add(n.name)
    return any(
        isinstance(place(inv, _ungrouped(g), within=frozenset(names)), Placement)
        for names in by_rack.values()
    )


@settings(max_examples=300, deadline=None)
@given(inventories(), grouped_gangs())
def test_grouped_pod_sets_always_share_the_rack_when_one_holds_them(
    inv: Inventory, g: Gang
) -> None:
    """Whenever some rack holds the whole group, it is placed, and always in one rack; a
    required group is placed only then."""
    got = place(inv, g)
    fits = _fits_in_some_rack(inv, g)
    required = g.pod_sets[0].topology is not None and (
        g.pod_sets[0].topology.mode is TopologyMode.REQUIRED
    )
    if fits:
        assert isinstance(got, Placement), got
        assert len({inv.by_name[pod.node].labels[RACK] for pod in got.pods}) == 1
        assert len({ps.domain for ps in got.pod_sets}) == 1
    elif required:
        assert isinstance(got, NoFit)
    if isinstance(got, Placement):
        assert [len(ps.pods) for ps in got.pod_sets] == [ps.count for ps in g.pod_sets]
