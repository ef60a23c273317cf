"""What placement decides for one gang that quota admits: placed, pending (with what would
change that), or a preemption inside one domain of its required level. Pure: the caller
(`CyclePlacer`, below) hands it the gang already converted, the live inventory and the
placements its ledger holds, and the domains nominated for other preemptors; it gets back
the decision and the gang's own nomination from now on.

The flow, in order:

1. **Place** the gang on the inventory (the live one, with this cycle's earlier placements
   taken and every other preemptor's nominated domain reserved). Placed: done.
2. **Fence:** when backfill reservations hold hosts the gang could only use for what they
   leave it, a gang that does not fit off them stays pending; it never preempts.
3. **Preemptible?** Only a `NO_DOMAIN` or `INSUFFICIENT` no-fit of a gang with a required
   topology level can be cured by evicting gangs; any other stays pending
   (TopologyPlacementFailed).
4. **Wait** for gangs already leaving (evicted earlier, or victims of this cycle): if the gang
   fits once they are gone, it keeps that domain nominated and waits
   (WaitingForPreemptedWorkloads), preempting nothing more.
5. **Preempt** (with a snapshot: the ClusterQueue's policy, `domainpreemption.allowed_victims`)
   the fewest, lowest gangs of one domain; the domain is nominated for the preemptor.
6. **Hints:** otherwise pending, told the fewest running gangs of one domain whose end would
   make room, and whether it fits now as preferred instead of required.

A pending gang is requeued as a quota "no fit" is: a StrictFIFO head stays at the head and
blocks its queue (Kueue's StrictFIFO requeues every inadmissible head at once), a
BestEffortFIFO one is parked until something changes.

`CyclePlacer` is the cycle's placer (`engine.cycle.Placer`, carried by the snapshot the
cycle reads): it runs this flow for each gang quota admits, in cycle order, on the inventory
with the gangs placed earlier in the cycle taken (a copy-on-write layer over the live
inventory: the caller holds the placements in its ledger once it assumes the admissions),
and keeps the nominations. The gangs come from a `Converter` (`state/placing.py`: the one
converter from the live objects), asked lazily, only for the heads quota admits.

The victim searches of steps 5 and 6 are memoized (`PlacementMemory`) by what they were
computed from: a gang that stays pending cycle after cycle on an unchanged inventory costs
one search. The memory also holds the nominations, between cycles.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, cast

from atoll.engine import decisions as d
from atoll.engine import domainpreemption as dp
from atoll.engine import model as m
from atoll.engine.inventory import Gang, Inventory, NoFit, NoFitReason, Placement
from atoll.engine.model import QueueingStrategy
from atoll.engine.ordering import requeue_for
from atoll.engine.placement import place
from atoll.engine.reservedhosts import Fence, Fenced
from atoll.engine.snapshot import Snapshot
from atoll.engine.topologyflavors import topology_flavors

_T = TypeVar("_T")
PREEMPTIBLE = frozenset({NoFitReason.NO_DOMAIN, NoFitReason.INSUFFICIENT})
"""No-fits that evicting running gangs can cure (not a bad request, nor no eligible node)."""

Token = tuple[object, ...]


@dataclass(slots=True)
class PlacementMemory:
    """What placement keeps between cycles: the domains nominated for preemptors, and the
    memo of victim searches."""

    nominations: dict[str, dp.Nomination] = field(default_factory=dict)
    """Preemptor → the domain its victims are freeing for it."""
    memo: dict[tuple[str, str], tuple[Token, object]] = field(default_factory=dict)
    """Victim searches by (kind, workload), with what they were computed from (the first
    item compared by identity: the inventory, which is rebuilt when anything changes)."""

    def fork(self) -> PlacementMemory:
        return PlacementMemory(dict(self.nominations), dict(self.memo))

    def others(self, inventory: Inventory, exclude: str) -> Inventory:
        """`inventory` with every preemptor's nominated domain but `exclude`'s taken."""
        others = [n.placement for k, n in sorted(self.nominations.items()) if k != exclude]
        return dp.reserve(inventory, others) if others else inventory

    def memoized(self, kind: str, key: str, token: Token, compute: Callable[[], _T]) -> _T:
        hit = self.memo.get((kind, key))
        if hit is not None and hit[0][0] is token[0] and hit[0][1:] == token[1:]:
            return cast(_T, hit[1])
        value = compute()
        self.memo[(kind, key)] = (token, value)
        return value

    def settle(self, key: str, nomination: dp.Nomination | None) -> None:
        """The gang's nomination from now on (None: it has none)."""
        if nomination is None:
            self.nominations.pop(key, None)
        else:
            self.nominations[key] = nomination

    def prune(self, *, nominated: Callable[[str], bool], searched: Callable[[str], bool]) -> None:
        """Keep the nominations of the preemptors for which `nominated` holds and the searches
        of the gangs for which `searched` holds."""
        for key in [k for k in self.nominations if not nominated(k)]:
            del self.nominations[key]
        for memo in [k for k in self.memo if not searched(k[1])]:
            del self.memo[memo]


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    decision: Placement | d.Pending | d.Preempt
    nomination: dp.Nomination | None
    """The gang's nominated domain from now on (None: it has none)."""


