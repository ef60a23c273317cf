"""ResourceFlavor (kueue.x-k8s.io/v1beta2): a kind of node, by labels, taints and tolerations.

Mirrors apis/kueue/v1beta2/resourceflavor_types.go, including its CEL rules on taints and
tolerations.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import ConfigDict, Field

from atoll.api.clusterqueue import API_VERSION
from atoll.api.core import Taint, Toleration
from atoll.api.meta import ATOMIC, ApiModel, DnsSubdomain, KubeObject, cel, validations

_EFFECTS = "['NoSchedule', 'PreferNoSchedule', 'NoExecute']"
_EFFECT_MESSAGE = "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'"

TOLERATION_RULES = (
    cel(
        "self.all(t, has(t.key) || (has(t.operator) && t.operator == 'Exists'))",
        "operator must be Exists when 'key' is empty, which means 'match all values and all keys'",
    ),
    cel(
        "self.all(t, !has(t.tolerationSeconds) || (has(t.effect) && t.effect == 'NoExecute'))",
        "effect must be 'NoExecute' when 'tolerationSeconds' is set",
    ),
    cel(
        "self.all(t, !has(t.operator) || t.operator in ['Equal', 'Exists'])",
        "supported toleration values: 'Equal'(default), 'Exists'",
    ),
    cel(
        "self.all(t, !has(t.operator) || t.operator != 'Exists' || !has(t.value))",
        "a value must be empty when 'operator' is 'Exists'",
    ),
    cel(f"self.all(t, !has(t.effect) || t.effect in {_EFFECTS})", _EFFECT_MESSAGE),
)
"""Kueue's rules on a list of tolerations (ResourceFlavor, AdmissionCheck podSetUpdates)."""

Tolerations = Annotated[
    tuple[Toleration, ...],
    Field(max_length=8, json_schema_extra=ATOMIC | validations(*TOLERATION_RULES)),
]


class ResourceFlavorSpec(ApiModel):
    """The desired state of a ResourceFlavor."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.topologyName) || (has(self.nodeLabels) && size(self.nodeLabels) >= 1)",
                "at least one nodeLabel is required when topology is set",
                field_path=".topologyName",
            ),
            cel(
                "!has(oldSelf.topologyName) || (has(self.topologyName)"
                " && self.topologyName == oldSelf.topologyName)",
                "topologyName is immutable when topologyName is set",
                field_path=".topologyName",
            ),
        )
    )

    node_labels: (
        Annotated[
            dict[str, str],
            Field(max_length=8, json_schema_extra={"x-kubernetes-map-type": "atomic"}),
        ]
        | None
    ) = None
    """Labels of the nodes of this flavor (at most 8); injected as a nodeSelector into
    admitted pods."""
    node_taints: (
        Annotated[
            tuple[Taint, ...],
            Field(
                max_length=8,
                json_schema_extra=ATOMIC
                | validations(
                    cel(f"self.all(t, t.effect in {_EFFECTS})", _EFFECT_MESSAGE),
                    cel(
                        "self.all(t, self.exists_one(u, u.key == t.key && u.effect == t.effect))",
                        "nodeTaints must be unique by key and effect",
                    ),
                ),
            ),
        ]
        | None
    ) = None
    """Taints of the nodes of this flavor (at most 8); a workload must tolerate them to be
    assigned the flavor, unless the flavor's tolerations cover them."""
    tolerations: Tolerations | None = None
    """Tolerations added to pods admitted in this flavor (at most 8)."""
    topology_name: DnsSubdomain | None = None
    """The Topology of this flavor's nodes, for topology-aware scheduling."""


class ResourceFlavor(KubeObject):
    """A kind of node capacity that ClusterQueues give quota for."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "ResourceFlavor"

    spec: ResourceFlavorSpec = ResourceFlavorSpec()
    """The desired state."""
