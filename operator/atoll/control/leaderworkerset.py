"""The LeaderWorkerSet integration's rules: each replica group (a leader and its workers, `size`
pods) is one gang with its own Workload. Pure functions over `atoll.api` models.

Mirrors Kueue's pkg/controller/jobs/leaderworkerset: the LWS webhook puts the queue name, the
priority class and Kueue's `pod-suspending-parent` and `pod-group-serving` annotations on the
leader and worker templates, so that the pod webhook gates every pod of the set at creation;
the reconciler keeps one Workload per group index (`leaderworkerset-<name>-<index>-<hash>`,
owned by the LWS, not as controller), made from the LWS spec (pod sets `leader` of 1 and
`worker` of size - 1, or `main` of size without a leader template), so a group is queued
before its pods exist; and the group's pods are a pod group of that Workload, ungated together
when it is admitted (the `pod` integration's start). A group is serving: it never finishes; it
is stopped by deleting its running pods, which the LWS controller recreates gated.

A group's pods are found by the LWS controller's own labels (`leaderworkerset.sigs.k8s.io/name`
and `…/group-index`, which the LWS pod webhook sets before the pod is stored), not by a label
atoll would have to write at creation: API servers call mutating webhooks in name order, so
atoll's may run before LWS's has set the group index.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from atoll.api import labels as keys
from atoll.api.core import Pod, PodTemplateSpec, PriorityClass
from atoll.api.leaderworkerset import (
    GROUP,
    GROUP_INDEX_LABEL,
    NAME_LABEL,
    VERSION,
    WORKER_INDEX_LABEL,
    LeaderWorkerSet,
)
from atoll.api.meta import ObjectMeta, OwnerReference
from atoll.api.priority import WorkloadPriorityClass
from atoll.api.workload import MAIN_POD_SET, PodSet, Workload
from atoll.control import jobframework as jf
from atoll.control import podgroups as pg

__all__ = ["GROUP", "LeaderWorkerSet", "ReplicaGroup", "build_workload", "pod_sets"]
FRAMEWORK = "leaderworkerset.x-k8s.io/leaderworkerset"
LEADER = "leader"
WORKER = "worker"
LWS_PREFIX = "leaderworkerset.sigs.k8s.io/"


class ReplicaGroup(pg.PodGroup):
    """One replica group of a LeaderWorkerSet as atoll sees it (not an API object): a pod
    group named after its leader pod (`<lws>-<index>`), with the LWS's labels."""

    lws: LeaderWorkerSet
    """The LeaderWorkerSet."""
    index: int = 0
    """The group index."""


def size(lws: LeaderWorkerSet) -> int:
    return lws.spec.leader_worker_template.size or 1


def replicas(lws: LeaderWorkerSet) -> int:
    r = lws.spec.replicas
    return 1 if r is None else r


def group_key(namespace: str | None, lws_name: str, index: int | str) -> str:
    """`namespace/<lws>-<index>`: the group's reconcile key (its leader pod's name)."""
    return f"{namespace or ''}/{lws_name}-{index}"


def split_key(key: str) -> tuple[str, int] | None:
    """`namespace/<lws>-<index>` → (`namespace/<lws>`, index); None for another key."""
    head, _, index = key.rpartition("-")
    if not head or "/" not in head or not index.isdigit():
        return None
    return head, int(index)


def pod_group_key(pod: Pod) -> str | None:
    """The group key of a pod of a managed LeaderWorkerSet (its template carries Kueue's
    suspending-parent annotation naming this framework), None for any other pod."""
    labels = pod.metadata.labels or {}
    ann = pod.metadata.annotations or {}
    if ann.get(keys.SUSPENDED_BY_PARENT_ANNOTATION) != FRAMEWORK:
        return None
    name, index = labels.get(NAME_LABEL), labels.get(GROUP_INDEX_LABEL)
    if not name or index is None or not index.isdigit():
        return None
    return group_key(pod.namespace, name, index)


