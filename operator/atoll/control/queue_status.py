"""ClusterQueue and LocalQueue status: counts, flavor usage and the Active condition, computed
from the cache and written only when they change.

Mirrors Kueue's pkg/controller/core/clusterqueue_controller.go and localqueue_controller.go
(`pendingWorkloads`, `reservingWorkloads`, `admittedWorkloads`, `flavorsReservation`,
`flavorsUsage`, condition `Active` with reasons Ready / FlavorNotFound / Stopped / ...).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import structlog

from atoll.api.clusterqueue import ClusterQueue, ClusterQueueStatus, FlavorUsage, ResourceUsage
from atoll.api.localqueue import (
    LocalQueue,
    LocalQueueAdmissionFairSharingStatus,
    LocalQueueFairSharingStatus,
    LocalQueueFlavorUsage,
    LocalQueueResourceUsage,
    LocalQueueStatus,
)
from atoll.api.meta import Condition
from atoll.api.quantity import Quantity
from atoll.control.metrics import ClusterQueueStatus as CqState
from atoll.control.metrics import LocalQueueRef, Metrics
from atoll.control.ports import QueueStatusStore
from atoll.engine import model as m
from atoll.engine.fairsharing import dominant_share
from atoll.engine.model import Admission, ClusterQueueName
from atoll.engine.overlay import UsageOverlay
from atoll.state import admissionchecks
from atoll.state import workloads as wls
from atoll.state.cache import Cache
from atoll.state.convert import quantity

log = structlog.get_logger("atoll.queues")

Usage = dict[str, dict[str, int]]
"""flavor -> resource -> amount."""


@dataclass(slots=True)
class Tally:
    pending: int = 0
    parked: int = 0
    """Of `pending`: parked as inadmissible until something changes."""
    reserving: int = 0
    admitted: int = 0
    finished: int = 0
    """Finished Workloads still present."""
    not_ready: int = 0
    """Admitted Workloads whose pods are not all ready (PodsReady=False)."""
    reserved: Usage = field(default_factory=lambda: defaultdict(dict))
    in_use: Usage = field(default_factory=lambda: defaultdict(dict))
    requested: dict[str, int] = field(default_factory=dict)
    """Resource -> what the pending Workloads request in total."""


def _add(usage: Usage, flavor: str, resource: str, amount: int) -> None:
    usage[flavor][resource] = usage[flavor].get(resource, 0) + amount


def _checked(cache: Cache, adm: m.Admission) -> bool:
    """Whether an admission decided and not written yet waits for admission checks (then it
    is only a reservation)."""
    flavors = admissionchecks.flavors_of(adm.pod_sets)
    return bool(cache.admission_checks_for(str(adm.cluster_queue), flavors))


def tally(cache: Cache, now: float) -> tuple[dict[str, Tally], dict[str, Tally]]:
    """Counts and usage per ClusterQueue and per LocalQueue (`namespace/name`)."""
    cqs: dict[str, Tally] = defaultdict(Tally)
    lqs: dict[str, Tally] = defaultdict(Tally)
    holding = {key: adm for key, adm, _ in cache.holding()}
    parked = {str(k) for k in cache.parked_keys()}
    for key, wl in cache.workloads.items():
        lq_key = wls.key_of(wl.namespace, wl.spec.queue_name or "")
        lq = cache.local_queues.get(lq_key)
        lq_cq = lq.spec.cluster_queue if lq is not None else None
        if key in holding:
            adm = holding[key]
            admitted = wls.is_admitted(wl) or (key in cache.assumed and not _checked(cache, adm))
            not_ready = admitted and wls.is_false(wl, wls.PODS_READY)
            for t in (cqs[str(adm.cluster_queue)], lqs[lq_key]):
                _count_holding(t, adm, admitted=admitted, not_ready=not_ready)
        elif wls.is_finished(wl):
            adm_cq = wl.status.admission.cluster_queue if wl.status.admission else lq_cq
            for t in [lqs[lq_key], *([cqs[adm_cq]] if adm_cq else [])]:
                t.finished += 1
        elif cache.is_pending(wl, now) or (not wls.has_quota(wl) and wl.spec.queue_name):
            ew = cache.engine_workload(key)
            for t in [lqs[lq_key], *([cqs[lq_cq]] if lq_cq else [])]:
                t.pending += 1
                t.parked += int(key in parked)
                for ps in ew.pod_sets if ew is not None else ():
                    for resource, amount in ps.requests:
                        r = str(resource)
                        t.requested[r] = t.requested.get(r, 0) + amount * ps.count
    return cqs, lqs


def _count_holding(t: Tally, adm: Admission, *, admitted: bool, not_ready: bool) -> None:
    t.reserving += 1
    t.admitted += int(admitted)
    t.not_ready += int(not_ready)
    for ps in adm.pod_sets:
        fl = dict(ps.flavors)
        for resource, amount in ps.resource_usage:
            flavor = str(fl.get(resource, ""))
            _add(t.reserved, flavor, resource, amount)
            if admitted:
                _add(t.in_use, flavor, resource, amount)


def _nominal(cq: ClusterQueue) -> dict[tuple[str, str], int]:
    out = {}
    for group in cq.spec.resource_groups:
        for fq in group.flavors:
            for r in fq.resources:
                q = r.nominal_quota
                out[(fq.name, r.name)] = q.milli if r.name == "cpu" else q.value
    return out


def _flavor_usage(cq: ClusterQueue, usage: Usage) -> tuple[FlavorUsage, ...]:
    nominal = _nominal(cq)
    out = []
    for group in cq.spec.resource_groups:
        for fq in group.flavors:
            resources = []
            for r in fq.resources:
                used = usage.get(fq.name, {}).get(r.name, 0)
                borrowed = max(0, used - nominal[(fq.name, r.name)])
                resources.append(
                    ResourceUsage(
                        name=r.name,
                        total=quantity(r.name, used),
                        borrowed=quantity(r.name, borrowed),
                    )
                )
            out.append(FlavorUsage(name=fq.name, resources=tuple(resources)))
    return tuple(out)


def _lq_usage(usage: Usage) -> tuple[LocalQueueFlavorUsage, ...]:
    return tuple(
        LocalQueueFlavorUsage(
            name=flavor,
            resources=tuple(
                LocalQueueResourceUsage(name=r, total=quantity(r, v))
                for r, v in sorted(res.items())
            ),
        )
        for flavor, res in sorted(usage.items())
        if flavor
    )


def _active(
    old: tuple[Condition, ...] | None, active: bool, reason: str, message: str, now: dt.datetime
) -> tuple[Condition, ...]:
    return wls.with_condition(
        old or (), "Active", status=active, reason=reason, message=message, now=now
    )


def cluster_queue_status(
    cq: ClusterQueue, t: Tally, inactive: str | None, now: dt.datetime
) -> ClusterQueueStatus:
    if inactive is None:
        cond = _active(cq.status.conditions, True, "Ready", "Can admit new workloads", now)
    else:
        cond = _active(
            cq.status.conditions, False, inactive, f"Can't admit new workloads: {inactive}", now
        )
    return cq.status.model_copy(
        update={
            "conditions": cond,
            "pending_workloads": t.pending,
            "reserving_workloads": t.reserving,
            "admitted_workloads": t.admitted,
            "flavors_reservation": _flavor_usage(cq, t.reserved),
            "flavors_usage": _flavor_usage(cq, t.in_use),
        }
    )


def local_queue_status(
    lq: LocalQueue,
    t: Tally,
    cq_known: bool,
    now: dt.datetime,
    afs: tuple[Mapping[str, int], float] | None = None,
) -> LocalQueueStatus:
    """`afs`: the queue's last Admission Fair Sharing sample (milli-units by resource, its
    time), written as `fairSharing.admissionFairSharingStatus`."""
    if cq_known:
        cond = _active(
            lq.status.conditions, True, "Ready", "Can submit new workloads to localQueue", now
        )
    else:
        cond = _active(
            lq.status.conditions,
            False,
            "ClusterQueueDoesNotExist",
            "Can't submit new workloads to clusterQueue",
            now,
        )
    return lq.status.model_copy(
        update={
            "conditions": cond,
            "pending_workloads": t.pending,
            "reserving_workloads": t.reserving,
            "admitted_workloads": t.admitted,
            "flavors_reservation": _lq_usage(t.reserved),
            "flavors_usage": _lq_usage(t.in_use),
            "fair_sharing": _afs_status(lq, afs),
        }
    )


def _afs_status(
    lq: LocalQueue, afs: tuple[Mapping[str, int], float] | None
) -> LocalQueueFairSharingStatus | None:
    if afs is None:
        return lq.status.fair_sharing
    consumed, at = afs
    share = lq.status.fair_sharing.weighted_share if lq.status.fair_sharing else 0
    return LocalQueueFairSharingStatus(
        weighted_share=share,
        admission_fair_sharing_status=LocalQueueAdmissionFairSharingStatus(
            consumed_resources={r: Quantity.from_milli(v) for r, v in sorted(consumed.items())},
            last_update=dt.datetime.fromtimestamp(at, dt.UTC).replace(microsecond=0),
        ),
    )


def _units(resource: str, amount: int) -> float:
    """An engine amount as the number Kueue's metrics report (cores for cpu, else units)."""
    return amount / 1000 if resource == "cpu" else float(amount)


