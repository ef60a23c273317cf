"""Read model of a LeaderWorkerSet (`leaderworkerset.x-k8s.io/v1`, the LWS controller): the
fields atoll reads to admit each of its replica groups (a leader and `size - 1` workers) as one
gang. atoll never writes these models back: its webhook patches the raw object's pod templates
(`atoll.kube.webhook`), so fields atoll does not model survive.
"""

from __future__ import annotations

from typing import ClassVar, Final

from atoll.api.core import PodTemplateSpec
from atoll.api.meta import ApiModel, Int32, KubeObject

GROUP: Final = "leaderworkerset.x-k8s.io"
VERSION: Final = "v1"
PLURAL: Final = "leaderworkersets"
NAME_LABEL: Final = "leaderworkerset.sigs.k8s.io/name"
"""The LWS controller's label on every pod of a LeaderWorkerSet: its name."""
GROUP_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/group-index"
"""The replica group of a pod (set by the LWS pod webhook; on worker templates already)."""
WORKER_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/worker-index"
"""The pod's index in its group: `0` is the leader."""


class LeaderWorkerTemplate(ApiModel):
    """The pods of one replica group."""

    size: Int32 | None = None
    """Pods per group, the leader included (default 1)."""
    leader_template: PodTemplateSpec | None = None
    """The leader's pod template (default: the worker template)."""
    worker_template: PodTemplateSpec = PodTemplateSpec()
    """The workers' pod template."""


class LeaderWorkerSetSpec(ApiModel):
    """The LeaderWorkerSet spec fields atoll reads."""

    replicas: Int32 | None = None
    """How many replica groups (default 1)."""
    leader_worker_template: LeaderWorkerTemplate = LeaderWorkerTemplate()
    """The template of every group."""


class LeaderWorkerSetStatus(ApiModel):
    """The LeaderWorkerSet status fields atoll reads."""

    replicas: Int32 = 0
    """Groups created."""
    ready_replicas: Int32 = 0
    """Groups whose pods are all ready."""


class LeaderWorkerSet(KubeObject):
    """A LeaderWorkerSet."""

    API_VERSION: ClassVar[str] = f"{GROUP}/{VERSION}"
    KIND: ClassVar[str] = "LeaderWorkerSet"

    spec: LeaderWorkerSetSpec = LeaderWorkerSetSpec()
    """The LeaderWorkerSet spec."""
    status: LeaderWorkerSetStatus = LeaderWorkerSetStatus()
    """The LeaderWorkerSet status."""
