"""The live cache: every object atoll reads, the admission ledger and the pending queues.

Mutable and synchronous (no awaits): kube handlers write into it, the scheduling loop reads a
snapshot of it. Mirrors Kueue's pkg/cache/scheduler (cache + assumed workloads) and
pkg/cache/queue (pending heaps, inadmissible workloads). The ledger of record is the Workload
status (QuotaReserved + admission); a decision taken but not yet seen in a Workload status is
*assumed* here so that the next cycle already counts its quota.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from atoll.api.clusterqueue import ClusterQueue
from atoll.api.cohort import Cohort
from atoll.api.core import Job, PriorityClass
from atoll.api.localqueue import LocalQueue
from atoll.api.priority import WorkloadPriorityClass
from atoll.api.resource import ResourceClaimTemplate
from atoll.api.resourceflavor import ResourceFlavor
from atoll.api.workload import Workload
from atoll.engine import model as m
from atoll.engine.snapshot import Snapshot, admission_usage, build_snapshot
from atoll.state import convert, devicequota
from atoll.state import workloads as wls
from atoll.state.inventory import ClusterInventory
from atoll.state.topologyassignment import placement_from_status

UNKNOWN_QUEUE_PREFIX = "\0lq:"
ISLAND_ATTRIBUTE = "gpu.atoll.dev/island"
"""Device attribute reported as "island" in placement messages (the sandbox's fake GPUs)."""
"""Pending groups for workloads whose LocalQueue (or its ClusterQueue) is unknown."""


def _older(new: str | None, current: str | None) -> bool:
    """Whether `new` is an older resourceVersion than `current`. Kubernetes' versions are
    opaque, but etcd-backed servers issue increasing integers; anything else is not older."""
    if not new or not current or not new.isdigit() or not current.isdigit():
        return False
    return int(new) < int(current)


@dataclass(slots=True)
class Cache:
    """Everything the scheduler needs, keyed by name or `namespace/name`."""

    flavors: dict[str, ResourceFlavor] = field(default_factory=dict)
    cluster_queues: dict[str, ClusterQueue] = field(default_factory=dict)
    cohorts: dict[str, Cohort] = field(default_factory=dict)
    local_queues: dict[str, LocalQueue] = field(default_factory=dict)
    workload_classes: dict[str, WorkloadPriorityClass] = field(default_factory=dict)
    priority_classes: dict[str, PriorityClass] = field(default_factory=dict)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    workloads: dict[str, Workload] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)
    assumed: dict[str, m.Admission] = field(default_factory=dict)
    """Admissions decided by this process and not yet seen in the Workload's status."""
    evicting: set[str] = field(default_factory=set)
    """Victims whose eviction was decided and not yet seen in their status."""
    preemptors: dict[str, str] = field(default_factory=dict)
    """BestEffortFIFO ClusterQueue → the workload that issued preemptions from its head and
    is not admitted yet: it stays the head (Kueue's sticky preemptor; see `preempting`)."""
    parked: dict[str, int] = field(default_factory=dict)
    """Inadmissible workloads, with the epoch they were parked at."""
    epoch: int = 0
    """Bumped by every change that can make a parked workload admissible."""
    inventory: ClusterInventory = field(
        default_factory=lambda: ClusterInventory(island_attribute=ISLAND_ATTRIBUTE)
    )
    """Nodes, pods, Topologies and DRA objects, and the placements of admitted gangs."""
    claim_templates: dict[str, ResourceClaimTemplate] = field(default_factory=dict)
    """ResourceClaimTemplates by `namespace/name` (write through `set_claim_template`)."""
    device_classes: dict[str, str] = field(default_factory=dict)
    """DeviceClass → quota resource (the Configuration's `resources.deviceClassMappings`);
    empty: DRA devices are placed but not charged to quota."""
    _holding: dict[str, None] = field(default_factory=dict)
    """Keys of Workloads whose status holds quota and that have not finished (ordered)."""
    _waiting: dict[str, None] = field(default_factory=dict)
    """Keys of Workloads without quota in their status that have not finished (ordered)."""
    _engine_workloads: dict[str, m.Workload] = field(default_factory=dict)
    _admitted: dict[str, m.AdmittedWorkload] = field(default_factory=dict)
    """The engine form of each holding workload, reused while it is the same."""
    _usage: dict[str, tuple[m.Admission, dict[tuple[m.FlavorName, m.ResourceName], int]]] = field(
        default_factory=dict
    )
    """`admission_usage` of each holding workload, with the admission it was computed for."""
    _evicted_status: dict[str, bool] = field(default_factory=dict)
    """`Evicted=True` in the status of each holding Workload version."""
    _admissions: dict[str, m.Admission | None] = field(default_factory=dict)
    """`status.admission` of each Workload in engine form, converted once per version."""
    _e_flavors: dict[str, m.ResourceFlavor] = field(default_factory=dict)
    _e_cluster_queues: dict[str, m.ClusterQueue] = field(default_factory=dict)
    _e_cohorts: dict[str, m.Cohort] = field(default_factory=dict)
    _e_local_queues: dict[str, m.LocalQueue] = field(default_factory=dict)

    # -- queue objects (each change may make parked workloads admissible) -----------------
    def bump(self) -> None:
        self.epoch += 1
        self.parked.clear()

    def set_flavor(self, obj: ResourceFlavor) -> None:
        self.flavors[obj.name] = obj
        self._e_flavors[obj.name] = convert.flavor(obj)
        self.bump()

    def set_cluster_queue(self, obj: ClusterQueue) -> None:
        old = self.cluster_queues.get(obj.name)
        self.cluster_queues[obj.name] = obj
        if (
            old is None
            or old.spec != obj.spec
            or old.metadata.deletion_timestamp != (obj.metadata.deletion_timestamp)
        ):
            self._e_cluster_queues[obj.name] = convert.cluster_queue(obj)
            self.bump()

    def set_cohort(self, obj: Cohort) -> None:
        old = self.cohorts.get(obj.name)
        self.cohorts[obj.name] = obj
        if old is None or old.spec != obj.spec:
            self._e_cohorts[obj.name] = convert.cohort(obj)
            self.bump()

    def set_local_queue(self, obj: LocalQueue) -> None:
        key = wls.key_of(obj.namespace, obj.name)
        old = self.local_queues.get(key)
        self.local_queues[key] = obj
        if old is None or old.spec != obj.spec:
            self._e_local_queues[key] = convert.local_queue(obj)
            self.bump()

    def set_namespace(self, name: str, labels: dict[str, str]) -> None:
        if self.namespaces.get(name) != labels:
            self.namespaces[name] = labels
            for key in [k for k in self._engine_workloads if k.startswith(f"{name}/")]:
                del self._engine_workloads[key]
            self.bump()

    def set_workload_class(self, obj: WorkloadPriorityClass) -> None:
        self.workload_classes[obj.name] = obj

    def set_priority_class(self, obj: PriorityClass) -> None:
        self.priority_classes[obj.name] = obj

    def delete(self, kind: str, key: str) -> None:
        """Forget an object of a queue kind: rf, cq, co, lq, wpc, pc, ns."""
        tables: dict[str, tuple[dict[str, Any], ...]] = {
            "rf": (self.flavors, self._e_flavors),
            "cq": (self.cluster_queues, self._e_cluster_queues),
            "co": (self.cohorts, self._e_cohorts),
            "lq": (self.local_queues, self._e_local_queues),
            "wpc": (self.workload_classes,),
            "pc": (self.priority_classes,),
            "ns": (self.namespaces,),
        }
        for table in tables[kind]:
            table.pop(key, None)
        self.bump()

    # -- workloads and jobs ---------------------------------------------------------------
    def set_workload(self, wl: Workload) -> None:
        """Store a Workload unless the cache already holds a newer version of it (a write's
        response can overtake the watch events that precede it)."""
        key = wls.wl_key(wl)
        old = self.workloads.get(key)
        if old is not None and _older(wl.metadata.resource_version, old.metadata.resource_version):
            return
        self.workloads[key] = wl
        self._index(key, wl)
        self._forget_engine_form(key)
        self._admissions.pop(key, None)
        if wls.has_quota(wl):
            self.assumed.pop(key, None)
            self._unstick(key)
        if wls.is_evicted(wl) or not wls.has_quota(wl):
            self.evicting.discard(key)
        was_holding = old is not None and wls.has_quota(old) and not wls.is_finished(old)
        holds = wls.has_quota(wl) and not wls.is_finished(wl)
        if was_holding and not holds:
            self.inventory.release(key)
            self.bump()  # quota released: parked workloads may fit now
        elif holds and not self.inventory.holds(key):
            # Admitted before this process started (or by another replica): hold its
            # placement as its status records it, so that its unbound pods keep their room.
            placement = placement_from_status(key, wl)
            if placement is not None:
                self.inventory.hold(placement)
        if old is None or old.spec != wl.spec:
            self.parked.pop(key, None)

    def _forget_engine_form(self, key: str) -> None:
        self._engine_workloads.pop(key, None)
        self._admitted.pop(key, None)
        self._usage.pop(key, None)
        self._evicted_status.pop(key, None)

    def _index(self, key: str, wl: Workload) -> None:
        finished, quota = wls.is_finished(wl), wls.has_quota(wl)
        if quota and not finished:
            self._holding[key] = None
        else:
            self._holding.pop(key, None)
        if not quota and not finished:
            self._waiting[key] = None
        else:
            self._waiting.pop(key, None)

    def delete_workload(self, key: str) -> None:
        old = self.workloads.pop(key, None)
        self._holding.pop(key, None)
        self._waiting.pop(key, None)
        self._forget_engine_form(key)
        self._admissions.pop(key, None)
        assumed = self.assumed.pop(key, None) is not None
        self.inventory.release(key)
        self.parked.pop(key, None)
        self.evicting.discard(key)
        self._unstick(key)
        if assumed or (old is not None and wls.has_quota(old)):
            self.bump()

    # -- ResourceClaimTemplates (their devices count against quota) -----------------------
    def set_claim_template(self, obj: ResourceClaimTemplate) -> None:
        self.claim_templates[wls.key_of(obj.namespace, obj.name)] = obj
        self._recount_devices(obj.namespace or "", obj.name)

    def delete_claim_template(self, namespace: str, name: str) -> None:
        self.claim_templates.pop(wls.key_of(namespace, name), None)
        self._recount_devices(namespace, name)

    def _recount_devices(self, namespace: str, template: str) -> None:
        """Workloads that get claims from this template are converted again (their device
        quota, or why it cannot be counted, may have changed) and tried again."""
        if not self.device_classes:
            return
        for key, wl in self.workloads.items():
            if wl.namespace == namespace and devicequota.uses_template(wl, template):
                self._engine_workloads.pop(key, None)
        self.bump()

    def _devices(self, wl: Workload) -> tuple[dict[str, dict[str, int]], str | None]:
        """Per-pod device quota of each pod set, or Kueue's message why it can't be counted."""
        if not self.device_classes:
            return {}, None
        prefix = f"{wl.namespace or ''}/"
        try:
            return devicequota.workload_devices(
                wl, lambda name: self.claim_templates.get(prefix + name), self.device_classes
            ), None
        except devicequota.DeviceQuotaError as e:
            return {}, str(e)

    def set_job(self, job: Job) -> None:
        self.jobs[wls.key_of(job.namespace, job.name)] = job

    def delete_job(self, key: str) -> None:
        self.jobs.pop(key, None)

    def workloads_of_job(self, job_key: str, job_uid: str | None = None) -> list[Workload]:
        """Workloads whose controller owner is the Job `namespace/name` (and uid, if given)."""
        ns, _, name = job_key.partition("/")
        out = []
        for wl in self.workloads.values():
            if wl.namespace != ns:
                continue
            for ref in wl.metadata.owner_references or ():
                if (
                    ref.kind == "Job"
                    and ref.name == name
                    and (job_uid is None or ref.uid == job_uid)
                ):
                    out.append(wl)
                    break
        return out

    # -- the ledger -----------------------------------------------------------------------
    def assume(self, key: str, admission: m.Admission) -> None:
        self.assumed[key] = admission
        self.parked.pop(key, None)
        self._unstick(key)

    def preempting(self, key: str, cluster_queue: str) -> None:
        """`key` issued preemptions as the head of `cluster_queue`. In a BestEffortFIFO
        queue it stays the head until admitted or deleted, even when quota released by its
        victims brings older inadmissible workloads back: else one of those would be the
        head in the next cycle, the preemptor would get no turn, and the freed quota could
        go back to the victims, to be reclaimed again, forever (Kueue#6929, #7157)."""
        cq = self._e_cluster_queues.get(cluster_queue)
        if cq is not None and cq.queueing_strategy is m.QueueingStrategy.BEST_EFFORT_FIFO:
            self.preemptors[cluster_queue] = key

    def _unstick(self, key: str) -> None:
        if self.preemptors:
            for cq in [cq for cq, k in self.preemptors.items() if k == key]:
                del self.preemptors[cq]

    def forget(self, key: str) -> None:
        """A status write failed: drop the assumption so the quota is free again."""
        self.inventory.release(key)
        if self.assumed.pop(key, None) is not None:
            self.bump()

    def park(self, key: str) -> None:
        self.parked[key] = self.epoch

    def engine_workload(self, key: str) -> m.Workload | None:
        cached = self._engine_workloads.get(key)
        if cached is not None:
            return cached
        wl = self.workloads.get(key)
        if wl is None:
            return None
        devices, misconfigured = self._devices(wl)
        ew = convert.workload(
            wl,
            namespace_labels=self.namespaces.get(wl.namespace or "", {}),
            queued_at=wls.queue_order_time(wl),
            devices=devices,
            misconfigured=misconfigured,
        )
        self._engine_workloads[key] = ew
        return ew

    def holding(self) -> Iterable[tuple[str, m.Admission, bool]]:
        """(key, admission, evicted) of every workload that holds quota, assumed ones too."""
        for key in self._holding:
            if key in self.assumed:
                continue
            if key not in self._admissions:
                wl = self.workloads[key]
                self._admissions[key] = convert.admission(wl)
                self._evicted_status[key] = wls.is_evicted(wl)
            adm = self._admissions[key]
            if adm is not None:
                yield key, adm, self._evicted_status[key] or key in self.evicting
        for key, adm in self.assumed.items():
            if key in self.workloads:
                yield key, adm, key in self.evicting

    def is_pending(self, wl: Workload, now: float) -> bool:
        key = wls.wl_key(wl)
        if key in self.assumed or wls.is_finished(wl) or wls.has_quota(wl) or wls.is_deleting(wl):
            return False
        if not wl.spec.queue_name or not wl.spec.active:
            return False
        if wls.is_false(wl, wls.REQUEUED):
            return False
        at = wls.requeue_at(wl)
        return at is None or at <= now

    def next_requeue(self, now: float) -> float | None:
        """The earliest future requeueAt among pending workloads (for the loop's timer)."""
        times = [
            t
            for key in self._waiting
            if (t := wls.requeue_at(self.workloads[key])) is not None and t > now
        ]
        return min(times) if times else None

    def pending_by_queue(self, now: float) -> dict[m.ClusterQueueName, list[m.Workload]]:
        """Pending workloads grouped by ClusterQueue (unknown queues grouped by LocalQueue);
        a queue's sticky preemptor (`preempting`) is marked `sticky`."""
        groups: dict[m.ClusterQueueName, list[m.Workload]] = {}
        for key in self._waiting:
            wl = self.workloads[key]
            if not self.is_pending(wl, now):
                continue
            ew = self.engine_workload(key)
            if ew is None:
                continue
            lq = self.local_queues.get(wls.key_of(wl.namespace, wl.spec.queue_name or ""))
            cq = lq.spec.cluster_queue if lq is not None else None
            group = (
                cq
                if cq and cq in self.cluster_queues
                else f"{UNKNOWN_QUEUE_PREFIX}{ew.local_queue}"
            )
            if self.preemptors.get(group) == key:
                ew = replace(ew, sticky=True)
            groups.setdefault(m.ClusterQueueName(group), []).append(ew)
        return groups

    def parked_keys(self) -> frozenset[m.WorkloadKey]:
        return frozenset(m.WorkloadKey(k) for k, e in self.parked.items() if e == self.epoch)

    def _reserved_at(self, key: str) -> float:
        """When the workload's quota was reserved (Kueue's "most recently admitted" order of
        preemption candidates); a decision only assumed so far is the most recent of all."""
        if key in self.assumed:
            return math.inf
        cond = wls.condition(self.workloads[key], wls.QUOTA_RESERVED)
        return cond.last_transition_time.timestamp() if cond is not None else 0.0

    def snapshot(self, fair_sharing: m.FairSharing | None = None) -> Snapshot:
        admitted = []
        usage: dict[m.WorkloadKey, dict[tuple[m.FlavorName, m.ResourceName], int]] = {}
        for key, adm, evicted in self.holding():
            ew = self.engine_workload(key)
            if ew is None:
                continue
            memo = self._admitted.get(key)
            if (
                memo is None
                or memo.workload is not ew
                or memo.admission is not adm
                or memo.evicted != evicted
            ):
                memo = m.AdmittedWorkload(
                    workload=ew, admission=adm, evicted=evicted, reserved_at=self._reserved_at(key)
                )
                self._admitted[key] = memo
            charged = self._usage.get(key)
            if charged is None or charged[0] is not adm:
                charged = self._usage[key] = (adm, admission_usage(memo))
            usage[m.WorkloadKey(key)] = charged[1]
            admitted.append(memo)
        return build_snapshot(
            flavors=self._e_flavors.values(),
            cluster_queues=self._e_cluster_queues.values(),
            cohorts=self._e_cohorts.values(),
            local_queues=self._e_local_queues.values(),
            admitted=admitted,
            fair_sharing=fair_sharing,
            usage_of=usage,
        )
