"""The plain-pod integration's rules (Kueue's `pod` framework): single pods and pod groups.

A pod labelled with a queue name is gated (`kueue.x-k8s.io/admission`) at creation. A pod with
`kueue.x-k8s.io/pod-group-name` belongs to the group of that name in its namespace, which is
one gang of `kueue.x-k8s.io/pod-group-total-count` pods: its Workload (named after the group)
is created once that many pods exist, with one pod set per role (pods of the same shape, named
by the first 8 hex of a hash of it, as Kueue's role hash), and its pods are ungated together
when it is admitted. A group that is not complete waits, and says how many pods it misses;
a group whose pods disagree on the total count or the queue name gets no Workload
(`inconsistency`).
A pod without a group is a gang of one (`pod-<name>-<hash>`). Pure functions over
`atoll.api` models.

Pods are kept until their Workload has accounted for them: the webhook puts the
`kueue.x-k8s.io/managed` finalizer on every plain pod it gates (not on a pod a managed parent
suspends, e.g. a LeaderWorkerSet's), and atoll removes it when the pod no longer counts: its
Workload finished or deleted, a single pod being deleted, an ended pod that a replacement
stands in for, an excess pod. A group keeps its Workload (named after it) for its whole life:

- its pods are matched to the Workload's pod sets by role (`members`): per pod set, the pods
  that can still run or succeeded fill its count, oldest first (a pod with the finalizer
  before one without, a running pod before a gated one); those beyond it are excess and are
  deleted; a Failed pod (or one deleted before it was bound) is replaced once a runnable pod
  of its role stands in for it, and loses its finalizer then; the pods the pod sets still
  miss make the Workload `WaitingForReplacementPods` (`state/lifecycle.replacement_pods`);
- a replacement pod (created gated, same group name) joins the Workload (as one more owner)
  and is ungated if the Workload is admitted;
- the group is finished when as many pods succeeded as the group counts, or, when one of its
  pods says `kueue.x-k8s.io/retriable-in-group: "false"`, once none of its pods is still
  running (both `Succeeded`, "Pods succeeded: n/N.", as Kueue reports them); a Failed pod
  alone never finishes a retriable group: it waits for its replacement;
- while it runs, its Succeeded pods give their quota back (`reclaimable_pods`, per role),
  unless it is a serving group.

A group whose Workload is evicted (preempted, deactivated, timed out) or deleted is stopped
as Kueue stops it: each running pod first gets the `TerminationTarget` condition saying why
(`termination_target`), then is deleted (gated, ended and terminating pods are left);
they keep their finalizer, so they stay as Failed pods and the Workload stays, waiting for
replacements; its quota is released once none of its pods runs.

Mirrors Kueue's pkg/controller/jobs/pod/pod_controller.go (`Finished`, `Stop`,
`FindMatchingWorkloads`, `waitingForReplacementPodsCondition`, `Finalize`,
`ReclaimablePods`). Not mirrored: fast admission, serving groups (beyond their pods not
being reclaimable); a deleted pod no longer counts as running (Kueue's
`FastQuotaReleaseInPodIntegration` gate, off by default in Kueue, where a pod counts until
it stops running or its grace period is over).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from atoll.api import labels as keys
from atoll.api.core import Pod, PodTemplateMeta, PodTemplateSpec, PriorityClass
from atoll.api.meta import KubeObject, ObjectMeta, OwnerReference
from atoll.api.priority import WorkloadPriorityClass
from atoll.api.workload import MAIN_POD_SET, PodSet, ReclaimablePod, Workload
from atoll.control import jobframework as jf
from atoll.state import tas
from atoll.state import workloads as wls

TERMINAL = ("Succeeded", "Failed")
TERMINATION_TARGET = "TerminationTarget"
"""The pod condition a pod gets just before atoll deletes it to stop its group."""
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


def creation_gates(pod: Pod) -> tuple[str, ...]:
    """The scheduling gates a managed pod is given at creation, among those it lacks: Kueue's
    admission gate, and, when its annotations ask for a topology (Kueue's TAS annotations),
    the topology gate too. A gate can be removed from a pod but never added, so the topology
    gate must be there from the start for the ungater to pin each pod to its domain once the
    gang is admitted with a topology assignment (`start_gates`). Kueue gives every managed pod
    the topology gate when TAS is on; atoll gives it to the pods that ask for a topology."""
    have = {g.name for g in pod.spec.scheduling_gates or ()}
    wanted = [keys.ADMISSION_GATE]
    if tas.asks_for_topology(pod.metadata.annotations):
        wanted.append(jf.TOPOLOGY_GATE)
    return tuple(g for g in wanted if g not in have)


def start_gates(gates: Sequence[str], *, topology: bool) -> tuple[str, ...]:
    """The gates a pod keeps when its gang starts: the admission gate goes; the topology gate
    stays only when its pod set was admitted with a topology assignment (the ungater removes
    it once it has pinned the pod), as Kueue's pod `prepare` does."""
    return tuple(
        g for g in gates if g != keys.ADMISSION_GATE and (topology or g != jf.TOPOLOGY_GATE)
    )


def live(pod: Pod) -> bool:
    return pod.status.phase not in TERMINAL and pod.metadata.deletion_timestamp is None


def runnable(pod: Pod) -> bool:
    """Whether the pod can still run, runs or succeeded (it counts for its group): not
    Failed, and not deleted before it was ever bound to a node."""
    if pod.metadata.deletion_timestamp is not None and not pod.spec.node_name:
        return False
    return pod.status.phase != "Failed"


def finalized(pod: Pod) -> bool:
    """Whether the pod carries the `kueue.x-k8s.io/managed` finalizer."""
    return keys.POD_FINALIZER in (pod.metadata.finalizers or ())


def unretriable(pod: Pod) -> bool:
    ann = pod.metadata.annotations or {}
    return ann.get(keys.RETRIABLE_IN_GROUP_ANNOTATION) == "false"


def termination_target(wl: Workload | None) -> tuple[str, str]:
    """Reason and message of the `TerminationTarget` condition of a pod deleted to stop its
    group, by why the group stops (Kueue's stop reasons): its Workload evicted
    (`WorkloadEvictedDueTo<eviction reason>`, the eviction's message), being deleted
    (`WorkloadDeleted`), not admitted (`NotAdmitted`), or no longer the group's
    (`NoMatchingWorkload`, also with no Workload at all)."""
    if wl is None:
        return "NoMatchingWorkload", "No matching Workload"
    evicted = wls.condition(wl, wls.EVICTED)
    if evicted is not None and wls.is_evicted(wl):
        return f"WorkloadEvictedDueTo{evicted.reason}", evicted.message or ""
    if wls.is_deleting(wl):
        return "WorkloadDeleted", "The workload is being deleted"
    if not wls.is_admitted(wl):
        return "NotAdmitted", "Not admitted by cluster queue"
    return "NoMatchingWorkload", "No matching Workload"


def _total_count(pod: Pod) -> str | None:
    return (pod.metadata.annotations or {}).get(keys.POD_GROUP_TOTAL_COUNT_ANNOTATION)


def _queue(pod: Pod) -> str | None:
    return (pod.metadata.labels or {}).get(keys.QUEUE_NAME_LABEL)


def inconsistency(group: PodGroup) -> str | None:
    """Why the group's pods cannot make one Workload, or None: every pod of a group that has
    not failed must name the same total count (annotation) and the same queue (label), as
    Kueue requires before it builds the group's Workload."""
    if not group.grouped:
        return None
    alive = [p for p in group.pods if p.status.phase != "Failed"]
    if not alive:
        return None
    first = alive[0]
    rules = (
        (f"annotation {keys.POD_GROUP_TOTAL_COUNT_ANNOTATION}", "same group size"),
        (f"label {keys.QUEUE_NAME_LABEL}", "same queue"),
    )
    for (field, same), value_of in zip(rules, (_total_count, _queue), strict=True):
        for pod in alive[1:]:
            if value_of(pod) != value_of(first):
                return (
                    f"pod group {group.name}: pods {first.name} and {pod.name} disagree on "
                    f"{field} ({value_of(first)!r} != {value_of(pod)!r}): all pods of a "
                    f"group must name the {same}; the group gets no Workload until they agree"
                )
    return None


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
        deletion_timestamp=None if grouped else first.metadata.deletion_timestamp,
        labels=first.metadata.labels,
        annotations=first.metadata.annotations,
    )
    return PodGroup(metadata=meta, pods=ordered, total=total, grouped=grouped)