def _quantity_units(resource: str, q: Quantity | None) -> float | None:
    return None if q is None else _units(resource, q.milli if resource == "cpu" else q.value)


def root_cohort(cache: Cache, cohort: str) -> str:
    """The root of the cohort tree `cohort` is in (itself when it has no parent; a cycle
    stops at the last cohort before it repeats)."""
    seen = {cohort}
    while (co := cache.cohorts.get(cohort)) is not None and co.spec.parent_name:
        if co.spec.parent_name in seen:
            break
        cohort = co.spec.parent_name
        seen.add(cohort)
    return cohort


class QueueStatusReporter:
    """Writes ClusterQueue and LocalQueue statuses that differ from what the cache last saw,
    and sets the queue gauges from the same counts (dropping the series of deleted queues)."""

    def __init__(
        self,
        cache: Cache,
        store: QueueStatusStore,
        clock: Callable[[], float],
        metrics: Metrics | None = None,
        *,
        fair_sharing: bool = False,
    ) -> None:
        self.cache = cache
        self.store = store
        self.clock = clock
        self.metrics = metrics
        self.fair_sharing = fair_sharing
        """Whether the operator runs with fair sharing (the weighted-share gauge)."""
        self._exported_cqs: set[str] = set()
        self._exported_lqs: set[LocalQueueRef] = set()

    def _export(self, m: Metrics, cq: ClusterQueue, t: Tally, inactive: str | None) -> None:
        name = cq.name
        m.set_pending(name, t.pending - t.parked, t.parked)
        m.set_reserving_active(name, t.reserving)
        m.set_admitted_active(name, t.admitted)
        m.set_finished(name, t.finished)
        m.set_cluster_queue_status(name, CqState.ACTIVE if inactive is None else CqState.PENDING)
        cohort = cq.spec.cohort_name or ""
        root = root_cohort(self.cache, cohort) if cohort else ""
        m.set_cluster_queue_info(name, parent_cohort=cohort, root_cohort=root)
        for resource in sorted({r for g in cq.spec.resource_groups for r in g.covered_resources}):
            m.set_resource_pending(name, resource, _units(resource, t.requested.get(resource, 0)))
        for group in cq.spec.resource_groups:
            for fq in group.flavors:
                for r in fq.resources:
                    m.set_quota(
                        cohort,
                        name,
                        fq.name,
                        r.name,
                        nominal=_quantity_units(r.name, r.nominal_quota) or 0.0,
                        borrowing_limit=_quantity_units(r.name, r.borrowing_limit),
                        lending_limit=_quantity_units(r.name, r.lending_limit),
                    )
                    used = t.in_use.get(fq.name, {}).get(r.name, 0)
                    reserved = t.reserved.get(fq.name, {}).get(r.name, 0)
                    m.set_usage(cohort, name, fq.name, r.name, _units(r.name, used))
                    m.set_reservation(cohort, name, fq.name, r.name, _units(r.name, reserved))

    def _export_shares(self, m: Metrics) -> None:
        """Each ClusterQueue's fair-sharing weighted share (status.fairSharing.weightedShare),
        for ClusterQueues in a cohort, when the operator runs with fair sharing."""
        if not self.fair_sharing:
            return
        snapshot = self.cache.snapshot()
        overlay = UsageOverlay(snapshot)
        for name, cq in self.cache.cluster_queues.items():
            node = snapshot.tree.cluster_queues.get(ClusterQueueName(name))
            if cq.spec.cohort_name and node is not None:
                share = dominant_share(overlay, node).rounded()
                m.set_weighted_share(name, cq.spec.cohort_name, share)

    def _export_local_queue(self, m: Metrics, lq: LocalQueue, t: Tally) -> None:
        ref = LocalQueueRef(namespace=lq.namespace or "", name=lq.name)
        m.set_local_queue_pending(ref, active=t.pending - t.parked, inadmissible=t.parked)
        m.set_local_queue_counts(ref, reserving=t.reserving, admitted=t.admitted)
        active = next((c for c in lq.status.conditions or () if c.type == "Active"), None)
        m.set_local_queue_status(ref, active.status.value if active else "Unknown")
        self._exported_lqs.add(ref)

    def _forget_deleted(self, m: Metrics) -> None:
        for name in self._exported_cqs - set(self.cache.cluster_queues):
            m.forget_cluster_queue(name)
        self._exported_cqs = set(self.cache.cluster_queues)
        live = {
            LocalQueueRef(namespace=lq.namespace or "", name=lq.name)
            for lq in self.cache.local_queues.values()
        }
        for ref in self._exported_lqs - live:
            m.forget_local_queue(ref)
        self._exported_lqs &= live

    async def report(self) -> int:
        """Write every changed status; return how many were written."""
        now_ts = self.clock()
        now = dt.datetime.fromtimestamp(now_ts, dt.UTC).replace(microsecond=0)
        cqs, lqs = tally(self.cache, now_ts)
        inactive = {str(k): v for k, v in self.cache.snapshot().inactive.items()}
        m = self.metrics
        written = 0
        for name, cq in list(self.cache.cluster_queues.items()):
            status = cluster_queue_status(cq, cqs[name], inactive.get(name), now)
            if m is not None:
                self._export(m, cq, cqs[name], inactive.get(name))
            if status != cq.status:
                await self.store.write_cluster_queue_status(name, status)
                written += 1
        for key, lq in list(self.cache.local_queues.items()):
            known = (lq.spec.cluster_queue or "") in self.cache.cluster_queues
            lq_status = local_queue_status(lq, lqs[key], known, now, self.cache.afs_status(key))
            if m is not None:
                self._export_local_queue(m, lq.model_copy(update={"status": lq_status}), lqs[key])
            if lq_status != lq.status:
                await self.store.write_local_queue_status(key, lq_status, lq.status)
                written += 1
        if m is not None:
            self._export_shares(m)
            m.set_gangs_partially_running(sum(t.not_ready for t in cqs.values()))
            self._forget_deleted(m)
        return written
