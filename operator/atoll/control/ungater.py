"""The ungater: pods of a gang with a topology assignment are created with the scheduling
gate `kueue.x-k8s.io/topology`; each is pinned to a domain of the assignment (its node labels
added to the pod's nodeSelector, which Kubernetes allows while a pod is gated) and its gate
removed, so kube-scheduler places the gang where atoll proved it fits.

Pods of the gang that are already ungated count against the domain they are bound to
(`spec.nodeName`), or, while unbound, the domain their nodeSelector pins them to. A pod whose
gate a user removed by hand is neither: the ungater waits until it is bound, counts it where it
landed, and pins the others where the gang still fits. If it landed outside every domain of
the assignment the gang can no longer run whole where it was admitted, so its Workload is
evicted whole (reason `PodOutsideTopologyAssignment`, a Warning event) and requeued.

Mirrors Kueue's pkg/controller/tas/topology_ungater.go (pods are spread over the assigned
domains in the order of the assignment, each domain taking its count); the eviction of a gang
split by hand is atoll's own.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from atoll.api import labels as keys
from atoll.api.core import Pod
from atoll.control.jobframework import TOPOLOGY_GATE
from atoll.control.metrics import Metrics
from atoll.control.ports import ObjectRef, WorkloadStore
from atoll.control.scheduler import workload_ref
from atoll.control.workload_metrics import report_eviction
from atoll.state import lifecycle
from atoll.state import workloads as wls
from atoll.state.cache import Cache
from atoll.state.lifecycle import OUTSIDE_ASSIGNMENT
from atoll.state.topologyassignment import domains

log = structlog.get_logger("atoll.ungater")

_TERMINAL = ("Succeeded", "Failed")


class PodStore(Protocol):
    async def ungate_pod(
        self, key: str, node_selector: Mapping[str, str], gates: tuple[str, ...]
    ) -> None:
        """Set the pod's nodeSelector and scheduling gates (additions / removals only)."""
        ...


def _pod_set(pod: Pod) -> str:
    return (pod.metadata.labels or {}).get(keys.PODSET_LABEL, "main")


def _gates(pod: Pod) -> tuple[str, ...]:
    return tuple(g.name for g in pod.spec.scheduling_gates or ())


@dataclass(frozen=True, slots=True)
class Seat:
    """Where an ungated pod of a gang is: its node once bound, else its nodeSelector."""

    node: str | None
    selector: Mapping[str, str]
    pod_set: str = "main"
    """The pod set the pod belongs to (a JobSet's replicated job): each has its own
    assignment, and its pods count only against it."""