def with_defaults(obj: jf.K, defaults: jf.Defaults) -> jf.K:
    """`obj` as the webhooks default it (`jf.Defaults.apply`); a pod group as the pod webhook
    defaults each of its pods (the group's labels are its first pod's)."""
    if not isinstance(obj, PodGroup):
        return defaults.apply(obj)
    pods = {p.name: defaults.apply(p) for p in obj.pods}
    if all(pods[p.name] is p for p in obj.pods):
        return obj
    group = group_of(f"{obj.namespace or ''}/{obj.name}", pods)
    assert group is not None  # it has pods
    return group.model_copy(update={"total": obj.total})  # type: ignore[return-value]


def with_pods(group: PodGroup, pods: Sequence[Pod]) -> PodGroup:
    """The group as its Workload counts it: only `pods` (by name)."""
    return group.model_copy(update={"pods": tuple(sorted(pods, key=lambda p: p.name))})


def role_hash(pod: Pod) -> str:
    """The pod's role: its `kueue.x-k8s.io/role-hash` annotation (stamped by the webhook at
    creation, so that the node selector and tolerations merged in at start do not change
    it), else 8 hex of a hash of its shape. Pods of one role form one pod set."""
    stamped = (pod.metadata.annotations or {}).get(keys.ROLE_HASH_ANNOTATION)
    if stamped:
        return stamped
    return shape_hash(pod)


