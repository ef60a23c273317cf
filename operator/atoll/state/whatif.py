"""Questions asked of the engine about one workload, on a copy of the cache.

`ask` answers "what would the next scheduling cycle decide for this workload": it takes the
heads of the queues exactly as the scheduling loop does (`pending_by_queue`,
`select_heads`), runs one engine cycle (`run_cycle`) on the snapshot, and, when another
workload is ahead of it in its ClusterQueue, also the decision were it at the head. Nothing
is assumed: the cache is not changed. `fork` gives a copy of a cache that counterfactuals
may change (a bigger quota, workloads that finished) without touching the original.

Shared by `atoll what-if` (offline, on a simulated scenario, and live) and `atoll explain`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from atoll.engine import decisions as d
from atoll.engine import model as m
from atoll.engine.cycle import run_cycle
from atoll.engine.ordering import queue_key, select_heads
from atoll.state.cache import UNKNOWN_QUEUE_PREFIX, Cache
from atoll.state.placing import TopologyChecker


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    workload: str
    cluster_queue: str | None
    """None when the workload's LocalQueue (or its ClusterQueue) does not exist."""
    queue: tuple[str, ...]
    """Every pending workload of its ClusterQueue, in queue order (itself included)."""
    ahead: tuple[str, ...]
    """Pending workloads ahead of it in queue order that are not parked as inadmissible."""
    decision: d.Decision | None
    """The engine's decision this cycle (None: the workload is not a head this cycle)."""
    at_head: d.Decision | None
    """The decision were it at the head of its ClusterQueue (the same object as `decision`
    when it is the head)."""

    @property
    def position(self) -> int | None:
        """1-based position in its ClusterQueue's queue order (None: not pending)."""
        return self.queue.index(self.workload) + 1 if self.workload in self.queue else None


def fork(cache: Cache) -> Cache:
    """A copy of `cache` whose tables (and the inventory's ledger) can be changed freely.
    The API objects themselves are shared: they are immutable models, replaced, not edited."""
    copy = dataclasses.replace(cache)
    for f in dataclasses.fields(Cache):
        value = getattr(cache, f.name)
        if isinstance(value, dict | set):
            setattr(copy, f.name, type(value)(value))
    copy.inventory = cache.inventory.fork()
    copy.queues = cache.queues.fork()
    return copy


def checked(cache: Cache, dec: d.Decision | None) -> d.Decision | None:
    """An Admit passed through the placement check the scheduler applies to it (topology
    and devices, on the cache's inventory): the Admit, or why it stays pending."""
    if not isinstance(dec, d.Admit):
        return dec
    placed = TopologyChecker(cache).check(dec)
    return placed if isinstance(placed, d.Pending) else dec


def _find(decisions: tuple[d.Decision, ...], key: str) -> d.Decision | None:
    return next((x for x in decisions if x.workload == key), None)


def ask(cache: Cache, key: str, now: float, fair_sharing: m.FairSharing | None = None) -> Answer:
    """The engine's answer for the workload `key` at time `now` (the cache is unchanged)."""
    pending = cache.pending_by_queue(now)
    group = next((cq for cq, ws in pending.items() if any(w.key == key for w in ws)), None)
    queue = sorted(pending.get(group, ()) if group is not None else (), key=queue_key)
    mine = next((w for w in queue if w.key == key), None)
    parked = cache.parked_keys()
    snapshot = cache.snapshot(fair_sharing)
    heads = select_heads(pending, parked)
    decision = _find(run_cycle(snapshot, heads), key)
    at_head = decision
    if decision is None and mine is not None:
        rivals = {w.key for w in queue}
        others = [h for h in heads if h.key not in rivals]
        at_head = _find(run_cycle(cache.snapshot(fair_sharing), [*others, mine]), key)
    known = group is not None and not group.startswith(UNKNOWN_QUEUE_PREFIX)
    ahead = tuple(w.key for w in queue[: queue.index(mine)] if w.key not in parked) if mine else ()
    return Answer(
        workload=key,
        cluster_queue=str(group) if known else None,
        queue=tuple(w.key for w in queue),
        ahead=ahead,
        decision=decision,
        at_head=at_head,
    )


def flavors_text(pod_sets: tuple[d.PodSetAdmission, ...]) -> str:
    return ", ".join(f"{r}={f}" for ps in pod_sets for r, f in ps.flavors) or "-"


def describe(dec: d.Decision) -> str:
    """One line for a decision: admitted with which flavors, whom it preempts, or why not."""
    match dec:
        case d.Admit():
            how = " (borrowing)" if dec.borrowing else ""
            return f"admitted{how} with {flavors_text(dec.pod_sets)}"
        case d.Preempt():
            victims = ", ".join(f"{v.workload} ({v.reason.value})" for v in dec.victims)
            return f"admitted after preempting {victims}, with {flavors_text(dec.pod_sets)}"
        case d.Pending():
            return f"pending, {dec.reason.value}: {dec.message}"
        case d.Evict():
            return f"evicted: {dec.message}"


def decision_json(dec: d.Decision | None) -> dict[str, Any] | None:
    """A decision for `--json` output."""
    match dec:
        case None:
            return None
        case d.Admit():
            return {
                "kind": "Admit",
                "flavors": flavors_text(dec.pod_sets),
                "borrowing": dec.borrowing,
            }
        case d.Preempt():
            return {
                "kind": "Preempt",
                "flavors": flavors_text(dec.pod_sets),
                "victims": [
                    {"workload": v.workload, "reason": v.reason.value} for v in dec.victims
                ],
            }
        case d.Pending():
            return {"kind": "Pending", "reason": dec.reason.value, "message": dec.message}
        case d.Evict():
            return {"kind": "Evict", "reason": dec.reason.value, "message": dec.message}
