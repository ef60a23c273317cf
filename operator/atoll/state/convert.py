"""Turning `atoll.api` models into the engine's snapshot types, once per object change.

Mirrors what Kueue's pkg/cache/scheduler does when it builds ClusterQueueSnapshot and
workload.Info: per-pod requests are folded (containers summed, init containers maxed,
overhead added) and quantities become exact integers (cpu in milli-units, others in units).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from atoll.api import clusterqueue as api_cq
from atoll.api import labels as keys
from atoll.api.cohort import Cohort as ApiCohort
from atoll.api.configuration import parse_duration
from atoll.api.core import Job, PodSpec, Taint, Toleration
from atoll.api.islands import ISLAND_REQUEST_ANNOTATION
from atoll.api.localqueue import LocalQueue as ApiLocalQueue
from atoll.api.meta import LabelSelector as ApiSelector
from atoll.api.quantity import Quantity
from atoll.api.resourceflavor import ResourceFlavor as ApiFlavor
from atoll.api.workload import PodSet as ApiPodSet
from atoll.api.workload import Workload as ApiWorkload
from atoll.engine import model as m
from atoll.state import workloads as wls


def amount(resource: str, quantity: Quantity) -> int:
    """The engine's integer for a quantity: milli-cpu, else whole units rounded up."""
    return quantity.milli if resource == "cpu" else quantity.value


def quantity(resource: str, value: int) -> Quantity:
    """The inverse of `amount`: the engine's integer (milli-cpu, else units) as a quantity."""
    return Quantity.from_milli(value) if resource == "cpu" else Quantity.from_units(value)


def _effect(raw: str | None) -> m.TaintEffect | None:
    return m.TaintEffect(raw) if raw else None


def taint(t: Taint) -> m.Taint:
    return m.Taint(key=t.key, value=t.value or "", effect=m.TaintEffect(t.effect))


def toleration(t: Toleration) -> m.Toleration:
    op = m.TolerationOperator(t.operator) if t.operator else m.TolerationOperator.EQUAL
    return m.Toleration(key=t.key or "", operator=op, value=t.value or "", effect=_effect(t.effect))


def selector(s: ApiSelector | None) -> m.LabelSelector | None:
    if s is None:
        return None
    return m.LabelSelector(
        match_labels=frozenset((s.match_labels or {}).items()),
        match_expressions=tuple(
            m.SelectorRequirement(
                key=r.key, operator=m.SelectorOperator(r.operator.value), values=r.values or ()
            )
            for r in s.match_expressions or ()
        ),
    )


def flavor(f: ApiFlavor) -> m.ResourceFlavor:
    return m.ResourceFlavor(
        name=m.FlavorName(f.name),
        node_labels=frozenset((f.spec.node_labels or {}).items()),
        node_taints=tuple(taint(t) for t in f.spec.node_taints or ()),
        tolerations=tuple(toleration(t) for t in f.spec.tolerations or ()),
        topology_name=f.spec.topology_name or None,
    )


def _groups(groups: Iterable[api_cq.ResourceGroup]) -> tuple[m.ResourceGroup, ...]:
    out = []
    for g in groups:
        flavors = []
        for fq in g.flavors:
            flavors.append(
                m.FlavorQuotas(
                    flavor=m.FlavorName(fq.name),
                    resources=tuple(
                        m.ResourceQuota(
                            resource=m.ResourceName(r.name),
                            nominal=amount(r.name, r.nominal_quota),
                            borrowing_limit=None
                            if r.borrowing_limit is None
                            else amount(r.name, r.borrowing_limit),
                            lending_limit=None
                            if r.lending_limit is None
                            else amount(r.name, r.lending_limit),
                        )
                        for r in fq.resources
                    ),
                )
            )
        out.append(
            m.ResourceGroup(
                covered_resources=tuple(m.ResourceName(r) for r in g.covered_resources),
                flavors=tuple(flavors),
            )
        )
    return tuple(out)


def _weight_milli(fs: api_cq.FairSharing | None) -> int:
    if fs is None or fs.weight is None:
        return 1000
    return fs.weight.milli


def _seconds(ann: dict[str, str], key: str) -> float | None:
    text = ann.get(key)
    if text is None:
        return None
    try:
        value = parse_duration(text)
    except ValueError:
        value = -1.0
    if value < 0:
        raise ValueError(
            f"metadata.annotations[{key}]: {text!r} is not a duration such as 30s or 2h"
        )
    return value


def backfill(cq: api_cq.ClusterQueue) -> tuple[m.Backfill | None, str | None]:
    """The queue's backfill settings from its `atoll.dev/backfill*` annotations, or why
    they are invalid (the queue is then inactive, with that reason)."""
    ann = dict(cq.metadata.annotations or {})
    if ann.get(keys.BACKFILL_ANNOTATION, "").lower() != "true":
        return None, None
    try:
        grace = _seconds(ann, keys.BACKFILL_GRACE_ANNOTATION)
        min_wait = _seconds(ann, keys.BACKFILL_MIN_WAIT_ANNOTATION)
        max_hold = _seconds(ann, keys.BACKFILL_MAX_HOLD_ANNOTATION)
        reserve_after = _seconds(ann, keys.BACKFILL_RESERVE_AFTER_ANNOTATION)
    except ValueError as e:
        return None, str(e)
    policy = m.Backfill()
    return (
        m.Backfill(
            grace_seconds=policy.grace_seconds if grace is None else grace,
            min_wait_seconds=min_wait or 0.0,
            max_hold_seconds=max_hold,
            reserve_after_seconds=reserve_after,
        ),
        None,
    )


