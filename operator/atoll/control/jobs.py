"""The Job reconciler: keeps each labelled batch/v1 Job and its Workload in step.

Mirrors Kueue's pkg/controller/jobframework/reconciler.go (`ReconcileGenericJob`, in its order,
described in docs/architecture.md, "The admission protocol"): finished Workloads lose their
finalizer, finished Jobs finish their Workload, a Job without a Workload gets one (and is
kept suspended), a running Job's slots that will never run again are reported as the
Workload's reclaimable pods, an evicted Workload stops its Job and releases quota only when
no pod is active, an admitted Workload starts its Job, and a running Job that is not admitted is
stopped. waitForPodsReady watches that an admitted gang becomes ready in time.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog

from atoll.api import labels as keys
from atoll.api.core import Job
from atoll.api.meta import KubeObject, LabelSelector
from atoll.api.workload import RequeueState, Workload
from atoll.control import jobframework as jf
from atoll.control.integrations import Integration, JobIntegration
from atoll.control.metrics import Metrics
from atoll.control.ports import JobStore, NotFoundError, ObjectRef, WorkloadStore
from atoll.control.scheduler import workload_ref
from atoll.control.workload_metrics import (
    report_eviction,
    report_finished,
    report_ready,
)
from atoll.state import lifecycle as lc
from atoll.state import workloads as wls
from atoll.state.cache import Cache

log = structlog.get_logger("atoll.jobs")

Emit = Callable[[ObjectRef, str, str, str], Awaitable[None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class PodsReadySettings:
    """Kueue's waitForPodsReady (on by default since 0.19)."""

    enable: bool = True
    timeout: float = 1800.0
    recovery_timeout: float | None = None
    """None: same as `timeout`."""
    backoff_base: float = 60.0
    backoff_max: float = 3600.0
    backoff_limit_count: int | None = None
    """After this many PodsReady timeouts the Workload is deactivated (None: never)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSettings:
    manage_jobs_without_queue_name: bool = False
    managed_namespaces: LabelSelector | None = None
    """Namespaces whose Jobs atoll manages (None: all but kube-system)."""
    pods_ready: PodsReadySettings = PodsReadySettings()
    enabled: bool = True
    """Whether the kind's framework is in `integrations.frameworks` (off: never managed)."""


def job_ref(job: Job) -> ObjectRef:
    return ObjectRef.of(job, "Job", "batch/v1")


def is_suspended(job: Job) -> bool:
    stopping = (job.metadata.annotations or {}).get(keys.STOPPING_ANNOTATION) == "true"
    return bool(job.spec.suspend) and not stopping