def workload_name(lws: LeaderWorkerSet, index: int) -> str:
    """Kueue's name of a group's Workload: `leaderworkerset-<name>-<index>-<hash>`."""
    return jf.workload_name(
        f"{lws.name}-{index}", lws.metadata.uid or "", kind=LeaderWorkerSet.KIND, group=GROUP
    )


def workload_group_key(wl: Workload) -> str | None:
    """The group key of an LWS group's Workload (its LWS owner and index annotation)."""
    index = (wl.metadata.annotations or {}).get(keys.COMPONENT_WORKLOAD_INDEX_ANNOTATION)
    if index is None or not index.isdigit():
        return None
    for ref in wl.metadata.owner_references or ():
        if ref.kind == LeaderWorkerSet.KIND and ref.api_version.startswith(f"{GROUP}/"):
            return group_key(wl.namespace, ref.name, index)
    return None


def reconcile_keys(lws: LeaderWorkerSet, workloads: Iterable[Workload]) -> list[str]:
    """The groups a change of the LWS concerns: those it has, and those its Workloads name
    (groups scaled away, or all of them once it is deleted)."""
    found = {group_key(lws.namespace, lws.name, i) for i in range(replicas(lws))}
    found.update(k for w in workloads if (k := workload_group_key(w)) is not None)
    return sorted(found)


def group_of(lws: LeaderWorkerSet, index: int, pods: Mapping[str, Pod]) -> ReplicaGroup:
    meta = ObjectMeta(
        name=f"{lws.name}-{index}",
        namespace=lws.namespace,
        uid=lws.metadata.uid,
        labels=lws.metadata.labels,
        annotations=lws.metadata.annotations,
    )
    return ReplicaGroup(
        metadata=meta,
        pods=tuple(pods[n] for n in sorted(pods)),
        total=size(lws),
        grouped=True,
        lws=lws,
        index=index,
    )


def pod_sets(lws: LeaderWorkerSet) -> tuple[PodSet, ...]:
    """Kueue's pod sets of a group: `leader` (1 pod) and `worker` (size - 1), or `main`
    (size) when the LWS has no leader template. The templates lose the LWS controller's keys
    (but its name label)."""
    lwt = lws.spec.leader_worker_template
    out = []
    worker_set, worker_count = MAIN_POD_SET, size(lws)
    if lwt.leader_template is not None:
        out.append(_pod_set(LEADER, 1, lwt.leader_template))
        worker_set, worker_count = WORKER, worker_count - 1
    out.append(_pod_set(worker_set, worker_count, lwt.worker_template))
    return tuple(out)


def _pod_set(name: str, count: int, template: PodTemplateSpec) -> PodSet:
    meta = template.metadata
    if meta is not None:

        def keep(m: Mapping[str, str] | None) -> dict[str, str] | None:
            kept = {
                k: v
                for k, v in (m or {}).items()
                if not k.startswith(LWS_PREFIX) or k == NAME_LABEL
            }
            return kept or None

        meta = meta.model_copy(
            update={"labels": keep(meta.labels), "annotations": keep(meta.annotations)}
        )
        template = template.model_copy(update={"metadata": meta})
    return PodSet(
        name=name,
        template=jf.workload_template(template),
        count=count,
        topology_request=jf.topology_request(template),
    )


def pod_set_name(group: ReplicaGroup, pod: Pod) -> str:
    """The pod set a pod of the group belongs to: its leader is worker index 0."""
    if group.lws.spec.leader_worker_template.leader_template is None:
        return MAIN_POD_SET
    return LEADER if (pod.metadata.labels or {}).get(WORKER_INDEX_LABEL) == "0" else WORKER


