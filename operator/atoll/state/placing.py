"""Topology- and device-aware feasibility of a gang that quota admits, from the live objects:
a ClusterQueue flavor with a `topologyName` (Kueue's topology-aware scheduling) or pods with
DRA ResourceClaims make atoll place the whole gang on the live inventory before admitting it,
so that it never admits what cannot be placed; the placement is held until the gang releases
its quota.

This module is the converter (`engine.gangstep.Converter`): the Workload and the cache's
flavors, claim templates and inventory become the engine's `Gang` and `Inventory`, handed to
the engine as one cycle's `engine.gangstep.CyclePlacer` (`TopologyChecker.placer`, carried by
the cycle's snapshot), and `engine.gangstep.decide` makes the decision (place, wait for the
gangs leaving, preempt inside one domain, or stay pending with hints). The checker owns
what that decision keeps between cycles, `gangstep.PlacementMemory` (the domains nominated
for preemptors, the victim-search memo), and prunes it by what the cache says of each
workload. It is the only state module the engine's placement is handed. Its helpers have
callers of their own: `state/gangs.py` (a pod set → `GangPodSet`; also device quota),
`state/inventory.py` (the cache's `ClusterInventory`, fed by the watches; also the GPU
nodes view), `state/islands.py` (NVLink islands, for the inventory and the gangs) and
`state/topologyassignment.py` (a placement → Kueue's `topologyAssignment`; also the cache
and the ungater). `state/tas.py` is not on this path: it turns a Job's TAS annotations into
its Workload's topology request (job framework, simulator).

Mirrors the role of Kueue's pkg/cache/scheduler/tas_flavor_snapshot.go in the scheduler cycle
(where Kueue's scheduler leaves a gang `Pending` with its TAS message; atoll's own reason is
`TopologyPlacementFailed`), extended to DRA devices (which Kueue's TAS does not combine
with), through `atoll.engine.placement`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from atoll.api.resource import ResourceClaimTemplate
from atoll.api.topologyassignment import TopologyAssignment
from atoll.api.workload import Workload
from atoll.engine import decisions as d
from atoll.engine import domainpreemption as dp
from atoll.engine import gangstep as gs
from atoll.engine import model as m
from atoll.engine.cycle import admissions
from atoll.engine.flavors import Assignment
from atoll.engine.gangstep import PlacementMemory
from atoll.engine.inventory import Gang, Inventory, Placement
from atoll.engine.reservedhosts import Fenced, Hosts
from atoll.engine.snapshot import Snapshot
from atoll.state import workloads as wls
from atoll.state.cache import Cache
from atoll.state.cel import SelectorCompiler
from atoll.state.gangs import GangError, gang_pod_set, wants_island
from atoll.state.reserving import clock
from atoll.state.topologyassignment import topology_assignment


@dataclass(slots=True)
class TopologyChecker:
    cache: Cache
    compiler: SelectorCompiler = field(default_factory=SelectorCompiler)
    memory: PlacementMemory = field(default_factory=PlacementMemory)
    """The nominations and the victim-search memo (`engine.gangstep`)."""

    @property
    def nominations(self) -> Mapping[str, dp.Nomination]:
        """Preemptor → the domain its victims are freeing for it."""
        return self.memory.nominations

    def fork(self, cache: Cache) -> TopologyChecker:
        """This checker on `cache` (a fork of its own), with the same nominations."""
        return TopologyChecker(cache, self.compiler, memory=self.memory.fork())

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

    def gang(self, dec: d.Admit) -> Gang | str | None:
        """The admitted gang to place (`engine.gangstep.Converter`): None when it needs no
        placement (neither topology nor devices, or its Workload is gone), or why it cannot
        be built (a `GangError`'s message)."""
        wl = self.cache.workloads.get(str(dec.workload))
        if wl is None:
            return None
        try:
            return self._gang(wl, dec)
        except GangError as e:
            return str(e)

    def workload(self, key: str) -> m.Workload | None:
        """The engine workload of a preemptor (`engine.gangstep.Converter`)."""
        return self.cache.engine_workload(key)

    def placer(self, snapshot: Snapshot) -> gs.CyclePlacer:
        """The placer of a cycle on `snapshot` (`engine.gangstep.CyclePlacer`): the live
        inventory and its ledger as they are now, this checker's nominations and memo, and
        this checker as the converter of the gangs quota admits."""
        return gs.CyclePlacer.on(
            snapshot,
            live=self.cache.inventory.snapshot,
            held=self.cache.inventory.ledger(),
            memory=self.memory,
            converter=self,
            describe=_held,
        )

    def hosts(self) -> Hosts:
        """What backfill reservations plan their hosts on (`engine.reservedhosts`): the live
        inventory with the preemptors' nominated domains taken, the ledger's placements by
        workload, and each holder's gang as this checker builds it."""

        def gang(w: m.Workload, cq: m.ClusterQueueName, a: Assignment) -> Gang | None:
            admit = d.Admit(
                workload=w.key, cluster_queue=cq, pod_sets=admissions(a), borrowing=False
            )
            got = self.gang(admit)
            return got if isinstance(got, Gang) else None  # a misconfigured gang: no hosts

        return Hosts(
            inventory=self._inventory(self.cache.inventory.snapshot(), exclude=""),
            held=self.cache.inventory.held(),
            gang=gang,
        )

    def forget(self, key: str) -> None:
        """The preemptor no longer needs its domain (admitted elsewhere, gone, over quota)."""
        self.memory.settle(key, None)

    def prune(self) -> None:
        """Drop the nominations of workloads that hold quota, finished, were deactivated or
        are gone, and the victim searches of those that hold quota, finished or are gone."""
        workloads, assumed = self.cache.workloads, self.cache.assumed

        def nominated(key: str) -> bool:
            wl = workloads.get(key)
            return not (
                wl is None
                or key in assumed
                or wls.has_quota(wl)
                or wls.is_finished(wl)
                or not wl.spec.active
            )

        def searched(key: str) -> bool:
            wl = workloads.get(key)
            return not (wl is None or wls.has_quota(wl) or wls.is_finished(wl))

        self.memory.prune(nominated=nominated, searched=searched)

    def _inventory(self, inventory: Inventory, exclude: str) -> Inventory:
        """The live inventory with every other preemptor's nominated domain taken."""
        return self.memory.others(inventory, exclude)


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
