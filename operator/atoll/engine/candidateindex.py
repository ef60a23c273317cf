"""Per-ClusterQueue preemption candidate lists and release totals, built on first use.

Supports Kueue's candidate ordering (pkg/scheduler/preemption/common/ordering.go) per queue:
a search merges these pre-sorted lists instead of sorting all candidates each time. Built
lazily per overlay (a cycle), so queues no preemptor looks at cost nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from atoll.engine.model import AdmittedWorkload, ClusterQueueName, FlavorResource, WorkloadKey
from atoll.engine.overlay import UsageOverlay
from atoll.engine.snapshot import candidate_key, queue_candidate_key


@dataclass(frozen=True, slots=True, kw_only=True)
class Releasable:
    """How much of a flavor/resource a ClusterQueue's workloads hold, by priority: what
    evicting all workloads below a priority could free at most."""

    evicted: int
    priorities: tuple[int, ...]
    """Of the workloads not already evicted, ascending."""
    cumulative: tuple[int, ...]
    """cumulative[i]: usage of the first i of them (len(priorities) + 1 entries)."""
    largest: int
    """The most any single one of the workloads uses."""


def _totals(
    workloads: tuple[AdmittedWorkload, ...],
    fr: FlavorResource,
    usage: Mapping[WorkloadKey, Mapping[FlavorResource, int]],
    *,
    by_usage: bool,
) -> Releasable:
    """`by_usage`: `workloads` are in Admission Fair Sharing's order, not by priority."""
    evicted = largest = 0
    priorities: list[int] = []
    cumulative = [0]
    for a in sorted(workloads, key=candidate_key) if by_usage else workloads:  # by priority
        used = usage[a.key][fr]
        largest = max(largest, used)
        if a.evicted:
            evicted += used
        else:
            priorities.append(a.workload.priority)
            cumulative.append(cumulative[-1] + used)
    return Releasable(
        evicted=evicted,
        priorities=tuple(priorities),
        cumulative=tuple(cumulative),
        largest=largest,
    )


def using(
    ov: UsageOverlay, cq: ClusterQueueName
) -> Mapping[FlavorResource, tuple[AdmittedWorkload, ...]]:
    """The queue's admitted workloads per flavor/resource they use, in candidate order
    (`queue_candidate_key`)."""
    key = ("using", cq)
    memo = ov.snapshot.cq_memo.get(cq, ov.memo)
    found = memo.get(key)
    if found is None:
        snap = ov.snapshot
        lq_usage = snap.lq_usage
        workloads = sorted(
            (snap.admitted[k] for k in snap.workloads_by_cq.get(cq, ())),
            key=(lambda a: queue_candidate_key(lq_usage, a)) if lq_usage else candidate_key,
        )
        per_fr: dict[FlavorResource, list[AdmittedWorkload]] = {}
        for a in workloads:
            for fr in snap.workload_usage[a.key]:
                per_fr.setdefault(fr, []).append(a)
        found = memo[key] = {fr: tuple(v) for fr, v in per_fr.items()}
    assert isinstance(found, dict)
    return found


def totals(ov: UsageOverlay, cq: ClusterQueueName, fr: FlavorResource) -> Releasable | None:
    key = ("totals", cq, fr)
    memo = ov.snapshot.cq_memo.get(cq, ov.memo)
    found = memo.get(key, ())
    if found == ():
        workloads = using(ov, cq).get(fr)
        found = memo[key] = (
            None
            if workloads is None
            else _totals(
                workloads, fr, ov.snapshot.workload_usage, by_usage=bool(ov.snapshot.lq_usage)
            )
        )
    assert found is None or isinstance(found, Releasable)
    return found
