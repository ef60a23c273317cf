"""Small builders for engine snapshots: one line per object in a test table.

Resources are plain names ("gpu", "cpu", "memory"); quantities are the engine's integers.
Every ClusterQueue gets a LocalQueue `default/<cq name>`, so `workload(..., queue="cq-a")`
lands in ClusterQueue cq-a.
"""

from __future__ import annotations

from collections.abc import Iterable

from atoll.engine.decisions import Admit, Decision, Pending, Preempt
from atoll.engine.model import (
    Admission,
    AdmittedWorkload,
    BorrowWithinCohort,
    BorrowWithinCohortPolicy,
    ClusterQueue,
    ClusterQueueName,
    Cohort,
    CohortName,
    FairSharing,
    FlavorFungibility,
    FlavorName,
    FlavorQuotas,
    FungibilityPolicy,
    FungibilityPreference,
    LabelSelector,
    LocalQueue,
    LocalQueueKey,
    PodSet,
    PodSetAssignment,
    PodSetName,
    PreemptionPolicy,
    QueueingStrategy,
    ReclaimWithinCohort,
    ResourceFlavor,
    ResourceGroup,
    ResourceName,
    ResourceQuota,
    StopPolicy,
    Taint,
    Toleration,
    WithinClusterQueue,
    Workload,
    WorkloadKey,
)
from atoll.engine.snapshot import Snapshot, build_snapshot

NS = "default"
NO_PREEMPTION = PreemptionPolicy()
DEFAULT_FUNGIBILITY = FlavorFungibility()
ALL_NAMESPACES = LabelSelector()


def q(
    nominal: int, borrow: int | None = None, lend: int | None = None
) -> tuple[int, int | None, int | None]:
    return (nominal, borrow, lend)


Quota = int | tuple[int, int | None, int | None]


def quotas(flavor: str, **resources: Quota) -> FlavorQuotas:
    out = []
    for name, value in resources.items():
        nominal, borrow, lend = (value, None, None) if isinstance(value, int) else value
        out.append(
            ResourceQuota(
                resource=ResourceName(name),
                nominal=nominal,
                borrowing_limit=borrow,
                lending_limit=lend,
            )
        )
    return FlavorQuotas(flavor=FlavorName(flavor), resources=tuple(out))


def group(*flavors: FlavorQuotas) -> ResourceGroup:
    covered = tuple(r.resource for r in flavors[0].resources)
    return ResourceGroup(covered_resources=covered, flavors=flavors)


def preemption(
    within: WithinClusterQueue = WithinClusterQueue.NEVER,
    reclaim: ReclaimWithinCohort = ReclaimWithinCohort.NEVER,
    borrow: BorrowWithinCohortPolicy = BorrowWithinCohortPolicy.NEVER,
    threshold: int | None = None,
) -> PreemptionPolicy:
    return PreemptionPolicy(
        within_cluster_queue=within,
        reclaim_within_cohort=reclaim,
        borrow_within_cohort=BorrowWithinCohort(policy=borrow, max_priority_threshold=threshold),
    )


def fungibility(
    borrow: FungibilityPolicy = FungibilityPolicy.MAY_STOP_SEARCH,
    preempt: FungibilityPolicy = FungibilityPolicy.TRY_NEXT_FLAVOR,
    preference: FungibilityPreference | None = None,
) -> FlavorFungibility:
    return FlavorFungibility(
        when_can_borrow=borrow, when_can_preempt=preempt, preference=preference
    )


def cluster_queue(
    name: str,
    *groups: ResourceGroup,
    cohort: str | None = None,
    policy: PreemptionPolicy = NO_PREEMPTION,
    strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO,
    fungible: FlavorFungibility = DEFAULT_FUNGIBILITY,
    stop: StopPolicy = StopPolicy.NONE,
    selector: LabelSelector | None = ALL_NAMESPACES,
    weight: int = 1000,
) -> ClusterQueue:
    return ClusterQueue(
        name=ClusterQueueName(name),
        cohort=None if cohort is None else CohortName(cohort),
        resource_groups=groups,
        preemption=policy,
        queueing_strategy=strategy,
        flavor_fungibility=fungible,
        stop_policy=stop,
        namespace_selector=selector,
        fair_weight_milli=weight,
    )


