"""Kueue's topology-aware scheduling annotations on a pod template → the pod set's
`topologyRequest` (what the Workload of the Job carries), for the operator and the
simulator alike. Mirrors Kueue's pkg/controller/jobframework (`PodSetTopologyRequest`)."""

from __future__ import annotations

from typing import Final

from atoll.api import topology as t
from atoll.api.core import PodTemplateSpec
from atoll.api.workload import PodSetTopologyRequest

JOB_COMPLETION_INDEX_LABEL: Final = "batch.kubernetes.io/job-completion-index"


class TopologyAnnotationError(ValueError):
    """Conflicting topology annotations; the message names them."""


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
    )
