"""Kueue's topology-aware scheduling annotations on a pod template → the pod set's
`topologyRequest` (what the Workload of the Job carries), for the operator and the
simulator alike. Mirrors Kueue's pkg/controller/jobframework (tas.go `PodSetTopologyRequest`,
tas_validation.go for the podset group rules)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from atoll.api import topology as t
from atoll.api.core import PodTemplateSpec
from atoll.api.workload import PodSet, PodSetTopologyRequest

JOB_COMPLETION_INDEX_LABEL: Final = "batch.kubernetes.io/job-completion-index"


class TopologyAnnotationError(ValueError):
    """Conflicting topology annotations; the message names them."""


TOPOLOGY_ANNOTATIONS: Final = (
    t.PODSET_REQUIRED_TOPOLOGY,
    t.PODSET_PREFERRED_TOPOLOGY,
    t.PODSET_UNCONSTRAINED_TOPOLOGY,
    t.PODSET_SLICE_REQUIRED_TOPOLOGY,
)
"""The annotations that give a pod set a topology request (any one of them)."""


def asks_for_topology(annotations: Mapping[str, str] | None) -> bool:
    """Whether a pod (template) with these annotations asks for a topology request."""
    return any(k in (annotations or {}) for k in TOPOLOGY_ANNOTATIONS)


def podset_topology_request(template: PodTemplateSpec) -> PodSetTopologyRequest | None:
    """The topology request of the pods of `template`, None when it asks for none."""
    ann = (template.metadata.annotations if template.metadata else None) or {}
    given = [
        k
        for k in (
            t.PODSET_REQUIRED_TOPOLOGY,
            t.PODSET_PREFERRED_TOPOLOGY,
            t.PODSET_UNCONSTRAINED_TOPOLOGY,
        )
        if k in ann
    ]
    if len(given) > 1:
        raise TopologyAnnotationError(
            f"pod template annotations {', '.join(given)}: at most one may be set"
        )
    group = _group_name(ann)
    if not given and t.PODSET_SLICE_REQUIRED_TOPOLOGY not in ann:
        return None
    slice_size = ann.get(t.PODSET_SLICE_SIZE)
    return PodSetTopologyRequest(
        required=ann.get(t.PODSET_REQUIRED_TOPOLOGY),
        preferred=ann.get(t.PODSET_PREFERRED_TOPOLOGY),
        unconstrained=(ann.get(t.PODSET_UNCONSTRAINED_TOPOLOGY) == "true")
        if t.PODSET_UNCONSTRAINED_TOPOLOGY in ann
        else None,
        pod_index_label=JOB_COMPLETION_INDEX_LABEL,
        pod_set_slice_required_topology=ann.get(t.PODSET_SLICE_REQUIRED_TOPOLOGY),
        pod_set_slice_size=int(slice_size) if slice_size and slice_size.isdigit() else None,
        pod_set_group_name=group,
    )


def _group_name(ann: dict[str, str]) -> str | None:
    """The podset group name, checked as Kueue's webhook checks it: not a number, with a
    required or preferred level, and without slices."""
    group = ann.get(t.PODSET_GROUP_NAME)
    if group is None:
        return None
    where = f"pod template annotation {t.PODSET_GROUP_NAME}"
    if group.isdigit():
        raise TopologyAnnotationError(f"{where}: {group!r} must not be a number")
    if t.PODSET_REQUIRED_TOPOLOGY not in ann and t.PODSET_PREFERRED_TOPOLOGY not in ann:
        raise TopologyAnnotationError(
            f"{where}: may not be set when neither {t.PODSET_REQUIRED_TOPOLOGY} nor"
            f" {t.PODSET_PREFERRED_TOPOLOGY} is set"
        )
    for key in (t.PODSET_SLICE_SIZE, t.PODSET_SLICE_REQUIRED_TOPOLOGY):
        if key in ann:
            raise TopologyAnnotationError(f"{where}: may not be set when {key} is set")
    return group


def podset_group_errors(pod_sets: Sequence[PodSet]) -> list[str]:
    """What is wrong with the podset groups of a Workload's pod sets (Kueue's
    `ValidatePodSetGroupingTopology`): a group is exactly two pod sets, one of them a single
    pod (the leader), both asking for the same required or preferred level."""
    groups: dict[str, list[PodSet]] = {}
    for ps in pod_sets:
        name = ps.topology_request.pod_set_group_name if ps.topology_request else None
        if name is not None:
            groups.setdefault(name, []).append(ps)
    errors = []
    for name, members in groups.items():
        names = ", ".join(str(ps.name) for ps in members)
        where = f"{t.PODSET_GROUP_NAME} {name!r} (pod sets {names})"
        if len(members) != 2:  # Kueue: a leader and its workers
            errors.append(f"{where}: a group is exactly 2 pod sets, got {len(members)}")
            continue
        if all(ps.count != 1 for ps in members):
            errors.append(
                f"{where}: one pod set of a group must have 1 pod, got"
                f" {members[0].count} and {members[1].count}"
            )
        asks = {
            (ps.topology_request.required, ps.topology_request.preferred)
            for ps in members
            if ps.topology_request
        }
        if len(asks) > 1:
            errors.append(f"{where}: both must ask for the same required or preferred level")
    return errors
