"""Topology- and device-aware feasibility of a gang that quota admits: a ClusterQueue flavor
with a `topologyName` (Kueue's topology-aware scheduling) or pods with DRA ResourceClaims make
atoll place the whole gang on the live inventory before admitting it, so that it never admits
what cannot be placed; the placement is held until the gang releases its quota.

Mirrors the role of Kueue's pkg/cache/scheduler/tas_flavor_snapshot.go in the scheduler cycle
(where Kueue reports `TopologyPlacementFailed`), extended to DRA devices (which Kueue's TAS
does not combine with), through `atoll.engine.placement`.

Topology-aware preemption: a gang whose quota fits but whose *required* level has no domain
with room (or whose devices do not fit in one) evicts whole gangs its ClusterQueue's policy
allows (`atoll.engine.domainpreemption.allowed_victims`), all inside one domain, as few and as
low as possible; the decision becomes a Preempt and the domain is *nominated* for the
preemptor: other gangs are placed as if the preemptor already held it, so the victims (or
anyone else) cannot take it back before the preemptor lands there. While victims are leaving,
the preemptor waits (WaitingForPreemptedWorkloads) and nothing is preempted again. A gang
that stays pending is told what would change the answer: the fewest running gangs of one
domain whose end would make room, and whether it fits now as preferred instead of required.
It is requeued as a quota "no fit" is: a StrictFIFO head stays at the head and blocks its
queue, a BestEffortFIFO one is parked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TypeVar, cast

from atoll.api.resource import ResourceClaimTemplate
from atoll.api.topologyassignment import TopologyAssignment
from atoll.api.workload import Workload
from atoll.engine import decisions as d
from atoll.engine import domainpreemption as dp
from atoll.engine import model as m
from atoll.engine.cycle import admissions
from atoll.engine.flavors import Assignment
from atoll.engine.inventory import (
    Gang,
    Inventory,
    NoFit,
    NoFitReason,
    Placement,
)
from atoll.engine.model import QueueingStrategy
from atoll.engine.ordering import requeue_for
from atoll.engine.placement import place
from atoll.engine.reservedhosts import Fence, Fenced, Hosts
from atoll.engine.snapshot import Snapshot
from atoll.state import workloads as wls
from atoll.state.cache import Cache
from atoll.state.cel import SelectorCompiler
from atoll.state.gangs import GangError, gang_pod_set, wants_island
from atoll.state.reserving import clock
from atoll.state.topologyassignment import topology_assignment

_T = TypeVar("_T")
_PREEMPTIBLE = frozenset({NoFitReason.NO_DOMAIN, NoFitReason.INSUFFICIENT})
"""No-fits that evicting running gangs can cure (not a bad request, nor no eligible node)."""


@dataclass(slots=True)
class TopologyChecker:
    cache: Cache
    compiler: SelectorCompiler = field(default_factory=SelectorCompiler)
    nominations: dict[str, dp.Nomination] = field(default_factory=dict)
    """Preemptor → the domain its victims are freeing for it."""
    _memo: dict[tuple[str, str], tuple[tuple[object, ...], object]] = field(default_factory=dict)
    """Victim searches by (kind, workload), with what they were computed from: a gang that
    stays pending cycle after cycle on an unchanged inventory costs one search."""

    def fork(self, cache: Cache) -> TopologyChecker:
        """This checker on `cache` (a fork of its own), with the same nominations."""
        return TopologyChecker(
            cache, self.compiler, nominations=dict(self.nominations), _memo=dict(self._memo)
        )

    def _templates(self, namespace: str) -> dict[str, ResourceClaimTemplate]:
        prefix = f"{namespace}/"
        return {
            k.removeprefix(prefix): t
            for k, t in self.cache.claim_templates.items()
            if k.startswith(prefix)
        }

    def _gang(self, wl: Workload, dec: d.Admit) -> Gang | None:
        """The gang to place, or None when neither topology nor devices are involved."""
        counts = {str(ps.name): ps for ps in dec.pod_sets}
        pod_sets = []
        involved = False
        for ps in wl.spec.pod_sets:
            assigned = counts.get(ps.name)
            flavors = [
                self.cache.flavors[str(f)]
                for f in sorted({f for _, f in assigned.flavors} if assigned else set())
                if str(f) in self.cache.flavors
            ]
            topology = next((f.spec.topology_name for f in flavors if f.spec.topology_name), None)
            labels: dict[str, str] = {}
            for f in flavors:
                labels.update(f.spec.node_labels or {})
            involved = (
                involved
                or bool(topology)
                or bool(ps.template.spec.resource_claims)
                or wants_island(ps)
            )
            gps = gang_pod_set(
                ps,
                templates=self._templates(wl.namespace or ""),
                compiler=self.compiler,
                inventory=self.cache.inventory,
                topology=topology,
                flavor_node_labels=labels,
            )
            if assigned is not None and assigned.count != gps.count:
                gps = dataclasses.replace(gps, count=assigned.count)
            pod_sets.append(gps)
        if not involved:
            return None
        return Gang(key=f"{wl.namespace}/{wl.name}", pod_sets=tuple(pod_sets))

    def check(self, dec: d.Admit) -> Placement | d.Pending | None:
        """Place the admitted gang: a Placement (to hold), a Pending saying why it cannot be
        placed now (and what would change that), or None when the gang needs no placement.
        Never preempts (what-if answers and tools)."""
        got = self.place_or_preempt(dec)
        assert not isinstance(got, d.Preempt)  # no snapshot: no policy, no victims
        return got

    def place_or_preempt(
        self,
        dec: d.Admit,
        snapshot: Snapshot | None = None,
        evicting: Collection[str] = (),
        placed: Mapping[str, Placement] | None = None,
        fence: Fence | None = None,
    ) -> Placement | d.Pending | d.Preempt | None:
        """As `check`, or a Preempt freeing one domain of the gang's required level.
        `snapshot` is the cycle's (for the preemption policy; without it nothing is
        preempted); `evicting`: admitted workloads already being evicted; `placed`: the
        gangs placed earlier in the cycle, taken from the live inventory (a copy-on-write
        layer: the ledger holds them only once the cycle's admissions are assumed);
        `fence`: hosts backfill reservations hold, which the gang may use only for what they
        leave it (placed off them, or pending; never preempting)."""
        key = str(dec.workload)
        wl = self.cache.workloads.get(key)
        if wl is None:
            return None
        try:
            gang = self._gang(wl, dec)
        except GangError as e:
            return self._pending(dec, d.PendingReason.MISCONFIGURED, str(e), snapshot)
        if gang is None:
            self.nominations.pop(key, None)
            return None
        base = self.cache.inventory.snapshot()
        if placed:
            base = dp.reserve(base, placed.values())
        inventory = self._inventory(base, exclude=key)
        if fence is not None:
            inventory = fence.apply(inventory, placed or {})
        result = place(inventory, gang)
        if isinstance(result, Placement):
            self.nominations.pop(key, None)
            return result
        if fence is not None:
            self.nominations.pop(key, None)
            message = f"{fence.message(_held)}; off them: {result.message}"
            return self._pending(dec, d.PendingReason.WAITING_FOR_QUOTA, message, snapshot)
        if result.reason not in _PREEMPTIBLE or dp.required_level(inventory, gang) is None:
            self.nominations.pop(key, None)
            return self._pending(
                dec, d.PendingReason.TOPOLOGY_PLACEMENT_FAILED, result.message, snapshot
            )
        held = {**self.cache.inventory.held(), **(placed or {})}
        leaving = {k: p for k, p in held.items() if k in evicting}
        freed = dp.release(inventory, leaving.values())
        if leaving:  # gangs already being evicted make room once gone: wait for them
            waiting = dp.wait_for_leaving(dec, gang, result, freed, leaving)
            if waiting is not None:
                self.nominations[key], pending = waiting
                return pending
        self.nominations.pop(key, None)
        running = {k: p for k, p in held.items() if k not in leaving and k != key}
        token = (
            base,
            tuple(sorted((k, n) for k, n in self.nominations.items() if k != key)),
            frozenset(leaving),
            gang,
        )
        if snapshot is not None:
            preempt = self._preempt(
                dec, gang, result, freed=freed, snapshot=snapshot, running=running, token=token
            )
            if preempt is not None:
                return preempt
        hints = self._memoized(
            "hints", key, token, lambda: dp.hints(gang, inventory, freed, running)
        )
        message = result.message + hints
        return self._pending(dec, d.PendingReason.TOPOLOGY_PLACEMENT_FAILED, message, snapshot)

    def hosts(self) -> Hosts:
        """What backfill reservations plan their hosts on (`engine.reservedhosts`): the live
        inventory with the preemptors' nominated domains taken, the ledger's placements by
        workload, and each holder's gang as this checker builds it."""

        def gang(w: m.Workload, cq: m.ClusterQueueName, a: Assignment) -> Gang | None:
            wl = self.cache.workloads.get(str(w.key))
            if wl is None:
                return None
            admit = d.Admit(
                workload=w.key, cluster_queue=cq, pod_sets=admissions(a), borrowing=False
            )
            try:
                return self._gang(wl, admit)
            except GangError:
                return None

        return Hosts(
            inventory=self._inventory(self.cache.inventory.snapshot(), exclude=""),
            held=self.cache.inventory.held(),
            gang=gang,
        )

    def forget(self, key: str) -> None:
        """The preemptor no longer needs its domain (admitted elsewhere, gone, over quota)."""
        self.nominations.pop(key, None)

    def prune(self) -> None:
        """Drop the nominations of workloads that hold quota, finished, or are gone."""
        for key in list(self.nominations):
            wl = self.cache.workloads.get(key)
            if (
                wl is None
                or key in self.cache.assumed
                or wls.has_quota(wl)
                or wls.is_finished(wl)
                or not wl.spec.active
            ):
                del self.nominations[key]
        for memo in list(self._memo):
            wl = self.cache.workloads.get(memo[1])
            if wl is None or wls.has_quota(wl) or wls.is_finished(wl):
                del self._memo[memo]

    def _memoized(
        self, kind: str, key: str, token: tuple[object, ...], compute: Callable[[], _T]
    ) -> _T:
        hit = self._memo.get((kind, key))
        if hit is not None and hit[0][0] is token[0] and hit[0][1:] == token[1:]:
            return cast(_T, hit[1])
        value = compute()
        self._memo[(kind, key)] = (token, value)
        return value

    def _inventory(self, inventory: Inventory, exclude: str) -> Inventory:
        """The live inventory with every other preemptor's nominated domain taken."""
        others = [n.placement for k, n in sorted(self.nominations.items()) if k != exclude]
        return dp.reserve(inventory, others) if others else inventory

    def _preempt(
        self,
        dec: d.Admit,
        gang: Gang,
        result: NoFit,
        *,
        freed: Inventory,
        snapshot: Snapshot,
        running: Mapping[str, Placement],
        token: tuple[object, ...],
    ) -> d.Preempt | None:
        key = str(dec.workload)
        preemptor = self.cache.engine_workload(key)
        if preemptor is None:
            return None
        allowed = {
            str(a.admitted.key): a
            for a in dp.allowed_victims(
                snapshot, preemptor, dec.cluster_queue, borrowing=dec.borrowing
            )
            if str(a.admitted.key) in running
        }
        if not allowed:
            return None
        candidates = [
            dp.Victim(key=k, priority=a.admitted.workload.priority, placement=running[k])
            for k, a in allowed.items()
        ]
        got = self._memoized(
            "preempt",
            key,
            (*token, tuple((v.key, v.priority) for v in candidates)),
            lambda: dp.preempt_in_one_domain(freed, gang, candidates),
        )
        if got is None:
            return None
        self.nominations[key], decision = dp.preemption(dec, result, got, allowed)
        return decision

    @staticmethod
    def _pending(
        dec: d.Admit, reason: d.PendingReason, message: str, snapshot: Snapshot | None
    ) -> d.Pending:
        """Pending as the quota's "no fit" is: a StrictFIFO head stays at the head of its
        queue and blocks it (Kueue's StrictFIFO requeues every inadmissible head at once);
        a BestEffortFIFO one is parked until something changes."""
        cq = snapshot.cluster_queues.get(dec.cluster_queue) if snapshot is not None else None
        strategy = cq.queueing_strategy if cq is not None else QueueingStrategy.BEST_EFFORT_FIFO
        return d.Pending(
            workload=dec.workload,
            cluster_queue=dec.cluster_queue,
            reason=reason,
            message=message,
            requeue=requeue_for(strategy),
        )


def _held(f: Fenced) -> str:
    """`on rack-2 for ml/train-0 from 14:05Z`."""
    return f"on {f.hold.where} for {f.holder} from {clock(f.start)}"


def assignments(placement: Placement | None) -> dict[str, TopologyAssignment]:
    """Kueue's `topologyAssignment` per pod set (only for pod sets with a topology request)."""
    out: dict[str, TopologyAssignment] = {}
    for ps in placement.pod_sets if placement else ():
        ta = topology_assignment(ps)
        if ta is not None:
            out[ps.name] = ta
    return out
