"""Kueue's v1beta2 `topologyAssignment` from a pod set's placement.

Mirrors pkg/util/tas (the v1beta2 compact form of KEP-2724 "Since v1beta2"): one slice of all
lowest-level domains; per level one `universal` value when every domain shares it, else
`individual` roots with their longest common prefix and suffix taken out; pod counts
`universal` when equal, else `individual`. Only the hostname level is written when it is a
level of the Topology.
"""

from __future__ import annotations

from collections.abc import Sequence

from atoll.api.topologyassignment import (
    TopologyAssignment,
    TopologyAssignmentSlice,
    TopologyAssignmentSliceLevelIndividualValues,
    TopologyAssignmentSliceLevelValues,
    TopologyAssignmentSlicePodCounts,
)
from atoll.api.workload import Workload
from atoll.engine.inventory import Placement, PodPlacement, PodSetPlacement
from atoll.engine.topology import HOSTNAME_LABEL
from atoll.state.convert import pod_requests


def _common_prefix(values: Sequence[str]) -> str:
    first = min(values)
    last = max(values)
    n = 0
    while n < len(first) and first[n] == last[n]:
        n += 1
    return first[:n]


def _common_suffix(values: Sequence[str]) -> str:
    return _common_prefix([v[::-1] for v in values])[::-1]


def _level_values(values: Sequence[str]) -> TopologyAssignmentSliceLevelValues:
    if len(set(values)) == 1:
        return TopologyAssignmentSliceLevelValues(universal=values[0])
    prefix = _common_prefix(values)
    rest = [v[len(prefix) :] for v in values]
    suffix = _common_suffix(rest)
    roots = tuple(r[: len(r) - len(suffix)] for r in rest)
    return TopologyAssignmentSliceLevelValues(
        individual=TopologyAssignmentSliceLevelIndividualValues(
            prefix=prefix or None, suffix=suffix or None, roots=roots
        )
    )


def topology_assignment(placement: PodSetPlacement) -> TopologyAssignment | None:
    """The assignment to write in `podSetAssignments[].topologyAssignment`, or None for a pod
    set placed without a topology."""
    if not placement.assignment_levels or not placement.assignment:
        return None
    domains = [values for values, _ in placement.assignment]
    counts = [n for _, n in placement.assignment]
    per_level = tuple(
        _level_values([d[i] for d in domains]) for i in range(len(placement.assignment_levels))
    )
    pod_counts = (
        TopologyAssignmentSlicePodCounts(universal=counts[0])
        if len(set(counts)) == 1
        else TopologyAssignmentSlicePodCounts(individual=tuple(counts))
    )
    return TopologyAssignment(
        levels=placement.assignment_levels,
        slices=(
            TopologyAssignmentSlice(
                domain_count=len(domains), values_per_level=per_level, pod_counts=pod_counts
            ),
        ),
    )


def domains(assignment: TopologyAssignment) -> list[tuple[dict[str, str], int]]:
    """The inverse of `topology_assignment`: (node labels of the domain, pods) per domain,
    in order, from Kueue's compressed form (universal or prefix/roots/suffix values)."""
    out: list[tuple[dict[str, str], int]] = []
    for sl in assignment.slices:
        n = sl.domain_count
        columns: list[list[str]] = []
        for lv in sl.values_per_level:
            if lv.universal is not None:
                columns.append([lv.universal] * n)
            elif lv.individual is not None:
                ind = lv.individual
                columns.append([f"{ind.prefix or ''}{r}{ind.suffix or ''}" for r in ind.roots])
            else:
                columns.append([""] * n)
        pc = sl.pod_counts
        counts = [pc.universal] * n if pc.universal is not None else list(pc.individual or ())
        for i in range(n):
            labels = {level: col[i] for level, col in zip(assignment.levels, columns, strict=True)}
            out.append((labels, counts[i] if i < len(counts) else 0))
    return out


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
