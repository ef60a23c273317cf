"""Kueue's v1beta2 `topologyAssignment` from a pod set's placement.

Mirrors pkg/util/tas (the v1beta2 compact form of KEP-2724 "Since v1beta2"): one slice of all
lowest-level domains; per level one `universal` value when every domain shares it, else
`individual` roots with their longest common prefix and suffix taken out; pod counts
`universal` when equal, else `individual`. Only the hostname level is written when it is a
level of the Topology.
"""

from __future__ import annotations

from atoll.api.topologyassignment import TopologyAssignment, compact, expand
from atoll.api.workload import Workload
from atoll.engine.inventory import Placement, PodPlacement, PodSetPlacement
from atoll.engine.topology import HOSTNAME_LABEL
from atoll.state.convert import pod_requests


def topology_assignment(placement: PodSetPlacement) -> TopologyAssignment | None:
    """The assignment to write in `podSetAssignments[].topologyAssignment`, or None for a pod
    set placed without a topology."""
    if not placement.assignment_levels or not placement.assignment:
        return None
    return compact(
        placement.assignment_levels,
        [(tuple(values), n) for values, n in placement.assignment],
    )


def domains(assignment: TopologyAssignment) -> list[tuple[dict[str, str], int]]:
    """The inverse of `topology_assignment`: (node labels of the domain, pods) per domain,
    in order, from Kueue's compressed form (universal or prefix/roots/suffix values)."""
    return [
        (dict(zip(assignment.levels, values, strict=True)), n) for values, n in expand(assignment)
    ]


def placement_from_status(key: str, wl: Workload) -> Placement | None:
    """The ledger entry of an admitted gang rebuilt from its Workload status (after a
    restart): each pod set whose `topologyAssignment` names hosts holds its pods' requests
    on those nodes. None when no pod set has a host-level assignment (devices chosen for
    pods that are not bound yet are not known from the status, and are not held)."""
    admission = wl.status.admission
    if admission is None:
        return None
    templates = {ps.name: ps.template for ps in wl.spec.pod_sets}
    pod_sets = []
    for psa in admission.pod_set_assignments:
        ta = psa.topology_assignment
        template = templates.get(psa.name)
        if ta is None or template is None or ta.levels[-1:] != (HOSTNAME_LABEL,):
            continue
        requests = tuple(sorted({**pod_requests(template.spec), "pods": 1}.items()))
        pods: list[PodPlacement] = []
        for labels, count in domains(ta):
            node = labels[HOSTNAME_LABEL]
            pods.extend(
                PodPlacement(pod_set=psa.name, index=len(pods) + i, node=node, requests=requests)
                for i in range(count)
            )
        pod_sets.append(PodSetPlacement(name=psa.name, pods=tuple(pods)))
    return Placement(gang=key, pod_sets=tuple(pod_sets)) if pod_sets else None