def pending(
    admit: d.Admit, reason: d.PendingReason, message: str, snapshot: Snapshot | None
) -> d.Pending:
    """Pending as the quota's "no fit" is (requeued by its ClusterQueue's strategy;
    BestEffortFIFO without a snapshot)."""
    cq = snapshot.cluster_queues.get(admit.cluster_queue) if snapshot is not None else None
    strategy = cq.queueing_strategy if cq is not None else QueueingStrategy.BEST_EFFORT_FIFO
    return d.Pending(
        workload=admit.workload,
        cluster_queue=admit.cluster_queue,
        reason=reason,
        message=message,
        requeue=requeue_for(strategy),
    )


def decide(
    admit: d.Admit,
    gang: Gang,
    *,
    live: Inventory,
    held: Mapping[str, Placement],
    memory: PlacementMemory,
    placed: Mapping[str, Placement] | None = None,
    evicting: Collection[str] = (),
    fence: Fence | None = None,
    describe: Callable[[Fenced], str] = lambda f: f.holder,
    snapshot: Snapshot | None = None,
    preemptor: m.Workload | None = None,
) -> Outcome:
    """The decision for `gang` (`admit`'s), and its nomination from now on.

    `live`: the inventory with the ledger's placements (`held`: by workload) taken;
    `memory`: the other preemptors' nominations (read) and the search memo (filled);
    `placed`: the gangs placed earlier in this cycle (not in the ledger yet); `evicting`:
    admitted workloads already leaving; `fence`: hosts backfill reservations hold (its
    message uses `describe` for each); `snapshot` and `preemptor` (the gang's engine
    workload): the preemption policy's inputs (without both nothing is preempted)."""
    key = str(admit.workload)
    base = dp.reserve(live, placed.values()) if placed else live
    inventory = memory.others(base, exclude=key)
    if fence is not None:
        inventory = fence.apply(inventory, placed or {})
    result = place(inventory, gang)
    if isinstance(result, Placement):
        return Outcome(decision=result, nomination=None)
    if fence is not None:
        message = f"{fence.message(describe)}; off them: {result.message}"
        return Outcome(
            decision=pending(admit, d.PendingReason.WAITING_FOR_QUOTA, message, snapshot),
            nomination=None,
        )
    if result.reason not in PREEMPTIBLE or dp.required_level(inventory, gang) is None:
        reason = d.PendingReason.TOPOLOGY_PLACEMENT_FAILED
        return Outcome(decision=pending(admit, reason, result.message, snapshot), nomination=None)
    held = {**held, **(placed or {})}
    leaving = {k: p for k, p in held.items() if k in evicting}
    freed = dp.release(inventory, leaving.values())
    if leaving:  # gangs already being evicted make room once gone: wait for them
        waiting = dp.wait_for_leaving(admit, gang, result, freed, leaving)
        if waiting is not None:
            nomination, wait = waiting
            return Outcome(decision=wait, nomination=nomination)
    running = {k: p for k, p in held.items() if k not in leaving and k != key}
    token = (
        base,
        tuple(sorted((k, n) for k, n in memory.nominations.items() if k != key)),
        frozenset(leaving),
        gang,
    )
    if snapshot is not None and preemptor is not None:
        got = _preempt(
            admit,
            gang,
            result,
            freed=freed,
            snapshot=snapshot,
            preemptor=preemptor,
            running=running,
            token=token,
            memory=memory,
        )
        if got is not None:
            nomination, preempt = got
            return Outcome(decision=preempt, nomination=nomination)
    hints = memory.memoized("hints", key, token, lambda: dp.hints(gang, inventory, freed, running))
    message = result.message + hints
    reason = d.PendingReason.TOPOLOGY_PLACEMENT_FAILED
    return Outcome(decision=pending(admit, reason, message, snapshot), nomination=None)


