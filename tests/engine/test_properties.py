"""Invariants of the engine over random cohort trees, queues and workloads (hypothesis).

The quota invariants are checked against the raw model (sums of nominal quotas and limits),
not through engine/quota.py, so they would catch a wrong formula there.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from atoll.engine import preemption as preemption_module
from atoll.engine.cycle import run_cycle
from atoll.engine.decisions import Admit, Decision, Pending, Preempt, Requeue
from atoll.engine.flavors import assign_flavors
from atoll.engine.model import (
    Admission,
    AdmittedWorkload,
    BorrowWithinCohortPolicy,
    ClusterQueue,
    ClusterQueueName,
    Cohort,
    FairSharing,
    FlavorQuotas,
    FlavorResource,
    FungibilityPolicy,
    PodSetAssignment,
    QueueingStrategy,
    ReclaimWithinCohort,
    ResourceGroup,
    ResourceName,
    ResourceQuota,
    WithinClusterQueue,
    Workload,
    WorkloadKey,
)
from atoll.engine.ordering import select_heads
from atoll.engine.overlay import UsageOverlay
from atoll.engine.preemption import Request, Target, classical_targets
from atoll.engine.snapshot import Snapshot
from tests.engine.builders import (
    cluster_queue,
    cohort,
    fungibility,
    pod_set,
    preemption,
    snapshot,
    workload,
)

FLAVORS = ("f1", "f2")
RESOURCES = ("gpu", "cpu")
SETTINGS = settings(max_examples=150, deadline=None)


@dataclass(frozen=True)
class World:
    cluster_queues: tuple[ClusterQueue, ...]
    cohorts: tuple[Cohort, ...]
    pending: tuple[Workload, ...]
    fair: FairSharing | None


@st.composite
def _group(draw: st.DrawFn, limits: bool, max_nominal: int) -> ResourceGroup:
    n_flavors = draw(st.integers(1, len(FLAVORS)))
    n_resources = len(RESOURCES)  # every queue covers every resource workloads ask for
    flavors = []
    for f in FLAVORS[:n_flavors]:
        resources = []
        for r in RESOURCES[:n_resources]:
            nominal = draw(st.integers(0, max_nominal))
            borrow = draw(st.none() | st.integers(0, 6)) if limits else None
            lend = draw(st.none() | st.integers(0, nominal)) if limits else None
            resources.append(
                ResourceQuota(
                    resource=ResourceName(r),
                    nominal=nominal,
                    borrowing_limit=borrow,
                    lending_limit=lend,
                )
            )
        flavors.append(FlavorQuotas(flavor=f, resources=tuple(resources)))  # type: ignore[arg-type]
    return ResourceGroup(
        covered_resources=tuple(ResourceName(r) for r in RESOURCES[:n_resources]),
        flavors=tuple(flavors),
    )


@st.composite
def worlds(draw: st.DrawFn, fair: bool | None = None, reclaiming: bool = False) -> World:
    """Random forests, queues and workloads; `reclaiming` makes every queue reclaim."""
    cohorts = [cohort(f"root{i}") for i in range(draw(st.integers(1, 2)))]
    for i in range(draw(st.integers(0, 3))):
        parent = draw(st.sampled_from([c.name for c in cohorts]))
        groups = (draw(_group(True, 4)),) if draw(st.booleans()) else ()
        cohorts.append(cohort(f"k{i}", *groups, parent=parent))
    names = [c.name for c in cohorts]
    cqs = []
    for i in range(draw(st.integers(1, 5))):
        parent = draw(st.sampled_from([*names, None]))
        policy = preemption(
            within=draw(st.sampled_from(WithinClusterQueue)),
            reclaim=(
                reclaim := draw(
                    st.sampled_from(
                        [ReclaimWithinCohort.LOWER_PRIORITY, ReclaimWithinCohort.ANY]
                        if reclaiming
                        else list(ReclaimWithinCohort)
                    )
                )
            ),
            borrow=BorrowWithinCohortPolicy.NEVER
            if reclaim is ReclaimWithinCohort.NEVER
            else draw(st.sampled_from(BorrowWithinCohortPolicy)),
            threshold=draw(st.none() | st.integers(0, 3)),
        )
        cqs.append(
            cluster_queue(
                f"cq{i}",
                draw(_group(parent is not None, 8)),
                cohort=parent,
                policy=policy,
                strategy=draw(st.sampled_from(QueueingStrategy)),
                fungible=fungibility(
                    borrow=draw(st.sampled_from(FungibilityPolicy)),
                    preempt=draw(st.sampled_from(FungibilityPolicy)),
                ),
                weight=draw(st.sampled_from([0, 500, 1000, 2000])),
            )
        )
    pending = []
    for i in range(draw(st.integers(1, 12))):
        sets = []
        for j in range(draw(st.integers(1, 2))):
            count = draw(st.integers(1, 3))
            requests = {r: draw(st.integers(0, 4)) for r in RESOURCES}
            minimum = draw(st.none() | st.integers(1, count)) if j == 0 else None
            sets.append(pod_set(count=count, name=f"ps{j}", min_count=minimum, **requests))
        queue = draw(st.sampled_from([cq.name for cq in cqs]))
        pending.append(
            workload(f"w{i}", queue, *sets, priority=draw(st.integers(0, 3)), at=float(i))
        )
    use_fair = draw(st.booleans()) if fair is None else fair
    return World(tuple(cqs), tuple(cohorts), tuple(pending), FairSharing() if use_fair else None)


def _admit(w: Workload, d: Admit) -> AdmittedWorkload:
    pod_sets = tuple(
        PodSetAssignment(
            name=ps.name, count=ps.count, flavors=ps.flavors, resource_usage=ps.resource_usage
        )
        for ps in d.pod_sets
    )
    return AdmittedWorkload(
        workload=w, admission=Admission(cluster_queue=d.cluster_queue, pod_sets=pod_sets)
    )


def _snap(world: World, running: Iterable[AdmittedWorkload]) -> Snapshot:
    return snapshot(world.cluster_queues, cohorts=world.cohorts, running=running, fair=world.fair)


def _simulate(world: World, cycles: int = 4) -> list[tuple[Snapshot, tuple[Decision, ...]]]:
    """Drive the engine like a queue manager would; victims leave at once."""
    pending = {w.key: w for w in world.pending}
    running: dict[WorkloadKey, AdmittedWorkload] = {}
    parked: set[WorkloadKey] = set()
    history = []
    cq_of = {w.key: ClusterQueueName(w.queue_name) for w in world.pending}
    for _ in range(cycles):
        snap = _snap(world, running.values())
        by_cq: dict[ClusterQueueName, list[Workload]] = {}
        for w in pending.values():
            by_cq.setdefault(cq_of[w.key], []).append(w)
        decisions = run_cycle(snap, select_heads(by_cq, frozenset(parked)))
        history.append((snap, decisions))
        for d in decisions:
            if isinstance(d, Admit):
                running[d.workload] = _admit(pending.pop(d.workload), d)
            elif isinstance(d, Preempt):
                for v in d.victims:
                    del running[v.workload]
            elif d.requeue is Requeue.INADMISSIBLE:
                parked.add(d.workload)
    history.append((_snap(world, running.values()), ()))
    return history


def _usage(snap: Snapshot) -> dict[str, dict[FlavorResource, int]]:
    usage: dict[str, dict[FlavorResource, int]] = {}
    for a in snap.admitted.values():
        mine = usage.setdefault(a.cluster_queue, {})
        for fr, v in snap.workload_usage[a.key].items():
            mine[fr] = mine.get(fr, 0) + v
    return usage


def _nominal(
    groups: tuple[ResourceGroup, ...], fr: FlavorResource
) -> tuple[int, int | None, int | None]:
    for g in groups:
        for fq in g.flavors:
            for rq in fq.resources:
                if (fq.flavor, rq.resource) == fr:
                    return rq.nominal, rq.borrowing_limit, rq.lending_limit
    return 0, None, None


class _Model:
    """The cohort forest of a world, from the model objects only."""

    def __init__(self, world: World) -> None:
        self.cqs = {cq.name: cq for cq in world.cluster_queues}
        self.cohorts = {c.name: c for c in world.cohorts}
        self.parent: dict[str, str | None] = {c.name: c.parent for c in world.cohorts}
        self.parent.update({f"cq:{cq.name}": cq.cohort for cq in world.cluster_queues})

    def groups(self, node: str) -> tuple[ResourceGroup, ...]:
        if node.startswith("cq:"):
            return self.cqs[ClusterQueueName(node[3:])].resource_groups
        return self.cohorts[node].resource_groups  # type: ignore[index]

    def ancestors(self, node: str) -> list[str]:
        out, p = [], self.parent[node]
        while p is not None:
            out.append(p)
            p = self.parent[p]
        return out

    def subtree(self, node: str) -> set[str]:
        return {n for n in self.parent if n == node or node in self.ancestors(n)}

    def nominal_sum(self, nodes: Iterable[str], fr: FlavorResource) -> int:
        return sum(_nominal(self.groups(n), fr)[0] for n in nodes)

    def cq_usage(
        self, nodes: Iterable[str], usage: dict[str, dict[FlavorResource, int]], fr: FlavorResource
    ) -> int:
        return sum(usage.get(n[3:], {}).get(fr, 0) for n in nodes if n.startswith("cq:"))


def _check_quota(world: World, snap: Snapshot) -> None:
    model = _Model(world)
    usage = _usage(snap)
    frs = [(f, r) for f in FLAVORS for r in RESOURCES]
    for node in model.parent:
        for fr in frs:
            _, borrow, lend = _nominal(model.groups(node), fr)
            tree = model.subtree(node)
            used = model.cq_usage(tree, usage, fr)
            has_parent = model.parent[node] is not None
            if not has_parent:
                assert used <= model.nominal_sum(tree, fr), (node, fr, "root over quota")
            elif borrow is not None:
                assert used <= model.nominal_sum(tree, fr) + borrow, (node, fr, "borrowing limit")
            if has_parent and lend is not None:
                root_tree = model.subtree(([node, *model.ancestors(node)])[-1])
                outside = root_tree - tree
                lent = model.nominal_sum(outside, fr) + lend
                assert model.cq_usage(outside, usage, fr) <= lent, (node, fr, "lending limit")


def _check_gang(world: World, snap: Snapshot, decisions: tuple[Decision, ...]) -> None:
    by_key = {w.key: w for w in world.pending}
    for d in decisions:
        if isinstance(d, Admit | Preempt):
            w = by_key[d.workload]
            assert [ps.name for ps in d.pod_sets] == [ps.name for ps in w.pod_sets]
            for given_ps, ps in zip(d.pod_sets, w.pod_sets, strict=True):
                low = ps.count if ps.min_count is None else ps.min_count
                assert low <= given_ps.count <= ps.count
                expected = {r: v * given_ps.count for r, v in ps.requests if v}
                assert {r: v for r, v in given_ps.resource_usage if r != "pods"} == expected
        if isinstance(d, Preempt):
            victims = [v.workload for v in d.victims]
            assert victims
            assert len(set(victims)) == len(victims)
            assert all(v in snap.admitted for v in victims)


@SETTINGS
@given(worlds())
def test_usage_stays_within_quota_and_limits_at_every_level(world: World) -> None:
    for snap, _ in _simulate(world):
        _check_quota(world, snap)


@SETTINGS
@given(worlds())
def test_no_gang_is_ever_partly_admitted_or_evicted(world: World) -> None:
    for snap, decisions in _simulate(world):
        _check_gang(world, snap, decisions)


@SETTINGS
@given(worlds(), st.randoms(use_true_random=False))
def test_same_input_same_decisions(world: World, rnd: random.Random) -> None:
    history = _simulate(world, cycles=2)
    snap, _ = history[-1]
    heads = list(world.pending)
    first = run_cycle(snap, heads)
    rnd.shuffle(heads)
    again = run_cycle(snap, heads)
    assert first == run_cycle(snap, list(world.pending))
    assert sorted(first, key=lambda d: d.workload) == sorted(again, key=lambda d: d.workload)


@SETTINGS
@given(worlds(), st.data())
def test_removing_a_pending_workload_never_makes_another_inadmissible(
    world: World, data: st.DataObject
) -> None:
    """A head admitted (or cleared to preempt) with another head present is never declared
    inadmissible when that other head is gone. (A cycle is greedy, as in Kueue: without the
    removed head an earlier one may now fit and take the room a later one had, so the later
    one can lose its place in this cycle; it is then retried at once, not parked.)"""
    snap, _ = _simulate(world, cycles=2)[-1]
    # every pending workload as a head: more contention than one head per queue
    heads = [w for w in world.pending if w.key not in snap.admitted]
    if len(heads) < 2:
        return
    before = {d.workload: d for d in run_cycle(snap, heads)}
    removed = data.draw(st.sampled_from(heads))
    after = {d.workload: d for d in run_cycle(snap, [w for w in heads if w is not removed])}
    for key, d in before.items():
        if key != removed.key and isinstance(d, Admit | Preempt):
            now = after[key]
            if isinstance(now, Pending):
                assert now.requeue is Requeue.IMMEDIATE, (key, d, now)
            else:
                assert type(now) is type(d), (key, d, now)


@SETTINGS
@given(worlds(fair=False, reclaiming=True))
def test_cycle_start_shortcuts_choose_what_the_general_search_chooses(world: World) -> None:
    """A pristine overlay lets flat cohorts use per-cycle candidate lists and release
    bounds (candidates.py); an overlay built from explicit maps always takes the general
    path. Both must give the same flavors, modes, borrowing and victims."""
    snap, _ = _simulate(world, cycles=2)[-1]
    for original in world.pending:
        # a higher-priority twin of every workload: same shape, so preemption is in play
        w = replace(original, name=f"{original.name}-twin", priority=original.priority + 10)
        lq = snap.local_queues[w.local_queue]
        cq = snap.cluster_queues[lq.cluster_queue]
        if cq.name in snap.inactive:
            continue
        fast = UsageOverlay(snap)
        general = UsageOverlay(snap, list(snap.base_usage))
        assert fast.pristine
        assert not general.pristine
        a_fast = assign_flavors(fast, w, cq)
        assert a_fast == assign_flavors(general, w, cq)
        req = Request(
            workload=w,
            cluster_queue=cq,
            node=fast.node(cq.name),
            usage=a_fast.usage,
            need_preemption=a_fast.need_preemption(),
        )
        targets = classical_targets(fast, req)
        assert targets == classical_targets(general, req)
        assert targets == _without_release_bounds(general, req)


def _without_release_bounds(ov: UsageOverlay, req: Request) -> tuple[Target, ...]:
    """The victims found when no attempt is skipped for being unable to free enough."""
    bound = preemption_module._could_fit
    preemption_module._could_fit = lambda *_: True  # type: ignore[assignment]
    try:
        return classical_targets(ov, req)
    finally:
        preemption_module._could_fit = bound