def run_bounds(wl: ApiWorkload, job: Job | None) -> tuple[float | None, float | None]:
    """(guaranteed run limit, run-duration hint) in seconds: the smallest of the Workload's
    `maximumExecutionTimeSeconds` and its Job's `activeDeadlineSeconds`; the Job's
    `atoll.dev/run-duration` (on the Job or its pod template), an estimate."""
    limits = []
    if wl.spec.maximum_execution_time_seconds is not None:
        limits.append(float(wl.spec.maximum_execution_time_seconds))
    hint = None
    if job is not None:
        if job.spec.active_deadline_seconds is not None:
            limits.append(float(job.spec.active_deadline_seconds))
        tmeta = job.spec.template.metadata
        for ann in (job.metadata.annotations, tmeta.annotations if tmeta else None):
            text = (ann or {}).get(keys.RUN_DURATION_ANNOTATION)
            if text and hint is None:
                try:
                    hint = parse_duration(text)
                except ValueError:
                    hint = None
    return (min(limits) if limits else None), hint


def cluster_queue(cq: api_cq.ClusterQueue) -> m.ClusterQueue:
    spec = cq.spec
    pre = spec.preemption
    fung = spec.flavor_fungibility
    policy, invalid = backfill(cq)
    return m.ClusterQueue(
        name=m.ClusterQueueName(cq.name),
        cohort=m.CohortName(spec.cohort_name) if spec.cohort_name else None,
        resource_groups=_groups(spec.resource_groups),
        preemption=m.PreemptionPolicy(
            within_cluster_queue=m.WithinClusterQueue(pre.within_cluster_queue.value),
            reclaim_within_cohort=m.ReclaimWithinCohort(pre.reclaim_within_cohort.value),
            borrow_within_cohort=m.BorrowWithinCohort(
                policy=m.BorrowWithinCohortPolicy(pre.borrow_within_cohort.policy.value),
                max_priority_threshold=pre.borrow_within_cohort.max_priority_threshold,
            ),
        ),
        queueing_strategy=m.QueueingStrategy(spec.queueing_strategy.value),
        flavor_fungibility=m.FlavorFungibility(
            when_can_borrow=m.FungibilityPolicy(fung.when_can_borrow.value),
            when_can_preempt=m.FungibilityPolicy(fung.when_can_preempt.value),
            preference=m.FungibilityPreference(fung.preference.value) if fung.preference else None,
        ),
        stop_policy=m.StopPolicy(spec.stop_policy.value),
        namespace_selector=selector(spec.namespace_selector),
        fair_weight_milli=_weight_milli(spec.fair_sharing),
        inactive_reason=invalid,
        backfill=policy,
    )


def cohort(c: ApiCohort) -> m.Cohort:
    return m.Cohort(
        name=m.CohortName(c.name),
        parent=m.CohortName(c.spec.parent_name) if c.spec.parent_name else None,
        resource_groups=_groups(c.spec.resource_groups),
        fair_weight_milli=_weight_milli(c.spec.fair_sharing),
    )


def local_queue(lq: ApiLocalQueue) -> m.LocalQueue:
    return m.LocalQueue(
        namespace=lq.namespace or "",
        name=lq.name,
        cluster_queue=m.ClusterQueueName(lq.spec.cluster_queue or ""),
        stop_policy=m.StopPolicy(lq.spec.stop_policy.value),
    )


def _add(total: dict[str, int], requests: Mapping[str, Quantity] | None) -> None:
    for name, q in (requests or {}).items():
        total[name] = total.get(name, 0) + amount(name, q)


def pod_requests(spec: PodSpec) -> dict[str, int]:
    """Per-pod requests as the scheduler counts them: containers (and sidecars) summed,
    regular init containers maxed against that, overhead added; limits stand in for
    missing requests, as the API server defaults them."""
    total: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for c in spec.containers:
        res = c.resources
        if res is not None:
            _add(total, {**(res.limits or {}), **(res.requests or {})})
    for c in spec.init_containers or ():
        res = c.resources
        if res is None:
            continue
        reqs: dict[str, int] = {}
        _add(reqs, {**(res.limits or {}), **(res.requests or {})})
        extra = getattr(c, "restart_policy", None) or (c.model_extra or {}).get("restartPolicy")
        if extra == "Always":
            for k, v in reqs.items():
                sidecars[k] = sidecars.get(k, 0) + v
        else:
            for k, v in reqs.items():
                init_peak[k] = max(init_peak.get(k, 0), v + sidecars.get(k, 0))
    for k, v in sidecars.items():
        total[k] = total.get(k, 0) + v
    for k, v in init_peak.items():
        total[k] = max(total.get(k, 0), v)
    _add(total, spec.overhead)
    return total


