"""Topology- and device-aware feasibility of a gang that quota admits: a ClusterQueue flavor
with a `topologyName` (Kueue's topology-aware scheduling) or pods with DRA ResourceClaims make
atoll place the whole gang on the live inventory before admitting it, so that it never admits
what cannot be placed; the placement is held until the gang releases its quota.

Mirrors the role of Kueue's pkg/cache/scheduler/tas_flavor_snapshot.go in the scheduler cycle
(where Kueue reports `TopologyPlacementFailed`), extended to DRA devices (which Kueue's TAS
does not combine with), through `atoll.engine.placement`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from atoll.api.resource import ResourceClaimTemplate
from atoll.api.topologyassignment import TopologyAssignment
from atoll.api.workload import Workload
from atoll.engine import decisions as d
from atoll.engine.inventory import Gang, NoFit, Placement
from atoll.engine.placement import place
from atoll.state.cache import Cache
from atoll.state.cel import SelectorCompiler
from atoll.state.gangs import GangError, gang_pod_set
from atoll.state.topologyassignment import topology_assignment


@dataclass(slots=True)
class TopologyChecker:
    cache: Cache
    compiler: SelectorCompiler = field(default_factory=SelectorCompiler)

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
            involved = involved or bool(topology) or bool(ps.template.spec.resource_claims)
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
        placed now, or None when the gang needs no placement."""
        wl = self.cache.workloads.get(str(dec.workload))
        if wl is None:
            return None
        try:
            gang = self._gang(wl, dec)
        except GangError as e:
            return self._pending(dec, d.PendingReason.MISCONFIGURED, str(e))
        if gang is None:
            return None
        result = place(self.cache.inventory.snapshot(), gang)
        if isinstance(result, NoFit):
            return self._pending(dec, d.PendingReason.TOPOLOGY_PLACEMENT_FAILED, result.message)
        return result

    @staticmethod
    def _pending(dec: d.Admit, reason: d.PendingReason, message: str) -> d.Pending:
        return d.Pending(
            workload=dec.workload,
            cluster_queue=dec.cluster_queue,
            reason=reason,
            message=message,
            requeue=d.Requeue.INADMISSIBLE,
        )


def assignments(placement: Placement | None) -> dict[str, TopologyAssignment]:
    """Kueue's `topologyAssignment` per pod set (only for pod sets with a topology request)."""
    out: dict[str, TopologyAssignment] = {}
    for ps in placement.pod_sets if placement else ():
        ta = topology_assignment(ps)
        if ta is not None:
            out[ps.name] = ta
    return out
