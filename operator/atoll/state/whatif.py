"""Questions asked of the scheduling step about one workload, on copies of the cache.

`ask` answers "what would the next scheduling step decide for this workload": the step the
operator runs (`state.decide.Decider.decide`: queue heads, engine cycle, placement, domain
preemption) on a fork of the Decider (`Decider.fork`), once; and, when other workloads are
ahead of it in its ClusterQueue, the same step on a fork where they are not (parked ones
included), which is its decision were it at the head. Nothing here changes the cache.
Counterfactuals change a fork (a bigger quota, workloads that finished) before asking.

Shared by `atoll what-if` (offline, on a simulated scenario, and live) and `atoll explain`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from atoll.engine import decisions as d
from atoll.engine.inventory import Placement
from atoll.state.cache import UNKNOWN_QUEUE_PREFIX
from atoll.state.decide import Decider


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
    """The step's decision for it (None: the workload is not a head in this step)."""
    at_head: d.Decision | None
    """The decision were it at the head of its ClusterQueue (the same object as `decision`
    when it is a head)."""
    placement: Placement | None = None
    """Where the step placed it when `at_head` admits it and topology or devices are
    involved."""

    @property
    def position(self) -> int | None:
        """1-based position in its ClusterQueue's queue order (None: not pending)."""
        return self.queue.index(self.workload) + 1 if self.workload in self.queue else None


def _find(decisions: tuple[d.Decision, ...], key: str) -> d.Decision | None:
    return next((x for x in decisions if x.workload == key), None)


def _step(decider: Decider, key: str, now: float) -> tuple[d.Decision | None, Placement | None]:
    """The step on `decider` (a fork): its decision for `key` and the placement it held."""
    dec = _find(decider.decide(now), key)
    held = decider.cache.inventory.held().get(key) if isinstance(dec, d.Admit) else None
    return dec, held


def ask(decider: Decider, key: str, now: float) -> Answer:
    """The step's answer for the workload `key` at time `now` (nothing is changed)."""
    cache = decider.cache
    if cache.afs is not None:  # the queue order at `now`, as the step samples it first
        cache = decider.fork().cache
        cache.sample_usage(now)
    pending = cache.pending_by_queue(now)
    group = next((cq for cq, ws in pending.items() if any(w.key == key for w in ws)), None)
    queue = sorted(pending.get(group, ()) if group is not None else (), key=cache.queue_order)
    mine = next((i for i, w in enumerate(queue) if w.key == key), None)
    parked = cache.parked_keys()
    decision, placement = _step(decider.fork(), key, now)
    head, head_placement = decision, placement
    if decision is None and mine is not None:
        front = decider.fork()
        for w in queue[:mine]:
            front.cache.delete_workload(w.key)  # pending: no quota released, nothing woken
        front.cache.parked.pop(key, None)
        front.cache.queues.renew(key)
        head, head_placement = _step(front, key, now)
    known = group is not None and not group.startswith(UNKNOWN_QUEUE_PREFIX)
    ahead = () if mine is None else tuple(w.key for w in queue[:mine] if w.key not in parked)
    return Answer(
        workload=key,
        cluster_queue=str(group) if known else None,
        queue=tuple(w.key for w in queue),
        ahead=ahead,
        decision=decision,
        at_head=head,
        placement=head_placement,
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