def shape_hash(pod: Pod) -> str:
    """8 hex of a hash of the pod's shape (what admission reads of it)."""
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
        if not runnable(pod):
            continue
        name = pod_set_name(group, pod)
        if name in sets:
            sets[name] = sets[name].model_copy(update={"count": sets[name].count + 1})
        else:
            sets[name] = PodSet(name=name, template=template_of(pod), count=1)
    return tuple(sets[n] for n in sorted(sets))


def missing(group: PodGroup) -> int:
    """Pods the group still lacks before it can be admitted."""
    return max(0, group.total - sum(1 for p in group.pods if runnable(p)))


def build_workload(
    group: PodGroup,
    workload_classes: Mapping[str, WorkloadPriorityClass],
    priority_classes: Mapping[str, PriorityClass],
) -> Workload:
    """The group's Workload (named after the group, owned by every pod), or a single pod's
    (`pod-<name>-<hash>`, owned by the pod). Raises jf.ComposeError while the group is
    incomplete, saying how many pods are missing, or when its pods disagree
    (`inconsistency`)."""
    disagreement = inconsistency(group)
    if disagreement is not None:
        raise jf.ComposeError("ErrWorkloadCompose", disagreement)
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
    """A single pod: finished once it ended (Succeeded or Failed, with the pod's message). A
    group: finished once as many pods succeeded as it counts, or once none of its pods is
    still running when one says `retriable-in-group: "false"`; both `Succeeded` with
    "Pods succeeded: n/N." (Kueue's words). A retriable group with Failed pods is not
    finished: it waits for their replacements."""
    if not group.grouped:
        pod = group.pods[0]
        if pod.status.phase not in TERMINAL:
            return False, "", ""
        reason = "Succeeded" if pod.status.phase == "Succeeded" else "Failed"
        return True, reason, pod.status.message or ""
    succeeded = sum(1 for p in group.pods if p.status.phase == "Succeeded")
    running = any(p.status.phase not in TERMINAL for p in group.pods)
    unretriable_done = not running and any(unretriable(p) for p in group.pods)
    if succeeded >= group.total or unretriable_done:
        return True, "Succeeded", f"Pods succeeded: {succeeded}/{group.total}."
    return False, "", ""