class JobController:
    """Kueue's generic reconciler for one managed kind (`integration`; batch/v1 Jobs by
    default): `job` below is an object of that kind."""

    def __init__(
        self,
        cache: Cache,
        workloads: WorkloadStore,
        jobs: JobStore | None,
        emit: Emit,
        *,
        settings: JobSettings = JobSettings(),
        clock: Callable[[], float] = time.time,
        metrics: Metrics | None = None,
        integration: Integration[Any] | None = None,
    ) -> None:
        if integration is None:
            assert jobs is not None
            integration = JobIntegration(jobs)
        self.kind: Integration[Any] = integration
        self.metrics = metrics
        self.cache = cache
        self.workloads = workloads
        self.jobs = jobs
        self.emit = emit
        self.settings = settings
        self.clock = clock
        self._stopped_unadmitted: set[str] = set()
        """UIDs of the objects counted as stopped while running unadmitted, until atoll
        starts them: a reconcile that sees such an object still running (the watch has not
        shown the stop yet) stops it again but does not count it twice."""

    def _now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.clock(), dt.UTC).replace(microsecond=0)

    def _namespace_managed(self, job: KubeObject) -> bool:
        ns = job.namespace or ""
        if ns == "kube-system":
            return False
        selector = self.settings.managed_namespaces
        return selector is None or selector.matches(self.cache.namespaces.get(ns, {}))

    def manages(self, job: KubeObject) -> bool:
        if (
            not self.settings.enabled
            or not self._namespace_managed(job)
            or self.kind.owned_elsewhere(job)
        ):
            return False
        return bool(jf.queue_name(job)) or self.settings.manage_jobs_without_queue_name

    async def reconcile(self, key: str) -> float | None:
        """One pass for the Job `namespace/name`; returns when to look again (seconds)."""
        if not self.settings.enabled:
            return None
        job = self.kind.get(self.cache, key)
        if job is None or job.metadata.deletion_timestamp is not None:
            await self._gone(job, key)
            return None
        if not self.manages(job):
            if not jf.queue_name(job) and self._namespace_managed(job):
                return await self._unqueued(job)
            return None
        owned = self._owned(key)
        mine = [w for w in owned if self.kind.owns(job, w)]
        for stale in (w for w in owned if w not in mine):
            await self._finish_orphan(stale)
        wl: Workload | None = mine[0] if mine else None
        if wl is not None and wls.is_finished(wl):
            await self.kind.finalize(job)
            await self._drop_finalizer(wl)
            return None
        if wl is not None and wls.is_deleting(wl):
            if not self.kind.suspended(job):
                await self._stop(job, wl, "The workload is being deleted")
            await self.kind.finalize(job)
            await self._drop_finalizer(wl)
            return None
        job, absent = await self.kind.align(job, wl)
        if wl is not None and absent is not None:
            replacements = lc.replacement_pods(wl, absent, self._now())
            if (
                replacements is not None
                and (wl := await self._set_status(wl, replacements)) is None
            ):
                return None
        finished, reason, message = self.kind.finished(job)
        if finished:
            if wl is not None:
                await self._finish(job, wl, reason, message)
            await self.kind.finalize(job)
            return None
        if wl is None:
            return await self._create(job)
        mismatch = self._mismatch(job, wl)
        if mismatch is not None:
            return await self._rebuild(job, wl, mismatch)
        if (wl := await self._reported(job, wl)) is None:
            return None
        if wls.is_evicted(wl) or (not wls.has_quota(wl) and not self.kind.suspended(job)):
            return await self._evicted(job, wl)
        if not wls.has_quota(wl):
            if wl.spec.queue_name != jf.queue_name(job):
                await self._move(job, wl)
            return await self._requeue_check(wl)
        if self.kind.suspended(job):
            if wls.is_admitted(wl) and self.kind.startable(job):
                await self._start(job, wl)
            return None
        if not wls.is_admitted(wl):
            await self._stop(job, wl, "Not admitted by cluster queue")
            self._count_unadmitted(job)
            return None
        if self.kind.partly_started(job):
            await self._start(job, wl)  # e.g. a LeaderWorkerSet group's recreated pods
        budget = await self._execution_time_left(wl)
        if budget is not None and budget <= 0:
            return None  # deactivated: the scheduler evicts it
        ready = await self._pods_ready(job, wl)
        return min((t for t in (budget, ready) if t is not None), default=None)

    async def _gone(self, job: Any, key: str) -> None:
        """The object is gone or being deleted: its members are released and its Workloads
        finished (or deleted, for a kind whose parts come back under the same name)."""
        if job is not None:
            await self.kind.finalize(job)
        for orphan in self._owned(key):
            if self.kind.deletes_orphans:
                await self._delete_orphan(orphan)
            else:
                await self._finish_orphan(orphan)

    async def _reported(self, job: Any, wl: Workload) -> Workload | None:
        """The Workload after its Job's reclaimable pods are written into it; None when it is
        gone. (What admission checks decide is the scheduler's: `Scheduler.admission_checks`.)"""
        reclaimable = self.kind.reclaimable(job, self.cache)
        if reclaimable is not None:
            update = lc.reclaimable(reclaimable)
            if update(wl) is not None:
                written = await self._set_status(wl, update)
                if written is None:
                    return None
                wl = written
        return wl

    def _count_unadmitted(self, job: Any) -> None:
        """A Job that ran without admission was just suspended (e.g. created while no
        operator served the webhook): counted once, so that such windows are visible."""
        uid = job.metadata.uid or wls.key_of(job.namespace, job.name)
        if uid in self._stopped_unadmitted:
            return
        self._stopped_unadmitted.add(uid)
        log.warning("unadmitted job stopped", job=wls.key_of(job.namespace, job.name))
        if self.metrics is not None:
            self.metrics.unadmitted_job_stopped(self.kind.active_pods(job))

    def _owned(self, key: str) -> list[Workload]:
        return self.kind.workloads(self.cache, key)

    async def _set_status(self, wl: Workload, mutate: lc.Mutation) -> Workload | None:
        try:
            written = await self.workloads.update_workload_status(wls.wl_key(wl), mutate)
        except NotFoundError:
            self.cache.delete_workload(wls.wl_key(wl))
            return None
        if written is not None:
            self.cache.set_workload(written)
        return written

    async def _drop_finalizer(self, wl: Workload) -> None:
        if keys.RESOURCE_IN_USE_FINALIZER in (wl.metadata.finalizers or ()):
            try:
                await self.workloads.remove_workload_finalizer(
                    wls.wl_key(wl), keys.RESOURCE_IN_USE_FINALIZER
                )
            except NotFoundError:
                self.cache.delete_workload(wls.wl_key(wl))

    async def _finish_orphan(self, wl: Workload) -> None:
        """A Workload whose owner is gone: Finished (OwnerNotFound), counted as every
        finished Workload is (`report_finished`), and its finalizer dropped."""
        if not wls.is_finished(wl):
            mutate = lc.finish(lc.OWNER_NOT_FOUND, lc.OWNER_NOT_FOUND_MESSAGE, self._now())
            written = await self._set_status(wl, mutate)
            if written is not None and wls.is_finished(written):
                report_finished(self.metrics, written)
        await self._drop_finalizer(wl)

    async def _delete_orphan(self, wl: Workload) -> None:
        """A part of an owner that is gone (a LeaderWorkerSet group scaled away): its
        Workload is deleted, so that the part gets a fresh one if it comes back (Kueue's)."""
        await self._drop_finalizer(wl)
        await self.workloads.delete_workload(wls.wl_key(wl))
        self.cache.delete_workload(wls.wl_key(wl))
        log.info("workload deleted", workload=wls.wl_key(wl), reason="OwnerNotFound")

    async def _finish(self, job: Any, wl: Workload, reason: str, message: str) -> None:
        written = await self._set_status(wl, lc.finish(reason, message, self._now()))
        if written is not None:
            log.info("workload finished", workload=wls.wl_key(wl), reason=reason)
            report_finished(self.metrics, written)
            await self.emit(
                self.kind.ref(job),
                "Normal",
                "FinishedWorkload",
                f"Workload '{wls.wl_key(wl)}' is declared finished",
            )
            await self._drop_finalizer(written)

    async def _create(self, job: Any) -> float | None:
        if not self.kind.suspended(job):
            await self.kind.suspend(job)
            self._count_unadmitted(job)
            await self.emit(self.kind.ref(job), "Normal", "Stopped", "No matching Workload")
        if self.kind.active_pods(job) > 0:
            return 1.0  # wait until the running pods are gone
        wl = await self._compose(job)
        if wl is None:
            return None
        created = await self.workloads.create_workload(wl)
        self.cache.set_workload(created)
        log.info("workload created", job=wls.key_of(job.namespace, job.name), workload=wl.name)
        await self.emit(
            self.kind.ref(job),
            "Normal",
            "CreatedWorkload",
            f"Created Workload: {wls.key_of(job.namespace, wl.name)}",
        )
        return None

    async def _compose(self, job: Any) -> Workload | None:
        """The Workload for the Job, or None with a Warning event saying why it has none."""
        try:
            return self.kind.compose(job, self.cache)
        except jf.ComposeError as e:
            await self.emit(self.kind.ref(job), "Warning", e.reason, str(e))
            return None

    def _mismatch(self, job: Any, wl: Workload) -> str | None:
        return self.kind.mismatch(job, wl)

    async def _rebuild(self, job: Any, wl: Workload, why: str) -> float | None:
        """The Job no longer matches its Workload (its parallelism or resources were edited):
        stop it, release the stale quota once no pod is active, and rebuild the Workload from
        the Job in place, so it queues again for what the Job now asks. Mirrors Kueue's
        `ensureOneWorkload` (stop a Job without a matching Workload, update the Workload of a
        suspended Job to match it)."""
        key = wls.key_of(job.namespace, job.name)
        if not self.kind.suspended(job) or self.kind.carries_admission(job):
            log.info("job no longer matches its workload", job=key, reason=why)
            await self._stop(
                job,
                wl,
                f"No matching Workload ({why}); restoring pod templates according to the "
                "existent Workload",
            )
            return 1.0
        if self.kind.active_pods(job) > 0:
            return 1.0  # quota is released only when no pod of the gang is active
        rebuilt = await self._compose(job)
        if rebuilt is None:
            return None
        # The spec first: once the quota is released the scheduler may admit the Workload at
        # once, and must see what the Job asks now. Kueue's CRD keeps the queue name while
        # quota is reserved; a new one is followed afterwards.
        keep: dict[str, object] = {"active": wl.spec.active}
        if wls.has_quota(wl):
            keep["queue_name"] = wl.spec.queue_name
        written = await self.workloads.update_workload_spec(
            wls.wl_key(wl), rebuilt.spec.model_copy(update=keep)
        )
        self.cache.set_workload(written)
        if await self._release(written, "The workload no longer matches its job") is None:
            return None
        await self.emit(
            self.kind.ref(job),
            "Normal",
            "UpdatedWorkload",
            f"Updated not matching Workload for suspended job: {wls.wl_key(wl)} ({why})",
        )
        return None

    async def _release(self, wl: Workload, message: str) -> Workload | None:
        """Clear the Workload's admission (QuotaReserved=False); returns the Workload as it is
        afterwards, None if it is gone."""
        if not wls.has_quota(wl):
            return wl
        cq = wl.status.admission.cluster_queue if wl.status.admission else ""
        release = lc.release_unmatched(message, self._now())
        written = await self._set_status(wl, release)
        if written is not None:
            log.info("quota released", workload=wls.wl_key(wl), reason="NoMatchingWorkload")
            if self.metrics is not None:
                self.metrics.quota_released(cq, "NoMatchingWorkload", seconds=0.0)
            return written
        return self.cache.workloads.get(wls.wl_key(wl))

    async def _move(self, job: Any, wl: Workload) -> None:
        """A suspended Job's queue-name label changed: the Workload follows it (Kueue's
        `QueueNameChange`); a name no LocalQueue can have gets a Warning event instead."""
        queue = jf.queue_name(job)
        error = jf.queue_name_error(queue) if queue else None
        if error is not None:
            await self.emit(self.kind.ref(job), "Warning", "ErrWorkloadCompose", error)
            return
        written = await self.workloads.update_workload_spec(
            wls.wl_key(wl), wl.spec.model_copy(update={"queue_name": queue})
        )
        self.cache.set_workload(written)
        log.info("workload moved", workload=wls.wl_key(wl), local_queue=queue)
        await self.emit(
            self.kind.ref(job),
            "Normal",
            "UpdatedWorkload",
            f"Moved Workload {wls.wl_key(wl)} to LocalQueue {queue}",
        )

    async def _unqueued(self, job: Any) -> float | None:
        """The Job lost its queue-name label (Kueue's webhook refuses that while it runs; this
        is the path when the webhook was bypassed): it is no longer queued, so it is stopped,
        and once no pod of it is active its Workload is deleted, releasing the quota."""
        key = wls.key_of(job.namespace, job.name)
        owned = [w for w in self._owned(key) if self.kind.owns(job, w) and not wls.is_finished(w)]
        if not owned:
            return None
        wl = owned[0]
        finished, reason, message = self.kind.finished(job)
        if finished:
            await self._finish(job, wl, reason, message)
            return None
        if not self.kind.suspended(job):
            await self._stop(
                job, wl, f"The queue-name label was removed: the {self.kind.kind} is not queued"
            )
            return 1.0
        if self.kind.active_pods(job) > 0:
            return 1.0
        await self._drop_finalizer(wl)
        await self.workloads.delete_workload(wls.wl_key(wl))
        log.info("workload deleted", workload=wls.wl_key(wl), reason="QueueNameRemoved")
        await self.emit(
            self.kind.ref(job),
            "Warning",
            "DeletedWorkload",
            f"Deleted Workload {wls.wl_key(wl)}: the {self.kind.kind} lost its queue-name "
            "label; add the label back to queue it again",
        )
        return None

    async def _stop(self, job: Any, wl: Workload, message: str) -> None:
        await self.kind.stop(job, wl)
        await self.emit(self.kind.ref(job), "Normal", "Stopped", message)

    async def _start(self, job: Any, wl: Workload) -> None:
        adm = wl.status.admission
        assert adm is not None
        try:
            await self.kind.start(job, wl, self.cache.flavors)
        except jf.StartConflictError as e:
            await self._finish(job, wl, "FailedToStart", str(e))
            return
        self._stopped_unadmitted.discard(job.metadata.uid or wls.key_of(job.namespace, job.name))
        log.info("job started", job=wls.key_of(job.namespace, job.name), workload=wl.name)
        await self.emit(
            self.kind.ref(job), "Normal", "Started", f"Admitted by clusterQueue {adm.cluster_queue}"
        )

    async def _evicted(self, job: Any, wl: Workload) -> float | None:
        evicted = wls.condition(wl, wls.EVICTED)
        if not self.kind.suspended(job):
            await self._stop(job, wl, evicted.message if evicted else "Not admitted")
        elif self.kind.carries_admission(job) and self.kind.active_pods(job) == 0:
            # a stop cut short after its suspend (Trainer refuses a TrainJob's override
            # changes while its JobSet's jobs are active): restore it now that none is
            await self.kind.stop(job, wl)
        if self.kind.active_pods(job) > 0:
            return 1.0  # quota is released only when no pod of the gang is active
        if not wls.has_quota(wl):
            return await self._requeue_check(wl)
        reason = evicted.reason if evicted else "Pending"
        backoff = self._backoff(wl) if reason == lc.PODS_READY_TIMEOUT else None
        release = lc.release(self._now(), backoff=backoff)
        cq = wl.status.admission.cluster_queue if wl.status.admission else ""
        written = await self._set_status(wl, release)
        if written is not None:
            log.info("quota released", workload=wls.wl_key(wl), reason=reason)
            if self.metrics is not None and evicted is not None:
                since = evicted.last_transition_time.timestamp()
                self.metrics.quota_released(cq, reason, seconds=max(0.0, self.clock() - since))
            if backoff is not None:
                return await self._requeue_check(written)
        return None

    def _backoff(self, wl: Workload) -> RequeueState:
        settings = self.settings.pods_ready
        return lc.backoff(wl, self._now(), settings.backoff_base, settings.backoff_max)

    async def _requeue_check(self, wl: Workload) -> float | None:
        """After a PodsReady timeout: deactivate past the limit, else requeue at requeueAt."""
        if not wls.is_false(wl, wls.REQUEUED):
            return None
        if lc.requeuing_limit_exceeded(wl, self.settings.pods_ready.backoff_limit_count):
            await self._deactivate(
                wl, lc.REQUEUING_LIMIT_EXCEEDED, lc.REQUEUING_LIMIT_EXCEEDED_MESSAGE
            )
            return None
        at = wls.requeue_at(wl)
        if at is not None and at > self.clock():
            return at - self.clock()
        await self._set_status(wl, lc.requeue(self._now()))
        return None

    async def _execution_time_left(self, wl: Workload) -> float | None:
        """`spec.maximumExecutionTimeSeconds`: the seconds left of it (time admitted, summed
        over earlier admissions), or None without a limit; at zero the Workload is
        deactivated, as Kueue does (DeactivationTarget, then `spec.active: false`)."""
        left = wls.execution_time_left(wl, self.clock())
        if left is None or left > 0:
            return left
        limit = wl.spec.maximum_execution_time_seconds
        if wl.spec.active:
            await self.emit(
                workload_ref(wl),
                "Warning",
                "MaximumExecutionTimeExceeded",
                f"The maximum execution time ({limit}s) exceeded",
            )
            await self._deactivate(
                wl, lc.MAXIMUM_EXECUTION_TIME_EXCEEDED, lc.MAXIMUM_EXECUTION_TIME_EXCEEDED_MESSAGE
            )
        return 0.0

    async def _deactivate(self, wl: Workload, reason: str, message: str) -> None:
        """DeactivationTarget=True with the cause, then `spec.active: false`; the scheduler
        evicts the Workload with reason `DeactivatedDueTo<cause>`."""
        await self._set_status(wl, lc.deactivation_target(reason, message, self._now()))
        log.info("workload deactivated", workload=wls.wl_key(wl), reason=reason)
        await self.workloads.deactivate_workload(wls.wl_key(wl))

    async def _pods_ready(self, job: Any, wl: Workload) -> float | None:
        settings = self.settings.pods_ready
        if not settings.enable:
            return None
        ready = self.kind.ready(job, wl)
        current = wls.condition(wl, wls.PODS_READY)
        was_ready = current is not None and current.status.value == "True"
        now = self._now()
        if ready:
            reason = (
                "Recovered" if current and current.reason == lc.WAIT_FOR_RECOVERY else "Started"
            )
            if not was_ready:
                written = await self._pods_ready_condition(
                    wl, True, reason, "All pods reached readiness and the workload is running", now
                )
                if written is not None:
                    report_ready(self.metrics, written)
            return None
        if was_ready or (current is not None and current.reason == lc.WAIT_FOR_RECOVERY):
            reason, message = (
                lc.WAIT_FOR_RECOVERY,
                "At least one pod has failed, waiting for recovery",
            )
            timeout = settings.recovery_timeout or settings.timeout
        else:
            reason, message = lc.WAIT_FOR_START, "Not all pods are ready or succeeded"
            timeout = settings.timeout
        if current is None or current.reason != reason:
            written = await self._pods_ready_condition(wl, False, reason, message, now)
            current = wls.condition(written, wls.PODS_READY) if written else current
        admitted = wls.condition(wl, wls.ADMITTED)
        since = admitted.last_transition_time.timestamp() if admitted else self.clock()
        if reason == lc.WAIT_FOR_RECOVERY and current is not None:
            since = max(since, current.last_transition_time.timestamp())
        remaining = since + timeout - self.clock()
        if remaining > 0:
            return remaining
        log.info("pods ready timeout", workload=wls.wl_key(wl), timeout_s=timeout)
        written = await self._set_status(wl, lc.pods_ready_timeout(now))
        if written is not None:
            report_eviction(self.metrics, written)
        return 0.0

    async def _pods_ready_condition(
        self, wl: Workload, status: bool, reason: str, message: str, now: dt.datetime
    ) -> Workload | None:
        return await self._set_status(
            wl, lc.set_condition(wls.PODS_READY, status, reason, message, now)
        )
