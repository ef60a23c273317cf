"""Topology (kueue.x-k8s.io/v1beta2): the node-label levels of a data centre, top to bottom.

Mirrors apis/kueue/v1beta2/topology_types.go, and the TAS annotations a pod template carries.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Final

from pydantic import Field, StringConstraints

from atoll.api.clusterqueue import API_VERSION
from atoll.api.meta import ATOMIC, QUALIFIED_NAME, ApiModel, KubeObject, cel, validations

HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
PODSET_REQUIRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-required-topology"
PODSET_PREFERRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-preferred-topology"
PODSET_UNCONSTRAINED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-unconstrained-topology"
PODSET_SLICE_REQUIRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-slice-required-topology"
PODSET_SLICE_SIZE: Final = "kueue.x-k8s.io/podset-slice-size"
PODSET_GROUP_NAME: Final = "kueue.x-k8s.io/podset-group-name"
TOPOLOGY_SCHEDULING_GATE: Final = "kueue.x-k8s.io/topology"

_LAST = "self[size(self) - 1].nodeLabel"


class TopologyLevel(ApiModel):
    """One level of a topology."""

    node_label: Annotated[
        str, StringConstraints(min_length=1, max_length=316, pattern=QUALIFIED_NAME)
    ]
    """The node label whose values name the domains of this level, e.g. a rack label."""


class TopologySpec(ApiModel):
    """The desired state of a Topology."""

    levels: Annotated[
        tuple[TopologyLevel, ...],
        Field(
            min_length=1,
            max_length=16,
            json_schema_extra=ATOMIC
            | validations(
                cel(
                    "self == oldSelf || [self, oldSelf].all(ls,"
                    f" ls[size(ls) - 1].nodeLabel == '{HOSTNAME_LABEL}')",
                    "levels are mutable only when kubernetes.io/hostname is the lowest level"
                    " both before and after the change",
                ),
                cel(
                    "size(self.map(l, l.nodeLabel).distinct()) == size(self)",
                    "must be unique",
                ),
                cel(
                    f"!self.exists(l, l.nodeLabel == '{HOSTNAME_LABEL}')"
                    f" || {_LAST} == '{HOSTNAME_LABEL}'",
                    "the kubernetes.io/hostname label can only be used at the lowest level"
                    " of topology",
                ),
            ),
        ),
    ]
    """Levels from the widest (e.g. block) to the narrowest (e.g. hostname); 1 to 16,
    unique."""


class Topology(KubeObject):
    """The levels of a topology, for topology-aware scheduling."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "Topology"

    spec: TopologySpec
    """The desired state."""
