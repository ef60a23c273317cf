"""ClusterQueue (kueue.x-k8s.io/v1beta2) and the quota types it shares with Cohort.

Mirrors apis/kueue/v1beta2/clusterqueue_types.go and fairsharing_types.go: field names,
defaults, enums and limits are Kueue's. Rules Kueue checks in its validating webhook
(pkg/webhooks/clusterqueue_webhook.go: non-negative quotas, a flavor or resource in only one
resource group, quotas naming coveredResources in order) are CEL rules here, so the API server
enforces them without a webhook.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Final

from pydantic import ConfigDict, Field, StringConstraints

from atoll.api.meta import (
    ATOMIC,
    SET,
    ApiModel,
    Condition,
    DnsSubdomain,
    Int32,
    Int64,
    KubeObject,
    LabelSelector,
    ResourceName,
    StrEnum,
    cel,
    list_map,
    validations,
)
from atoll.api.quantity import Quantity

GROUP: Final = "kueue.x-k8s.io"
VERSION: Final = "v1beta2"
API_VERSION: Final = f"{GROUP}/{VERSION}"


CohortName = DnsSubdomain
ClusterQueueName = DnsSubdomain
FlavorName = DnsSubdomain
AdmissionCheckName = Annotated[str, StringConstraints(min_length=1, max_length=316)]


def non_negative(field: str) -> dict[str, str]:
    """CEL rule: the int-or-string quantity `field`, when set, is not negative."""
    return cel(
        f"!has(self.{field}) || (type(self.{field}) == string"
        f" ? !self.{field}.startsWith('-') : self.{field} >= 0)",
        f"{field} must be non-negative",
        field_path=f".{field}",
    )


class QueueingStrategy(StrEnum):
    """How workloads of a ClusterQueue are ordered."""

    STRICT_FIFO = "StrictFIFO"
    BEST_EFFORT_FIFO = "BestEffortFIFO"


class StopPolicy(StrEnum):
    """Whether a queue is held, and what happens to its admitted workloads."""

    NONE = "None"
    HOLD = "Hold"
    HOLD_AND_DRAIN = "HoldAndDrain"


class FlavorFungibilityPolicy(StrEnum):
    """Whether the flavor search stops at a flavor that needs borrowing or preemption."""

    MAY_STOP_SEARCH = "MayStopSearch"
    TRY_NEXT_FLAVOR = "TryNextFlavor"


class FlavorFungibilityPreference(StrEnum):
    """Which of borrowing and preemption is preferred when every flavor needs one of them."""

    BORROWING_OVER_PREEMPTION = "BorrowingOverPreemption"
    PREEMPTION_OVER_BORROWING = "PreemptionOverBorrowing"


class ReclaimWithinCohortPolicy(StrEnum):
    """Which workloads of other queues may be preempted to reclaim nominal quota."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class WithinClusterQueuePolicy(StrEnum):
    """Which workloads of the same queue may be preempted."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"


class BorrowWithinCohortPolicy(StrEnum):
    """Whether a workload that must borrow may preempt in other queues of the cohort."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"


class AdmissionMode(StrEnum):
    """Whether Admission Fair Sharing orders the queue's workloads."""

    USAGE_BASED = "UsageBasedAdmissionFairSharing"
    NONE = "NoAdmissionFairSharing"


class ResourceQuota(ApiModel):
    """The quota of one resource in one flavor."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            non_negative("nominalQuota"),
            non_negative("borrowingLimit"),
            non_negative("lendingLimit"),
        )
    )

    name: ResourceName
    """The resource, e.g. cpu, memory or nvidia.com/gpu."""
    nominal_quota: Quantity
    """Amount of the resource guaranteed to the queue's workloads; never negative."""
    borrowing_limit: Quantity | None = None
    """Most the queue may borrow from its cohort on top of nominalQuota; unset means no
    limit. Only allowed when the queue is in a cohort."""
    lending_limit: Quantity | None = None
    """Most of the unused nominalQuota the queue lends to its cohort; unset means all of it.
    Only allowed when the queue is in a cohort."""


class FlavorQuotas(ApiModel):
    """The quotas one ResourceFlavor provides for the resources of a group."""

    name: FlavorName
    """Name of a ResourceFlavor."""
    resources: Annotated[
        tuple[ResourceQuota, ...],
        Field(min_length=1, max_length=64, json_schema_extra=list_map("name")),
    ]
    """One quota per covered resource, in the order of coveredResources."""


