"""WorkloadPriorityClass (kueue.x-k8s.io/v1beta2): a priority for workloads, not pods.

Mirrors apis/kueue/v1beta2/workloadpriorityclass_types.go. The class has no spec: `value` and
`description` are top-level fields.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Final

from pydantic import StringConstraints

from atoll.api.clusterqueue import API_VERSION
from atoll.api.meta import Int32, KubeObject

DEFAULT_WORKLOAD_PRIORITY_CLASS: Final = "default"
"""The WorkloadPriorityClass a new object without a priority-class label gets, when it exists
and Kueue's `WorkloadPriorityClassDefaulting` gate is on (WorkloadPriorityClass defaulting)."""


class WorkloadPriorityClass(KubeObject):
    """A priority value that Jobs select with the kueue.x-k8s.io/priority-class label."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "WorkloadPriorityClass"

    value: Int32
    """The priority Workloads of this class get; changing it does not affect existing
    Workloads."""
    description: Annotated[str, StringConstraints(max_length=2048)] | None = None
    """When to use this class (at most 2048 characters)."""