def required_node_terms(affinity: Mapping[str, object] | None) -> tuple[m.NodeSelectorTerm, ...]:
    """The required node-affinity terms of a raw pod affinity (terms are ORed)."""
    node = (affinity or {}).get("nodeAffinity")
    if not isinstance(node, Mapping):
        return ()
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(required, Mapping):
        return ()
    terms = []
    for term in required.get("nodeSelectorTerms") or ():
        exprs = tuple(
            m.SelectorRequirement(
                key=str(e["key"]),
                operator=m.SelectorOperator(str(e["operator"])),
                values=tuple(str(v) for v in e.get("values") or ()),
            )
            for e in (term.get("matchExpressions") or ())
        )
        terms.append(m.NodeSelectorTerm(match_expressions=exprs))
    return tuple(terms)


def placement_inputs(ps: ApiPodSet) -> tuple[str, ...]:
    """`PodSet.placement`: the topology request, the NVLink-island annotation and the
    resource claims of a pod set, as canonical text (empty when it has none of them)."""
    out = []
    if ps.topology_request is not None:
        out.append("topology " + ps.topology_request.model_dump_json(exclude_none=True))
    meta = ps.template.metadata
    island = ((meta.annotations if meta else None) or {}).get(ISLAND_REQUEST_ANNOTATION)
    if island is not None:
        out.append(f"island {island}")
    claims = ps.template.spec.resource_claims or ()
    out += ["claim " + c.model_dump_json(exclude_none=True) for c in claims]
    return tuple(out)


def workload(
    wl: ApiWorkload,
    *,
    namespace_labels: Mapping[str, str],
    queued_at: float,
    devices: Mapping[str, Mapping[str, int]] | None = None,
    misconfigured: str | None = None,
    job: Job | None = None,
) -> m.Workload:
    """The engine's workload. `devices` adds per-pod quota resources by pod set name (DRA
    devices, atoll.state.devicequota); `misconfigured` says why it cannot be queued; `job`,
    its Job if known, gives its run bounds (`run_bounds`). A pod set asks for its pods less
    those `status.reclaimablePods` says are done for good (Kueue's `podSetsCountsAfterReclaim`):
    a gang evicted after part of it succeeded queues again for the rest only."""
    pod_sets = []
    counts = wls.counts_after_reclaim(wl)
    for ps in wl.spec.pod_sets:
        spec = ps.template.spec
        reqs = pod_requests(spec)
        for name, count in ((devices or {}).get(ps.name) or {}).items():
            reqs[name] = reqs.get(name, 0) + count
        left = counts[ps.name]
        pod_sets.append(
            m.PodSet(
                name=m.PodSetName(ps.name),
                count=left,
                requests=tuple(sorted((m.ResourceName(k), v) for k, v in reqs.items())),
                min_count=None if ps.min_count is None else min(ps.min_count, left),
                node_selector=frozenset((spec.node_selector or {}).items()),
                required_affinity=required_node_terms(spec.affinity),
                tolerations=tuple(toleration(t) for t in spec.tolerations or ()),
                placement=placement_inputs(ps),
                group=ps.topology_request.pod_set_group_name if ps.topology_request else None,
            )
        )
    limit, hint = run_bounds(wl, job)
    return m.Workload(
        namespace=wl.namespace or "",
        name=wl.name,
        queue_name=wl.spec.queue_name or "",
        pod_sets=tuple(pod_sets),
        priority=wl.spec.priority or 0,
        queued_at=queued_at,
        namespace_labels=frozenset(namespace_labels.items()),
        uid=wl.metadata.uid or "",
        active=wl.spec.active,
        misconfigured=misconfigured,
        run_limit=limit,
        run_hint=hint,
    )


def admission(wl: ApiWorkload) -> m.Admission | None:
    """The engine form of `status.admission`, if the Workload holds one."""
    adm = wl.status.admission if wl.status else None
    if adm is None:
        return None
    sizes = {ps.name: ps.count for ps in wl.spec.pod_sets}
    lefts = wls.counts_after_reclaim(wl)
    pod_sets = []
    for a in adm.pod_set_assignments:
        size = sizes.get(a.name, 0)
        count = a.count if a.count is not None else size
        usage = sorted(
            (m.ResourceName(r), amount(r, q)) for r, q in (a.resource_usage or {}).items()
        )
        # pods done for good give their share back (Kueue's usage after reclaim)
        left = lefts.get(a.name, 0)
        if left < count:
            usage = [(r, v // count * left) for r, v in usage]
        pod_sets.append(
            m.PodSetAssignment(
                name=m.PodSetName(a.name),
                count=a.count if a.count is not None else 0,
                flavors=tuple(
                    sorted(
                        (m.ResourceName(r), m.FlavorName(f)) for r, f in (a.flavors or {}).items()
                    )
                ),
                resource_usage=tuple(usage),
            )
        )
    return m.Admission(
        cluster_queue=m.ClusterQueueName(adm.cluster_queue), pod_sets=tuple(pod_sets)
    )
