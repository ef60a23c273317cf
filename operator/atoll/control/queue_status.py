"""ClusterQueue and LocalQueue status: counts, flavor usage and the Active condition, computed
from the cache and written only when they change.

Mirrors Kueue's pkg/controller/core/clusterqueue_controller.go and localqueue_controller.go
(`pendingWorkloads`, `reservingWorkloads`, `admittedWorkloads`, `flavorsReservation`,
`flavorsUsage`, condition `Active` with reasons Ready / FlavorNotFound / Stopped / ...).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from atoll.api.clusterqueue import ClusterQueue, ClusterQueueStatus, FlavorUsage, ResourceUsage
from atoll.api.localqueue import (
    LocalQueue,
    LocalQueueFlavorUsage,
    LocalQueueResourceUsage,
    LocalQueueStatus,
)
from atoll.api.meta import Condition
from atoll.api.quantity import Quantity
from atoll.control.admission import quantity
from atoll.control.metrics import ClusterQueueStatus as CqState
from atoll.control.metrics import Metrics
from atoll.control.ports import QueueStatusStore
from atoll.state import workloads as wls
from atoll.state.cache import Cache

log = structlog.get_logger("atoll.queues")

Usage = dict[str, dict[str, int]]
"""flavor -> resource -> amount."""


@dataclass(slots=True)
class Tally:
    pending: int = 0
    reserving: int = 0
    admitted: int = 0
    reserved: Usage = field(default_factory=lambda: defaultdict(dict))
    in_use: Usage = field(default_factory=lambda: defaultdict(dict))


def _add(usage: Usage, flavor: str, resource: str, amount: int) -> None:
    usage[flavor][resource] = usage[flavor].get(resource, 0) + amount


def tally(cache: Cache, now: float) -> tuple[dict[str, Tally], dict[str, Tally]]:
    """Counts and usage per ClusterQueue and per LocalQueue (`namespace/name`)."""
    cqs: dict[str, Tally] = defaultdict(Tally)
    lqs: dict[str, Tally] = defaultdict(Tally)
    holding = {key: adm for key, adm, _ in cache.holding()}
    for key, wl in cache.workloads.items():
        lq_key = wls.key_of(wl.namespace, wl.spec.queue_name or "")
        lq = cache.local_queues.get(lq_key)
        if key in holding:
            adm = holding[key]
            cq = str(adm.cluster_queue)
            admitted = wls.is_admitted(wl) or key in cache.assumed
            for t in (cqs[cq], lqs[lq_key]):
                t.reserving += 1
                t.admitted += int(admitted)
                for ps in adm.pod_sets:
                    fl = dict(ps.flavors)
                    for resource, amount in ps.resource_usage:
                        flavor = str(fl.get(resource, ""))
                        _add(t.reserved, flavor, resource, amount)
                        if admitted:
                            _add(t.in_use, flavor, resource, amount)
        elif cache.is_pending(wl, now) or (
            not wls.is_finished(wl) and not wls.has_quota(wl) and wl.spec.queue_name
        ):
            lqs[lq_key].pending += 1
            if lq is not None and lq.spec.cluster_queue:
                cqs[lq.spec.cluster_queue].pending += 1
    return cqs, lqs


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
    lq: LocalQueue, t: Tally, cq_known: bool, now: dt.datetime
) -> LocalQueueStatus:
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
        }
    )


def _units(resource: str, q: Quantity | None) -> float | None:
    """A quantity as the number Kueue's metrics report (cores for cpu, else units)."""
    if q is None:
        return None
    return q.milli / 1000 if resource == "cpu" else float(q.value)


class QueueStatusReporter:
    """Writes ClusterQueue and LocalQueue statuses that differ from what the cache last saw."""

    def __init__(
        self,
        cache: Cache,
        store: QueueStatusStore,
        clock: Callable[[], float],
        metrics: Metrics | None = None,
    ) -> None:
        self.cache = cache
        self.store = store
        self.clock = clock
        self.metrics = metrics

    def _export(self, cq: ClusterQueue, t: Tally, inactive: str | None) -> None:
        m = self.metrics
        if m is None:
            return
        name = cq.name
        parked = sum(1 for k in self.cache.parked_keys() if self._cq_of(str(k)) == name)
        m.set_pending(name, max(0, t.pending - parked), parked)
        m.set_reserving_active(name, t.reserving)
        m.set_admitted_active(name, t.admitted)
        m.set_cluster_queue_status(name, CqState.ACTIVE if inactive is None else CqState.PENDING)
        cohort = cq.spec.cohort_name or ""
        for group in cq.spec.resource_groups:
            for fq in group.flavors:
                for r in fq.resources:

                    def units(q: object, res: str = r.name) -> float | None:
                        if q is None:
                            return None
                        return q.milli / 1000 if res == "cpu" else float(q.value)  # type: ignore[attr-defined]

                    m.set_quota(
                        cohort,
                        name,
                        fq.name,
                        r.name,
                        nominal=units(r.nominal_quota) or 0.0,
                        borrowing_limit=units(r.borrowing_limit),
                        lending_limit=units(r.lending_limit),
                    )
                    scale = 1000 if r.name == "cpu" else 1
                    used = t.in_use.get(fq.name, {}).get(r.name, 0) / scale
                    reserved = t.reserved.get(fq.name, {}).get(r.name, 0) / scale
                    m.set_usage(cohort, name, fq.name, r.name, used)
                    m.set_reservation(cohort, name, fq.name, r.name, reserved)

    def _cq_of(self, key: str) -> str | None:
        wl = self.cache.workloads.get(key)
        if wl is None:
            return None
        lq = self.cache.local_queues.get(wls.key_of(wl.namespace, wl.spec.queue_name or ""))
        return lq.spec.cluster_queue if lq is not None else None

    async def report(self) -> int:
        """Write every changed status; return how many were written."""
        now_ts = self.clock()
        now = dt.datetime.fromtimestamp(now_ts, dt.UTC).replace(microsecond=0)
        cqs, lqs = tally(self.cache, now_ts)
        inactive = {str(k): v for k, v in self.cache.snapshot().inactive.items()}
        written = 0
        for name, cq in list(self.cache.cluster_queues.items()):
            status = cluster_queue_status(cq, cqs[name], inactive.get(name), now)
            self._export(cq, cqs[name], inactive.get(name))
            if status != cq.status:
                await self.store.write_cluster_queue_status(name, status)
                written += 1
        for key, lq in list(self.cache.local_queues.items()):
            known = (lq.spec.cluster_queue or "") in self.cache.cluster_queues
            lq_status = local_queue_status(lq, lqs[key], known, now)
            if lq_status != lq.status:
                await self.store.write_local_queue_status(key, lq_status)
                written += 1
        return written