def serving(group: PodGroup) -> bool:
    """A serving group (`kueue.x-k8s.io/pod-group-serving: "true"`, e.g. a LeaderWorkerSet's):
    its pods are meant to run until stopped."""
    return any(
        (p.metadata.annotations or {}).get(keys.POD_GROUP_SERVING_ANNOTATION) == "true"
        for p in group.pods
    )


def reclaimable_pods(group: PodGroup) -> tuple[ReclaimablePod, ...]:
    """The pods whose quota can go back while the group runs (Kueue's `ReclaimablePods` of
    pod groups): its Succeeded pods, counted per role (pod set). None for a single pod or a
    serving group."""
    if not group.grouped or serving(group):
        return ()
    done: dict[str, int] = {}
    for pod in group.pods:
        if pod.status.phase == "Succeeded":
            role = pod_set_name(group, pod)
            done[role] = done.get(role, 0) + 1
    return tuple(ReclaimablePod(name=role, count=n) for role, n in sorted(done.items()))


@dataclass(frozen=True, slots=True)
class Members:
    """A group's pods matched to its Workload (or to the Workload it is about to get)."""

    kept: tuple[Pod, ...]
    """The pods the Workload counts."""
    excess: tuple[Pod, ...] = ()
    """Runnable pods beyond their pod set's count (the newest): deleted, finalizer removed."""
    released: tuple[Pod, ...] = ()
    """Ended pods that no longer count (replaced, or ended before the Workload was made):
    their finalizer is removed."""
    absent: int = 0
    """Pods the Workload's pod sets count that no runnable pod fills (replacements awaited)."""


_LATEST = dt.datetime.max.replace(tzinfo=dt.UTC)


def _created(pod: Pod) -> dt.datetime:
    return pod.metadata.creation_timestamp or _LATEST


def _kept_first(pod: Pod) -> tuple[bool, bool, dt.datetime, str]:
    """Runnable pods in the order they are kept: with the finalizer first, running before
    gated, oldest first."""
    return (not finalized(pod), gated(pod), _created(pod), pod.name)


def _inactive_kept_first(pod: Pod) -> tuple[bool, float, float, str]:
    """Ended pods in the order they are kept: with the finalizer first, the one deleted
    last first (not deleted counts as latest), newest first."""
    deleted = pod.metadata.deletion_timestamp or _LATEST
    return (not finalized(pod), -deleted.timestamp(), -_created(pod).timestamp(), pod.name)


def members(group: PodGroup, wl: Workload | None) -> Members:
    """Match the group's pods to `wl`'s pod sets by role; with no Workload yet, to the
    group's total count (ended pods are released, the newest runnable pods beyond the count
    are excess). A single pod is kept as it is. Pods of a role the Workload lacks are left
    out (neither kept nor touched)."""
    if not group.grouped:
        return Members(kept=group.pods)
    active = sorted((p for p in group.pods if runnable(p)), key=_kept_first)
    inactive = sorted((p for p in group.pods if not runnable(p)), key=_inactive_kept_first)
    if wl is None:
        return Members(
            kept=tuple(active[: group.total]),
            excess=tuple(active[group.total :]),
            released=tuple(inactive),
            absent=max(0, group.total - len(active)),
        )
    kept_all: list[Pod] = []
    excess: list[Pod] = []
    released: list[Pod] = []
    absent = 0
    for ps in wl.spec.pod_sets:
        role_active = [p for p in active if role_hash(p) == ps.name]
        role_inactive = [p for p in inactive if role_hash(p) == ps.name]
        absent += max(0, ps.count - len(role_active))
        kept_all += role_active[: ps.count]
        excess += role_active[ps.count :]
        drop = max(0, min(len(role_inactive), len(role_inactive) + len(role_active) - ps.count))
        kept_all += role_inactive[: len(role_inactive) - drop]
        released += role_inactive[len(role_inactive) - drop :]
    return Members(
        kept=tuple(kept_all), excess=tuple(excess), released=tuple(released), absent=absent
    )


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
