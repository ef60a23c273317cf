"""The simulator's Workloads: composed from a scenario's objects by the operator's own
adapters, and changed by the operator's own lifecycle rules.

A scenario's Job, JobSet, MPIJob, TrainJob, pod group or LeaderWorkerSet replica group
becomes the Workload the operator would create
for it through the same `control/integrations.py` adapter (`Integration.compose`: its pod
sets, priority, Kueue's `<kind>-<name>-<hash>` name, or the group's name), among the kinds the
scenario's Configuration enables (`integrations.frameworks`, as the operator does). Its
status then changes as the operator changes it, through `state/lifecycle.py`: the
simulator applies each mutation at once instead of writing it, and, as its pods vanish with
the eviction, releases the quota in the same instant. Only time differs: a simulated
second is `EPOCH` + t.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from typing import Any, cast

from atoll.api.configuration import RUN_FRAMEWORKS, Configuration
from atoll.api.core import Job
from atoll.api.meta import KubeObject
from atoll.api.workload import Workload
from atoll.control import integrations as ig
from atoll.control import leaderworkerset as lws
from atoll.control.jobframework import ComposeError
from atoll.control.podgroups import PodGroup
from atoll.state import lifecycle as lc
from atoll.state import workloads as wls
from atoll.state.cache import Cache

__all__ = ["EPOCH", "ComposeError", "Kinds", "at", "uid_of"]

EPOCH = 1_767_225_600.0
"""Wall-clock time of simulation second 0 (2026-01-01T00:00:00Z), for object timestamps."""
_UID_NAMESPACE = uuid.UUID("6c1d0b4e-5f0a-4f5e-9a57-61746f6c6c21")


def at(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(EPOCH + t, dt.UTC)


def uid_of(obj: KubeObject) -> str:
    """A stable uid for a scenario object (a Job's from its `namespace/name`, another
    kind's from its kind too), so that runs are reproducible."""
    seed = f"{obj.namespace}/{obj.name}"
    if not isinstance(obj, Job):
        seed = f"{obj.KIND}/{seed}"
    return str(uuid.uuid5(_UID_NAMESPACE, seed))


class _Offline:
    """The adapters' object writers: the simulator composes Workloads only, it starts and
    stops nothing through them."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"the simulator writes no object ({name})")


class Kinds:
    """The adapters of the kinds a Configuration enables, as the operator builds them."""

    def __init__(self, frameworks: Sequence[str]) -> None:
        stores = cast("ig.Stores", _Offline())
        self.enabled: Sequence[ig.Integration[KubeObject]] = ig.enabled(tuple(frameworks), stores)

    @classmethod
    def of_config(cls, cfg: Configuration) -> Kinds:
        """The kinds `integrations.frameworks` enables."""
        return cls(cfg.integrations.frameworks)

    @classmethod
    def all(cls) -> Kinds:
        """Every kind atoll runs (what kube-scheduler alone sees: every object's pods)."""
        return cls(RUN_FRAMEWORKS)

    def of(self, obj: KubeObject) -> ig.Integration[KubeObject] | None:
        """The adapter of `obj`'s kind, None when its framework is not enabled."""
        # exact: a LeaderWorkerSet's group is a pod group, but not of the `pod` framework
        return next((k for k in self.enabled if type(obj) is k.model), None)

    def compose(self, obj: KubeObject, cache: Cache, *, created: float | dt.datetime) -> Workload:
        """The Workload the operator creates for `obj` at `created` (sim seconds, or a wall
        clock time; its uid and
        creation time set as the API server would). Raises ComposeError as the operator's
        adapter does (an unknown priority class, a bad annotation, an incomplete group), or
        when the kind's framework is not enabled."""
        kind = self.of(obj)
        if kind is None:
            raise ComposeError(
                "FrameworkNotEnabled",
                f"the {framework_of(obj)} framework is not in the Configuration's "
                "integrations.frameworks",
            )
        uid = uid_of(obj)
        wl = kind.compose(with_uid(obj, uid), cache)
        when = at(created) if isinstance(created, float | int) else created
        meta = wl.metadata.model_copy(update={"uid": uid, "creation_timestamp": when})
        return wl.model_copy(update={"metadata": meta})


def framework_of(obj: KubeObject) -> str:
    """Kueue's framework name of an object's kind."""
    if isinstance(obj, lws.ReplicaGroup):
        return ig.LEADERWORKERSET
    if isinstance(obj, PodGroup):
        return ig.POD
    return {
        "Job": ig.BATCH_JOB,
        "JobSet": ig.JOBSET,
        "MPIJob": ig.MPIJOB,
        "TrainJob": ig.TRAINJOB,
    }.get(obj.KIND, obj.KIND)


def with_uid(obj: KubeObject, uid: str) -> KubeObject:
    """`obj` with `metadata.uid` (and, for a pod group, each pod's; for a LeaderWorkerSet's
    group, its LeaderWorkerSet's, shared by all its groups) set when missing."""
    if isinstance(obj, lws.ReplicaGroup):
        owner = obj.lws
        if not owner.metadata.uid:
            owner_uid = uid_of(owner)
            owner = owner.model_copy(
                update={"metadata": owner.metadata.model_copy(update={"uid": owner_uid})}
            )
        meta = obj.metadata.model_copy(update={"uid": owner.metadata.uid})
        return obj.model_copy(update={"lws": owner, "metadata": meta})
    if isinstance(obj, PodGroup):
        pods = tuple(
            p
            if p.metadata.uid
            else p.model_copy(update={"metadata": p.metadata.model_copy(update={"uid": uid_of(p)})})
            for p in obj.pods
        )
        obj = obj.model_copy(update={"pods": pods})
        if not obj.grouped:
            return obj.model_copy(
                update={"metadata": obj.metadata.model_copy(update={"uid": pods[0].metadata.uid})}
            )
        return obj
    if obj.metadata.uid:
        return obj
    return obj.model_copy(update={"metadata": obj.metadata.model_copy(update={"uid": uid})})


def released(
    wl: Workload,
    eviction: lc.Mutation,
    t: float,
    *,
    backoff: tuple[float, float] | None,
) -> Workload:
    """Evicted by `eviction` then, the pods being gone at once in the simulator, the quota
    released; `backoff` (base, cap) after a PodsReady timeout. A Workload not requeued at
    once is requeued as the reconciler's next pass does (PodsReady timeouts wait for their
    backoff, `backoff_finished`)."""
    now = at(t)
    wl = lc.applied(wl, eviction)
    rs = lc.backoff(wl, now, *backoff) if backoff is not None else None
    wl = lc.applied(wl, lc.release(now, backoff=rs))
    if rs is None:
        wl = lc.applied(wl, lc.requeue(now))
    return wl


def out_of_time(wl: Workload, t: float) -> Workload:
    """Deactivated for exceeding its maximum execution time, as the operator's Job
    reconciler does it (DeactivationTarget, then `spec.active: false`): the next step
    evicts it and it is not requeued."""
    target = lc.deactivation_target(
        lc.MAXIMUM_EXECUTION_TIME_EXCEEDED, lc.MAXIMUM_EXECUTION_TIME_EXCEEDED_MESSAGE, at(t)
    )
    return lc.deactivated(lc.applied(wl, target))


def backoff_finished(wl: Workload, t: float) -> Workload:
    return lc.applied(wl, lc.requeue(at(t)))


def deactivated(wl: Workload, t: float) -> Workload:
    """Past `backoffLimitCount`: DeactivationTarget (RequeuingLimitExceeded) and
    `spec.active: false`, as the operator's reconciler does."""
    target = lc.deactivation_target(
        lc.REQUEUING_LIMIT_EXCEEDED, lc.REQUEUING_LIMIT_EXCEEDED_MESSAGE, at(t)
    )
    return lc.deactivated(lc.applied(wl, target))


def requeue_time(wl: Workload) -> float | None:
    """When a Workload requeued with backoff may be admitted again (sim seconds)."""
    t = wls.requeue_at(wl)
    return None if t is None else t - EPOCH