def _preempt(
    admit: d.Admit,
    gang: Gang,
    result: NoFit,
    *,
    freed: Inventory,
    snapshot: Snapshot,
    preemptor: m.Workload,
    running: Mapping[str, Placement],
    token: Token,
    memory: PlacementMemory,
) -> tuple[dp.Nomination, d.Preempt] | None:
    """The fewest, lowest gangs the policy allows, all in one domain, whose eviction lets
    the gang fit there."""
    allowed = {
        str(a.admitted.key): a
        for a in dp.allowed_victims(
            snapshot, preemptor, admit.cluster_queue, borrowing=admit.borrowing
        )
        if str(a.admitted.key) in running
    }
    if not allowed:
        return None
    candidates = [
        dp.Victim(key=k, priority=a.admitted.workload.priority, placement=running[k])
        for k, a in allowed.items()
    ]
    got = memory.memoized(
        "preempt",
        str(admit.workload),
        (*token, tuple((v.key, v.priority) for v in candidates)),
        lambda: dp.preempt_in_one_domain(freed, gang, candidates),
    )
    if got is None:
        return None
    return dp.preemption(admit, result, got, allowed)


class Converter(Protocol):
    """The live objects as placement's inputs, asked only for the gangs quota admits."""

    def gang(self, admit: d.Admit) -> Gang | str | None:
        """`admit`'s gang (its pod sets with the admitted counts and flavors), None when it
        needs no placement (neither topology nor devices), or why it cannot be built (a
        misconfiguration, told as the gang's pending message)."""
        ...

    def workload(self, key: str) -> m.Workload | None:
        """The engine workload of a preemptor (the preemption policy's input)."""
        ...


