"""One scheduling cycle: the heads of the queues in, one decision per head out.

Mirrors Kueue's pkg/scheduler/scheduler.go (`schedule`, `nominate`, `processEntry`,
`getInitialAssignments`, `resourcesToReserve`). Every head is nominated against the
snapshot as it was when the cycle started; then, in cycle order, each is admitted, told to
preempt, or left pending, against the usage of the decisions taken before it in the cycle.

Placement is part of the cycle, as Kueue's TAS flavor assigner makes it part of flavor
assignment: a head that quota admits is handed to the snapshot's `Placer` (topology and
devices on the inventory, after the admissions before it in the cycle), which places it,
turns it into a preemption inside one domain, or leaves it pending. Only what the placer
lets go counts as usage for the heads after it: a gang it turns down takes no quota.

Gang rule (an invariant of every decision): an Admit names every pod set of its workload,
each with its full count (or, with partial admission, a count between minCount and count,
for every pod set at once), and charges exactly count × per-pod requests; a Preempt and an
Evict name whole workloads, whose whole usage is released. Nothing is ever admitted or
evicted per pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from atoll.engine import topologyflavors as tas
from atoll.engine.backfill import Guard, Reservation
from atoll.engine.decisions import (
    Admit,
    Decision,
    Evict,
    EvictionReason,
    Pending,
    PendingReason,
    PodSetAdmission,
    Preempt,
    Requeue,
    Victim,
)
from atoll.engine.flavors import Assignment, FitMode, Refused, assign_flavors
from atoll.engine.matching import selector_matches
from atoll.engine.model import (
    ClusterQueue,
    FlavorResource,
    ReclaimWithinCohort,
    StopPolicy,
    Workload,
    WorkloadKey,
)
from atoll.engine.ordering import cycle_key, requeue_for
from atoll.engine.overlay import UsageOverlay
from atoll.engine.partial import can_be_partially_admitted, largest_fitting
from atoll.engine.preemption import Request, Target
from atoll.engine.reservedhosts import Fence
from atoll.engine.snapshot import Snapshot
from atoll.engine.targets import find_targets
from atoll.engine.tournament import fair_order


class Placer(Protocol):
    """Placement of the heads quota admits, in cycle order: part of the snapshot a cycle
    reads (`Snapshot.placer`; `engine.gangstep.CyclePlacer` on the inventory and the domains
    nominated for preemptors, one per cycle)."""

    def place(self, admit: Admit, fence: Fence | None = None) -> Admit | Preempt | Pending:
        """`admit` when the gang is placed (or needs no placement), a Preempt freeing one
        domain for it, or why it stays pending. With a `fence`, the hosts backfill
        reservations hold are cut down to what they leave for it (`engine.reservedhosts`)."""
        ...

    def unplaceable(self, preempt: Preempt) -> Pending | None:
        """Why a quota preemption cannot help: the gang would not fit its topology even
        with no gang placed (Kueue's TAS check on an empty topology); None: it would."""
        ...

    def decided(self, decision: Decision) -> None:
        """Every decision of the cycle, in order, once taken (after `place`)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """A nominated head: its assignment and preemption targets, computed at cycle start."""

    workload: Workload
    cluster_queue: ClusterQueue
    node: int
    assignment: Assignment
    targets: tuple[Target, ...]


def _pending(
    w: Workload, cq: ClusterQueue | None, reason: PendingReason, message: str, requeue: Requeue
) -> Pending:
    return Pending(
        workload=w.key,
        cluster_queue=None if cq is None else cq.name,
        reason=reason,
        message=message,
        requeue=requeue,
    )


def validate(snapshot: Snapshot, w: Workload) -> ClusterQueue | Pending:
    """The ClusterQueue a head may be scheduled in, or why it can't be considered now."""
    if not w.active:
        return _pending(
            w, None, PendingReason.DEACTIVATED, "The workload is deactivated", Requeue.INADMISSIBLE
        )
    if w.misconfigured is not None:
        return _pending(w, None, PendingReason.MISCONFIGURED, w.misconfigured, Requeue.INADMISSIBLE)
    lq = snapshot.local_queues.get(w.local_queue)
    if lq is None:
        return _pending(
            w,
            None,
            PendingReason.MISCONFIGURED,
            f"LocalQueue {w.queue_name} doesn't exist",
            Requeue.INADMISSIBLE,
        )
    cq = snapshot.cluster_queues.get(lq.cluster_queue)
    if cq is None:
        return _pending(
            w,
            None,
            PendingReason.MISCONFIGURED,
            f"ClusterQueue {lq.cluster_queue} not found",
            Requeue.INADMISSIBLE,
        )
    if lq.stop_policy is not StopPolicy.NONE:
        return _pending(
            w,
            cq,
            PendingReason.SUSPENDED,
            f"LocalQueue {lq.name} is stopped",
            requeue_for(cq.queueing_strategy),
        )
    inactive = snapshot.inactive.get(cq.name)
    if inactive is not None:
        return _pending(
            w,
            cq,
            PendingReason.SUSPENDED,
            f"ClusterQueue {cq.name} is inactive: {inactive}",
            requeue_for(cq.queueing_strategy),
        )
    if not selector_matches(cq.namespace_selector, w.namespace_labels):
        return _pending(
            w,
            cq,
            PendingReason.NAMESPACE_MISMATCH,
            "Workload namespace doesn't match ClusterQueue selector",
            Requeue.INADMISSIBLE,
        )
    return cq


def _request(entry_cq: ClusterQueue, node: int, w: Workload, a: Assignment) -> Request:
    return Request(
        workload=w,
        cluster_queue=entry_cq,
        node=node,
        usage=a.usage,
        need_preemption=a.need_preemption(),
    )


def _try_counts(
    ov: UsageOverlay,
    w: Workload,
    cq: ClusterQueue,
    node: int,
    counts: tuple[int, ...] | None,
    *,
    refused: Refused | None,
) -> tuple[Assignment, tuple[Target, ...], bool]:
    """An assignment for these counts, its targets, and whether it can go ahead."""
    a = assign_flavors(ov, w, cq, counts, refused)
    if a.mode is FitMode.FIT:
        return a, (), True
    if a.mode is FitMode.PREEMPT:
        targets = find_targets(ov, _request(cq, node, w, a))
        if targets:
            return a, targets, True
    return a, (), False


def nominate(
    ov: UsageOverlay, w: Workload, cq: ClusterQueue, refused: Refused | None = None
) -> Entry:
    """Kueue's getInitialAssignments: the full gang first; partial admission (reduced
    counts) only when the full gang neither fits nor can preempt its way in. `refused`:
    flavors whose topology already refused a pod set (`engine.topologyflavors`)."""
    node = ov.node(cq.name)
    full, targets, ok = _try_counts(ov, w, cq, node, None, refused=refused)
    if not ok and can_be_partially_admitted(w.pod_sets):

        def attempt(counts: tuple[int, ...]) -> tuple[Assignment, tuple[Target, ...]] | None:
            a, t, fits = _try_counts(ov, w, cq, node, counts, refused=refused)
            return (a, t) if fits else None

        found = largest_fitting(w.pod_sets, attempt)
        if found is not None:
            full, targets = found
    return Entry(workload=w, cluster_queue=cq, node=node, assignment=full, targets=targets)


def admissions(a: Assignment) -> tuple[PodSetAdmission, ...]:
    return tuple(
        PodSetAdmission(
            name=ps.name,
            count=ps.count,
            flavors=tuple(sorted((r, c.flavor) for r, c in ps.flavors.items())),
            resource_usage=tuple(sorted(ps.requests.items())),
        )
        for ps in a.pod_sets
    )


def _to_reserve(ov: UsageOverlay, e: Entry) -> dict[FlavorResource, int]:
    """Kueue's quotaResourcesToReserve: a preemptor without candidates holds what it could
    use (up to nominal, or up to its borrowing limit when it borrows), so that lower
    priority workloads don't slip in ahead of it."""
    node = ov.tree.nodes[e.node]
    reserve = {}
    for fr, value in e.assignment.usage.items():
        used = ov.used(e.node, fr)
        nominal = node.nominal.get(fr, 0)
        if e.assignment.borrowing > 0:
            limit = node.borrowing_limit.get(fr)
            reserve[fr] = value if limit is None else min(value, nominal + limit - used)
        else:
            reserve[fr] = max(0, min(value, nominal - used))
    return reserve


def _fits_after(ov: UsageOverlay, e: Entry, preempted: dict[WorkloadKey, Target]) -> bool:
    """Kueue's `fits`: does the entry fit once every victim chosen so far is gone? (Only
    victims in the entry's own cohort tree can make a difference.)"""
    tree = ov.tree
    root = tree.root(e.node)
    gone = {k for k, t in preempted.items() if tree.root(ov.node(t.cluster_queue)) == root}
    gone.update(t.workload for t in e.targets)
    ov.begin()
    ov.remove_workloads(sorted(gone), e.assignment.usage.keys())
    fits = ov.fits(e.node, e.assignment.usage)
    ov.rollback()
    return fits


def _unassignable(e: Entry, reason: PendingReason) -> Pending:
    a = e.assignment
    return Pending(
        workload=e.workload.key,
        cluster_queue=e.cluster_queue.name,
        reason=reason,
        message=a.message(),
        requeue=requeue_for(e.cluster_queue.queueing_strategy),
        shortfalls=a.shortfalls,
    )


def _go(e: Entry) -> Admit | Preempt:
    a, cq, w = e.assignment, e.cluster_queue, e.workload
    if a.mode is FitMode.PREEMPT:
        victims = tuple(
            Victim(workload=t.workload, cluster_queue=t.cluster_queue, reason=t.reason)
            for t in e.targets
        )
        message = f"{a.message()}. Pending the preemption of {len(victims)} workload(s)"
        return Preempt(
            workload=w.key,
            cluster_queue=cq.name,
            victims=victims,
            pod_sets=admissions(a),
            message=message,
        )
    return Admit(
        workload=w.key,
        cluster_queue=cq.name,
        pod_sets=admissions(a),
        borrowing=a.borrowing > 0,
        borrow_level=a.borrowing,
    )


Reserve = dict[FlavorResource, int] | None
"""Quota a head that stays pending holds back from the heads after it (`_to_reserve`)."""


def _quota(
    ov: UsageOverlay, e: Entry, preempted: dict[WorkloadKey, Target], guard: Guard | None
) -> tuple[Admit | Preempt | Pending, Reserve]:
    """What quota (and the backfill `guard`) decide for a nominated head, given earlier
    decisions, and what it reserves if it stays pending. Changes nothing."""
    a, cq, w = e.assignment, e.cluster_queue, e.workload
    if a.mode is FitMode.NO_FIT:
        return _unassignable(e, a.no_fit_reason or PendingReason.NO_MATCHING_FLAVOR), None
    if a.mode is FitMode.PREEMPT and not e.targets:
        reserve = None
        if cq.preemption.reclaim_within_cohort is not ReclaimWithinCohort.ANY:
            reserve = _to_reserve(ov, e)
        return _unassignable(e, PendingReason.WAITING_FOR_QUOTA), reserve
    if any(t.workload in preempted for t in e.targets):
        message = "Workload has overlapping preemption targets with another workload"
        return _pending(w, cq, PendingReason.WAITING_FOR_QUOTA, message, Requeue.IMMEDIATE), None
    if not _fits_after(ov, e, preempted):
        message = "Workload no longer fits after processing another workload"
        return _pending(w, cq, PendingReason.WAITING_FOR_QUOTA, message, Requeue.IMMEDIATE), None
    if guard is not None:
        leaving = [t.workload for t in e.targets]
        refused = guard.check(ov, w, cq=cq, node=e.node, usage=a.usage, leaving=leaving)
        if refused is not None:
            return refused, None
    return _go(e), None


def _place(placer: Placer, guard: Guard | None, admit: Admit) -> Admit | Preempt | Pending:
    """Place `admit`, inside the fence of the backfill reservations its check found."""
    return placer.place(admit, None if guard is None else guard.fence(admit.workload))


def _kept(guard: Guard | None, outcome: Admit | Preempt | Pending) -> Admit | Preempt | Pending:
    """`outcome` as the head's answer: a gang placement keeps pending is withdrawn from the
    backfill guard, which counted it as admitted when quota let it in."""
    if guard is not None and isinstance(outcome, Pending):
        guard.withdraw(outcome.workload)
    return outcome


Asked = tuple[Admit | Preempt, Admit | Preempt | Pending]
"""What placement was asked about (an admission, or a quota preemption) and its answer."""


def _attempt(
    ov: UsageOverlay,
    e: Entry,
    preempted: dict[WorkloadKey, Target],
    guard: Guard | None,
    placer: Placer,
) -> tuple[Admit | Preempt | Pending, Reserve, Asked | None]:
    """`_quota`'s decision and reserve for `e`, and what placement was asked and answered:
    where an admission is placed (or why not), or why a quota preemption cannot make room
    for the gang in its topology; None when placement has nothing to say."""
    decision, reserve = _quota(ov, e, preempted, guard)
    if isinstance(decision, Admit):
        return decision, reserve, (decision, _place(placer, guard, decision))
    if isinstance(decision, Preempt):
        answer = placer.unplaceable(decision)
        return decision, reserve, None if answer is None else (decision, answer)
    return decision, reserve, None


def _placed(
    ov: UsageOverlay,
    e: Entry,
    preempted: dict[WorkloadKey, Target],
    guard: Guard | None,
    placer: Placer,
) -> tuple[Admit | Preempt | Pending, Reserve, Entry]:
    """`_quota`, with every admission placed and every quota preemption checked against
    the topology; a flavor whose topology refuses the gang is refused and flavors are
    assigned again without it (`engine.topologyflavors`). The decision, what it reserves,
    and the entry (the assignment) it was taken on."""
    decision, reserve, asked = _attempt(ov, e, preempted, guard, placer)
    if asked is None:
        return decision, reserve, e
    checked, outcome = asked
    refused = tas.refusal(ov.snapshot, checked, outcome)
    if not refused:
        return _kept(guard, outcome), None, e
    tried = [(e, checked, outcome)]
    all_refused = dict(refused)
    entry = e
    while not tas.stops_search(outcome, e.cluster_queue):
        if guard is not None:  # the refused flavor's admission is not made
            guard.withdraw(e.workload.key)
        entry = nominate(ov, e.workload, e.cluster_queue, all_refused)
        decision, reserve, asked = _attempt(ov, entry, preempted, guard, placer)
        if asked is None:
            break
        checked, outcome = asked
        refused = tas.refusal(ov.snapshot, checked, outcome)
        if not refused:
            return _kept(guard, outcome), None, entry
        all_refused.update(refused)
        tried.append((entry, checked, outcome))
    else:
        return _kept(guard, outcome), None, entry
    first = tas.fallback([o for _, _, o in tried])
    if first is not None:  # the first flavor that preempts in one of its domains
        entry, admit, _ = next(t for t in tried if t[2] is first)
        assert isinstance(admit, Admit)  # a quota preemption's refusal is never a fallback
        if guard is not None:  # checked again: the guard forgot it when it was refused
            again, _ = _quota(ov, entry, preempted, guard)
            if not isinstance(again, Admit):
                return again, None, entry
            admit = again
        return _kept(guard, _place(placer, guard, admit)), None, entry  # placed again: its state
    if len(tried) == 1 and entry.assignment.mode is FitMode.NO_FIT:
        return tried[0][2], None, e  # only one flavor's topology refused it: its answer
    return decision, reserve, entry


def process(
    ov: UsageOverlay,
    e: Entry,
    preempted: dict[WorkloadKey, Target],
    guard: Guard | None = None,
    *,
    placer: Placer | None = None,
) -> Decision:
    """Kueue's processEntry: the decision for one nominated head, given earlier ones; with
    a `guard`, an admission or preemption must also keep the reservations it checks; with a
    `placer`, an admission must also be placed (in another flavor if its topology refuses
    the gang in the flavor quota chose)."""
    decision: Admit | Preempt | Pending
    if placer is None:
        decision, reserve = _quota(ov, e, preempted, guard)
        entry = e
    else:
        decision, reserve, entry = _placed(ov, e, preempted, guard, placer)
    if reserve is not None:
        ov.add(entry.node, reserve)
    if isinstance(decision, Pending):
        return decision
    preempted.update((t.workload, t) for t in entry.targets)
    ov.add(entry.node, entry.assignment.usage)
    return decision


def run_cycle(
    snapshot: Snapshot,
    heads: Iterable[Workload],
    reservations: Sequence[Reservation] = (),
    now: float = 0.0,
    guard: Guard | None = None,
) -> tuple[Decision, ...]:
    """Decide every head once. Decisions come in processing order, then the heads that
    could not be considered at all (inactive queues, deactivated workloads...).

    With `reservations` (`engine.backfill.reserve` at `now`), the heads of backfill queues
    must keep them (`engine.backfill.Guard`; pass one to read what it backfilled). With a
    `snapshot.placer`, every admission is placed before it counts (see the module's
    docstring)."""
    if reservations and guard is None:
        guard = Guard(snapshot=snapshot, reservations=reservations, now=now)
    if not reservations:
        guard = None
    ov = UsageOverlay(snapshot)
    entries: list[Entry] = []
    rejected: list[Decision] = []
    for w in heads:
        if w.key in snapshot.admitted:
            continue
        checked = validate(snapshot, w)
        if isinstance(checked, Pending):
            rejected.append(checked)
        else:
            entries.append(nominate(ov, w, checked))
    preempted: dict[WorkloadKey, Target] = {}
    if snapshot.fair_sharing is None:
        entries.sort(key=lambda e: cycle_key(e.assignment.borrowing, e.workload))
        ordered: Iterable[Entry] = entries
    else:
        ordered = fair_order(ov, entries)
    decisions = []
    placer = snapshot.placer
    for e in ordered:
        decisions.append(process(ov, e, preempted, guard, placer=placer))
        if placer is not None:
            placer.decided(decisions[-1])
    if placer is not None:
        for dec in rejected:
            placer.decided(dec)
    return tuple(decisions + rejected)


def drain(snapshot: Snapshot) -> tuple[Evict, ...]:
    """Evictions a snapshot calls for by itself: admitted workloads of ClusterQueues and
    LocalQueues set to HoldAndDrain, and deactivated workloads still holding quota."""
    evictions = []
    chosen = sorted(snapshot.admitted) if snapshot.draining else snapshot.deactivated
    for key in chosen:
        a = snapshot.admitted[key]
        if a.evicted:
            continue
        cq = snapshot.cluster_queues.get(a.cluster_queue)
        lq = snapshot.local_queues.get(a.workload.local_queue)
        if not a.workload.active:
            evictions.append(
                Evict(
                    workload=key,
                    cluster_queue=a.cluster_queue,
                    reason=EvictionReason.DEACTIVATED,
                    message="The workload is deactivated",
                )
            )
        elif cq is not None and cq.stop_policy is StopPolicy.HOLD_AND_DRAIN:
            evictions.append(
                Evict(
                    workload=key,
                    cluster_queue=a.cluster_queue,
                    reason=EvictionReason.CLUSTER_QUEUE_STOPPED,
                    message=f"The ClusterQueue {cq.name} is stopped",
                )
            )
        elif lq is not None and lq.stop_policy is StopPolicy.HOLD_AND_DRAIN:
            evictions.append(
                Evict(
                    workload=key,
                    cluster_queue=a.cluster_queue,
                    reason=EvictionReason.LOCAL_QUEUE_STOPPED,
                    message=f"The LocalQueue {lq.name} is stopped",
                )
            )
    return tuple(evictions)
