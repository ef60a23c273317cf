"""The live cache: every object atoll reads, the admission ledger and the pending queues.

Mutable and synchronous (no awaits): kube handlers write into it, the scheduling loop reads a
snapshot of it. Mirrors Kueue's pkg/cache/scheduler (cache + assumed workloads) and
pkg/cache/queue (pending heaps, inadmissible workloads). The ledger of record is the Workload
status (QuotaReserved + admission); a decision taken but not yet seen in a Workload status is
*assumed* here so that the next cycle already counts its quota.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from atoll.api.admissioncheck import AdmissionCheck
from atoll.api.clusterqueue import AdmissionMode, ClusterQueue
from atoll.api.cohort import Cohort
from atoll.api.core import Job, Pod, PriorityClass
from atoll.api.jobset import JobSet
from atoll.api.leaderworkerset import LeaderWorkerSet
from atoll.api.localqueue import DEFAULT_LOCAL_QUEUE, LocalQueue
from atoll.api.mpijob import MPIJob
from atoll.api.priority import DEFAULT_WORKLOAD_PRIORITY_CLASS, WorkloadPriorityClass
from atoll.api.resource import ResourceClaimTemplate
from atoll.api.resourceflavor import ResourceFlavor
from atoll.api.trainjob import ClusterTrainingRuntime, TrainingRuntime, TrainJob
from atoll.api.workload import Workload
from atoll.engine import decisions as d
from atoll.engine import model as m
from atoll.engine import trust
from atoll.engine.ordering import QueueKey, queue_key, scheduling_class, with_usage
from atoll.engine.quota import NO_PARENT, LiveUsage, QuotaTree
from atoll.engine.snapshot import (
    Snapshot,
    Structure,
    admission_usage,
    assemble,
    build_structure,
    charge_tree,
    over_nominal,
    usage_of,
)
from atoll.state import admissionchecks, convert, devicequota
from atoll.state import workloads as wls
from atoll.state.afs import Tracker, admission_amounts
from atoll.state.inventory import ClusterInventory
from atoll.state.queues import PendingQueues
from atoll.state.topologyassignment import placement_from_status

UNKNOWN_QUEUE_PREFIX = "\0lq:"
"""Pending groups for workloads whose LocalQueue (or its ClusterQueue) is unknown."""
NO_USAGE: Mapping[m.LocalQueueKey, float] = MappingProxyType({})
"""The LocalQueue usages without Admission Fair Sharing (one object: compared by identity)."""
EVERY_QUEUE = "*"
"""The requeue scope of a change that may let any parked workload in (`Cache.bump`)."""
Lack = tuple[tuple[str, tuple[tuple[str, int], ...]], ...]
"""(flavor, ((resource, quota lacking), ...)) for each flavor a parked workload could fit."""


@dataclass(slots=True)
class _LackOrder:
    """One requeue scope's workloads with a lack record (`Cache.lacks`), in queue order, kept
    sorted from one release of quota to the next instead of sorted again at each
    (`Cache._lacking_in_order`). They are kept in runs, one per usage group: a LocalQueue
    whose ClusterQueue is ordered by its LocalQueues' usage (Admission Fair Sharing), or ""
    for the others. A run is sorted by the queue key without the usage; a walk merges the
    runs, each with its LocalQueue's usage of the moment, so a change of usage keeps them.
    An entry `(key, workload)` is live while the workload has a record in the scope and `at`
    gives it that group and key; otherwise it is dead and skipped (a record dropped and made
    again revives it: its key is the same)."""

    runs: dict[str, list[tuple[QueueKey, str]]] = field(default_factory=dict)
    at: dict[str, tuple[str, QueueKey]] = field(default_factory=dict)
    """Workload → (its group, the key of its entry) (`Cache._lack_entry` names the scope)."""
    added: set[str] = field(default_factory=set)
    """Workloads with a record and no entry: merged in at the next walk."""


REQUEUE_BATCH_PERIOD = 1.0
"""Seconds from a change that may make parked (inadmissible) workloads admissible to their
requeue: Kueue v0.17's `requeueBatchPeriod` (pkg/cache/queue/inadmissible_workloads.go)."""
LONG_REQUEUE_BATCH_PERIOD = 10.0
"""The period with Kueue's alpha feature gate `SchedulerLongRequeueInterval`."""
ISLAND_ATTRIBUTE = "gpu.atoll.dev/island"
"""Device attribute reported as "island" in placement messages (the sandbox's fake GPUs)."""


def requeue_period(*, batched: bool, long_interval: bool) -> float:
    """The batch period of the requeue of parked workloads (`Cache.requeue_period`): 0
    unless batched (`atoll.batchedRequeue`), else Kueue's, with or without its
    `SchedulerLongRequeueInterval` gate."""
    if not batched:
        return 0.0
    return LONG_REQUEUE_BATCH_PERIOD if long_interval else REQUEUE_BATCH_PERIOD


def _gone_key(key: str) -> QueueKey:
    """The queue key of a workload no longer cached: after every other."""
    return (math.inf, True, 0, math.inf, "", key)


def _lack_run(
    run: list[tuple[QueueKey, str]],
    group: str,
    usage: float | None,
    at: Mapping[str, tuple[str, QueueKey]],
    records: Mapping[str, Lack],
) -> Iterator[tuple[QueueKey, str]]:
    """The live entries of one usage group's run (`_LackOrder`) with their full queue key:
    the group's `usage` in front (None: the key is whole already)."""
    last = None
    for entry in run:
        qkey, key = entry
        # a record made again after its queue key was recomputed, unchanged: two equal
        # entries, side by side
        if entry != last and key in records and at.get(key) == (group, qkey):
            yield (qkey if usage is None else with_usage(qkey, usage)), key
        last = entry


def _owners(wl: Workload | None) -> tuple[tuple[str, str], ...]:
    """(kind, `namespace/name`) of each owner of `wl`."""
    if wl is None:
        return ()
    return tuple(
        (ref.kind, wls.key_of(wl.namespace, ref.name)) for ref in wl.metadata.owner_references or ()
    )


def _awaits_checks(wl: Workload) -> bool:
    if wls.is_finished(wl):
        return False
    return bool(admissionchecks.states(wl)) or (wls.has_quota(wl) and not wls.is_admitted(wl))


