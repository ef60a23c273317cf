"""Flavor assignment with topology: a flavor whose topology cannot place the gang is refused,
and the gang's flavors are assigned again without it.

Mirrors pkg/scheduler/flavorassigner/tas_flavorassigner.go and the TAS part of
`assignFlavors` in flavorassigner.go. Kueue assigns flavors by quota, then asks the chosen
flavor's topology: a pod set that does not fit turns the assignment into Preempt (TAS
preemption, with the topology's reason in the pod set's message), or NoFit when it would not
fit even on an empty topology. Without victims the Workload stays pending and keeps the index
of the flavor it tried (`LastTriedFlavorIdx`), so its next attempt starts at the next flavor
of the resource group: the gang lands on flavor B one cycle after flavor A's topology refused
it. atoll keeps no such state across cycles; it does the same within one attempt: the refused
flavor is skipped with its reason and flavors are assigned again (`engine.flavors`, with
flavorFungibility as usual among the flavors left). The refusal counts as Kueue's flavor
modes do (`shouldTryNextFlavor`): a gang that fits no domain now (no candidates) or ever
(no fit) moves on; one that would free a domain by preemption (or waits for victims already
leaving it) moves on only when `whenCanPreempt: TryNextFlavor`, and if no later flavor
admits it, that preemption is the answer (the first such flavor, as Kueue's "best mode seen").
When every flavor is refused, the pending message names each flavor's reason.

The same holds when quota alone needs preemption: Kueue checks the gang against its flavor's
topology with every TAS workload gone (`WithSimulateEmpty`) and turns the assignment into
NoFit when even that fails, so no workload is preempted for a gang that could never be placed
there (`CyclePlacer.unplaceable`); the flavor is refused like any other.
"""

from __future__ import annotations

from atoll.engine.decisions import Admit, Pending, PendingReason, Preempt
from atoll.engine.flavors import Refused
from atoll.engine.model import ClusterQueue, FlavorName, FungibilityPolicy, PodSetName
from atoll.engine.snapshot import Snapshot

_TOPOLOGY_OUTCOMES = frozenset(
    {PendingReason.TOPOLOGY_PLACEMENT_FAILED, PendingReason.WAITING_FOR_PREEMPTED_WORKLOADS}
)


def topology_flavors(snapshot: Snapshot, admit: Admit | Preempt) -> dict[PodSetName, FlavorName]:
    """The pod sets of `admit` (or of the admission a preemption makes room for) assigned
    a flavor with a topology, and that flavor."""
    out = {}
    for ps in admit.pod_sets:
        for _, name in ps.flavors:
            flavor = snapshot.flavors.get(name)
            if flavor is not None and flavor.topology_name:
                out[ps.name] = name
                break
    return out


def refusal(
    snapshot: Snapshot, admit: Admit | Preempt, outcome: Admit | Preempt | Pending
) -> Refused:
    """(pod set, flavor) → reason, for the topology flavors of `admit` that placement did
    not admit it into (`outcome`: the placer's answer); empty when the gang was placed, was
    refused for something else (its devices, a bad request), or uses no topology flavor."""
    if isinstance(outcome, Admit):
        return {}
    if isinstance(outcome, Pending) and outcome.reason not in _TOPOLOGY_OUTCOMES:
        return {}
    flavors = topology_flavors(snapshot, admit)
    return {(ps, f): f"flavor {f}: {outcome.message}" for ps, f in flavors.items()}


def stops_search(outcome: Admit | Preempt | Pending, cq: ClusterQueue) -> bool:
    """Does a refused flavor's `outcome` end the search (Kueue's shouldTryNextFlavor on
    Preempt mode)? Only a domain preemption, or a wait for victims already leaving, does,
    and only under `whenCanPreempt: MayStopSearch`."""
    preempts = isinstance(outcome, Preempt) or (
        isinstance(outcome, Pending)
        and outcome.reason is PendingReason.WAITING_FOR_PREEMPTED_WORKLOADS
    )
    return preempts and cq.flavor_fungibility.when_can_preempt is FungibilityPolicy.MAY_STOP_SEARCH


def fallback(outcomes: list[Admit | Preempt | Pending]) -> Admit | Preempt | Pending | None:
    """The first refused flavor's domain preemption (or wait for victims), if any: what the
    gang does when no later flavor admits it."""
    for o in outcomes:
        if isinstance(o, Preempt) or (
            isinstance(o, Pending) and o.reason is PendingReason.WAITING_FOR_PREEMPTED_WORKLOADS
        ):
            return o
    return None
