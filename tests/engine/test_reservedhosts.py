"""Host reservations (engine.reservedhosts, through engine.backfill): a gang that placement
places reserves the hosts (one domain of its required level) that free soonest, by the same
ends as its quota; a backfill candidate that would still run at the start is placed off
them, or stays pending; one that ends before the start may use them. Property: a candidate
placed under the fence never leaves the holder without room on its reserved hosts at the
start."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from atoll.engine import domainpreemption as dp
from atoll.engine.backfill import Guard, Holder, Reservation, reserve
from atoll.engine.cycle import run_cycle
from atoll.engine.decisions import Admit, Decision, Pending, PendingReason, Preempt, Requeue
from atoll.engine.flavors import Assignment
from atoll.engine.inventory import (
    Gang,
    GangPodSet,
    Inventory,
    NodeInventory,
    Placement,
    PodPlacement,
    PodSetPlacement,
    TopologyMode,
    TopologyRequest,
)
from atoll.engine.model import (
    AdmittedWorkload,
    Backfill,
    ClusterQueue,
    ClusterQueueName,
    Workload,
)
from atoll.engine.placement import place
from atoll.engine.reservedhosts import Fence, Hosts
from atoll.engine.snapshot import Snapshot, placing
from tests.engine.builders import (
    admitted,
    by_workload,
    cluster_queue,
    group,
    quotas,
    snapshot,
    workload,
)

GRACE = 10.0
NOW = 1000.0
RACK = "rack"
HOST = "kubernetes.io/hostname"
NODES = {"n0": "r0", "n1": "r0", "n2": "r1", "n3": "r1"}
"""Two racks of two 8-GPU nodes."""


def cq(gpus: int = 32) -> ClusterQueue:
    base = cluster_queue("a", group(quotas("f", gpu=gpus)))
    return replace(base, backfill=Backfill(grace_seconds=GRACE))


def job(name: str, gpus: int, *, limit: float | None = None, at: float = 0.0) -> Workload:
    return replace(workload(name, "a", gpu=gpus, at=at), run_limit=limit)


def pod_set(count: int, gpus: int, level: str | None, mode: TopologyMode) -> GangPodSet:
    topo = None if level is None else TopologyRequest(topology="t", mode=mode, level=level)
    return GangPodSet(name="main", count=count, requests=(("gpu", gpus),), topology=topo)


def on(key: str, node: str, gpus: int) -> Placement:
    pod = PodPlacement(pod_set="main", index=0, node=node, requests=(("gpu", gpus),))
    return Placement(gang=key, pod_sets=(PodSetPlacement(name="main", pods=(pod,)),))


def inventory(held: Mapping[str, Placement]) -> Inventory:
    empty = Inventory(
        nodes=tuple(
            NodeInventory(
                name=n,
                labels={RACK: r, HOST: n},
                allocatable={"gpu": 8},
                free={"gpu": 8},
            )
            for n, r in sorted(NODES.items())
        ),
        topologies={"t": (RACK, HOST)},
    )
    return dp.reserve(empty, held.values())


@dataclass
class World:
    """Running single-pod jobs, where they run, and the gangs placement would place."""

    running: list[tuple[Workload, str, float]]
    """(job, node, since)."""
    gangs: dict[str, Gang] = field(default_factory=dict)

    def held(self) -> dict[str, Placement]:
        return {
            str(w.key): on(str(w.key), n, w.pod_sets[0].requests[0][1]) for w, n, _ in self.running
        }

    def admitted(self) -> list[AdmittedWorkload]:
        return [admitted(w, "a", at=since) for w, _, since in self.running]

    def snapshot(self, gpus: int = 32) -> Snapshot:
        return snapshot([cq(gpus)], running=self.admitted())

    def hosts(self) -> Hosts:
        def gang(w: Workload, _cq: ClusterQueueName, _a: Assignment) -> Gang | None:
            return self.gangs.get(str(w.key))

        return Hosts(inventory=inventory(self.held()), held=self.held(), gang=gang)


@dataclass
class FakePlacer:
    """The cycle's placer on an engine inventory: the fence cuts the reserved hosts down
    (as `engine.gangstep.CyclePlacer` does), placement is `engine.placement.place`."""

    world: World
    placed: dict[str, Placement] = field(default_factory=dict)

    def place(self, admit: Admit, fence: Fence | None = None) -> Admit | Pending:
        base = dp.reserve(inventory(self.world.held()), self.placed.values())
        inv = base if fence is None else fence.apply(base, self.placed)
        got = place(inv, self.world.gangs[str(admit.workload)])
        if not isinstance(got, Placement):
            return Pending(
                workload=admit.workload,
                cluster_queue=admit.cluster_queue,
                reason=PendingReason.WAITING_FOR_QUOTA,
                message=got.message,
                requeue=Requeue.INADMISSIBLE,
            )
        self.placed[str(admit.workload)] = got
        return admit

    def unplaceable(self, preempt: Preempt) -> Pending | None:
        del preempt  # every gang here fits an empty topology
        return None

    def decided(self, decision: Decision) -> None:
        pass


def holder(w: Workload) -> Holder:
    return Holder(workload=w, cluster_queue=ClusterQueueName("a"), since=NOW)


BIG = job("big", 16, at=500.0)
BIG_GANG = Gang(key=str(BIG.key), pod_sets=(pod_set(2, 8, RACK, TopologyMode.REQUIRED),))


def racks() -> World:
    """r0: n0 busy until 1410, n1 half busy until 1110; r1: n2 busy until 1210, n3 with 2
    GPUs free until 1160. Quota frees enough for the 16-GPU gang at 1160 (n1 and n3: two racks), the
    first rack to free whole is r1, at 1210."""
    w = World(
        running=[
            (job("ra", 8, limit=400), "n0", NOW),
            (job("rb", 4, limit=100), "n1", NOW),
            (job("rc", 8, limit=200), "n2", NOW),
            (job("rd", 6, limit=150), "n3", NOW),
        ]
    )
    w.gangs[str(BIG.key)] = BIG_GANG
    return w


def test_a_gang_with_a_required_level_reserves_the_domain_that_frees_soonest() -> None:
    w = racks()
    snap = w.snapshot()
    (quota_only,) = reserve(snap, [holder(BIG)], NOW)
    (r,) = reserve(snap, [holder(BIG)], NOW, w.hosts())
    assert quota_only.hosts is None
    assert quota_only.start == NOW + 150 + GRACE  # quota alone: when rd ends
    assert r.start == NOW + 200 + GRACE  # rack r1 whole: when rc ends
    assert r.hosts is not None
    assert r.hosts.nodes == {"n2", "n3"}
    assert r.hosts.where == "r1"
    assert dict(r.usage) == {("f", "gpu"): 16}


def test_a_gang_whose_hosts_never_free_keeps_a_reservation_of_quota() -> None:
    w = racks()
    w.gangs[str(BIG.key)] = Gang(
        key=str(BIG.key), pod_sets=(pod_set(3, 8, RACK, TopologyMode.REQUIRED),)
    )
    (r,) = reserve(w.snapshot(), [holder(BIG)], NOW, w.hosts())
    assert r.hosts is None  # no rack has three nodes: the quota is still reserved
    assert r.start == NOW + 150 + GRACE


def test_a_gang_without_a_level_reserves_the_nodes_that_free_soonest() -> None:
    w = racks()
    w.gangs[str(BIG.key)] = Gang(
        key=str(BIG.key), pod_sets=(pod_set(2, 8, None, TopologyMode.REQUIRED),)
    )
    (r,) = reserve(w.snapshot(), [holder(BIG)], NOW, w.hosts())
    assert r.hosts is not None
    assert r.start == NOW + 150 + GRACE  # n1 (1110) and n3 (1160) are whole by then
    assert r.hosts.nodes == {"n1", "n3"}
    assert r.hosts.where == "nodes n1, n3"


def _cycle(w: World, *heads: Workload) -> tuple[dict[str, Decision], FakePlacer, Reservation]:
    snap = w.snapshot()
    reservations = reserve(snap, [holder(BIG)], NOW, w.hosts())
    guard = Guard(snapshot=snap, reservations=reservations, now=NOW)
    placer = FakePlacer(w)
    decisions = run_cycle(placing(snap, placer), list(heads), reservations, NOW, guard)
    (r,) = reservations
    return by_workload(decisions), placer, r


def _one(name: str, gpus: int, limit: float | None, w: World) -> Workload:
    small = job(name, gpus, limit=limit, at=600.0)
    w.gangs[str(small.key)] = Gang(
        key=str(small.key), pod_sets=(pod_set(1, gpus, HOST, TopologyMode.REQUIRED),)
    )
    return small


def test_a_candidate_ending_after_the_start_is_placed_off_the_reserved_hosts() -> None:
    w = racks()
    small = _one("small", 2, 1000.0, w)  # best fit is n3 (2 free), but it is reserved
    decisions, placer, r = _cycle(w, small)
    assert isinstance(decisions["small"], Admit)
    assert r.hosts is not None
    assert {p.node for p in placer.placed[str(small.key)].pods} == {"n1"}


def test_a_candidate_ending_after_the_start_with_no_room_off_the_hosts_waits() -> None:
    w = racks()
    w.running[1] = (job("rb", 8, limit=100), "n1", NOW)  # n1 full: only n3 has room
    small = _one("small", 2, 1000.0, w)
    decisions, placer, _ = _cycle(w, small)
    assert isinstance(decisions["small"], Pending)
    assert str(small.key) not in placer.placed


def test_a_candidate_ending_before_the_start_may_use_the_reserved_hosts() -> None:
    w = racks()
    w.running[1] = (job("rb", 8, limit=100), "n1", NOW)
    small = _one("small", 2, 100.0, w)  # ends at 1110 < 1210
    decisions, placer, r = _cycle(w, small)
    assert isinstance(decisions["small"], Admit)
    assert {p.node for p in placer.placed[str(small.key)].pods} == {"n3"}
    assert r.hosts is not None
    assert "n3" in r.hosts.nodes


@settings(max_examples=60, deadline=None)
@given(
    ends=st.lists(st.integers(min_value=1, max_value=8), min_size=4, max_size=4),
    busy=st.lists(st.sampled_from([2, 4, 6, 8]), min_size=4, max_size=4),
    candidates=st.lists(
        st.tuples(st.sampled_from([1, 2, 4]), st.integers(min_value=1, max_value=12)),
        min_size=1,
        max_size=5,
    ),
)
def test_backfill_never_takes_the_room_the_holder_needs_on_its_hosts(
    ends: list[int], busy: list[int], candidates: list[tuple[int, int]]
) -> None:
    """With guaranteed ends only, whatever runs where and whatever is backfilled (a cycle
    per candidate, each recomputing the reservation as the decision step does), the holder's
    start never moves later than the first reservation said."""
    w = World(
        running=[
            (job(f"r{i}", g, limit=100.0 * e), node, NOW)
            for i, (node, g, e) in enumerate(zip(sorted(NODES), busy, ends, strict=True))
        ]
    )
    w.gangs[str(BIG.key)] = BIG_GANG
    first = reserve(w.snapshot(), [holder(BIG)], NOW, w.hosts())
    if not first or first[0].hosts is None:
        return
    heads = [_one(f"c{i}", g, 100.0 * e, w) for i, (g, e) in enumerate(candidates)]
    for head in heads:
        decisions, placer, _ = _cycle(w, head)
        if isinstance(decisions[head.name], Admit):
            node = placer.placed[str(head.key)].pods[0].node
            w.running.append((head, node, NOW))
    (last,) = reserve(w.snapshot(), [holder(BIG)], NOW, w.hosts())
    assert last.hosts is not None
    assert last.start <= first[0].start
