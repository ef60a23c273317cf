"""Kueue's topology-aware scheduling annotations on a pod template → the pod set's
`topologyRequest` (what the Workload of the Job carries), for the operator and the
simulator alike. Mirrors Kueue's pkg/controller/jobframework (`PodSetTopologyRequest`)."""

from __future__ import annotations

from typing import Final

from atoll.api.core import PodTemplateSpec
from atoll.api.workload import PodSetTopologyRequest

REQUIRED: Final = "kueue.x-k8s.io/podset-required-topology"
PREFERRED: Final = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED: Final = "kueue.x-k8s.io/podset-unconstrained-topology"
SLICE_REQUIRED: Final = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE: Final = "kueue.x-k8s.io/podset-slice-size"
JOB_COMPLETION_INDEX_LABEL: Final = "batch.kubernetes.io/job-completion-index"


class TopologyAnnotationError(ValueError):
    """Conflicting topology annotations; the message names them."""


def podset_topology_request(template: PodTemplateSpec) -> PodSetTopologyRequest | None:
    """The topology request of the pods of `template`, None when it asks for none."""
    ann = (template.metadata.annotations if template.metadata else None) or {}
    given = [k for k in (REQUIRED, PREFERRED, UNCONSTRAINED) if k in ann]
    if len(given) > 1:
        raise TopologyAnnotationError(
            f"pod template annotations {', '.join(given)}: at most one may be set"
        )
    if not given and SLICE_REQUIRED not in ann:
        return None
    slice_size = ann.get(SLICE_SIZE)
    return PodSetTopologyRequest(
        required=ann.get(REQUIRED),
        preferred=ann.get(PREFERRED),
        unconstrained=(ann.get(UNCONSTRAINED) == "true") if UNCONSTRAINED in ann else None,
        pod_index_label=JOB_COMPLETION_INDEX_LABEL,
        pod_set_slice_required_topology=ann.get(SLICE_REQUIRED),
        pod_set_slice_size=int(slice_size) if slice_size and slice_size.isdigit() else None,
    )
