"""The ungater: pods of a gang with a topology assignment are created with the scheduling
gate `kueue.x-k8s.io/topology`; each is pinned to a domain of the assignment (its node labels
added to the pod's nodeSelector, which Kubernetes allows while a pod is gated) and its gate
removed, so kube-scheduler places the gang where atoll proved it fits.

Mirrors Kueue's pkg/controller/tas/topology_ungater.go (pods are spread over the assigned
domains in the order of the assignment, each domain taking its count).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from atoll.api import labels as keys
from atoll.api.core import Pod
from atoll.control.jobframework import TOPOLOGY_GATE
from atoll.state import workloads as wls
from atoll.state.cache import Cache
from atoll.state.topologyassignment import domains

log = structlog.get_logger("atoll.ungater")


class PodStore(Protocol):
    async def ungate_pod(
        self, key: str, node_selector: Mapping[str, str], gates: tuple[str, ...]
    ) -> None:
        """Set the pod's nodeSelector and scheduling gates (additions / removals only)."""
        ...


def _gates(pod: Pod) -> tuple[str, ...]:
    return tuple(g.name for g in pod.spec.scheduling_gates or ())


@dataclass(slots=True)
class Ungater:
    cache: Cache
    pods: PodStore
    gated: dict[str, Pod] = field(default_factory=dict)
    """Pods that carry the topology gate, by `namespace/name`."""
    pinned: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)
    """Per workload: pod name → the nodeSelector of its ungated pod."""

    def observe(self, pod: Pod, deleted: bool = False) -> str | None:
        """Track a pod; returns its key when it needs ungating."""
        key = wls.key_of(pod.namespace, pod.name)
        wl_name = (pod.metadata.annotations or {}).get(keys.WORKLOAD_ANNOTATION)
        if deleted:
            self.gated.pop(key, None)
            if wl_name:
                self.pinned.get(wls.key_of(pod.namespace, wl_name), {}).pop(pod.name, None)
            return None
        if TOPOLOGY_GATE in _gates(pod):
            self.gated[key] = pod
            return key
        self.gated.pop(key, None)
        if wl_name:  # ungated pods of a gang count against their domain (also after restarts)
            wl_key = wls.key_of(pod.namespace, wl_name)
            self.pinned.setdefault(wl_key, {})[pod.name] = dict(pod.spec.node_selector or {})
        return None

    def _used(self, wl_key: str, labels: dict[str, str]) -> int:
        return sum(1 for v in self.pinned.get(wl_key, {}).values() if labels.items() <= v.items())

    async def reconcile(self, key: str) -> float | None:
        pod = self.gated.get(key)
        if pod is None:
            return None
        wl_name = (pod.metadata.annotations or {}).get(keys.WORKLOAD_ANNOTATION, "")
        wl = self.cache.workloads.get(wls.key_of(pod.namespace, wl_name))
        if wl is None or not wls.is_admitted(wl) or wl.status.admission is None:
            return 1.0  # the admission is not seen yet
        pod_set = (pod.metadata.labels or {}).get(keys.PODSET_LABEL, "main")
        assignment = next(
            (a for a in wl.status.admission.pod_set_assignments if a.name == pod_set), None
        )
        if assignment is None or assignment.topology_assignment is None:
            return None
        wl_key = wls.wl_key(wl)
        for labels, count in domains(assignment.topology_assignment):
            if self._used(wl_key, labels) < count:
                selector = {**(pod.spec.node_selector or {}), **labels}
                gates = tuple(g for g in _gates(pod) if g != TOPOLOGY_GATE)
                await self.pods.ungate_pod(key, selector, gates)
                self.pinned.setdefault(wl_key, {})[pod.name] = selector
                self.gated.pop(key, None)
                log.info("pod ungated", workload=wl_key, pod=key, domain=labels)
                return None
        log.warning("no domain left for pod", workload=wl_key, pod=key)
        return None