def _reclaiming(old: Workload, new: Workload) -> bool:
    """Whether the reclaimable pods of a Workload changed between two versions."""
    before, after = old.status.reclaimable_pods, new.status.reclaimable_pods
    return before != after and wls.reclaimable_counts(before) != wls.reclaimable_counts(after)


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
    admission_checks: dict[str, AdmissionCheck] = field(default_factory=dict)
    priority_classes: dict[str, PriorityClass] = field(default_factory=dict)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    workloads: dict[str, Workload] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)
    succeeded_pods: dict[str, frozenset[tuple[str, int | None]]] = field(default_factory=dict)
    """Job UID → its pods seen Succeeded on the pod watch, with their completion index (an
    Indexed Job's): ahead of the Job's own status, which its controller updates a second or
    more later (`control/jobframework.reclaimable_pods`). Replaced, never edited."""
    jobsets: dict[str, JobSet] = field(default_factory=dict)
    mpijobs: dict[str, MPIJob] = field(default_factory=dict)
    trainjobs: dict[str, TrainJob] = field(default_factory=dict)
    training_runtimes: dict[str, TrainingRuntime] = field(default_factory=dict)
    """TrainingRuntimes by `namespace/name` (read only: a TrainJob's pod sets come from them)."""
    cluster_training_runtimes: dict[str, ClusterTrainingRuntime] = field(default_factory=dict)
    """ClusterTrainingRuntimes by name."""
    trainjob_jobsets: dict[str, JobSet] = field(default_factory=dict)
    """The JobSets Trainer made for TrainJobs (read only), by `namespace/name`, the
    TrainJob's: Trainer v2.0 reports none of their status in the TrainJob's, so a TrainJob's
    active, ready and succeeded Jobs are read here (`TrainJobIntegration.child`)."""
    pod_groups: dict[str, dict[str, Pod]] = field(default_factory=dict)
    """Managed plain pods (the `pod` integration) by group key (`namespace/group`, or
    `namespace/pod` for a single pod), then by pod name."""
    leaderworkersets: dict[str, LeaderWorkerSet] = field(default_factory=dict)
    lws_pods: dict[str, dict[str, Pod]] = field(default_factory=dict)
    """Pods of managed LeaderWorkerSets by group key (`namespace/<lws>-<index>`), then name."""
    assumed: dict[str, m.Admission] = field(default_factory=dict)
    """Admissions decided by this process and not yet seen in the Workload's status."""
    evicting: set[str] = field(default_factory=set)
    """Victims whose eviction was decided and not yet seen in their status."""
    preemptors: dict[str, str] = field(default_factory=dict)
    """BestEffortFIFO ClusterQueue → the workload that issued preemptions from its head and
    is not admitted yet: it stays the head (Kueue's sticky preemptor; see `preempting`)."""
    parked: dict[str, tuple[str | None, int]] = field(default_factory=dict)
    """Inadmissible workloads parked one at a time, with their queue's epoch when they were
    parked (whole queues are parked by `queues.park_all`; `parked_keys` gives both)."""
    queues: PendingQueues = field(default_factory=PendingQueues)
    """The pending workloads by queue, in queue order (see `queue_heads`), and each queue's
    epoch: a workload parked in an older epoch of its queue is awake."""
    checked: set[str] = field(default_factory=set)
    """Workloads whose admission checks the scheduler looks at (`Scheduler.admission_checks`):
    those with check states, and those holding quota but not admitted."""
    priority_class_defaulting: bool = False
    """Kueue's `WorkloadPriorityClassDefaulting` gate (`has_default_priority_class`)."""
    afs: Tracker | None = None
    """The LocalQueues' usage under Admission Fair Sharing (None: the Configuration has no
    `admissionFairSharing`): it orders the queues of ClusterQueues whose admission scope
    asks for it (`queue_order`)."""
    requeue_period: float = 0.0
    """Seconds from a change that may make parked workloads admissible (`bump`) to their
    requeue; 0 (the default) requeues them at the next step, REQUEUE_BATCH_PERIOD is
    Kueue's batching (`requeue_period`)."""
    requeues: dict[str, float | None] = field(default_factory=dict)
    """The requested requeues by scope (`bump`: every queue, a root Cohort's tree, or a
    ClusterQueue without a Cohort), each with when it is due: `requeue_period` after the
    first step that saw the request (the step's clock; the cache reads none), None until a
    step saw it."""
    lacks: dict[str, dict[str, Lack]] = field(default_factory=dict)
    """Scope → parked workload → what it lacked when it was parked for quota (`note_lack`):
    freed quota that covers it wakes it at once (`requeue_due`). Nested: `fork` copies it."""
    lack_scope: dict[str, str] = field(default_factory=dict)
    """Workload → its scope in `lacks`."""
    _lack_orders: dict[str, _LackOrder] = field(default_factory=dict)
    """Scope → its `lacks` in queue order (`_lacking_in_order`); not copied by `fork`."""
    _lack_entry: dict[str, str] = field(default_factory=dict)
    """Workload → the scope whose `_lack_orders` has its entry (at most one)."""
    _lack_seen: dict[str, int] = field(default_factory=dict)
    """Scope → the `_queues_version` of its last walk (what the kept keys and usage groups
    read besides each workload's engine form): an order is kept once a version holds for
    two walks, and only for that version."""
    freed: dict[str, dict[tuple[str, str], int]] = field(default_factory=dict)
    """Scope → (flavor, resource) → quota released there since the last step. Nested:
    `fork` copies it."""
    promised: frozenset[str] = frozenset()
    """The workloads holding a backfill reservation (set by each step): the first step after
    a change (`bump`) wakes them at once, not a batch period later, since their
    reservation's start time is a promise; the other parked workloads wait for the batch."""
    promised_due: bool = False
    """A change since the last step may let the `promised` workloads in."""
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
    _structure: Structure | None = None
    """The queue-object part of the snapshot; None after a queue object changed."""
    _ledger: _Ledger | None = None
    """The admitted part of the snapshot, kept up to date between snapshots."""
    _dirty: set[str] = field(default_factory=set)
    """Workloads whose part in the ledger may have changed since the last snapshot."""
    _queues_version: int = 0
    """Bumped with every change of a queue object the snapshot reads (see `_structure`)."""
    _scope_memo: tuple[int, dict[str, str]] | None = None
    """(`_queues_version`, `_scopes()` at that version); replaced, never edited."""
    _lack_memo: tuple[d.Pending, int, tuple[Lack, str]] | None = None
    """The last `_lack_of`: (its decision, `_queues_version`, its result); a class's members
    are parked one by one with the same decision object."""
    _waiting_memo: dict[str, tuple[Workload, int, bool, str | None, float | None]] = field(
        default_factory=dict
    )
    """Per waiting Workload version: what `pending_by_queue` reads from it that does not
    depend on the time or the assumptions (the Workload, `_queues_version`, whether it is
    queued at all, its ClusterQueue if known, its requeueAt)."""
    _evicted_status: dict[str, bool] = field(default_factory=dict)
    """`Evicted=True` in the status of each holding Workload version."""
    _admissions: dict[str, m.Admission | None] = field(default_factory=dict)
    """`status.admission` of each Workload in engine form, converted once per version."""
    _owned: dict[tuple[str, str], dict[str, None]] = field(default_factory=dict)
    """(owner kind, owner `namespace/name`) → keys of the Workloads that reference it, in the
    order they entered the cache (`workloads_of_job` without a scan of every Workload)."""
    _e_flavors: dict[str, m.ResourceFlavor] = field(default_factory=dict)
    _e_cluster_queues: dict[str, m.ClusterQueue] = field(default_factory=dict)
    _e_cohorts: dict[str, m.Cohort] = field(default_factory=dict)
    _e_local_queues: dict[str, m.LocalQueue] = field(default_factory=dict)
    _lq_waiting: dict[str, dict[str, None]] = field(default_factory=dict)
    """Under Admission Fair Sharing: LocalQueue → the waiting Workloads that name it (their
    queue order moves with its usage)."""
    _lq_of: dict[str, str] = field(default_factory=dict)
    """Under Admission Fair Sharing: waiting Workload → the LocalQueue in `_lq_waiting`."""
    _afs_new: bool = True
    """A LocalQueue never sampled may exist (`sample_usage` then looks at all of them)."""
    _usage_memo: tuple[tuple[int, int], dict[str, float]] = field(
        default_factory=lambda: ((-1, -1), {})
    )
    """((tracker version, `_queues_version`), LocalQueue → `lq_usage`)."""
    _lq_usage_memo: tuple[tuple[int, int], Mapping[m.LocalQueueKey, float]] | None = None
    """((tracker version, `_queues_version`), `_lq_usages()` then); replaced, never edited."""

    def fork(self) -> Cache:
        """A copy whose tables (and the inventory's ledger, the queues, the lacks) can be
        changed freely. The API objects themselves are shared: they are immutable models,
        replaced, not edited."""
        copy = dataclasses.replace(self)
        for f in dataclasses.fields(Cache):
            value = getattr(self, f.name)
            if isinstance(value, dict | set):
                setattr(copy, f.name, type(value)(value))
        copy.inventory = self.inventory.fork()
        copy.queues = self.queues.fork()
        copy.lacks = {scope: dict(records) for scope, records in self.lacks.items()}
        copy._lack_orders, copy._lack_entry = {}, {}  # sorted again on the copy's first walk
        copy._lack_seen = {}
        copy.freed = {scope: dict(amounts) for scope, amounts in self.freed.items()}
        copy._lq_waiting = {lq: dict(keys) for lq, keys in self._lq_waiting.items()}
        copy._usage_memo, copy._lq_usage_memo = ((-1, -1), {}), None
        if self.afs is not None:
            copy.afs = self.afs.fork()
        return copy

    # -- queue objects (each change may make parked workloads admissible) -----------------
    def bump(self, *scopes: str) -> None:
        """Something changed that may make parked workloads admissible: request their
        requeue. `scopes` (from `scope_of`) name what may have become admissible: the
        ClusterQueues of a root Cohort's tree, or one ClusterQueue without a Cohort, as
        Kueue's requeuer; none: every queue (capacity, or objects read by all queues). As
        Kueue, the requeue is batched (`requeue_due`): changes within one period wake the
        parked workloads of a scope once, not once per change."""
        for scope in scopes or (EVERY_QUEUE,):
            self.requeues.setdefault(scope, None)
        self.promised_due = True

    @property
    def requeue_requested(self) -> bool:
        """Whether a requeue is requested (due now or later)."""
        return bool(self.requeues)

    def scope_of(self, cluster_queue: str | None) -> str:
        """The requeue scope of a change of quota in `cluster_queue`: its root Cohort's tree
        (in a Cohort), else the ClusterQueue alone; every queue for a Cohort tree with a
        cycle, or an unknown ClusterQueue."""
        if not cluster_queue:
            return EVERY_QUEUE
        return self._scopes().get(cluster_queue, EVERY_QUEUE)

    def _scopes(self) -> dict[str, str]:
        """ClusterQueue → its scope, worked out once per version of the queue objects."""
        memo = self._scope_memo
        if memo is None or memo[0] != self._queues_version:
            memo = (
                self._queues_version,
                {
                    name: f"cq:{name}" if cq.cohort is None else self._cohort_scope(cq.cohort)
                    for name, cq in self._e_cluster_queues.items()
                },
            )
            self._scope_memo = memo
        return memo[1]

    def _cohort_scope(self, cohort: str) -> str:
        seen = {cohort}
        while (co := self._e_cohorts.get(cohort)) is not None and co.parent is not None:
            if co.parent in seen:
                return EVERY_QUEUE  # a cycle (Kueue leaves such a tree alone until it is fixed)
            seen.add(co.parent)
            cohort = co.parent
        return f"co:{cohort}"

    def requeue_due(self, now: float) -> None:
        """The batched requeue at `now`, the step's clock. A request not timed yet is due
        `requeue_period` from now; changes of its scope before it is due join it; when it is
        due, the parked workloads of its scope are woken at once (Kueue's requeuer, whose
        delaying queue keeps the earliest time of a request made again before it is due)."""
        if self.freed:
            for scope, amounts in self.freed.items():
                self._wake_fitting(scope, amounts)
            self.freed.clear()
        for scope, at in self.requeues.items():
            if at is None:
                self.requeues[scope] = now + self.requeue_period
        due = [scope for scope, at in self.requeues.items() if at is not None and at <= now]
        if EVERY_QUEUE in due:
            self.queues.wake_all(self.parked)
            self.lacks.clear()
            self.lack_scope.clear()
        elif due:
            scopes = set(due)
            self.queues.wake_queues(
                (cq for cq, scope in self._scopes().items() if scope in scopes), self.parked
            )
            for scope in due:
                for key in self.lacks.pop(scope, {}):
                    self.lack_scope.pop(key, None)
        for scope in due:
            del self.requeues[scope]
        if self.promised_due:
            self.promised_due = False
            for key in self.promised:
                self.queues.wake(key, self.parked)

    def wake_parked(self) -> None:
        """Wake every parked workload now (a new epoch of every queue); what-if copies that
        ask about capacity, not timing, call it directly."""
        self.queues.wake_all(self.parked)
        self.requeues.clear()
        self.lacks.clear()
        self.lack_scope.clear()
        self.freed.clear()
        self.promised_due = False

    def note_lack(self, key: str, dec: d.Pending) -> None:
        """`key` is parked with `dec`: if it waits for quota (not for more than its
        ClusterQueue could ever get), remember what it lacks on each flavor, so that a
        release covering that wakes it before the batched requeue."""
        self.note_lacks((key,), dec)

    def note_lacks(self, keys: Iterable[str], dec: d.Pending) -> None:
        """`note_lack` for each of `keys`, all parked with the same decision (a class)."""
        lacks, scope = self._lack_of(dec)
        records: dict[str, Lack] | None = None
        order = self._lack_orders.get(scope) if lacks else None
        lack_scope, entry = self.lack_scope, self._lack_entry
        for key in keys:
            if key in lack_scope:
                self._drop_lack(key)
            if lacks:
                if records is None:
                    records = self.lacks.setdefault(scope, {})
                records[key] = lacks
                lack_scope[key] = scope
                if order is not None and entry.get(key) != scope:
                    order.added.add(key)

    def _lack_of(self, dec: d.Pending) -> tuple[Lack, str]:
        """What a workload parked with `dec` lacks on each flavor it could fit, and the scope
        of the release that would cover it; no lack when it does not wait for quota."""
        memo = self._lack_memo
        if memo is not None and memo[0] is dec and memo[1] == self._queues_version:
            return memo[2]
        out = self._lack_of_uncached(dec)
        self._lack_memo = (dec, self._queues_version, out)
        return out

    def _lack_of_uncached(self, dec: d.Pending) -> tuple[Lack, str]:
        if dec.reason is not d.PendingReason.WAITING_FOR_QUOTA or not dec.shortfalls:
            return (), EVERY_QUEUE
        per: dict[str, dict[str, int]] = {}
        never: set[str] = set()
        for s in dec.shortfalls:
            if s.needed > s.maximum:
                never.add(s.flavor)
            lack = s.needed - s.available
            if lack > 0:
                need = per.setdefault(s.flavor, {})
                need[s.resource] = max(need.get(s.resource, 0), lack)
        lacks = tuple((f, tuple(need.items())) for f, need in per.items() if f not in never)
        scope = self.scope_of(dec.cluster_queue)
        return (lacks if scope != EVERY_QUEUE else ()), scope

    def _drop_lack(self, key: str) -> None:
        scope = self.lack_scope.pop(key, None)
        if scope is not None:
            records = self.lacks.get(scope)
            if records is not None:
                records.pop(key, None)
            order = self._lack_orders.get(scope)
            if order is not None:
                order.added.discard(key)

    def _forget_lack_order(self, scope: str) -> None:
        order = self._lack_orders.pop(scope)
        for key in order.at:
            if self._lack_entry.get(key) == scope:
                del self._lack_entry[key]

    def _wake_fitting(self, scope: str, amounts: Mapping[tuple[str, str], int]) -> None:
        """Wake now the parked workloads of `scope` whose lack on some flavor the quota
        released there since the last step covers, in queue order (priority, then age),
        each taking what it lacks from what is left to its ClusterQueue, up to the first
        that it does not cover: no workload is woken ahead of one that waits for more quota
        (the batch wakes it and the others, as Kueue's requeue, where the higher priority
        is tried first).

        Each ClusterQueue takes from the whole release: the first covered workload of every
        queue is woken, and the cycle picks among them as Kueue's cycle picks among heads
        (non-borrowing first, then priority and age). Taking from one shared amount in queue
        order instead could give a queue's own nominal quota, just released, to an older
        workload of another queue that borrows it, while the queue's own waiting workload
        stays parked; that one then reclaims it at once, and the borrower is evicted right
        after its admission."""
        records = self.lacks.get(scope)
        if not records:
            if scope in self._lack_orders:  # nothing left to keep in order: its entries go
                self._forget_lack_order(scope)
            return
        left_of: dict[str | None, dict[tuple[str, str], int]] = {}
        queue_of = self.queues.group_of  # the ClusterQueue each waits in
        for key in self._lacking_in_order(scope, records):
            cq = queue_of.get(key)
            left = left_of.get(cq)
            if left is None:
                left = left_of[cq] = dict(amounts)
            for flavor, need in records[key]:
                if all(lack <= left.get((flavor, r), 0) for r, lack in need):
                    for r, lack in need:
                        left[(flavor, r)] -= lack
                    self._drop_lack(key)
                    self.queues.wake(key, self.parked)
                    break
            else:
                return

    def _order(self, key: str) -> QueueKey:
        ew = self.engine_workload(key)
        return self.queue_order(ew) if ew is not None else _gone_key(key)

    def _usage_group(self, key: str) -> tuple[str, QueueKey]:
        """`key`'s usage group (`_LackOrder`) and its queue key without the usage: that
        group's usage of the moment put in front gives its `_order`."""
        ew = self.engine_workload(key)
        if ew is None:
            return "", _gone_key(key)
        return self._usage_queue(ew) or "", queue_key(ew)

    def _lacking_in_order(self, scope: str, records: Mapping[str, Lack]) -> Iterator[str]:
        """The workloads of `records` (the scope's lacks) in queue order, as
        `sorted(records, key=self._order)`, from the scope's `_LackOrder`, kept once the
        queue objects held from one walk to the next: sorted again only when dead entries
        outnumber the live ones, else the workloads added since are merged in; the dead
        entries in front of each run are dropped. The runs are merged lazily: a walk that
        stops early reads a few entries of each. The caller drops or keeps records between
        two workloads, not others'."""
        stamp = self._queues_version
        if self._lack_seen.get(scope) != stamp:
            # new queue objects: sorted once, nothing kept (a kept order is always of the
            # scope's `_lack_seen` version)
            if scope in self._lack_orders:
                self._forget_lack_order(scope)
            self._lack_seen[scope] = stamp
            yield from sorted(records, key=self._order)
            return
        order = self._lack_orders.get(scope)
        if order is None or sum(map(len, order.runs.values())) > 2 * len(records) + 32:
            order = self._sort_lacks(scope, records)
        elif order.added:
            touched = {
                self._lack_enter(scope, order, k) for k in sorted(order.added) if k in records
            }
            order.added.clear()
            for group in touched:
                order.runs[group].sort()  # two sorted runs: merged in linear time
        at = order.at
        streams = []
        for group in sorted(order.runs):
            run = order.runs[group]
            i = 0
            while i < len(run):  # the dead entries in front go
                qkey, key = run[i]
                if at.get(key) == (group, qkey):
                    if key in records:
                        break
                    del at[key]
                    self._lack_entry.pop(key, None)
                i += 1
            del run[:i]
            if not run:
                del order.runs[group]
            else:
                usage = None if group == "" else self.lq_usage(group)
                streams.append(_lack_run(run, group, usage, at, records))
        for _, key in heapq.merge(*streams):
            yield key

    def _sort_lacks(self, scope: str, records: Mapping[str, Lack]) -> _LackOrder:
        if scope in self._lack_orders:
            self._forget_lack_order(scope)
        order = self._lack_orders[scope] = _LackOrder()
        for key in records:
            self._lack_enter(scope, order, key)
        for run in order.runs.values():
            run.sort()
        return order

    def _lack_enter(self, scope: str, order: _LackOrder, key: str) -> str:
        """Append `key`'s entry to its usage group's run (left to the caller to sort);
        returns the group."""
        group, qkey = self._usage_group(key)
        self._lack_at(scope, order, key, group, qkey)
        order.runs.setdefault(group, []).append((qkey, key))
        return group

    def _lack_at(self, scope: str, order: _LackOrder, key: str, group: str, qkey: QueueKey) -> None:
        """`key`'s entry in `scope` is at `qkey` in `group`'s run (an entry it had in another
        scope is dead)."""
        before = self._lack_entry.get(key)
        if before is not None and before != scope and (other := self._lack_orders.get(before)):
            other.at.pop(key, None)
        order.at[key] = (group, qkey)
        self._lack_entry[key] = scope

    def _lack_moved(self, key: str) -> None:
        """`key`'s engine form changed: its queue key may have, so its entry is dead and its
        record, if any, is merged in again at the next walk."""
        before = self._lack_entry.pop(key, None)
        if before is not None and (order := self._lack_orders.get(before)) is not None:
            order.at.pop(key, None)
        scope = self.lack_scope.get(key)
        if scope is not None and (order := self._lack_orders.get(scope)) is not None:
            order.added.add(key)

    # -- Admission Fair Sharing -----------------------------------------------------------
    def uses_afs(self, cluster_queue: str | None) -> bool:
        """Whether `cluster_queue` orders its workloads by LocalQueue usage: Admission Fair
        Sharing is configured and its `admissionScope` asks for it."""
        if self.afs is None or cluster_queue is None:
            return False
        cq = self.cluster_queues.get(cluster_queue)
        scope = cq.spec.admission_scope if cq is not None else None
        return scope is not None and scope.admission_mode is AdmissionMode.USAGE_BASED

    def lq_usage(self, lq: str) -> float:
        """The usage that orders LocalQueue `lq`'s workloads (`namespace/name`); worked out
        once per change of the usages or of the queue objects."""
        tracker = self.afs
        if tracker is None:
            return 0.0
        stamp = (tracker.version, self._queues_version)
        memo = self._usage_memo
        if memo[0] != stamp:
            memo = self._usage_memo = (stamp, {})
        usage = memo[1].get(lq)
        if usage is None:
            obj = self.local_queues.get(lq)
            fs = obj.spec.fair_sharing if obj is not None else None
            weight = 1.0 if fs is None or fs.weight is None else fs.weight.milli / 1000
            usage = memo[1][lq] = tracker.usage(lq, weight)
        return usage

    def queue_order(self, ew: m.Workload) -> QueueKey:
        """`ew`'s key in its ClusterQueue's order (`engine.ordering.queue_key`, with its
        LocalQueue's usage where Admission Fair Sharing applies)."""
        lq = self._usage_queue(ew)
        return queue_key(ew) if lq is None else queue_key(ew, self.lq_usage(lq))

    def _usage_queue(self, ew: m.Workload) -> str | None:
        """`ew`'s LocalQueue (`namespace/name`) if its usage orders `ew`'s ClusterQueue."""
        if self.afs is not None:
            lq = self._e_local_queues.get(ew.local_queue)
            if lq is not None and self.uses_afs(lq.cluster_queue):
                return lq.key
        return None

    @property
    def holds_quota(self) -> bool:
        """Whether a Workload holds quota."""
        return bool(self._holding or self.assumed)

    @property
    def orders_by_usage(self) -> bool:
        """Whether a ClusterQueue is ordered by its LocalQueues' usage."""
        return any(self.uses_afs(name) for name in self.cluster_queues)

    def sample_usage(self, now: float) -> None:
        """Take the LocalQueue usage samples due at `now` (Admission Fair Sharing), before a
        step reads the snapshot and the queues, and move the workloads of each LocalQueue
        whose usage changed to their new place in the queue."""
        tracker = self.afs
        if tracker is None:
            return
        nxt = tracker.next_due()
        if self._afs_new or nxt is None or nxt <= now:
            self._afs_new = False
            tracker.due((k for k, lq in self.local_queues.items() if lq.spec.cluster_queue), now)
        if not tracker.changed:
            return
        for lq in sorted(tracker.take_changed()):
            e_lq = self._e_local_queues.get(lq)
            waiting = self._lq_waiting.get(lq)
            if e_lq is not None and waiting and self.uses_afs(e_lq.cluster_queue):
                # its workloads move together (their order among themselves stays)
                self.queues.rekey(e_lq.cluster_queue, waiting, self.lq_usage(lq))

    def _afs_index(self, key: str, wl: Workload | None) -> None:
        """Keep the tracker's view of `key`: what it holds while admitted, its penalty, and
        which LocalQueue it waits in."""
        tracker = self.afs
        if tracker is None:
            return
        lq = wls.key_of(wl.namespace, wl.spec.queue_name) if wl and wl.spec.queue_name else None
        waiting = lq if wl is not None and key in self._waiting else None
        before = self._lq_of.get(key)
        if before != waiting:
            if before is not None:
                members = self._lq_waiting[before]
                members.pop(key, None)
                if not members:
                    del self._lq_waiting[before]
                del self._lq_of[key]
            if waiting is not None:
                self._lq_waiting.setdefault(waiting, {})[key] = None
                self._lq_of[key] = waiting
        if wl is None:
            tracker.set_admitted(key, None, None)
            tracker.drop(key)
            return
        admitted = lq is not None and wls.is_admitted(wl) and not wls.is_finished(wl)
        admission = convert.admission(wl) if admitted else None
        tracker.set_admitted(key, lq, admission_amounts(admission) if admission else None)
        if key in tracker.charged:
            if admitted:
                cond = wls.condition(wl, wls.ADMITTED)
                at = cond.last_transition_time.timestamp() if cond is not None else 0.0
                tracker.settle(key, at)
            elif (not wls.has_quota(wl) or wls.is_finished(wl)) and key not in self.assumed:
                tracker.drop(key)

    def afs_status(self, lq: str) -> tuple[dict[str, int], float] | None:
        """The last sample of LocalQueue `lq` (milli-units by resource, its time), for its
        status; None without Admission Fair Sharing or before its first sample."""
        return None if self.afs is None else self.afs.written.get(lq)

    @property
    def epoch(self) -> int:
        """Bumped by every requeue (of every queue, or of some)."""
        return self.queues.clock

    def _queues_changed(self) -> None:
        self._structure = None
        self._queues_version += 1

    def set_flavor(self, obj: ResourceFlavor) -> None:
        self.flavors[obj.name] = obj
        self._e_flavors[obj.name] = convert.flavor(obj)
        self._queues_changed()
        self.bump()

    def set_cluster_queue(self, obj: ClusterQueue) -> None:
        old = self.cluster_queues.get(obj.name)
        self.cluster_queues[obj.name] = obj
        if (
            old is None
            or old.spec != obj.spec
            or old.metadata.deletion_timestamp != (obj.metadata.deletion_timestamp)
            or convert.backfill(old) != convert.backfill(obj)  # atoll.dev/backfill*
        ):
            if old is None:
                self._e_cluster_queues[obj.name] = self._engine_cq(obj)
                self._queues_changed()
                self.bump()  # its LocalQueues' workloads waited in queues of their own
                return
            before = self.scope_of(obj.name)
            self._e_cluster_queues[obj.name] = self._engine_cq(obj)
            self._queues_changed()
            # its tree (Kueue's), and the one it left (what it used or lent there changed)
            self.bump(*{before, self.scope_of(obj.name)})

    def _engine_cq(self, obj: ClusterQueue) -> m.ClusterQueue:
        """The engine's ClusterQueue, inactive while an admission check it names is missing
        or not Active."""
        cq = convert.cluster_queue(obj)
        if cq.inactive_reason is None and cq.stop_policy is m.StopPolicy.NONE:  # Stopped first
            reason = admissionchecks.inactive_reason(obj, self.admission_checks)
            if reason is not None:
                cq = dataclasses.replace(cq, inactive_reason=reason)
        return cq

    def admission_checks_for(self, cluster_queue: str, flavors: Iterable[str]) -> tuple[str, ...]:
        """The admission checks a Workload admitted on `flavors` of the ClusterQueue must
        pass (none for a ClusterQueue not known)."""
        cq = self.cluster_queues.get(cluster_queue)
        return admissionchecks.for_flavors(cq, flavors) if cq is not None else ()

    def set_admission_check(self, obj: AdmissionCheck) -> None:
        old = self.admission_checks.get(obj.name)
        self.admission_checks[obj.name] = obj
        if old is None or admissionchecks.is_active(old) != admissionchecks.is_active(obj):
            self._checks_changed(obj.name)

    def _checks_changed(self, name: str) -> None:
        """The ClusterQueues naming this check may have turned active or inactive."""
        users = [cq for cq in self.cluster_queues.values() if name in admissionchecks.names(cq)]
        for cq in users:
            self._e_cluster_queues[cq.name] = self._engine_cq(cq)
        if users:
            self._queues_changed()
            self.bump()

    def set_cohort(self, obj: Cohort) -> None:
        old = self.cohorts.get(obj.name)
        self.cohorts[obj.name] = obj
        if old is None or old.spec != obj.spec:
            before = self._cohort_scope(obj.name)
            self._e_cohorts[obj.name] = convert.cohort(obj)
            self._queues_changed()
            self.bump(*{before, self._cohort_scope(obj.name)})  # the tree(s) it is in

    def has_default_queue(self, namespace: str) -> bool:
        """Whether the namespace has a LocalQueue named `default` (LocalQueue defaulting)."""
        return wls.key_of(namespace, DEFAULT_LOCAL_QUEUE) in self.local_queues

    def has_default_priority_class(self) -> bool:
        """Whether a new object without a priority class gets the WorkloadPriorityClass
        `default`: the gate is on and the class exists (WorkloadPriorityClass defaulting)."""
        return self.priority_class_defaulting and (
            DEFAULT_WORKLOAD_PRIORITY_CLASS in self.workload_classes
        )

    def set_local_queue(self, obj: LocalQueue) -> None:
        key = wls.key_of(obj.namespace, obj.name)
        old = self.local_queues.get(key)
        self.local_queues[key] = obj
        if old is None:
            self._afs_new = True
        if self.afs is not None and obj.spec.cluster_queue:  # those `sample_usage` samples
            fs = obj.status.fair_sharing if obj.status is not None else None
            if fs is not None and fs.admission_fair_sharing_status is not None:
                st = fs.admission_fair_sharing_status
                consumed = {r: q.milli for r, q in st.consumed_resources.items()}
                self.afs.seed(key, consumed, st.last_update.timestamp())
        if old is None or old.spec != obj.spec:
            self._e_local_queues[key] = convert.local_queue(obj)
            self._queues_changed()
            cqs = {obj.spec.cluster_queue} | ({old.spec.cluster_queue} if old else set())
            self.bump(*{self.scope_of(cq) for cq in cqs})

    def set_namespace(self, name: str, labels: dict[str, str]) -> None:
        if self.namespaces.get(name) != labels:
            self.namespaces[name] = labels
            for key in [k for k in self._engine_workloads if k.startswith(f"{name}/")]:
                del self._engine_workloads[key]
                self._lack_moved(key)
                self._dirty.add(key)
                self.queues.touch(key)
            self.bump()

    def set_workload_class(self, obj: WorkloadPriorityClass) -> None:
        self.workload_classes[obj.name] = obj

    def set_priority_class(self, obj: PriorityClass) -> None:
        self.priority_classes[obj.name] = obj

    def delete(self, kind: str, key: str) -> None:
        """Forget an object of a queue kind: rf, cq, co, lq, wpc, pc, ns, ac."""
        tables: dict[str, tuple[dict[str, Any], ...]] = {
            "rf": (self.flavors, self._e_flavors),
            "cq": (self.cluster_queues, self._e_cluster_queues),
            "co": (self.cohorts, self._e_cohorts),
            "lq": (self.local_queues, self._e_local_queues),
            "wpc": (self.workload_classes,),
            "pc": (self.priority_classes,),
            "ns": (self.namespaces,),
            "ac": (self.admission_checks,),
        }
        for table in tables[kind]:
            table.pop(key, None)
        if kind == "lq" and self.afs is not None:
            self.afs.forget(key)
        if kind == "ac":
            self._checks_changed(key)
            return
        self._queues_changed()
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
        self._index_owners(key, old, wl)
        if self.afs is not None:
            self._afs_index(key, wl)
        if _awaits_checks(wl):
            self.checked.add(key)
        else:
            self.checked.discard(key)
        self._forget_engine_form(key)
        self._admissions.pop(key, None)
        if wls.has_quota(wl):
            self.assumed.pop(key, None)
            self._unstick(key)
        if wls.is_evicted(wl) or not wls.has_quota(wl):
            self.evicting.discard(key)
        was_holding = old is not None and wls.has_quota(old) and not wls.is_finished(old)
        holds = wls.has_quota(wl) and not wls.is_finished(wl)
        if old is not None and was_holding and holds and _reclaiming(old, wl):
            self._reclaim(old, wl)  # pods done for good: part of the quota released
        if was_holding and not holds:
            self._release(key, old)  # quota released: parked workloads may fit now
        elif holds and not self.inventory.holds(key):
            # Admitted before this process started (or by another replica): hold its
            # placement as its status records it, so that its unbound pods keep their room.
            placement = placement_from_status(key, wl)
            if placement is not None:
                self.inventory.hold(placement)
        if old is None or old.spec != wl.spec or (not holds and _reclaiming(old, wl)):
            # a new ask: its spec, or the pods it still needs (Kueue's PushOrUpdate)
            self.parked.pop(key, None)
            self._drop_lack(key)
            self.queues.renew(key)

    def _forget_engine_form(self, key: str) -> None:
        self.queues.touch(key)
        self._engine_workloads.pop(key, None)
        self._lack_moved(key)
        self._waiting_memo.pop(key, None)
        self._dirty.add(key)
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

    def _index_owners(self, key: str, old: Workload | None, new: Workload | None) -> None:
        before, after = _owners(old), _owners(new)
        if before == after:
            return
        for owner in before:
            keys = self._owned.get(owner)
            if keys is not None:
                keys.pop(key, None)
                if not keys:
                    del self._owned[owner]
        for owner in after:
            self._owned.setdefault(owner, {})[key] = None

    def delete_workload(self, key: str) -> None:
        old = self.workloads.pop(key, None)
        self.checked.discard(key)
        self._index_owners(key, old, None)
        self._holding.pop(key, None)
        self._waiting.pop(key, None)
        if self.afs is not None:
            self._afs_index(key, None)
        self._forget_engine_form(key)
        self._admissions.pop(key, None)
        assumed = self.assumed.pop(key, None)
        holding = assumed is not None or (old is not None and wls.has_quota(old))
        if holding:
            self._release(key, old, assumed)
        self.inventory.release(key)
        self.parked.pop(key, None)
        self._drop_lack(key)
        self.queues.renew(key)
        self.evicting.discard(key)
        self._unstick(key)

    def _release(self, key: str, wl: Workload | None, assumed: m.Admission | None = None) -> None:
        """`key` no longer holds quota (nor its placement): request the requeue of what may
        fit now. Quota is shared only within a Cohort tree (Kueue requeues the root Cohort's
        tree of the Workload's ClusterQueue); a placement held on nodes is room for any
        queue whose flavors select them, so that wakes every queue."""
        admission = wl.status.admission if wl is not None and wl.status is not None else None
        cq: str | None = None
        if assumed is not None:
            cq = assumed.cluster_queue
        elif admission is not None:
            cq = admission.cluster_queue
        if self.inventory.holds(key):
            self.bump()
        else:
            adm = assumed if assumed is not None else convert.admission(wl) if wl else None
            self._free(self.scope_of(cq), usage_of(adm) if adm is not None else {})
        self.inventory.release(key)

    def _reclaim(self, old: Workload, wl: Workload) -> None:
        """A holding Workload's reclaimable pods changed (its Job's done pods): the quota
        they give back may let parked workloads of its scope in, as a release does."""
        before, after = convert.admission(old), convert.admission(wl)
        if before is None or after is None:
            return
        left = usage_of(after)
        given = {fr: amount - left.get(fr, 0) for fr, amount in usage_of(before).items()}
        self._free(self.scope_of(after.cluster_queue), given)

    def _free(self, scope: str, amounts: Mapping[m.FlavorResource, int]) -> None:
        """Quota `amounts` went back in `scope`: its parked workloads are requeued, and those
        whose lack it covers woken at the next step (`requeue_due`)."""
        self.bump(scope)
        if scope != EVERY_QUEUE:
            freed = self.freed.setdefault(scope, {})
            for fr, amount in amounts.items():
                if amount > 0:
                    freed[fr] = freed.get(fr, 0) + amount

    # -- ResourceClaimTemplates (their devices count against quota) -----------------------
    def set_claim_template(self, obj: ResourceClaimTemplate) -> None:
        self.claim_templates[wls.key_of(obj.namespace, obj.name)] = obj
        self._recount_devices(obj.namespace or "", obj.name)

    def delete_claim_template(self, namespace: str, name: str) -> None:
        self.claim_templates.pop(wls.key_of(namespace, name), None)
        self._recount_devices(namespace, name)

    def _recount_devices(self, namespace: str, template: str) -> None:
        """Workloads that get claims from this template are converted again (their device
        quota, or why it cannot be counted, may have changed) and tried again at once, as
        after a change of their own spec (not in the batched requeue of `bump`)."""
        if not self.device_classes:
            return
        for key, wl in self.workloads.items():
            if wl.namespace == namespace and devicequota.uses_template(wl, template):
                self._engine_workloads.pop(key, None)
                self._lack_moved(key)
                self._dirty.add(key)
                self.parked.pop(key, None)
                self._drop_lack(key)
                self.queues.renew(key)
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
        job = self.jobs.pop(key, None)
        if job is not None:
            self.succeeded_pods.pop(job.metadata.uid or "", None)

    def pod_succeeded(self, job_uid: str, pod: str, index: int | None) -> bool:
        """Note a pod of Job `job_uid` seen Succeeded; whether it is new."""
        seen = self.succeeded_pods.get(job_uid, frozenset())
        if (pod, index) in seen:
            return False
        self.succeeded_pods[job_uid] = seen | {(pod, index)}
        return True

    def owner_job(self, wl: Workload) -> Job | None:
        """The Job that owns `wl`, if cached (its run bounds are read once, with the rest of
        the engine workload: a Job exists before its Workload and its bounds don't change)."""
        key = wls.owner_job_key(wl)
        return self.jobs.get(key) if key is not None else None

    def set_jobset(self, jobset: JobSet) -> None:
        self.jobsets[wls.key_of(jobset.namespace, jobset.name)] = jobset

    def delete_jobset(self, key: str) -> None:
        self.jobsets.pop(key, None)

    def set_group_pod(
        self, group: str, pod: Pod, *, table: dict[str, dict[str, Pod]] | None = None
    ) -> None:
        """Keep a pod of a group (in `pod_groups`, or `table`: `lws_pods`)."""
        (self.pod_groups if table is None else table).setdefault(group, {})[pod.name] = pod

    def delete_group_pod(
        self, group: str, name: str, *, table: dict[str, dict[str, Pod]] | None = None
    ) -> None:
        groups = self.pod_groups if table is None else table
        pods = groups.get(group)
        if pods is not None:
            pods.pop(name, None)
            if not pods:
                del groups[group]

    def workloads_of_job(
        self, job_key: str, job_uid: str | None = None, *, kind: str = "Job"
    ) -> list[Workload]:
        """Workloads whose controller owner is the `kind` `namespace/name` (and uid, if
        given)."""
        _, _, name = job_key.partition("/")
        out = []
        for key in self._owned.get((kind, job_key), ()):
            wl = self.workloads[key]
            for ref in wl.metadata.owner_references or ():
                if (
                    ref.kind == kind
                    and ref.name == name
                    and (job_uid is None or ref.uid == job_uid)
                ):
                    out.append(wl)
                    break
        return out

    # -- the ledger -----------------------------------------------------------------------
    def assume(self, key: str, admission: m.Admission) -> None:
        if self.afs is not None and self.uses_afs(admission.cluster_queue):
            wl = self.workloads.get(key)
            if wl is not None and wl.spec.queue_name:
                lq = wls.key_of(wl.namespace, wl.spec.queue_name)
                self.afs.charge(key, lq, admission_amounts(admission))
        self.assumed[key] = admission
        self.parked.pop(key, None)
        self._drop_lack(key)
        self.queues.renew(key)
        self._unstick(key)

    def preempting(self, key: str, cluster_queue: str) -> None:
        """`key` issued preemptions as the head of `cluster_queue`. In a BestEffortFIFO
        queue it stays the head until admitted or deleted, even when quota released by its
        victims brings older inadmissible workloads back: else one of those would be the
        head in the next cycle, the preemptor would get no turn, and the freed quota could
        go back to the victims, to be reclaimed again, forever (Kueue#6929, #7157)."""
        cq = self._e_cluster_queues.get(cluster_queue)
        if cq is not None and cq.queueing_strategy is m.QueueingStrategy.BEST_EFFORT_FIFO:
            before = self.preemptors.get(cluster_queue)
            if before is not None:
                self.queues.touch(before)
            self.preemptors[cluster_queue] = key
            self.queues.touch(key)

    def _unstick(self, key: str) -> None:
        if self.preemptors:
            for cq in [cq for cq, k in self.preemptors.items() if k == key]:
                del self.preemptors[cq]
                self.queues.touch(key)

    def forget(self, key: str) -> None:
        """A status write failed: drop the assumption so the quota is free again."""
        self.queues.touch(key)
        assumed = self.assumed.pop(key, None)
        if self.afs is not None:
            self.afs.drop(key)
        if assumed is not None:
            self._release(key, None, assumed)
        self.inventory.release(key)

    def park(self, key: str, dec: d.Pending | None = None) -> None:
        """Park `key` until its queue is woken (`dec`: the pending decision it was parked
        with, see `note_lack`)."""
        if dec is not None:
            self.note_lack(key, dec)
        group = self.queues.group_of.get(key)
        if group is None and (wl := self.workloads.get(key)) is not None:
            group = self._waiting_facts(wl)[3]  # its ClusterQueue (queues not kept: tests)
        self.queues.park(key, self.parked, group)

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
            job=self.owner_job(wl),
        )
        self._engine_workloads[key] = ew
        return ew

    def untrusted_admissions(self) -> tuple[trust.Refused, ...]:
        """Admissions in Workload statuses (not assumed ones) that name a missing ClusterQueue
        or flavor, or exceed quota together (`engine.trust`): what a restart must not trust."""
        held = []
        for key in self._holding:
            if key in self.assumed or key not in self.workloads:
                continue
            found = self._held(key)
            if found is None or found[1]:
                continue  # already evicted: releasing it is under way
            reserved = wls.condition(self.workloads[key], wls.QUOTA_RESERVED)
            at = reserved.last_transition_time.timestamp() if reserved else 0.0
            held.append(trust.Held(key=key, admission=found[0], reserved_at=at))
        return trust.audit(
            held,
            cluster_queues={m.ClusterQueueName(k): v for k, v in self._e_cluster_queues.items()},
            cohorts={m.CohortName(k): v for k, v in self._e_cohorts.items()},
            flavors={m.FlavorName(k) for k in self._e_flavors},
        )

    def holding(self) -> Iterable[tuple[str, m.Admission, bool]]:
        """(key, admission, evicted) of every workload that holds quota, assumed ones too."""
        for key in self._holding:
            if key in self.assumed:
                continue
            held = self._held(key)
            if held is not None:
                yield key, *held
        for key in self.assumed:
            held = self._held(key)
            if held is not None:
                yield key, *held

    def _held(self, key: str) -> tuple[m.Admission, bool] | None:
        """(admission, evicted) of `key` if it holds quota (an assumed admission first)."""
        assumed = self.assumed.get(key)
        if assumed is not None:
            return (assumed, key in self.evicting) if key in self.workloads else None
        if key not in self._holding:
            return None
        if key not in self._admissions or key not in self._evicted_status:
            wl = self.workloads[key]
            self._admissions[key] = convert.admission(wl)
            self._evicted_status[key] = wls.is_evicted(wl)
        adm = self._admissions[key]
        if adm is None:
            return None
        return adm, self._evicted_status[key] or key in self.evicting

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
        """The earliest future time a pending workload may be tried again (for the loop's
        timer): a requeueAt (backoff), or the batched requeue of the parked workloads (a
        request not timed yet is due a period after the step at `now` sees it)."""
        times = [
            t
            for key in self._waiting
            if (t := wls.requeue_at(self.workloads[key])) is not None and t > now
        ]
        if (at := self.next_wake(now)) is not None:
            times.append(at)
        if self.afs is not None and (at := self.afs.next_due()) is not None:
            times.append(max(now, at))  # the LocalQueues' usage samples
        return min(times) if times else None

    def next_wake(self, now: float) -> float | None:
        """When the next requested requeue of parked workloads is due, as seen by a step at
        `now` (a request not timed yet: a period after it)."""
        return (
            min(
                (now + self.requeue_period if at is None else max(now, at))
                for at in self.requeues.values()
            )
            if self.requeues
            else None
        )

    def pending_by_queue(self, now: float) -> dict[m.ClusterQueueName, list[m.Workload]]:
        """Pending workloads grouped by ClusterQueue (unknown queues grouped by LocalQueue);
        a queue's sticky preemptor (`preempting`) is marked `sticky`."""
        groups: dict[m.ClusterQueueName, list[m.Workload]] = {}
        for key in self._waiting:
            wl = self.workloads[key]
            memo = self._waiting_memo.get(key)
            if memo is None or memo[0] is not wl or memo[1] != self._queues_version:
                memo = self._waiting_memo[key] = self._waiting_facts(wl)
            _, _, queued, cq, at = memo
            # is_pending(wl, now), with the parts that depend on `wl` alone memoized
            if not queued or key in self.assumed or (at is not None and at > now):
                continue
            ew = self.engine_workload(key)
            if ew is None:
                continue
            group = cq if cq is not None else f"{UNKNOWN_QUEUE_PREFIX}{ew.local_queue}"
            if self.preemptors.get(group) == key:
                ew = replace(ew, sticky=True)
            groups.setdefault(m.ClusterQueueName(group), []).append(ew)
        return groups

    def _waiting_facts(self, wl: Workload) -> tuple[Workload, int, bool, str | None, float | None]:
        queued = not (
            wls.is_finished(wl)
            or wls.has_quota(wl)
            or wls.is_deleting(wl)
            or not wl.spec.queue_name
            or not wl.spec.active
            or wls.is_false(wl, wls.REQUEUED)
        )
        lq = self.local_queues.get(wls.key_of(wl.namespace, wl.spec.queue_name or ""))
        cq = lq.spec.cluster_queue if lq is not None else None
        known = cq if cq and cq in self.cluster_queues else None
        return wl, self._queues_version, queued, known, wls.requeue_at(wl)

    def any_parked(self) -> bool:
        """Whether a workload is parked now (cheaper than `parked_keys`)."""
        return self.queues.any_parked(self.parked)

    def parked_keys(self) -> frozenset[m.WorkloadKey]:
        return frozenset(m.WorkloadKey(k) for k in self.queues.parked_keys(self.parked))

    # -- the pending queues, kept up to date (what the scheduling loop reads) -------------
    def queue_heads(self, now: float) -> list[tuple[str, m.Workload]]:
        """(queue, workload) of the first unparked workload of every queue at `now`, by
        queue name: what `select_heads(pending_by_queue(now), parked_keys())` gives, from
        queues kept up to date instead of grouped and sorted again."""
        self.sample_usage(now)  # first: the usage orders the wake-ups too
        self.requeue_due(now)
        q = self.queues
        if q.version != self._queues_version:
            q.dirty |= q.rebuild(self._queues_version, self.parked)
            q.dirty.update(self._waiting)
        q.due(now)
        if q.dirty:
            dirty, q.dirty = q.dirty, set()
            for key in sorted(dirty):
                q.place(key, self._queue_place(key, now), self.parked)
        return self._heads()

    def queue_heads_again(self) -> list[tuple[str, m.Workload]]:
        """`queue_heads(now)` again at the same `now` when only `park` was called since: no
        requeue, usage sample (its interval is never 0) or backoff can be due, nothing moved
        in the queues; only the parked heads are passed."""
        return self._heads()

    def _heads(self) -> list[tuple[str, m.Workload]]:
        return [(g, self._queued_form(g, k)) for g, k in self.queues.heads(self.parked)]

    def _queued_form(self, group: str, key: str) -> m.Workload:
        ew = self.engine_workload(key)
        assert ew is not None  # queued workloads have one (`_queue_place`)
        return replace(ew, sticky=True) if self.preemptors.get(group) == key else ew

    def _queue_place(self, key: str, now: float) -> tuple[str, QueueKey, object] | None:
        """The queue, queue key and class of `key` if it is pending at `now` (the filter of
        `pending_by_queue`); a workload in backoff is looked at again when it ends."""
        wl = self.workloads.get(key)
        if wl is None or key not in self._waiting:
            return None
        memo = self._waiting_memo.get(key)
        if memo is None or memo[0] is not wl or memo[1] != self._queues_version:
            memo = self._waiting_memo[key] = self._waiting_facts(wl)
        _, _, queued, cq, at = memo
        if not queued or key in self.assumed:
            return None
        if at is not None and at > now:
            self.queues.defer(at, key)
            return None
        ew = self.engine_workload(key)
        if ew is None:
            return None
        group = cq if cq is not None else f"{UNKNOWN_QUEUE_PREFIX}{ew.local_queue}"
        ew = self._queued_form(group, key)
        e_cq = self._e_cluster_queues.get(cq) if cq is not None else None
        by_time = e_cq is not None and (
            e_cq.preemption.within_cluster_queue
            is m.WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY
        )
        by_end = e_cq is not None and e_cq.backfill is not None
        return group, self.queue_order(ew), scheduling_class(ew, by_time=by_time, by_end=by_end)

    def queue_park_all(self, group: str) -> None:
        """Park every workload now in queue `group` (as `park` on each of them)."""
        self.queues.park_all(group)

    def queue_asleep(self, key: str) -> bool:
        return self.queues.asleep(key, self.parked)

    def _reserved_at(self, key: str) -> float:
        """When the workload's quota was reserved (Kueue's "most recently admitted" order of
        preemption candidates); a decision only assumed so far is the most recent of all."""
        if key in self.assumed:
            return math.inf
        cond = wls.condition(self.workloads[key], wls.QUOTA_RESERVED)
        return cond.last_transition_time.timestamp() if cond is not None else 0.0

    def snapshot(self, fair_sharing: m.FairSharing | None = None) -> Snapshot:
        """The engine's view of now. Its structure is rebuilt only after a queue object
        changed, and its admitted part is updated from the workloads changed since the last
        snapshot (`_dirty`, and the `assumed` and `evicting` tables compared with what the
        last snapshot saw): the cost of a cycle does not grow with the admitted workloads."""
        structure = self._structure
        if structure is None:
            structure = self._structure = build_structure(
                flavors=self._e_flavors.values(),
                cluster_queues=self._e_cluster_queues.values(),
                cohorts=self._e_cohorts.values(),
                local_queues=self._e_local_queues.values(),
            )
        ledger = self._ledger
        if ledger is None or ledger.owner is not self:  # new, or copied from another cache
            ledger = self._ledger = _Ledger(self, structure.tree)
            dirty: set[str] = {*self._holding, *self.assumed}
        else:
            dirty = self._dirty
            ledger.changed_since(self.assumed, self.evicting, dirty)
        self._dirty = set()
        ledger.saw(self.assumed, self.evicting)
        if ledger.tree is not structure.tree:
            ledger.rebase(structure.tree)
        for key in sorted(dirty):  # the same history in every process (no hash order)
            ledger.update(m.WorkloadKey(key), self._admitted_now(key, ledger))
        return ledger.publish(structure, fair_sharing, self._lq_usages())

    def _lq_usages(self) -> Mapping[m.LocalQueueKey, float]:
        """The usage of every LocalQueue of a ClusterQueue ordered by it (Admission Fair
        Sharing), the same mapping while nothing it reads changed."""
        tracker = self.afs
        if tracker is None:
            return NO_USAGE
        stamp = (tracker.version, self._queues_version)
        if self._lq_usage_memo is None or self._lq_usage_memo[0] != stamp:
            usages = {
                m.LocalQueueKey(key): self.lq_usage(key)
                for key, lq in self._e_local_queues.items()
                if self.uses_afs(lq.cluster_queue)
            }
            old = self._lq_usage_memo[1] if self._lq_usage_memo is not None else None
            # the same mapping when equal: the snapshot (and what a step learnt from it) stays
            self._lq_usage_memo = (stamp, old if old == usages else usages)
        return self._lq_usage_memo[1]

    def _admitted_now(self, key: str, ledger: _Ledger) -> m.AdmittedWorkload | None:
        """The engine form of `key` as an admitted workload, None if it holds no quota; the
        ledger's entry when nothing it says changed."""
        held = self._held(key)
        if held is None:
            return None
        adm, evicted = held
        ew = self.engine_workload(key)
        if ew is None:
            return None
        memo = ledger.entries.get(m.WorkloadKey(key))
        if (
            memo is not None
            and memo.workload is ew
            and memo.admission is adm
            and memo.evicted == evicted
        ):
            return memo
        return m.AdmittedWorkload(
            workload=ew, admission=adm, evicted=evicted, reserved_at=self._reserved_at(key)
        )