def build_workload(
    group: ReplicaGroup,
    workload_classes: Mapping[str, WorkloadPriorityClass],
    priority_classes: Mapping[str, PriorityClass],
) -> Workload:
    """The Workload Kueue creates for one group. Raises jf.ComposeError when it cannot."""
    lws = group.lws
    lwt = lws.spec.leader_worker_template
    pod_class, where = None, ""
    for path, template in (
        ("leaderTemplate", lwt.leader_template),
        ("workerTemplate", lwt.worker_template),
    ):
        if template is not None and template.spec.priority_class_name:
            pod_class = template.spec.priority_class_name
            where = f"spec.leaderWorkerTemplate.{path}.spec.priorityClassName"
            break
    priority = jf.owner_priority(
        lws.metadata.labels or {}, pod_class, workload_classes, priority_classes, field=where
    )
    wl = jf.owned_workload(lws, pod_sets(lws), priority, group=GROUP)
    uid = lws.metadata.uid or ""
    ref = OwnerReference(
        api_version=f"{GROUP}/{VERSION}", kind=LeaderWorkerSet.KIND, name=lws.name, uid=uid
    )
    meta = wl.metadata.model_copy(
        update={
            "name": workload_name(lws, group.index),
            "owner_references": (ref,),
            "annotations": {
                keys.IS_GROUP_WORKLOAD_ANNOTATION: "true",
                keys.JOB_OWNER_GVK_ANNOTATION: f"{GROUP}/{VERSION}, Kind={LeaderWorkerSet.KIND}",
                keys.JOB_OWNER_NAME_ANNOTATION: lws.name,
                keys.COMPONENT_WORKLOAD_INDEX_ANNOTATION: str(group.index),
            },
        }
    )
    return wl.model_copy(update={"metadata": meta})


def owns(group: ReplicaGroup, wl: Workload) -> bool:
    """Whether `wl` is this group's Workload (its name carries the LWS's uid)."""
    return wl.name == workload_name(group.lws, group.index)


def pod_labels(group: ReplicaGroup, wl: Workload) -> dict[str, str]:
    """Kueue's pod-group labels on a group's pods (written when they are ungated)."""
    return {
        keys.MANAGED_LABEL: "true",
        keys.POD_GROUP_NAME_LABEL: wl.name,
        keys.PREBUILT_WORKLOAD_LABEL: wl.name,
    }


def pod_annotations(group: ReplicaGroup, pod: Pod) -> dict[str, str]:
    return {
        keys.POD_GROUP_TOTAL_COUNT_ANNOTATION: str(group.total),
        keys.ROLE_HASH_ANNOTATION: pod_set_name(group, pod),
    }


def template_defaults(lws: LeaderWorkerSet) -> dict[str, object]:
    """The merge patch the webhook applies to a managed LeaderWorkerSet: Kueue's queue and
    priority labels and its suspending-parent and serving annotations on each pod template
    (empty when they are there already)."""
    labels = {
        k: v
        for k, v in (lws.metadata.labels or {}).items()
        if k in (keys.QUEUE_NAME_LABEL, keys.PRIORITY_CLASS_LABEL)
    }
    annotations = {
        keys.SUSPENDED_BY_PARENT_ANNOTATION: FRAMEWORK,
        keys.POD_GROUP_SERVING_ANNOTATION: "true",
    }
    lwt = lws.spec.leader_worker_template
    patch: dict[str, object] = {}
    for field, template in (
        ("leaderTemplate", lwt.leader_template),
        ("workerTemplate", lwt.worker_template),
    ):
        if template is None:
            continue
        meta = template.metadata
        have_l = (meta.labels if meta else None) or {}
        have_a = (meta.annotations if meta else None) or {}
        if all(have_l.get(k) == v for k, v in labels.items()) and all(
            have_a.get(k) == v for k, v in annotations.items()
        ):
            continue
        meta_patch: dict[str, object] = {"annotations": annotations}
        if labels:
            meta_patch["labels"] = labels
        patch[field] = {"metadata": meta_patch}
    return {"spec": {"leaderWorkerTemplate": patch}} if patch else {}