def cohort(
    name: str, *groups: ResourceGroup, parent: str | None = None, weight: int = 1000
) -> Cohort:
    return Cohort(
        name=CohortName(name),
        parent=None if parent is None else CohortName(parent),
        resource_groups=groups,
        fair_weight_milli=weight,
    )


def flavor(
    name: str,
    labels: dict[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    tolerations: tuple[Toleration, ...] = (),
) -> ResourceFlavor:
    return ResourceFlavor(
        name=FlavorName(name),
        node_labels=frozenset((labels or {}).items()),
        node_taints=taints,
        tolerations=tolerations,
    )


def pod_set(
    count: int = 1,
    name: str = "main",
    min_count: int | None = None,
    selector: dict[str, str] | None = None,
    tolerations: tuple[Toleration, ...] = (),
    *,
    group: str | None = None,
    **requests: int,
) -> PodSet:
    return PodSet(
        name=PodSetName(name),
        count=count,
        requests=tuple((ResourceName(r), v) for r, v in requests.items()),
        min_count=min_count,
        node_selector=frozenset((selector or {}).items()),
        tolerations=tolerations,
        group=group,
    )


def workload(
    name: str,
    queue: str,
    *pod_sets: PodSet,
    priority: int = 0,
    at: float = 0.0,
    ns: str = NS,
    ns_labels: dict[str, str] | None = None,
    active: bool = True,
    **requests: int,
) -> Workload:
    """A workload; `**requests` is shorthand for a single 1-pod set with those requests."""
    sets = pod_sets or (pod_set(**requests),)
    return Workload(
        namespace=ns,
        name=name,
        queue_name=queue,
        pod_sets=sets,
        priority=priority,
        queued_at=at,
        namespace_labels=frozenset((ns_labels or {"kubernetes.io/metadata.name": ns}).items()),
        active=active,
    )


def admitted(
    w: Workload, cq: str, flavor_name: str = "f", *, at: float = 0.0, evicted: bool = False
) -> AdmittedWorkload:
    """`w` admitted in `cq` with every resource on `flavor_name`."""
    assignments = tuple(
        PodSetAssignment(
            name=ps.name,
            count=ps.count,
            flavors=tuple((r, FlavorName(flavor_name)) for r, _ in ps.requests),
            resource_usage=tuple((r, v * ps.count) for r, v in ps.requests),
        )
        for ps in w.pod_sets
    )
    return AdmittedWorkload(
        workload=w,
        admission=Admission(cluster_queue=ClusterQueueName(cq), pod_sets=assignments),
        reserved_at=at,
        evicted=evicted,
    )


def snapshot(
    cluster_queues: Iterable[ClusterQueue],
    *,
    cohorts: Iterable[Cohort] = (),
    flavors: Iterable[ResourceFlavor] | None = None,
    running: Iterable[AdmittedWorkload] = (),
    fair: FairSharing | None = None,
    local_queues: Iterable[LocalQueue] | None = None,
    lq_usage: dict[str, float] | None = None,
) -> Snapshot:
    cqs = list(cluster_queues)
    if flavors is None:
        names = {fq.flavor for cq in cqs for g in cq.resource_groups for fq in g.flavors}
        flavors = [flavor(n) for n in sorted(names)]
    if local_queues is None:
        local_queues = [LocalQueue(namespace=NS, name=cq.name, cluster_queue=cq.name) for cq in cqs]
    return build_snapshot(
        flavors=flavors,
        cluster_queues=cqs,
        cohorts=cohorts,
        local_queues=local_queues,
        admitted=running,
        fair_sharing=fair,
        lq_usage={LocalQueueKey(k): v for k, v in (lq_usage or {}).items()},
    )


def key(name: str, ns: str = NS) -> WorkloadKey:
    return WorkloadKey(f"{ns}/{name}")


def by_workload(decisions: Iterable[Decision]) -> dict[str, Decision]:
    return {d.workload.split("/", 1)[1]: d for d in decisions}


def summary(d: Decision) -> str:
    """One word plus what matters: `admit:f`, `preempt:a,b`, `pending:WaitingForQuota`."""
    if isinstance(d, Admit):
        flavors = sorted({f for ps in d.pod_sets for _, f in ps.flavors})
        return "admit:" + ",".join(flavors)
    if isinstance(d, Preempt):
        return "preempt:" + ",".join(sorted(v.workload.split("/", 1)[1] for v in d.victims))
    if isinstance(d, Pending):
        return "pending:" + d.reason.value
    return "evict:" + d.reason.value
