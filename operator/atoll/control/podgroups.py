"""The plain-pod integration's rules (Kueue's `pod` framework): single pods and pod groups.

A pod labelled with a queue name is gated (`kueue.x-k8s.io/admission`) at creation. A pod with
`kueue.x-k8s.io/pod-group-name` belongs to the group of that name in its namespace, which is
one gang of `kueue.x-k8s.io/pod-group-total-count` pods: its Workload (named after the group)
is created once that many pods exist, with one pod set per role (pods of the same shape, named
by the first 8 hex of a hash of it, as Kueue's role hash), and its pods are ungated together
when it is admitted. A group that is not complete waits, and says how many pods it misses.
A pod without a group is a gang of one (`pod-<name>-<hash>`). Pure functions over
`atoll.api` models.

A group whose Workload is evicted (preempted, deactivated, timed out) or deleted is stopped
as Kueue stops it: its running pods are deleted (gated, ended and terminating pods are left),
and its quota is released once none runs. atoll puts no `kueue.x-k8s.io/managed` finalizer on
pods, so the deleted pods are gone at once rather than kept as Failed: once the last pod of
the group is gone its Workload is finished (`OwnerNotFound`) and garbage-collected with its
owners, and a group made again under the same name gets a new Workload, queued afresh.

Mirrors Kueue's pkg/controller/jobs/pod/pod_controller.go (`Stop`: delete every pod that is
neither gated, ended nor being deleted). Not mirrored: fast admission, serving groups, the
pods' `kueue.x-k8s.io/managed` finalizer (so neither the `TerminationTarget` pod condition
Kueue sets before the deletion nor the `WaitingForReplacementPods` Workload condition of a
group whose failed pods wait for replacements; the quota is released when the deletion
begins, as Kueue's `FastQuotaReleaseInPodIntegration` gate does, rather than when the pods
stop running).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence

from atoll.api import labels as keys
from atoll.api.core import Pod, PodTemplateMeta, PodTemplateSpec, PriorityClass
from atoll.api.meta import KubeObject, ObjectMeta, OwnerReference
from atoll.api.priority import WorkloadPriorityClass
from atoll.api.workload import MAIN_POD_SET, PodSet, Workload
from atoll.control import jobframework as jf

TERMINAL = ("Succeeded", "Failed")
TOTAL_COUNT_FIELD = f"metadata.annotations[{keys.POD_GROUP_TOTAL_COUNT_ANNOTATION}]"


class PodGroup(KubeObject):
    """A gang of plain pods as atoll sees it (not an API object): the pods of one group, or
    one pod without a group. Its name is the group's (or the pod's)."""

    pods: tuple[Pod, ...] = ()
    """The group's pods that exist, by name."""
    total: int = 1
    """Pods the group needs (its total-count annotation; 1 for a single pod)."""
    grouped: bool = False
    """Whether this is a group (else a single pod)."""


def group_name(pod: Pod) -> str | None:
    return (pod.metadata.labels or {}).get(keys.POD_GROUP_NAME_LABEL) or None


def group_key(pod: Pod) -> str:
    """`namespace/group` for a grouped pod, `namespace/pod` for a single one."""
    return f"{pod.namespace or ''}/{group_name(pod) or pod.name}"


def total_count_error(pod: Pod) -> str | None:
    """Why a grouped pod's total-count annotation is unusable (a field error), or None."""
    if group_name(pod) is None:
        return None
    raw = (pod.metadata.annotations or {}).get(keys.POD_GROUP_TOTAL_COUNT_ANNOTATION)
    if raw is None:
        return f"{TOTAL_COUNT_FIELD}: Required value: a pod of a group names the group's size"
    if not raw.isdigit() or int(raw) < 1:
        return f'{TOTAL_COUNT_FIELD}: Invalid value: "{raw}": must be a positive integer'
    return None


def gated(pod: Pod) -> bool:
    return any(g.name == keys.ADMISSION_GATE for g in pod.spec.scheduling_gates or ())


def live(pod: Pod) -> bool:
    return pod.status.phase not in TERMINAL and pod.metadata.deletion_timestamp is None


def group_of(key: str, pods: Mapping[str, Pod]) -> PodGroup | None:
    """The PodGroup `key` made of `pods` (by name), None when it has no pod."""
    if not pods:
        return None
    ordered = tuple(pods[n] for n in sorted(pods))
    first = ordered[0]
    grouped = group_name(first) is not None
    total = 1
    if grouped:
        raw = (first.metadata.annotations or {}).get(keys.POD_GROUP_TOTAL_COUNT_ANNOTATION, "")
        total = int(raw) if raw.isdigit() and int(raw) > 0 else len(ordered)
    meta = ObjectMeta(
        name=key.partition("/")[2],
        namespace=first.namespace,
        uid=None if grouped else first.metadata.uid,
        labels=first.metadata.labels,
        annotations=first.metadata.annotations,
    )
    return PodGroup(metadata=meta, pods=ordered, total=total, grouped=grouped)