class ResourceGroup(ApiModel):
    """Resources that are assigned a flavor together, and the flavors that provide them."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.flavors.all(f, size(f.resources) == size(self.coveredResources))",
                "flavors must have the same number of resources as the coveredResources",
                field_path=".flavors",
            ),
            cel(
                "self.flavors.all(f, f.resources.all(i, r, i < size(self.coveredResources)"
                " && r.name == self.coveredResources[i]))",
                "the resources of each flavor must be the coveredResources, in the same order",
                field_path=".flavors",
            ),
        )
    )

    covered_resources: Annotated[
        tuple[ResourceName, ...], Field(min_length=1, max_length=64, json_schema_extra=ATOMIC)
    ]
    """Resources covered by this group, e.g. [cpu, memory]."""
    flavors: Annotated[
        tuple[FlavorQuotas, ...],
        Field(min_length=1, max_length=64, json_schema_extra=list_map("name")),
    ]
    """Flavors in order of preference; each lists a quota for every covered resource."""


def resource_groups_rules(owner: str) -> tuple[dict[str, str], ...]:
    """CEL rules on a spec holding resourceGroups (a ClusterQueue's or a Cohort's)."""
    flavors = "self.resourceGroups.map(g, g.flavors.map(f, f.name)).flatten()"
    resources = "self.resourceGroups.map(g, g.coveredResources).flatten()"
    return (
        cel(
            f"!has(self.resourceGroups) || size({flavors}) == size({flavors}.distinct())",
            f"a flavor can appear in only one resourceGroup of a {owner}",
            field_path=".resourceGroups",
        ),
        cel(
            f"!has(self.resourceGroups) || size({resources}) == size({resources}.distinct())",
            f"a resource can appear in only one resourceGroup of a {owner}",
            field_path=".resourceGroups",
        ),
        cel(
            f"!has(self.resourceGroups) || size({flavors}) <= 256",
            f"a {owner} can have at most 256 flavors across its resourceGroups",
            field_path=".resourceGroups",
        ),
        cel(
            f"!has(self.resourceGroups) || size({resources}) <= 256",
            f"a {owner} can have at most 256 coveredResources across its resourceGroups",
            field_path=".resourceGroups",
        ),
    )


def limit_requires(limit: str, parent: str, message: str) -> dict[str, str]:
    """CEL rule: no quota of the spec's resourceGroups sets `limit` unless `parent` is set."""
    return cel(
        f"has(self.{parent}) || !has(self.resourceGroups) || self.resourceGroups.all(g,"
        f" g.flavors.all(f, f.resources.all(r, !has(r.{limit}))))",
        message,
        field_path=".resourceGroups",
    )


ResourceGroups = Annotated[
    tuple[ResourceGroup, ...], Field(max_length=16, json_schema_extra=ATOMIC)
]


class FairSharing(ApiModel):
    """How a ClusterQueue, Cohort or LocalQueue competes for unused quota under fair sharing."""

    model_config = ConfigDict(json_schema_extra=validations(non_negative("weight")))

    weight: Annotated[Quantity | None, Field(json_schema_extra={"default": 1})] = (
        Quantity.from_units(1)
    )
    """Relative advantage when competing for unused quota; the share is divided by it. Zero
    means always at a disadvantage. Default 1."""


