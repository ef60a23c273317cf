"""Where each managed custom kind is served and how the kube layer handles it: its API
coordinates and CRD, its cache slot, its webhook id and how the webhook suspends it. One
entry per integration whose objects are custom resources (JobSet, MPIJob, TrainJob,
LeaderWorkerSet);
batch/v1 Jobs are
wired on their own. `bootstrap`, `handlers`, `webhook` and `operator` read this table, so a new
kind is one entry here plus its `control.integrations` adapter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from atoll.api import jobset, leaderworkerset, mpijob, trainjob
from atoll.api.jobset import JobSet
from atoll.api.leaderworkerset import LeaderWorkerSet
from atoll.api.meta import KubeObject
from atoll.api.mpijob import MPIJob
from atoll.api.trainjob import ClusterTrainingRuntime, TrainingRuntime, TrainJob
from atoll.control import integrations
from atoll.control import leaderworkerset as lws
from atoll.control import trainjob as trainer_rules
from atoll.state.cache import Cache


@dataclass(frozen=True, slots=True)
class ReadKind:
    """A kind watched read-only for a managed kind (a TrainJob's training runtimes): cached,
    and each change queues the managed objects that use it."""

    model: type[KubeObject]
    group: str
    version: str
    plural: str
    objects: Callable[[Cache], dict[str, Any]]
    """Its cache slot, by `namespace/name` (by name when cluster-scoped)."""
    users: Callable[[Cache, str], list[str]]
    """The reconcile keys of the managed objects that use the object of a cache key."""
    keep: Callable[[Any], bool] | None = None
    """Which objects are cached (default: every one)."""

    def key(self, obj: KubeObject) -> str:
        return f"{obj.namespace}/{obj.name}" if obj.namespace else obj.name

    def kept(self, obj: KubeObject) -> bool:
        """Whether `obj` is cached (`keep`)."""
        return self.keep is None or self.keep(obj)


def _made_by_trainer(obj: JobSet) -> bool:
    return any(
        ref.kind == TrainJob.KIND and ref.controller for ref in obj.metadata.owner_references or ()
    )


def _trainjobs_using(cache: Cache, kind: str, key: str) -> list[str]:
    return [
        k for k, obj in cache.trainjobs.items() if trainer_rules.runtime_key(obj) == (kind, key)
    ]


@dataclass(frozen=True, slots=True)
class CustomKind:
    """One managed custom kind, as the kube layer sees it."""

    model: type[KubeObject]
    framework: str
    """Kueue's framework name (`integrations.frameworks`)."""
    group: str
    version: str
    plural: str
    webhook_id: str
    """Kueue's path of the kind's mutating webhook."""
    objects: Callable[[Cache], dict[str, Any]]
    """The cache's slot of the kind, by `namespace/name`."""
    suspended: Callable[[Any], bool]
    """Whether an object is suspended (the webhook suspends a managed one at creation)."""
    suspend_patch: Mapping[str, Any]
    """The merge patch that suspends an object."""
    defaults: Callable[[Any], Mapping[str, Any]] | None = None
    """The merge patch the webhook applies to a managed object on create and update (a
    LeaderWorkerSet's pod templates), if any."""
    reconcile_keys: Callable[[Cache, Any], list[str]] | None = None
    """The reconcile keys an object's change queues (default: its own `namespace/name`)."""
    reads: tuple[ReadKind, ...] = ()
    """Kinds watched read-only with it (a TrainJob's runtimes)."""

    @property
    def kind(self) -> str:
        return self.model.KIND

    @property
    def crd(self) -> str:
        return f"{self.plural}.{self.group}"


CUSTOM_KINDS: Final[dict[str, CustomKind]] = {
    JobSet.KIND: CustomKind(
        model=JobSet,
        framework=integrations.JOBSET,
        group=jobset.GROUP,
        version=jobset.VERSION,
        plural=jobset.PLURAL,
        webhook_id="mutate-jobset-x-k8s-io-v1alpha2-jobset",
        objects=lambda cache: cache.jobsets,
        suspended=lambda obj: bool(obj.spec.suspend),
        suspend_patch={"spec": {"suspend": True}},
    ),
    MPIJob.KIND: CustomKind(
        model=MPIJob,
        framework=integrations.MPIJOB,
        group=mpijob.GROUP,
        version=mpijob.VERSION,
        plural=mpijob.PLURAL,
        webhook_id="mutate-kubeflow-org-v2beta1-mpijob",
        objects=lambda cache: cache.mpijobs,
        suspended=lambda obj: bool(obj.spec.run_policy.suspend),
        suspend_patch={"spec": {"runPolicy": {"suspend": True}}},
    ),
    TrainJob.KIND: CustomKind(
        model=TrainJob,
        framework=integrations.TRAINJOB,
        group=trainjob.GROUP,
        version=trainjob.VERSION,
        plural=trainjob.PLURAL,
        webhook_id="mutate-trainer-kubeflow-org-v1alpha1-trainjob",
        objects=lambda cache: cache.trainjobs,
        suspended=lambda obj: bool(obj.spec.suspend),
        suspend_patch={"spec": {"suspend": True}},
        reads=(
            ReadKind(
                model=TrainingRuntime,
                group=trainjob.GROUP,
                version=trainjob.VERSION,
                plural=trainjob.RUNTIME_PLURAL,
                objects=lambda cache: cache.training_runtimes,
                users=lambda cache, key: _trainjobs_using(cache, trainjob.RUNTIME_KIND, key),
            ),
            ReadKind(
                model=ClusterTrainingRuntime,
                group=trainjob.GROUP,
                version=trainjob.VERSION,
                plural=trainjob.CLUSTER_RUNTIME_PLURAL,
                objects=lambda cache: cache.cluster_training_runtimes,
                users=lambda cache, key: _trainjobs_using(
                    cache, trainjob.CLUSTER_RUNTIME_KIND, key
                ),
            ),
            ReadKind(
                model=JobSet,
                group=jobset.GROUP,
                version=jobset.VERSION,
                plural=jobset.PLURAL,
                objects=lambda cache: cache.trainjob_jobsets,
                # Trainer names the JobSet after its TrainJob
                users=lambda cache, key: [key] if key in cache.trainjobs else [],
                keep=_made_by_trainer,
            ),
        ),
    ),
    LeaderWorkerSet.KIND: CustomKind(
        model=LeaderWorkerSet,
        framework=integrations.LEADERWORKERSET,
        group=leaderworkerset.GROUP,
        version=leaderworkerset.VERSION,
        plural=leaderworkerset.PLURAL,
        webhook_id="mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
        objects=lambda cache: cache.leaderworkersets,
        # no suspend: its pods are gated at creation; its queue name is fixed once a group is
        # ready (Kueue's rule)
        suspended=lambda obj: obj.status.ready_replicas == 0,
        suspend_patch={},
        defaults=lws.template_defaults,
        reconcile_keys=lambda cache, obj: lws.reconcile_keys(
            obj, cache.workloads_of_job(f"{obj.namespace}/{obj.name}", kind=obj.KIND)
        ),
    ),
}
"""The managed custom kinds, by kind."""
