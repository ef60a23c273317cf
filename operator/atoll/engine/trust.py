"""Admissions read back from Workload statuses are checked, not trusted blindly.

Anyone allowed to write `workloads/status` can write an admission (a forged one, or one left
by another controller). When atoll rebuilds its ledger from the statuses, an admission is
refused when it names a ClusterQueue that does not exist, or a flavor that does not exist or
that its ClusterQueue does not offer for that resource, or when the admissions together
exceed what quota allows. The quota check uses two necessary conditions (any set of
admissions atoll itself could make passes them, so no honest admission is refused):

- per ClusterQueue, flavor and resource: usage <= nominal + borrowingLimit (nominal only
  outside a cohort; no per-queue bound inside a cohort without a borrowingLimit);
- per cohort tree (at its root), flavor and resource: usage of all its ClusterQueues <= the
  sum of their nominal quotas and of the quotas of the tree's Cohorts.

Admissions are kept oldest first; one that would break a bound is refused, so that the most
recently admitted go first and the rest fit. Mirrors no Kueue file: Kueue trusts the status.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from atoll.engine import model as m
from atoll.engine.snapshot import usage_of

Key = tuple[m.FlavorName, m.ResourceName]


class Distrust(enum.Enum):
    CLUSTER_QUEUE_MISSING = "ClusterQueueDoesNotExist"
    FLAVOR_MISSING = "FlavorDoesNotExist"
    QUOTA_EXCEEDED = "AdmissionExceedsQuota"


@dataclass(frozen=True, slots=True, kw_only=True)
class Held:
    """A Workload holding quota according to its status."""

    key: str
    admission: m.Admission
    reserved_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Refused:
    key: str
    reason: Distrust
    message: str


def _root(cohort: m.CohortName, cohorts: Mapping[m.CohortName, m.Cohort]) -> m.CohortName:
    seen = {cohort}
    while (parent := cohorts[cohort].parent if cohort in cohorts else None) is not None:
        if parent in seen:
            break  # a cycle is refused elsewhere; stop here
        seen.add(parent)
        cohort = parent
    return cohort


def _quotas(groups: Sequence[m.ResourceGroup]) -> dict[Key, m.ResourceQuota]:
    return {(fq.flavor, rq.resource): rq for g in groups for fq in g.flavors for rq in fq.resources}


@dataclass(frozen=True, slots=True)
class _Bounds:
    queue: dict[m.ClusterQueueName, dict[Key, int | None]]
    tree: dict[m.CohortName, dict[Key, int]]
    root_of: dict[m.ClusterQueueName, m.CohortName | None]


def _bounds(
    cluster_queues: Mapping[m.ClusterQueueName, m.ClusterQueue],
    cohorts: Mapping[m.CohortName, m.Cohort],
) -> _Bounds:
    queue: dict[m.ClusterQueueName, dict[Key, int | None]] = {}
    tree: dict[m.CohortName, dict[Key, int]] = defaultdict(lambda: defaultdict(int))
    root_of: dict[m.ClusterQueueName, m.CohortName | None] = {}
    for name, cq in cluster_queues.items():
        root = _root(cq.cohort, cohorts) if cq.cohort is not None else None
        root_of[name] = root
        limits: dict[Key, int | None] = {}
        for key, rq in _quotas(cq.resource_groups).items():
            if root is None:
                limits[key] = rq.nominal
            elif rq.borrowing_limit is not None:
                limits[key] = rq.nominal + rq.borrowing_limit
            else:
                limits[key] = None
            if root is not None:
                tree[root][key] += rq.nominal
        queue[name] = limits
    for cohort_name, cohort in cohorts.items():
        for key, rq in _quotas(cohort.resource_groups).items():
            tree[_root(cohort_name, cohorts)][key] += rq.nominal
    return _Bounds(queue=queue, tree=tree, root_of=root_of)


def _unknown(
    held: Held,
    cluster_queues: Mapping[m.ClusterQueueName, m.ClusterQueue],
    flavors: Collection[m.FlavorName],
) -> Refused | None:
    cq_name = held.admission.cluster_queue
    cq = cluster_queues.get(cq_name)
    if cq is None:
        return Refused(
            key=held.key,
            reason=Distrust.CLUSTER_QUEUE_MISSING,
            message=f"The admission names ClusterQueue {cq_name}, which does not exist",
        )
    offered = _quotas(cq.resource_groups)
    for ps in held.admission.pod_sets:
        for resource, flavor in ps.flavors:
            if flavor not in flavors or (flavor, resource) not in offered:
                return Refused(
                    key=held.key,
                    reason=Distrust.FLAVOR_MISSING,
                    message=f"The admission assigns flavor {flavor} for {resource}, which "
                    f"does not exist or is not offered by ClusterQueue {cq_name}",
                )
    return None


def audit(
    held: Sequence[Held],
    *,
    cluster_queues: Mapping[m.ClusterQueueName, m.ClusterQueue],
    cohorts: Mapping[m.CohortName, m.Cohort],
    flavors: Collection[m.FlavorName],
) -> tuple[Refused, ...]:
    """The admissions to refuse, in the order they were found."""
    bounds = _bounds(cluster_queues, cohorts)
    by_queue: dict[m.ClusterQueueName, dict[Key, int]] = defaultdict(lambda: defaultdict(int))
    by_tree: dict[m.CohortName, dict[Key, int]] = defaultdict(lambda: defaultdict(int))
    refused: list[Refused] = []
    for h in sorted(held, key=lambda h: (h.reserved_at, h.key)):
        unknown = _unknown(h, cluster_queues, flavors)
        if unknown is not None:
            refused.append(unknown)
            continue
        cq = h.admission.cluster_queue
        root = bounds.root_of[cq]
        used = usage_of(h.admission)
        over = None
        for key, amount in used.items():
            limit = bounds.queue[cq].get(key)
            if limit is not None and by_queue[cq][key] + amount > limit:
                over = f"ClusterQueue {cq} allows {limit} of {key[1]} in flavor {key[0]}"
            elif root is not None and by_tree[root][key] + amount > bounds.tree[root][key]:
                over = f"cohort {root} holds {bounds.tree[root][key]} of {key[1]} in {key[0]}"
            if over is not None:
                break
        if over is not None:
            refused.append(
                Refused(
                    key=h.key,
                    reason=Distrust.QUOTA_EXCEEDED,
                    message=f"The admissions read at start exceed the quota ({over}); "
                    "the most recent ones are evicted",
                )
            )
            continue
        for key, amount in used.items():
            by_queue[cq][key] += amount
            if root is not None:
                by_tree[root][key] += amount
    return tuple(refused)
