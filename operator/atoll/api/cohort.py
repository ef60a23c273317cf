"""Cohort (kueue.x-k8s.io/v1beta2): a node of the tree of ClusterQueues that share quota.

Mirrors apis/kueue/v1beta2/cohort_types.go. Kueue's webhook (pkg/webhooks/cohort_webhook.go)
allows borrowing and lending limits only on a Cohort with a parent; here that is a CEL rule.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import ConfigDict

from atoll.api.clusterqueue import (
    API_VERSION,
    CohortName,
    FairSharing,
    FairSharingStatus,
    ResourceGroups,
    limit_requires,
    resource_groups_rules,
)
from atoll.api.meta import ApiModel, KubeObject, validations


class CohortSpec(ApiModel):
    """The desired state of a Cohort."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            limit_requires(
                "borrowingLimit", "parentName", "borrowingLimit must be nil when parent is empty"
            ),
            limit_requires(
                "lendingLimit", "parentName", "lendingLimit must be nil when parent is empty"
            ),
            *resource_groups_rules("Cohort"),
        )
    )

    parent_name: CohortName | None = None
    """The parent Cohort; unset makes this Cohort a root. A parent that does not exist is an
    implicit Cohort without quota."""
    resource_groups: ResourceGroups = ()
    """Quota shared by the Cohort's subtree, on top of its members' own quota (at most 16
    groups). Limits bound what the subtree borrows from and lends to the parent."""
    fair_sharing: FairSharing | None = None
    """Fair-sharing weight of the Cohort."""


class CohortStatus(ApiModel):
    """The observed state of a Cohort."""

    fair_sharing: FairSharingStatus | None = None
    """Fair-sharing state, when fair sharing is enabled."""


class Cohort(KubeObject):
    """A named group of ClusterQueues and Cohorts that borrow from each other."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "Cohort"

    spec: CohortSpec = CohortSpec()
    """The desired state."""
    status: CohortStatus = CohortStatus()
    """The observed state."""