@dataclass(slots=True)
class Ungater:
    cache: Cache
    pods: PodStore
    workloads: WorkloadStore
    emit: Callable[[ObjectRef, str, str, str], Awaitable[None]]
    clock: Callable[[], float] = time.time
    metrics: Metrics | None = None
    gated: dict[str, Pod] = field(default_factory=dict)
    """Pods that carry the topology gate, by `namespace/name`."""
    pinned: dict[str, dict[str, Seat]] = field(default_factory=dict)
    """Per workload: pod name → where its ungated, active pod is."""
    gang_of: dict[str, str] = field(default_factory=dict)
    """Ungated, active pods of gangs: `namespace/name` → the Workload's key."""

    def observe(self, pod: Pod, deleted: bool = False) -> str | None:
        """Track a pod; returns its key when it needs a look (ungating, or a check of where
        a gang's pod was bound)."""
        key = wls.key_of(pod.namespace, pod.name)
        wl_name = (pod.metadata.annotations or {}).get(keys.WORKLOAD_ANNOTATION)
        wl_key = wls.key_of(pod.namespace, wl_name) if wl_name else None
        gone = (
            deleted or pod.status.phase in _TERMINAL or pod.metadata.deletion_timestamp is not None
        )
        if gone or TOPOLOGY_GATE in _gates(pod):
            self.gang_of.pop(key, None)
            if wl_key:
                self.pinned.get(wl_key, {}).pop(pod.name, None)
        if gone:
            self.gated.pop(key, None)
            return None
        if TOPOLOGY_GATE in _gates(pod):
            self.gated[key] = pod
            return key
        self.gated.pop(key, None)
        if wl_key is None:
            return None
        self.gang_of[key] = wl_key
        seats = self.pinned.setdefault(wl_key, {})
        seat = Seat(pod.spec.node_name, dict(pod.spec.node_selector or {}), _pod_set(pod))
        before = seats.get(pod.name)
        seats[pod.name] = seat  # counts against its domain (also after restarts)
        return key if seat.node and (before is None or before.node != seat.node) else None

    def _where(self, seat: Seat) -> Mapping[str, str] | None:
        """The labels that place a seat: its node's once bound, else its nodeSelector."""
        if seat.node is not None:
            return self.cache.inventory.node_labels(seat.node)
        return seat.selector

    def _inside(self, seat: Seat, labels: Mapping[str, str]) -> bool:
        where = self._where(seat)
        return where is not None and labels.items() <= where.items()

    async def reconcile(self, key: str) -> float | None:
        pod = self.gated.get(key)
        if pod is not None:
            annotation = (pod.metadata.annotations or {}).get(keys.WORKLOAD_ANNOTATION)
            if not annotation:
                return None  # a pod gated at creation (a pod group's): its start names it
            wl_name: str | None = wls.key_of(pod.namespace, annotation)
        else:
            wl_name = self.gang_of.get(key)
        if wl_name is None:
            return None
        wl = self.cache.workloads.get(wl_name)
        if wl is None or not wls.is_admitted(wl) or wl.status.admission is None:
            return 1.0 if pod is not None else None  # the admission is not seen yet
        pod_set = _pod_set(pod) if pod else None
        if pod_set is None:
            pod_set = (
                self.pinned.get(wl_name, {}).get(key.partition("/")[2], Seat(None, {})).pod_set
            )
        assignment = next(
            (a for a in wl.status.admission.pod_set_assignments if a.name == pod_set), None
        )
        if assignment is None or assignment.topology_assignment is None:
            return None
        assigned = domains(assignment.topology_assignment)
        seats = {
            name: seat
            for name, seat in self.pinned.get(wl_name, {}).items()
            if seat.pod_set == pod_set
        }
        for other, seat in seats.items():
            if any(self._inside(seat, labels) for labels, _ in assigned):
                continue
            if seat.node is not None and self._where(seat) is not None:
                await self._evict(wl_name, wls.key_of(wl.namespace, other), seat.node)
                return None
            if pod is not None:
                return 1.0  # ungated by hand and not bound yet: count it where it lands
        if pod is None:
            return None
        for labels, count in assigned:
            if sum(self._inside(s, labels) for s in seats.values()) < count:
                selector = {**(pod.spec.node_selector or {}), **labels}
                gates = tuple(g for g in _gates(pod) if g != TOPOLOGY_GATE)
                await self.pods.ungate_pod(key, selector, gates)
                self.pinned.setdefault(wl_name, {})[pod.name] = Seat(None, selector, pod_set)
                self.gated.pop(key, None)
                log.info("pod ungated", workload=wl_name, pod=key, domain=labels)
                return None
        log.warning("no domain left for pod", workload=wl_name, pod=key)
        return None

    async def _evict(self, wl_key: str, pod: str, node: str) -> None:
        message = (
            f"Pod {pod} was ungated outside atoll and bound to node {node}, outside the "
            "topology assignment of its gang; the gang is evicted whole and requeued"
        )
        now = dt.datetime.fromtimestamp(self.clock(), dt.UTC).replace(microsecond=0)
        written = await self.workloads.update_workload_status(
            wl_key, lifecycle.evict(OUTSIDE_ASSIGNMENT, message, now)
        )
        if written is None:
            return
        self.cache.set_workload(written)
        report_eviction(self.metrics, written)
        log.warning("gang split by hand, evicted", workload=wl_key, pod=pod, node=node)
        await self.emit(
            workload_ref(written), "Warning", f"EvictedDueTo{OUTSIDE_ASSIGNMENT}", message
        )
