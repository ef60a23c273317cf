"""AdmissionCheck (kueue.x-k8s.io/v1beta2): an extra gate a Workload passes before admission.

Mirrors apis/kueue/v1beta2/admissioncheck_types.go. atoll accepts the kind so that Kueue
manifests apply; checks are run by their own controllers.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field, StringConstraints

from atoll.api.clusterqueue import API_VERSION, Conditions
from atoll.api.meta import (
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    ApiModel,
    KubeObject,
    StrEnum,
    cel,
)


class CheckState(StrEnum):
    """State of one AdmissionCheck for one Workload."""

    PENDING = "Pending"
    READY = "Ready"
    RETRY = "Retry"
    REJECTED = "Rejected"


class AdmissionCheckParametersReference(ApiModel):
    """An object holding the check's parameters."""

    api_group: Annotated[
        str, StringConstraints(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)
    ]
    """API group of the object."""
    kind: Annotated[
        str,
        StringConstraints(min_length=1, max_length=63, pattern=r"^(?i)[a-z]([-a-z0-9]*[a-z0-9])?$"),
    ]
    """Kind of the object."""
    name: Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=DNS1123_LABEL)]
    """Name of the object."""


class AdmissionCheckSpec(ApiModel):
    """The desired state of an AdmissionCheck."""

    controller_name: Annotated[
        str,
        StringConstraints(min_length=1, max_length=253),
        Field(
            json_schema_extra={
                "x-kubernetes-validations": [cel("self == oldSelf", "field is immutable")]
            }
        ),
    ]
    """The controller that runs this check; cannot be changed."""
    parameters: AdmissionCheckParametersReference | None = None
    """Parameters of the check."""


class AdmissionCheckStatus(ApiModel):
    """The observed state of an AdmissionCheck."""

    conditions: Conditions | None = None
    """Latest observations; the check's controller sets Active."""


class AdmissionCheck(KubeObject):
    """A check run by another controller before a Workload is admitted."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "AdmissionCheck"

    spec: AdmissionCheckSpec
    """The desired state."""
    status: AdmissionCheckStatus = AdmissionCheckStatus()
    """The observed state."""