@dataclass(slots=True, kw_only=True)
class CyclePlacer:
    """One cycle's placement (`engine.cycle.Placer`): each gang quota admits is placed on
    the inventory as it is after the admissions before it in the cycle, or preempts inside
    one domain of its required level, or stays pending (`decide`)."""

    snapshot: Snapshot
    """The cycle's snapshot (the preemption policy's and the requeue strategy's input)."""
    live: Inventory | Callable[[], Inventory]
    """The live inventory, with the ledger's placements taken, or how to get it: asked
    only when a gang needs placing (most cycles place none)."""
    held: Mapping[str, Placement]
    """The ledger's placements, by workload."""
    memory: PlacementMemory
    """The nominations (read, and settled for each gang placed) and the search memo."""
    converter: Converter
    describe: Callable[[Fenced], str] = lambda f: f.holder
    """How a fence's message names each host it holds."""
    evicting: set[str] = field(default_factory=set)
    """Admitted workloads being evicted, and the victims of this cycle's preemptions: later
    gangs see them as leaving, never as new victims."""
    changed: set[str] = field(default_factory=set)
    """Gangs placement turned into a preemption or a pending decision."""
    placed: dict[str, Placement] = field(default_factory=dict)
    """The gangs placed in this cycle, in order: taken from the live inventory for the gangs
    after them; the caller holds them in its ledger when it assumes the admissions."""

    @classmethod
    def on(
        cls,
        snapshot: Snapshot,
        *,
        live: Inventory | Callable[[], Inventory],
        held: Mapping[str, Placement],
        memory: PlacementMemory,
        converter: Converter,
        describe: Callable[[Fenced], str] = lambda f: f.holder,
    ) -> CyclePlacer:
        """The placer of a cycle on `snapshot` (its evicted workloads are leaving)."""
        return cls(
            snapshot=snapshot,
            live=live,
            held=held,
            memory=memory,
            converter=converter,
            describe=describe,
            evicting={str(k) for k in snapshot.evicted},
        )

    def _check(
        self, admit: d.Admit, fence: Fence | None
    ) -> Placement | d.Pending | d.Preempt | None:
        key = str(admit.workload)
        gang = self.converter.gang(admit)
        if isinstance(gang, str):
            return pending(admit, d.PendingReason.MISCONFIGURED, gang, self.snapshot)
        if gang is None:
            self.memory.settle(key, None)
            return None
        if callable(self.live):
            self.live = self.live()
        got = decide(
            admit,
            gang,
            live=self.live,
            held=self.held,
            memory=self.memory,
            placed=self.placed,
            evicting=self.evicting,
            fence=fence,
            describe=self.describe,
            snapshot=self.snapshot,
            preemptor=self.converter.workload(key),
        )
        self.memory.settle(key, got.nomination)
        return got.decision

    def place(self, admit: d.Admit, fence: Fence | None = None) -> d.Admit | d.Preempt | d.Pending:
        checked = self._check(admit, fence)
        if isinstance(checked, d.Pending | d.Preempt):
            self.changed.add(str(admit.workload))
            return checked
        self.changed.discard(str(admit.workload))  # refused in another flavor before
        if checked is not None:
            self.placed[str(admit.workload)] = checked
        return admit

    def unplaceable(self, preempt: d.Preempt) -> d.Pending | None:
        """Kueue's check before a quota preemption of a gang with a topology flavor (TAS
        `WithSimulateEmpty`): would the gang fit if no gang held a place? If not, no victim
        can make room for it: it stays pending (TopologyPlacementFailed) with placement's
        reason, and nothing is preempted. None: it would fit, or needs no placement."""
        admit = d.Admit(
            workload=preempt.workload,
            cluster_queue=preempt.cluster_queue,
            pod_sets=preempt.pod_sets,
            borrowing=False,
        )
        if not topology_flavors(self.snapshot, admit):
            return None
        gang = self.converter.gang(admit)
        if not isinstance(gang, Gang):
            return None  # no placement, or misconfigured: the admission's placement says why
        if callable(self.live):
            self.live = self.live()
        live, held = self.live, self.held
        key = str(preempt.workload)
        result = self.memory.memoized(
            "empty", key, (live, gang), lambda: place(dp.release(live, held.values()), gang)
        )
        if isinstance(result, Placement):
            return None
        self.changed.add(key)
        message = f"{result.message}, even with no workload admitted in the topology"
        return pending(admit, d.PendingReason.TOPOLOGY_PLACEMENT_FAILED, message, self.snapshot)

    def decided(self, decision: d.Decision) -> None:
        key = str(decision.workload)
        quota_miss = isinstance(decision, d.Preempt) or (
            isinstance(decision, d.Pending) and decision.requeue is d.Requeue.INADMISSIBLE
        )
        if quota_miss and key not in self.changed:
            self.memory.settle(key, None)  # its nominated domain is free again
        if isinstance(decision, d.Preempt):
            self.evicting.update(str(v.workload) for v in decision.victims)