_Usage = dict[m.FlavorResource, int]


class _Ledger:
    """The admitted workloads of a cache as the snapshot shows them, with their usage
    charged to the quota tree, updated one workload at a time (`update`). `publish` hands
    out copies of what changed since the previous snapshot, never the live tables."""

    __slots__ = (
        "_assumed",
        "_by_cq",
        "_changed",
        "_deactivated",
        "_evicted",
        "_evicting",
        "_last",
        "_lq_usage",
        "_memos",
        "_negative",
        "_over",
        "_over_of",
        "_published",
        "_sorted",
        "_stale",
        "entries",
        "live",
        "owner",
        "usage_of",
    )

    def __init__(self, owner: Cache, tree: QuotaTree) -> None:
        self.owner = owner
        self.entries: dict[m.WorkloadKey, m.AdmittedWorkload] = {}
        self.usage_of: dict[m.WorkloadKey, _Usage] = {}
        self.live = LiveUsage(tree, [{} for _ in tree.nodes])
        """Per tree node; `touched`: nodes changed since the last snapshot."""
        self._by_cq: dict[m.ClusterQueueName, list[m.WorkloadKey]] = {}
        """Keys of each queue's workloads, sorted."""
        self._changed: set[m.ClusterQueueName] = set()
        """ClusterQueues whose workloads changed since the last snapshot."""
        self._lq_usage: Mapping[m.LocalQueueKey, float] = NO_USAGE
        """The LocalQueue usages of the last snapshot (Admission Fair Sharing)."""
        self._deactivated: set[m.WorkloadKey] = set()
        self._evicted: set[m.WorkloadKey] = set()
        self._negative = 0
        """Entries with a negative usage (never, from valid admissions)."""
        self._stale = False
        """`live` must be charged again from scratch (see `_charge`)."""
        # What the last snapshot got; each is replaced, never changed, once handed out.
        self._last: tuple[Structure, Snapshot] | None = None
        self._published: list[Mapping[m.FlavorResource, int]] = []
        self._over: dict[tuple[int, m.FlavorResource], tuple[int, ...]] = {}
        self._over_of: dict[tuple[int, m.FlavorResource], set[int]] = {}
        """`_over` as sets (kept up to date for the touched nodes)."""
        self._sorted: dict[m.ClusterQueueName, tuple[m.WorkloadKey, ...]] = {}
        self._memos: dict[m.ClusterQueueName, dict[object, object]] = {}
        self._assumed: dict[str, m.Admission] = {}
        self._evicting: set[str] = set()

    def changed_since(
        self, assumed: Mapping[str, m.Admission], evicting: set[str], dirty: set[str]
    ) -> None:
        """Add to `dirty` the keys whose assumption or eviction mark changed since `saw`."""
        for key, adm in self._assumed.items():
            if assumed.get(key) is not adm:
                dirty.add(key)
        dirty.update(k for k in assumed if k not in self._assumed)
        dirty.update(self._evicting.symmetric_difference(evicting))

    def saw(self, assumed: Mapping[str, m.Admission], evicting: set[str]) -> None:
        self._assumed = dict(assumed)
        self._evicting = set(evicting)

    @property
    def tree(self) -> QuotaTree:
        return self.live.tree

    def rebase(self, tree: QuotaTree) -> None:
        """Charge everything again, to a new tree when a queue object changed."""
        per_cq: dict[m.ClusterQueueName, _Usage] = {}
        for key, a in self.entries.items():
            total = per_cq.setdefault(a.cluster_queue, {})
            for fr, value in self.usage_of[key].items():
                total[fr] = total.get(fr, 0) + value
        self.live = LiveUsage(tree, charge_tree(tree, per_cq))
        self._published = []
        self._last = None
        self._stale = False

    def _charge(self, cq: m.ClusterQueueName, usage: _Usage, sign: int) -> None:
        """Add (sign 1) or remove (-1) a workload's usage: exact for positive usage (see
        LiveUsage); with a negative one, charge everything again before publishing."""
        negative = any(v < 0 for v in usage.values())
        if negative:
            self._negative += sign
        if negative or self._negative or self._stale:
            self._stale = True
            return
        n = self.tree.cluster_queues.get(cq)
        if n is not None:
            if sign > 0:
                self.live.add(n, usage)
            else:
                self.live.remove(n, usage)

    def update(self, key: m.WorkloadKey, new: m.AdmittedWorkload | None) -> None:
        old = self.entries.get(key)
        if old is new:
            return
        self._last = None
        if old is not None:
            self._changed.add(old.cluster_queue)
            self._deactivated.discard(key)
            self._evicted.discard(key)
            if new is not None and old.admission is new.admission:
                self.entries[key] = new  # same queue, same usage
                self._mark(key, new)
                return
            del self.entries[key]
            keys = self._by_cq[old.cluster_queue]
            del keys[bisect.bisect_left(keys, key)]
            self._charge(old.cluster_queue, self.usage_of.pop(key), -1)
        if new is not None:
            self._changed.add(new.cluster_queue)
            self.entries[key] = new
            usage = self.usage_of[key] = admission_usage(new)
            bisect.insort(self._by_cq.setdefault(new.cluster_queue, []), key)
            self._mark(key, new)
            self._charge(new.cluster_queue, usage, 1)

    def _mark(self, key: m.WorkloadKey, a: m.AdmittedWorkload) -> None:
        if not a.workload.active:
            self._deactivated.add(key)
        if a.evicted:
            self._evicted.add(key)

    def _publish_usage(self) -> None:
        """Copy the usage of the nodes changed since the last snapshot, and update which
        children use more than their quota (`over_nominal`) for those nodes."""
        live = self.live
        tree = live.tree
        if len(self._published) != len(live.usage):
            self._published = [dict(u) for u in live.usage]
            self._over = over_nominal(tree, self._published)
            self._over_of = {k: set(v) for k, v in self._over.items()}
            live.touched = set()
            return
        if not live.touched:
            return
        changed: set[tuple[int, m.FlavorResource]] = set()
        for n in live.touched:
            before, after = self._published[n], dict(live.usage[n])
            self._published[n] = after
            node = tree.nodes[n]
            if node.parent == NO_PARENT:
                continue
            for fr in before.keys() | after.keys():
                k = (node.parent, fr)
                over = after.get(fr, 0) > node.subtree_quota.get(fr, 0)
                children = self._over_of.get(k)
                if over and (children is None or n not in children):
                    self._over_of.setdefault(k, set()).add(n)
                    changed.add(k)
                elif not over and children is not None and n in children:
                    children.discard(n)
                    changed.add(k)
        live.touched = set()
        if changed:
            self._over = dict(self._over)
            for k in changed:
                children = self._over_of.get(k)
                if children:
                    self._over[k] = tuple(sorted(children))
                else:
                    self._over.pop(k, None)
                    self._over_of.pop(k, None)

    def publish(
        self,
        structure: Structure,
        fair_sharing: m.FairSharing | None,
        lq_usage: Mapping[m.LocalQueueKey, float] = NO_USAGE,
    ) -> Snapshot:
        if self._stale:
            self.rebase(self.tree)
        if self._last is not None:
            built_from, last = self._last
            if (
                built_from is structure
                and last.fair_sharing == fair_sharing
                and self._lq_usage is lq_usage
            ):
                return last  # nothing changed since
        if lq_usage is not self._lq_usage:
            # the candidate order of their ClusterQueues changed (`queue_candidate_key`)
            old = self._lq_usage
            for lq in {*old, *lq_usage}:
                if old.get(lq) != lq_usage.get(lq) and lq in structure.local_queues:
                    self._changed.add(structure.local_queues[lq].cluster_queue)
            self._lq_usage = lq_usage
        self._publish_usage()
        if self._changed:
            by_cq, memos = dict(self._sorted), dict(self._memos)
            for cq in self._changed:
                keys = self._by_cq.get(cq)
                if keys:
                    by_cq[cq], memos[cq] = tuple(keys), {}
                else:
                    by_cq.pop(cq, None)
                    memos.pop(cq, None)
            self._sorted, self._memos = by_cq, memos
            self._changed = set()
        snapshot = assemble(
            structure,
            admitted=dict(self.entries),
            workload_usage=dict(self.usage_of),
            usage=tuple(self._published),
            workloads_by_cq=self._sorted,
            deactivated=tuple(sorted(self._deactivated)),
            evicted=frozenset(self._evicted),
            fair_sharing=fair_sharing,
            over=self._over,
            cq_memo=self._memos,
            lq_usage=lq_usage,
        )
        self._last = (structure, snapshot)
        return snapshot