class FlavorFungibility(ApiModel):
    """Whether the flavor search moves on rather than borrow or preempt in a flavor."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.preference)"
                " || [self.whenCanBorrow, self.whenCanPreempt].all(p, p == 'TryNextFlavor')",
                "preference can only be set when both whenCanBorrow and whenCanPreempt"
                " are TryNextFlavor",
            )
        )
    )

    when_can_borrow: FlavorFungibilityPolicy = FlavorFungibilityPolicy.MAY_STOP_SEARCH
    """MayStopSearch: take a flavor that fits by borrowing; TryNextFlavor: try the next
    flavor first."""
    when_can_preempt: FlavorFungibilityPolicy = FlavorFungibilityPolicy.TRY_NEXT_FLAVOR
    """MayStopSearch: take a flavor that fits by preempting; TryNextFlavor: try the next
    flavor first."""
    preference: FlavorFungibilityPreference | None = None
    """When every flavor needs borrowing or preemption, which one to prefer (unset behaves as
    BorrowingOverPreemption)."""


class BorrowWithinCohort(ApiModel):
    """Preemption in other queues of the cohort by a workload that must borrow."""

    policy: BorrowWithinCohortPolicy = BorrowWithinCohortPolicy.NEVER
    """Never, or LowerPriority: preempt lower-priority workloads of other queues."""
    max_priority_threshold: Int32 | None = None
    """Only workloads at or below this priority may be preempted."""


class ClusterQueuePreemption(ApiModel):
    """Which admitted workloads a pending workload of this queue may preempt."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.reclaimWithinCohort != 'Never' || !has(self.borrowWithinCohort)"
                " || self.borrowWithinCohort.policy == 'Never'",
                "borrowWithinCohort.policy must be Never when reclaimWithinCohort is Never",
            )
        )
    )

    reclaim_within_cohort: ReclaimWithinCohortPolicy = ReclaimWithinCohortPolicy.NEVER
    """Whether to preempt workloads of other queues that use more than their nominal quota:
    Never, LowerPriority or Any."""
    borrow_within_cohort: BorrowWithinCohort = BorrowWithinCohort()
    """Whether a workload that must borrow may preempt in other queues of the cohort."""
    within_cluster_queue: WithinClusterQueuePolicy = WithinClusterQueuePolicy.NEVER
    """Whether to preempt workloads of this queue: Never, LowerPriority or
    LowerOrNewerEqualPriority."""


class AdmissionCheckStrategyRule(ApiModel):
    """An AdmissionCheck and the flavors it applies to."""

    name: AdmissionCheckName
    """Name of the AdmissionCheck."""
    on_flavors: (
        Annotated[tuple[FlavorName, ...], Field(max_length=64, json_schema_extra=SET)] | None
    ) = None
    """Flavors the check runs for; empty means every workload of the queue."""


class AdmissionChecksStrategy(ApiModel):
    """The AdmissionChecks a workload of the queue must pass."""

    admission_checks: Annotated[
        tuple[AdmissionCheckStrategyRule, ...],
        Field(min_length=1, max_length=64, json_schema_extra=list_map("name")),
    ]
    """The checks, each with the flavors it applies to."""


class AdmissionScope(ApiModel):
    """Admission Fair Sharing settings of a ClusterQueue."""

    admission_mode: AdmissionMode
    """UsageBasedAdmissionFairSharing or NoAdmissionFairSharing."""


class ConcurrentAdmissionMode(StrEnum):
    """Whether an admitted workload keeps trying more preferred flavors."""

    TRY_PREFERRED_FLAVORS = "TryPreferredFlavors"
    RETAIN_FIRST_ADMISSION = "RetainFirstAdmission"


class ConcurrentAdmissionConstraints(ApiModel):
    """Limits on flavor migration."""

    last_acceptable_flavor_name: FlavorName | None = None
    """The least preferred flavor a workload may migrate to."""


class ConcurrentAdmissionMigration(ApiModel):
    """How workloads migrate between flavors after admission."""

    mode: ConcurrentAdmissionMode
    """TryPreferredFlavors or RetainFirstAdmission."""
    constraints: ConcurrentAdmissionConstraints | None = None
    """Limits on migration."""


class ConcurrentAdmissionPolicy(ApiModel):
    """Concurrent admission to several flavors (Kueue alpha feature; accepted, not acted on)."""

    migration: ConcurrentAdmissionMigration
    """How workloads migrate between flavors."""


