"""Placement invariants on random inventories and gangs: all or nothing, never more than a
node has, the same answer every time."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from atoll.engine.devices import (
    Claim,
    ConstraintKind,
    Device,
    DeviceConstraint,
    DeviceId,
    DeviceRequest,
    NodeDevices,
    RequestAlternative,
)
from atoll.engine.inventory import (
    Gang,
    GangPodSet,
    Inventory,
    NodeInventory,
    NoFit,
    Placement,
    TopologyMode,
    TopologyRequest,
)
from atoll.engine.placement import place

ISLAND = "x.dev/island"
RACK = "rack"
HOST = "kubernetes.io/hostname"


def _any(_: Device) -> bool:
    return True


def _node(i: int, gpus: int, island: int, used: int) -> NodeInventory:
    name = f"n{i:02d}"
    devices = tuple(
        Device(
            id=DeviceId(f"x.dev/{name}/gpu-{k}"),
            driver="x.dev",
            pool=name,
            name=f"gpu-{k}",
            generation=1,
            attributes={ISLAND: k // island},
            capacity={},
        )
        for k in range(gpus)
    )
    busy = frozenset(d.id for d in devices[:used])
    return NodeInventory(
        name=name,
        labels={RACK: f"r{i // 2}", HOST: name},
        allocatable={"cpu": 8000, "nvidia.com/gpu": gpus, "pods": 10},
        free={"cpu": 8000, "nvidia.com/gpu": gpus - used, "pods": 10},
        devices=NodeDevices(
            free=tuple(d for d in devices if d.id not in busy), busy=busy, all=devices
        ),
    )


@st.composite
def inventories(draw: st.DrawFn) -> Inventory:
    n = draw(st.integers(min_value=1, max_value=6))
    nodes = []
    for i in range(n):
        island = draw(st.sampled_from((1, 2, 4)))
        gpus = island * draw(st.integers(min_value=1, max_value=2))
        nodes.append(_node(i, gpus, island, draw(st.integers(min_value=0, max_value=gpus))))
    return Inventory(nodes=tuple(nodes), topologies={"t": (RACK, HOST)}, island_attribute=ISLAND)


def _claim(count: int, match: bool) -> Claim:
    alt = RequestAlternative(name="gpu", device_class="gpu", matchers=(_any,), count=count)
    constraints = (DeviceConstraint(kind=ConstraintKind.MATCH, attribute=ISLAND),) if match else ()
    return Claim(
        name="c",
        requests=(DeviceRequest(name="gpu", alternatives=(alt,)),),
        constraints=constraints,
    )


@st.composite
def gangs(draw: st.DrawFn) -> Gang:
    pod_sets = []
    for i in range(draw(st.integers(min_value=1, max_value=2))):
        count = draw(st.integers(min_value=1, max_value=6))
        cpu = draw(st.sampled_from((500, 2000, 4000)))
        dra = draw(st.integers(min_value=0, max_value=4))
        gpus = 0 if dra else draw(st.integers(min_value=0, max_value=2))
        claims = (_claim(dra, draw(st.booleans())),) if dra else ()
        mode = draw(st.sampled_from((None, *TopologyMode)))
        topo = None
        if mode is not None:
            level = None if mode is TopologyMode.UNCONSTRAINED else RACK
            size = None if level is None else draw(st.sampled_from((None, 1, 2, 3, 4)))
            topo = TopologyRequest(
                topology="t",
                mode=mode,
                level=level,
                slice_level=None if size is None else HOST,
                slice_size=size,
            )
        requests = (("cpu", cpu),) + ((("nvidia.com/gpu", gpus),) if gpus else ())
        pod_sets.append(
            GangPodSet(name=f"ps{i}", count=count, requests=requests, claims=claims, topology=topo)
        )
    return Gang(key="ns/g", pod_sets=tuple(pod_sets))


@settings(max_examples=300, deadline=None)
@given(inventories(), gangs())
def test_a_gang_is_placed_whole_or_not_at_all(inv: Inventory, gang: Gang) -> None:
    got = place(inv, gang)
    if isinstance(got, NoFit):
        assert got.message
        return
    assert [ps.name for ps in got.pod_sets] == [ps.name for ps in gang.pod_sets]
    for want, have in zip(gang.pod_sets, got.pod_sets, strict=True):
        assert len(have.pods) == want.count
        assert sorted(p.index for p in have.pods) == list(range(want.count))


@settings(max_examples=300, deadline=None)
@given(inventories(), gangs())
def test_placement_never_exceeds_free_resources_or_devices(inv: Inventory, gang: Gang) -> None:
    got = place(inv, gang)
    if not isinstance(got, Placement):
        return
    used: dict[str, Counter[str]] = {}
    for pod in got.pods:
        used.setdefault(pod.node, Counter()).update(dict(pod.requests))
    for node, amounts in used.items():
        free = inv.by_name[node].free
        for r, q in amounts.items():
            assert q <= free.get(r, 0), (node, r)
    ids = [a.device for p in got.pods for a in p.devices]
    assert len(ids) == len(set(ids))
    for pod in got.pods:
        free_ids = {d.id for d in inv.by_name[pod.node].devices.free}
        assert {a.device for a in pod.devices} <= free_ids
        wanted = sum(
            c.requests[0].alternatives[0].count
            for ps in gang.pod_sets
            if ps.name == pod.pod_set
            for c in ps.claims
        )
        assert len(pod.devices) == wanted


@settings(max_examples=300, deadline=None)
@given(inventories(), gangs())
def test_required_rack_gangs_stay_in_one_rack_and_islands_match(inv: Inventory, gang: Gang) -> None:
    got = place(inv, gang)
    if not isinstance(got, Placement):
        return
    for want, have in zip(gang.pod_sets, got.pod_sets, strict=True):
        t = want.topology
        if t is not None and t.mode is TopologyMode.REQUIRED:
            assert len({inv.by_name[p.node].labels[RACK] for p in have.pods}) == 1
        if want.claims and want.claims[0].constraints:
            for pod in have.pods:
                devices = {d.id: d for d in inv.by_name[pod.node].devices.all}
                assert len({devices[a.device].attributes[ISLAND] for a in pod.devices}) == 1


@settings(max_examples=200, deadline=None)
@given(inventories(), gangs())
def test_placement_is_deterministic(inv: Inventory, gang: Gang) -> None:
    assert place(inv, gang) == place(inv, gang)


@settings(max_examples=300, deadline=None)
@given(inventories(), gangs())
def test_slices_are_whole_on_one_host_but_one_short_slice(inv: Inventory, gang: Gang) -> None:
    """Each host holds whole slices, and one host the short last slice when the count is no
    multiple of the slice size (a requeued gang's pods left)."""
    got = place(inv, gang)
    if not isinstance(got, Placement):
        return
    for want, have in zip(gang.pod_sets, got.pod_sets, strict=True):
        size = want.topology.slice_size if want.topology else None
        if size is None:
            continue
        per_host = Counter(p.node for p in have.pods)
        rests = sorted(n % size for n in per_host.values() if n % size)
        assert rests == ([want.count % size] if want.count % size else [])