def role_hash(pod: Pod) -> str:
    """8 hex of a hash of the pod's shape: pods of one role form one pod set."""
    spec = pod.spec.to_dict()
    shape = {
        k: spec.get(k)
        for k in (
            "containers",
            "initContainers",
            "nodeSelector",
            "affinity",
            "tolerations",
            "priorityClassName",
            "overhead",
            "resourceClaims",
        )
    }
    for c in [*(shape["containers"] or []), *(shape["initContainers"] or [])]:
        for drop in ("name", "env", "command", "args", "image"):
            c.pop(drop, None)
    digest = hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()
    return digest[:8]


def template_of(pod: Pod) -> PodTemplateSpec:
    meta = PodTemplateMeta(labels=pod.metadata.labels, annotations=pod.metadata.annotations)
    spec = pod.spec.model_copy(update={"node_name": None})
    return PodTemplateSpec(metadata=meta, spec=spec)


def pod_set_name(group: PodGroup, pod: Pod) -> str:
    return role_hash(pod) if group.grouped else MAIN_POD_SET


def pod_sets(group: PodGroup) -> tuple[PodSet, ...]:
    """One pod set per role (sorted by name) of the group's pods that did not fail; one pod
    set `main` of one pod for a single pod."""
    sets: dict[str, PodSet] = {}
    for pod in group.pods:
        if pod.status.phase == "Failed":
            continue
        name = pod_set_name(group, pod)
        if name in sets:
            sets[name] = sets[name].model_copy(update={"count": sets[name].count + 1})
        else:
            sets[name] = PodSet(name=name, template=template_of(pod), count=1)
    return tuple(sets[n] for n in sorted(sets))


def missing(group: PodGroup) -> int:
    """Pods the group still lacks before it can be admitted."""
    return max(0, group.total - sum(1 for p in group.pods if p.status.phase != "Failed"))


def build_workload(
    group: PodGroup,
    workload_classes: Mapping[str, WorkloadPriorityClass],
    priority_classes: Mapping[str, PriorityClass],
) -> Workload:
    """The group's Workload (named after the group, owned by every pod), or a single pod's
    (`pod-<name>-<hash>`, owned by the pod). Raises jf.ComposeError while the group is
    incomplete, saying how many pods are missing."""
    lacking = missing(group)
    if group.grouped and lacking:
        have = group.total - lacking
        raise jf.ComposeError(
            "WaitingForPods",
            f"pod group {group.name}: {have} of {group.total} pods exist, {lacking} missing; "
            "the group is admitted whole once all exist",
        )
    first = group.pods[0]
    priority = jf.owner_priority(
        group.metadata.labels or {},
        first.spec.priority_class_name,
        workload_classes,
        priority_classes,
        field="spec.priorityClassName",
    )
    wl = jf.owned_workload(first, pod_sets(group), priority, group="")
    if not group.grouped:
        return wl
    refs = tuple(
        OwnerReference(api_version="v1", kind="Pod", name=p.name, uid=p.metadata.uid or "")
        for p in group.pods
    )
    meta = wl.metadata.model_copy(
        update={
            "name": group.name,
            "owner_references": refs,
            "labels": None,
            "annotations": {keys.IS_GROUP_WORKLOAD_ANNOTATION: "true"},
        }
    )
    return wl.model_copy(update={"metadata": meta})


def owns(group: PodGroup, wl: Workload) -> bool:
    """Whether `wl` is the group's Workload."""
    if group.grouped:
        ann = wl.metadata.annotations or {}
        return wl.name == group.name and ann.get(keys.IS_GROUP_WORKLOAD_ANNOTATION) == "true"
    return any(
        r.controller and r.kind == "Pod" and r.uid == group.metadata.uid
        for r in wl.metadata.owner_references or ()
    )


def finished(group: PodGroup) -> tuple[bool, str, str]:
    """Finished once all its pods ended: Succeeded if all succeeded, else Failed."""
    if len(group.pods) < group.total or any(p.status.phase not in TERMINAL for p in group.pods):
        return False, "", ""
    failed = [p.name for p in group.pods if p.status.phase == "Failed"]
    if failed:
        return True, "Failed", f"Pods failed: {', '.join(failed)}"
    return True, "Succeeded", "Pods succeeded"


def running_pods(group: PodGroup) -> list[Pod]:
    """Ungated pods that have not ended and are not being deleted (they hold their nodes)."""
    return [p for p in group.pods if live(p) and not gated(p)]


def active_pods(group: PodGroup) -> int:
    return len(running_pods(group))


def ready(group: PodGroup) -> bool:
    done = 0
    for p in group.pods:
        is_ready = any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or ())
        done += is_ready or p.status.phase == "Succeeded"
    return done >= group.total


def gated_pods(group: PodGroup) -> Sequence[Pod]:
    return [p for p in group.pods if live(p) and gated(p)]
