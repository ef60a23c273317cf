"""The placement decision for one gang quota admits (`engine.gangstep.decide`): placed;
pending behind a backfill fence; pending when no eviction could help; waiting for the gangs
already leaving; preempting inside one domain; pending with hints; requeued by the queueing
strategy. Property: a Preempt evicts only gangs the policy allows, all in one domain of the
required level, and once they are gone the gang places there. The cycle's placer carried by
the snapshot (`CyclePlacer`): each gang places after those before it in the cycle; what the
converter cannot build is pending Misconfigured."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import event, given, settings
from hypothesis import strategies as st

from atoll.engine import domainpreemption as dp
from atoll.engine import gangstep as gs
from atoll.engine.cycle import run_cycle
from atoll.engine.decisions import Admit, Pending, PendingReason, Preempt, Requeue
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
    ClusterQueueName,
    QueueingStrategy,
    WithinClusterQueue,
    Workload,
)
from atoll.engine.placement import place
from atoll.engine.reservedhosts import Fence, Fenced, HostHold
from atoll.engine.snapshot import Snapshot, placing
from tests.engine.builders import (
    admitted,
    cluster_queue,
    group,
    preemption,
    quotas,
    snapshot,
    summary,
    workload,
)

RACK = "rack"
HOST = "kubernetes.io/hostname"
RACKS = {"r0": ("n0", "n1"), "r1": ("n2", "n3"), "r2": ("n4", "n5")}
RACK_OF = {n: r for r, ns in RACKS.items() for n in ns}
CQ = ClusterQueueName("a")


def empty() -> Inventory:
    """Three racks of two 8-GPU nodes."""
    return Inventory(
        nodes=tuple(
            NodeInventory(
                name=n, labels={RACK: r, HOST: n}, allocatable={"gpu": 8}, free={"gpu": 8}
            )
            for n, r in sorted(RACK_OF.items())
        ),
        topologies={"t": (RACK, HOST)},
    )


def on(key: str, node: str, gpus: int) -> Placement:
    pod = PodPlacement(pod_set="main", index=0, node=node, requests=(("gpu", gpus),))
    return Placement(gang=key, pod_sets=(PodSetPlacement(name="main", pods=(pod,)),))


def gang(key: str, pods: int, gpus: int, *, level: str | None = RACK) -> Gang:
    topo = (
        None
        if level is None
        else TopologyRequest(topology="t", mode=TopologyMode.REQUIRED, level=level)
    )
    ps = GangPodSet(name="main", count=pods, requests=(("gpu", gpus),), topology=topo)
    return Gang(key=key, pod_sets=(ps,))


def admit(w: Workload) -> Admit:
    return Admit(workload=w.key, cluster_queue=CQ, pod_sets=(), borrowing=False)


def job(name: str, gpus: int, priority: int = 0) -> Workload:
    return workload(name, "a", priority=priority, gpu=gpus)


def snap(
    running: list[tuple[Workload, str]],
    *,
    within: WithinClusterQueue = WithinClusterQueue.LOWER_PRIORITY,
    strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO,
) -> Snapshot:
    cq = cluster_queue(
        "a", group(quotas("f", gpu=1000)), policy=preemption(within=within), strategy=strategy
    )
    return snapshot([cq], running=[admitted(w, "a") for w, _ in running])


def held_of(running: list[tuple[Workload, str]]) -> dict[str, Placement]:
    return {str(w.key): on(str(w.key), n, w.pod_sets[0].requests[0][1]) for w, n in running}


def decide(
    preemptor: Workload,
    g: Gang,
    running: list[tuple[Workload, str]],
    *,
    memory: gs.PlacementMemory | None = None,
    with_snapshot: Snapshot | None = None,
    evicting: tuple[str, ...] = (),
    fence: Fence | None = None,
) -> gs.Outcome:
    held = held_of(running)
    return gs.decide(
        admit(preemptor),
        g,
        live=dp.reserve(empty(), held.values()),
        held=held,
        memory=memory if memory is not None else gs.PlacementMemory(),
        evicting=evicting,
        fence=fence,
        snapshot=with_snapshot,
        preemptor=preemptor if with_snapshot is not None else None,
    )


BIG = job("big", 16, priority=10)
BIG_GANG = gang(str(BIG.key), 2, 8)


def low(name: str, gpus: int = 8, priority: int = 0) -> Workload:
    return job(name, gpus, priority)


# one 8-GPU low-priority job on each node but n5 (r2 half free): no rack has room for 2x8
BUSY = [(low(f"v{i}"), n) for i, n in enumerate(["n0", "n1", "n2", "n3", "n4"])]


def racks_of(p: Placement) -> set[str]:
    return {RACK_OF[pod.node] for pod in p.pods}


def test_placed_when_a_rack_has_room() -> None:
    got = decide(BIG, BIG_GANG, BUSY[:3])
    assert isinstance(got.decision, Placement)
    assert racks_of(got.decision) in ({"r1"}, {"r2"})
    assert got.nomination is None


def test_fenced_gang_stays_pending_and_never_preempts() -> None:
    running = BUSY[:3]  # r2 free, r1 half busy
    inv = dp.reserve(empty(), held_of(running).values())
    holder = on("ns/holder", "n4", 8)
    at_start = dp.reserve(inv, [holder, on("ns/holder", "n5", 8)])
    hold = HostHold(placement=holder, nodes=frozenset({"n4", "n5"}), at_start=at_start)
    fence = Fence(fenced=(Fenced(hold=hold, start=2000.0, holder="ns/holder"),), ends={})
    got = decide(BIG, BIG_GANG, running, fence=fence, with_snapshot=snap(running))
    assert isinstance(got.decision, Pending)
    assert got.decision.reason is PendingReason.WAITING_FOR_QUOTA
    assert "reserved (ns/holder)" in got.decision.message
    assert got.nomination is None


def test_not_preemptible_without_a_required_level() -> None:
    # 13 GPUs in one pod: no node has that many; evicting gangs cannot help
    g = gang(str(BIG.key), 1, 13, level=None)
    got = decide(BIG, g, BUSY, with_snapshot=snap(BUSY))
    assert isinstance(got.decision, Pending)
    assert got.decision.reason is PendingReason.TOPOLOGY_PLACEMENT_FAILED
    assert "would fit after" not in got.decision.message
    assert got.nomination is None


def test_waits_for_the_gangs_already_leaving() -> None:
    got = decide(
        BIG, BIG_GANG, BUSY, evicting=("default/v0", "default/v1"), with_snapshot=snap(BUSY)
    )
    assert isinstance(got.decision, Pending)
    assert got.decision.reason is PendingReason.WAITING_FOR_PREEMPTED_WORKLOADS
    assert got.decision.requeue is Requeue.IMMEDIATE
    assert got.nomination is not None
    assert got.nomination.victims == {"default/v0", "default/v1"}
    assert got.nomination.domain == ("r0",)


def test_preempts_the_fewest_lowest_in_one_rack() -> None:
    running = [*BUSY[:4], (low("v4", priority=5), "n4")]
    got = decide(BIG, BIG_GANG, running, with_snapshot=snap(running))
    assert isinstance(got.decision, Preempt)
    # r2 needs one victim, but of priority 5; r0 and r1 need two of priority 0: lowest wins
    assert {str(v.workload) for v in got.decision.victims} in (
        {"default/v0", "default/v1"},
        {"default/v2", "default/v3"},
    )
    assert got.nomination is not None
    assert got.nomination.victims == {str(v.workload) for v in got.decision.victims}


def test_pending_with_hints_when_the_policy_allows_no_victim() -> None:
    s = snap(BUSY, within=WithinClusterQueue.NEVER)
    got = decide(BIG, BIG_GANG, BUSY, with_snapshot=s)
    assert isinstance(got.decision, Pending)
    assert got.decision.reason is PendingReason.TOPOLOGY_PLACEMENT_FAILED
    assert "would fit after workload default/v4 finishes" in got.decision.message
    assert got.decision.requeue is Requeue.INADMISSIBLE  # BestEffortFIFO: parked
    assert got.nomination is None


def test_strict_fifo_head_stays_at_the_head() -> None:
    s = snap(BUSY, within=WithinClusterQueue.NEVER, strategy=QueueingStrategy.STRICT_FIFO)
    got = decide(BIG, BIG_GANG, BUSY, with_snapshot=s)
    assert isinstance(got.decision, Pending)
    assert got.decision.requeue is Requeue.IMMEDIATE


def test_another_preemptors_nominated_domain_is_taken() -> None:
    memory = gs.PlacementMemory()
    other = dp.Nomination(
        placement=Placement(
            gang="ns/other",
            pod_sets=(
                PodSetPlacement(
                    name="main",
                    pods=tuple(
                        PodPlacement(pod_set="main", index=i, node=n, requests=(("gpu", 8),))
                        for i, n in enumerate(("n4", "n5"))
                    ),
                ),
            ),
        ),
        victims=frozenset(),
        level=RACK,
        domain=("r2",),
    )
    memory.settle("ns/other", other)
    running = BUSY[:3]  # r2 free, r1 half busy
    got = decide(BIG, BIG_GANG, running, memory=memory)
    assert isinstance(got.decision, Pending)  # r2 is promised to ns/other
    assert isinstance(decide(BIG, BIG_GANG, running).decision, Placement)


def test_the_search_is_memoized_on_an_unchanged_inventory() -> None:
    memory = gs.PlacementMemory()
    held = held_of(BUSY)
    live = dp.reserve(empty(), held.values())
    s = snap(BUSY, within=WithinClusterQueue.NEVER)
    first = gs.decide(admit(BIG), BIG_GANG, live=live, held=held, memory=memory, snapshot=s)
    assert ("hints", str(BIG.key)) in memory.memo
    again = gs.decide(admit(BIG), BIG_GANG, live=live, held=held, memory=memory, snapshot=s)
    assert again == first
    memory.prune(nominated=lambda _: True, searched=lambda _: False)
    assert not memory.memo


# -- property ---------------------------------------------------------------------------
NODES = sorted(RACK_OF)


@st.composite
def worlds(draw: st.DrawFn) -> tuple[list[tuple[Workload, str]], Workload, Gang, set[str]]:
    running: list[tuple[Workload, str]] = []
    for node in NODES:
        free = 8
        for i in range(draw(st.integers(0, 3))):
            gpus = draw(st.integers(1, free)) if free else 0
            if not gpus:
                break
            free -= gpus
            prio = draw(st.integers(0, 4))
            running.append((low(f"{node}-{i}", gpus, prio), node))
    prio = draw(st.integers(0, 5))
    pods = draw(st.integers(1, 2))
    gpus = draw(st.integers(3, 8))
    preemptor = job("p", pods * gpus, priority=prio)
    leaving = (
        draw(st.sets(st.sampled_from([str(w.key) for w, _ in running]), max_size=2))
        if running
        else set()
    )
    return running, preemptor, gang(str(preemptor.key), pods, gpus), leaving


@given(worlds())
@settings(max_examples=300, deadline=None)
def test_a_preempt_frees_one_rack_with_allowed_victims_only(
    world: tuple[list[tuple[Workload, str]], Workload, Gang, set[str]],
) -> None:
    running, preemptor, g, leaving = world
    s = snap(running)
    got = decide(preemptor, g, running, with_snapshot=s, evicting=tuple(sorted(leaving)))
    event(type(got.decision).__name__)
    if isinstance(got.decision, Pending):
        event(got.decision.reason.value)
    held = held_of(running)
    live = dp.reserve(empty(), held.values())
    match got.decision:
        case Placement():
            assert len(racks_of(got.decision)) == 1
            assert got.nomination is None
        case Preempt():
            victims = {str(v.workload) for v in got.decision.victims}
            allowed = {
                str(a.admitted.key) for a in dp.allowed_victims(s, preemptor, CQ, borrowing=False)
            }
            assert victims
            assert victims <= allowed
            assert not victims & leaving
            assert got.nomination is not None
            rack = got.nomination.domain[-1]
            assert {held[v].pods[0].node for v in victims} <= set(RACKS[rack])
            for w, _ in running:
                if str(w.key) in victims:
                    assert w.priority < preemptor.priority
            freed = dp.release(live, [held[v] for v in victims | leaving])
            after = place(freed, g, within=frozenset(RACKS[rack]))
            assert isinstance(after, Placement)
            assert racks_of(got.nomination.placement) == {rack}
        case Pending():
            assert got.decision.workload == preemptor.key
            if got.decision.reason is PendingReason.WAITING_FOR_PREEMPTED_WORKLOADS:
                assert got.nomination is not None
                freed = dp.release(live, [held[v] for v in leaving])
                assert isinstance(place(freed, g), Placement)
            else:
                assert got.nomination is None


# -- the cycle's placer, carried by the snapshot (`CyclePlacer`, `snapshot.placing`) ---------


@dataclass
class Converted:
    """A converter from fixed answers: the gang (or a misconfiguration) of each workload."""

    gangs: dict[str, Gang | str]
    workloads: dict[str, Workload]

    def gang(self, admit: Admit) -> Gang | str | None:
        return self.gangs.get(str(admit.workload))

    def workload(self, key: str) -> Workload | None:
        return self.workloads.get(key)


def cycle(
    heads: list[Workload], gangs: dict[str, Gang | str], asked: list[int] | None = None
) -> tuple[dict[str, str], gs.CyclePlacer]:
    """One cycle of `heads`; `asked` counts how often the placer asked for the inventory."""
    s = snap([])

    def live() -> Inventory:
        if asked is not None:
            asked.append(1)
        return empty()

    placer = gs.CyclePlacer.on(
        s,
        live=live,
        held={},
        memory=gs.PlacementMemory(),
        converter=Converted(gangs, {str(w.key): w for w in heads}),
    )
    got = run_cycle(placing(s, placer), heads)
    return {str(d.workload): summary(d) for d in got}, placer


def test_each_gang_of_a_cycle_places_after_those_before_it() -> None:
    heads = [job(f"g{i}", 16, priority=10 - i) for i in range(4)]
    got, placer = cycle(heads, {str(w.key): gang(str(w.key), 2, 8) for w in heads})
    keys = [str(w.key) for w in heads]
    assert [got[k] for k in keys] == [*["admit:f"] * 3, "pending:TopologyPlacementFailed"]
    assert sorted(racks_of(placer.placed[k]).pop() for k in keys[:3]) == ["r0", "r1", "r2"]
    assert keys[3] in placer.changed
    assert keys[3] not in placer.placed
    # without the placer the same snapshot admits all four on quota alone
    alone = run_cycle(snap([]), heads)
    assert all(summary(d).startswith("admit") for d in alone)


def test_a_gang_the_converter_cannot_build_is_misconfigured_and_one_without_needs_none() -> None:
    bad, plain = job("bad", 8), job("plain", 8)
    got, placer = cycle([bad, plain], {str(bad.key): "pod set main: no such device class"})
    assert got == {str(bad.key): "pending:Misconfigured", str(plain.key): "admit:f"}
    assert placer.placed == {}


def test_the_inventory_is_asked_only_when_a_gang_is_placed_and_then_once() -> None:
    plain = [job(f"p{i}", 8) for i in range(3)]
    asked: list[int] = []
    got, _ = cycle(plain, {}, asked)
    assert set(got.values()) == {"admit:f"}
    assert asked == []  # no gang needs placement: the inventory is never built
    heads = [job(f"g{i}", 16, priority=10 - i) for i in range(2)]
    got, _ = cycle(heads, {str(w.key): gang(str(w.key), 2, 8) for w in heads}, asked)
    assert set(got.values()) == {"admit:f"}
    assert asked == [1]  # both gangs placed on one inventory