class ClusterQueueSpec(ApiModel):
    """The desired state of a ClusterQueue."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            limit_requires(
                "borrowingLimit", "cohortName", "borrowingLimit must be nil when cohort is empty"
            ),
            limit_requires(
                "lendingLimit", "cohortName", "lendingLimit must be nil when cohort is empty"
            ),
            *resource_groups_rules("ClusterQueue"),
        )
    )

    resource_groups: ResourceGroups = ()
    """Groups of resources and the flavors that provide quota for them (at most 16). A
    resource or a flavor may appear in only one group."""
    cohort_name: CohortName | None = None
    """The cohort this queue borrows from and lends to; empty means none."""
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    """StrictFIFO: the oldest workload blocks newer ones; BestEffortFIFO: workloads that do
    not fit do not block newer ones that do."""
    namespace_selector: LabelSelector | None = None
    """Namespaces whose LocalQueues may submit to this queue. Unset selects no namespace;
    an empty selector selects all."""
    flavor_fungibility: FlavorFungibility = FlavorFungibility()
    """Whether to try the next flavor rather than borrow or preempt in the current one."""
    preemption: ClusterQueuePreemption = ClusterQueuePreemption()
    """Preemption policies."""
    admission_checks_strategy: AdmissionChecksStrategy | None = None
    """AdmissionChecks workloads must pass, per flavor."""
    stop_policy: StopPolicy = StopPolicy.NONE
    """None; Hold: admit nothing new; HoldAndDrain: also evict admitted workloads."""
    fair_sharing: FairSharing | None = None
    """Fair-sharing weight of the queue."""
    admission_scope: AdmissionScope | None = None
    """Admission Fair Sharing mode."""
    concurrent_admission_policy: ConcurrentAdmissionPolicy | None = None
    """Concurrent admission to several flavors."""

    def selects_namespace(self, labels: dict[str, str]) -> bool:
        """Whether a namespace with `labels` may submit here (unset selector: none may)."""
        return self.namespace_selector is not None and self.namespace_selector.matches(labels)


class ResourceUsage(ApiModel):
    """Usage of one resource of a flavor."""

    name: ResourceName
    """The resource."""
    total: Quantity | None = None
    """Quota in use, including what is borrowed."""
    borrowed: Quantity | None = None
    """Part of the total above nominal quota."""


class FlavorUsage(ApiModel):
    """Usage of the resources of one flavor."""

    name: FlavorName
    """The flavor."""
    resources: Annotated[
        tuple[ResourceUsage, ...], Field(max_length=64, json_schema_extra=list_map("name"))
    ]
    """Usage per resource."""


class FairSharingStatus(ApiModel):
    """Current fair-sharing state."""

    weighted_share: Int64
    """Largest ratio of borrowed usage to lendable quota over the resources, divided by the
    weight; 0 when within nominal quota."""


Conditions = Annotated[
    tuple[Condition, ...], Field(max_length=16, json_schema_extra=list_map("type"))
]
FlavorUsages = Annotated[
    tuple[FlavorUsage, ...], Field(max_length=64, json_schema_extra=list_map("name"))
]


class ClusterQueueStatus(ApiModel):
    """The observed state of a ClusterQueue."""

    conditions: Conditions | None = None
    """Latest observations; type Active tells whether the queue can admit."""
    flavors_reservation: FlavorUsages | None = None
    """Quota reserved per flavor by workloads holding a reservation."""
    flavors_usage: FlavorUsages | None = None
    """Quota used per flavor by admitted workloads."""
    pending_workloads: Int32 = 0
    """Workloads waiting for admission."""
    reserving_workloads: Int32 = 0
    """Workloads holding a quota reservation."""
    admitted_workloads: Int32 = 0
    """Admitted workloads that have not finished."""
    fair_sharing: FairSharingStatus | None = None
    """Fair-sharing state, when fair sharing is enabled."""


class ClusterQueue(KubeObject):
    """A cluster-scoped queue holding quota per flavor and resource."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "ClusterQueue"

    spec: ClusterQueueSpec = ClusterQueueSpec()
    """The desired state."""
    status: ClusterQueueStatus = ClusterQueueStatus()
    """The observed state."""


def not_run(cq: ClusterQueue, *, admission_fair_sharing: bool) -> str | None:
    """What the ClusterQueue asks for that will not apply, as a warning; None if nothing.
    `admission_fair_sharing`: whether the Configuration turns Admission Fair Sharing on."""
    scope = cq.spec.admission_scope
    if (
        scope is not None
        and scope.admission_mode is AdmissionMode.USAGE_BASED
        and not admission_fair_sharing
    ):
        return (
            "admissionScope UsageBasedAdmissionFairSharing has no effect: the Configuration "
            "has no admissionFairSharing (or the AdmissionFairSharing gate is off), so its "
            "Workloads are ordered by priority and creation time, as Kueue does then"
        )
    return None
