"""The batch/v1 Job integration: a Job's Workload, its priority, and how a Job is started and
stopped. Pure functions over `atoll.api` models.

Mirrors Kueue's pkg/controller/jobframework (workload_names.go, reconciler.go) and
pkg/controller/jobs/job/job_controller.go (docs/architecture.md, "The admission protocol").
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from atoll.api import labels as keys
from atoll.api.admissioncheck import CheckState
from atoll.api.core import (
    Container,
    Job,
    JobCondition,
    Pod,
    PodTemplateMeta,
    PodTemplateSpec,
    PriorityClass,
    Toleration,
)
from atoll.api.jobset import JobSet
from atoll.api.leaderworkerset import LeaderWorkerSet
from atoll.api.localqueue import DEFAULT_LOCAL_QUEUE
from atoll.api.meta import KubeObject, ObjectMeta, OwnerReference
from atoll.api.priority import DEFAULT_WORKLOAD_PRIORITY_CLASS, WorkloadPriorityClass
from atoll.api.resourceflavor import ResourceFlavor
from atoll.api.workload import (
    MAIN_POD_SET,
    PodSet,
    PodSetTopologyRequest,
    PodSetUpdate,
    PriorityClassGroup,
    PriorityClassKind,
    PriorityClassRef,
    ReclaimablePod,
    Workload,
    WorkloadSpec,
)
from atoll.state import tas
from atoll.state import workloads as wls

K = TypeVar("K", bound=KubeObject)

_MAX_NAME = 253
_HASH_LEN = 5
JOB_CONTROLLER_LABELS = ("job-name", "controller-uid", "batch.kubernetes.io/controller-uid")
"""Labels the Job controller puts on the template; not part of the Workload's template."""
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
"""Scheduling gate of pods whose gang has a topology assignment (removed by the ungater)."""


class ComposeError(ValueError):
    """The Job cannot be turned into a Workload; `reason` is the Kueue event reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class StartConflictError(ValueError):
    """Injecting the admission into the Job would overwrite a key the Job already sets."""


def workload_name(job_name: str, job_uid: str, *, kind: str = "Job", group: str = "batch") -> str:
    """Kueue's `job-<name>-<5 hex of sha1(kind, group, name, uid)>`, truncated to fit 253."""
    digest = hashlib.sha1(
        f"{kind}\n{group}\n{job_name}\n{job_uid}".encode(), usedforsecurity=False
    ).hexdigest()
    prefix = f"{kind.lower()}-{job_name}"[: _MAX_NAME - _HASH_LEN - 1]
    return f"{prefix}-{digest[:_HASH_LEN]}"


def queue_name(job: KubeObject) -> str | None:
    return (job.metadata.labels or {}).get(keys.QUEUE_NAME_LABEL)


DEFAULTED_KINDS: Final = frozenset({"Job", "JobSet", "MPIJob", "TrainJob", "LeaderWorkerSet"})
"""The kinds given their namespace's default LocalQueue (not plain pods: atoll's pod webhook
sees only the pods that name a queue, so that no other pod depends on atoll running)."""


def default_queue_name(obj: KubeObject, has_default: Callable[[str], bool]) -> str | None:
    """The queue name a new object gets at creation: `DEFAULT_LOCAL_QUEUE` when it is of one
    of `DEFAULTED_KINDS`, names no queue (no label, or an empty one, as Kueue reads it) and
    `has_default(its namespace)` (a LocalQueue `default` exists there), else None. The
    operator's webhook checks the rest of Kueue's rule with its `manages`: the kind's
    framework is enabled and no managed kind owns the object (a JobSet's Jobs are not
    defaulted); the simulator does not simulate what it would not manage either."""
    if obj.KIND not in DEFAULTED_KINDS or queue_name(obj):
        return None
    return DEFAULT_LOCAL_QUEUE if has_default(obj.namespace or "default") else None


def with_default_queue(obj: K, has_default: Callable[[str], bool]) -> K:
    """`obj` as LocalQueue defaulting leaves it: a copy labelled with `default_queue_name`
    when there is one, else `obj` itself."""
    name = default_queue_name(obj, has_default)
    if name is None:
        return obj
    labels = {**(obj.metadata.labels or {}), keys.QUEUE_NAME_LABEL: name}
    return obj.model_copy(update={"metadata": obj.metadata.model_copy(update={"labels": labels})})


def with_default_priority_class(obj: K, has_default: bool) -> K:
    """`obj` as WorkloadPriorityClass defaulting leaves it (Kueue's, gate
    `WorkloadPriorityClassDefaulting`): a copy labelled
    `kueue.x-k8s.io/priority-class: default` when it is of one of `DEFAULTED_KINDS` or a plain
    pod, names no WorkloadPriorityClass (no label, or an empty one) and `has_default` (that
    class exists and the gate is on), else `obj` itself. Its Workload's priority is then the
    class's value rather than its pods' PriorityClass's."""
    if (
        not has_default
        or (obj.KIND not in DEFAULTED_KINDS and obj.KIND != "Pod")
        or (obj.metadata.labels or {}).get(keys.PRIORITY_CLASS_LABEL)
    ):
        return obj
    labels = {
        **(obj.metadata.labels or {}),
        keys.PRIORITY_CLASS_LABEL: DEFAULT_WORKLOAD_PRIORITY_CLASS,
    }
    return obj.model_copy(update={"metadata": obj.metadata.model_copy(update={"labels": labels})})


@dataclass(frozen=True, slots=True)
class Defaults:
    """What Kueue's webhooks default on a new object, as one cluster (or scenario) reads it."""

    queue: Callable[[str], bool] = lambda _namespace: False
    """Whether a namespace has a LocalQueue named `default`."""
    priority_class: Callable[[], bool] = lambda: False
    """Whether a new object without a priority-class label gets the WorkloadPriorityClass
    `default` (it exists and the gate `WorkloadPriorityClassDefaulting` is on)."""

    def apply(self, obj: K) -> K:
        """`obj` with its default queue name and priority class, each where it has none."""
        return with_default_priority_class(
            with_default_queue(obj, self.queue), self.priority_class()
        )


NO_DEFAULTS: Final = Defaults()
"""Nothing defaulted."""


def pod_count(job: Job) -> int:
    """Pods of the gang: min(parallelism, completions), parallelism defaulting to 1."""
    parallelism = job.spec.parallelism if job.spec.parallelism is not None else 1
    completions = job.spec.completions
    return parallelism if completions is None else min(parallelism, completions)


def _min_count(job: Job, count: int) -> int | None:
    raw = (job.metadata.annotations or {}).get(keys.JOB_MIN_PARALLELISM_ANNOTATION)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ComposeError(
            "ErrWorkloadCompose",
            f"annotation {keys.JOB_MIN_PARALLELISM_ANNOTATION}: {raw!r} is not an integer",
        ) from None
    if not 0 < value < count:
        raise ComposeError(
            "ErrWorkloadCompose",
            f"annotation {keys.JOB_MIN_PARALLELISM_ANNOTATION}: {value} must be > 0 and < "
            f"the Job's pod count {count}",
        )
    return value


def topology_request(template: PodTemplateSpec) -> PodSetTopologyRequest | None:
    try:
        return tas.podset_topology_request(template)
    except tas.TopologyAnnotationError as e:
        raise ComposeError("ErrWorkloadCompose", str(e)) from e


def workload_template(template: PodTemplateSpec) -> PodTemplateSpec:
    """The Job's pod template without the labels the Job controller adds."""
    meta = template.metadata or PodTemplateMeta()
    labels = {k: v for k, v in (meta.labels or {}).items() if k not in JOB_CONTROLLER_LABELS}
    return template.model_copy(
        update={"metadata": meta.model_copy(update={"labels": labels or None})}
    )


@dataclass(frozen=True, slots=True)
class Priority:
    value: int
    ref: PriorityClassRef | None


def resolve_priority(
    job: Job,
    workload_classes: Mapping[str, WorkloadPriorityClass],
    priority_classes: Mapping[str, PriorityClass],
) -> Priority:
    """WorkloadPriorityClass label, else the pods' PriorityClass, else the global default."""
    return owner_priority(
        job.metadata.labels or {},
        job.spec.template.spec.priority_class_name,
        workload_classes,
        priority_classes,
    )


def owner_priority(
    labels: Mapping[str, str],
    pod_priority_class: str | None,
    workload_classes: Mapping[str, WorkloadPriorityClass],
    priority_classes: Mapping[str, PriorityClass],
    *,
    field: str = "spec.template.spec.priorityClassName",
) -> Priority:
    """Any kind's priority: the WorkloadPriorityClass label of the owner, else the PriorityClass
    of its pods, else the global default PriorityClass (Kueue's order)."""
    wpc_name = labels.get(keys.PRIORITY_CLASS_LABEL)
    if wpc_name:
        wpc = workload_classes.get(wpc_name)
        if wpc is None:
            raise ComposeError(
                "WorkloadPriorityClassNotFound",
                f"WorkloadPriorityClass {wpc_name!r} (label {keys.PRIORITY_CLASS_LABEL}) "
                "does not exist",
            )
        ref = PriorityClassRef(
            group=PriorityClassGroup("kueue.x-k8s.io"),
            kind=PriorityClassKind("WorkloadPriorityClass"),
            name=wpc_name,
        )
        return Priority(wpc.value, ref)
    pc_name = pod_priority_class
    if pc_name:
        pc = priority_classes.get(pc_name)
        if pc is None:
            raise ComposeError(
                "ErrWorkloadCompose",
                f"PriorityClass {pc_name!r} ({field}) not found",
            )
        ref = PriorityClassRef(
            group=PriorityClassGroup("scheduling.k8s.io"),
            kind=PriorityClassKind("PriorityClass"),
            name=pc_name,
        )
        return Priority(pc.value, ref)
    defaults = sorted(
        (pc for pc in priority_classes.values() if pc.global_default), key=lambda pc: pc.value
    )
    if defaults:
        ref = PriorityClassRef(
            group=PriorityClassGroup("scheduling.k8s.io"),
            kind=PriorityClassKind("PriorityClass"),
            name=defaults[0].name,
        )
        return Priority(defaults[0].value, ref)
    return Priority(0, None)


_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
MAX_EXEC_TIME_FIELD = f"metadata.labels[{keys.MAX_EXEC_TIME_SECONDS_LABEL}]"


def _max_exec_label(job: KubeObject) -> tuple[str, int | None] | None:
    """The `kueue.x-k8s.io/max-exec-time-seconds` label and its value as a decimal integer
    with an optional sign (as Go's strconv reads one: "+30" is 30), None for the value when
    it is not one; None when the label is absent."""
    raw = (job.metadata.labels or {}).get(keys.MAX_EXEC_TIME_SECONDS_LABEL)
    if raw is None:
        return None
    digits = raw[1:] if raw[:1] in ("+", "-") else raw
    if not digits.isascii() or not digits.isdigit():
        return raw, None
    return raw, int(raw)


def max_exec_seconds(job: KubeObject) -> int | None:
    """The Workload's `maximumExecutionTimeSeconds` from the Job's
    `kueue.x-k8s.io/max-exec-time-seconds` label: a decimal integer from 1 to 2^31-1, as
    Kueue reads it (`strconv.ParseInt(v, 10, 32)`); anything else ("0", "-5", "1h", too
    large) means no limit. The one reader of the label: the operator, `atoll simulate` and
    `atoll what-if` compose Workloads through it (the webhook refuses such values on
    creation, `max_exec_label_error`, but an object that bypassed it still gets a
    Workload)."""
    label = _max_exec_label(job)
    value = None if label is None else label[1]
    return value if value is not None and 1 <= value <= _INT32_MAX else None


def max_exec_label_error(job: KubeObject) -> str | None:
    """Why the webhook refuses an object's `kueue.x-k8s.io/max-exec-time-seconds` label
    (a whole number greater than 0), on creation (`job_create_errors`) or when an update
    changes it (`job_update_errors`), as a Kubernetes field error naming the label; None
    when it is absent or valid."""
    label = _max_exec_label(job)
    if label is None:
        return None
    raw, value = label
    if value is None or abs(value) > _INT64_MAX:
        why = "must be a whole number of seconds"
    elif value <= 0:
        why = "must be greater than 0"
    else:
        return None
    return f'{MAX_EXEC_TIME_FIELD}: Invalid value: "{raw}": {why}'


def build_workload(job: Job, priority: Priority) -> Workload:
    """The Workload Kueue would create for this Job (name, owner, finalizer, one podSet).
    Raises ComposeError when the Job cannot have one (an invalid queue name, a bad
    annotation)."""
    for error in job_errors(job):
        raise ComposeError("ErrWorkloadCompose", error)
    count = pod_count(job)
    template = job.spec.template
    pod_set = PodSet(
        name=MAIN_POD_SET,
        template=workload_template(template),
        count=count,
        min_count=_min_count(job, count),
        topology_request=topology_request(template),
    )
    return owned_workload(job, (pod_set,), priority)


def owned_workload(
    owner: KubeObject,
    pod_sets: Sequence[PodSet],
    priority: Priority,
    *,
    group: str = "batch",
) -> Workload:
    """The Workload of any owner kind: Kueue's name, the controller owner reference, the
    job-uid label and the resource-in-use finalizer. Raises ComposeError on an invalid queue
    name or invalid podset groups."""
    for error in (*job_errors(owner), *tas.podset_group_errors(pod_sets)):
        raise ComposeError("ErrWorkloadCompose", error)
    name = owner.metadata.name or ""
    uid = owner.metadata.uid or ""
    ref = OwnerReference(
        api_version=owner.API_VERSION,
        kind=owner.KIND,
        name=name,
        uid=uid,
        controller=True,
        block_owner_deletion=True,
    )
    labels = {keys.JOB_UID_LABEL: uid} if uid and len(uid) <= 63 else None
    return Workload(
        metadata=ObjectMeta(
            name=workload_name(name, uid, kind=owner.KIND, group=group),
            namespace=owner.metadata.namespace,
            labels=labels,
            owner_references=(ref,),
            finalizers=(keys.RESOURCE_IN_USE_FINALIZER,),
        ),
        spec=WorkloadSpec(
            pod_sets=tuple(pod_sets),
            queue_name=queue_name(owner),
            priority_class_ref=priority.ref,
            priority=priority.value,
            maximum_execution_time_seconds=max_exec_seconds(owner),
        ),
    )


def job_finished(job: Job) -> tuple[bool, str, str]:
    """(finished, reason Succeeded|Failed, message) from the Job's Complete/Failed conditions."""
    return finished_from(job.status.conditions, "Complete", "Job")


def finished_from(
    conditions: Sequence[JobCondition] | None, complete: str, kind: str
) -> tuple[bool, str, str]:
    """(finished, reason Succeeded|Failed, message) from a `complete` or Failed condition
    that is True (Kueue's `Finished` of Jobs and JobSets)."""
    for cond in conditions or ():
        if cond.status == "True" and cond.type in (complete, "Failed"):
            reason = "Succeeded" if cond.type == complete else "Failed"
            return True, reason, cond.message or f"{kind} {cond.type.lower()}"
    return False, "", ""


def active_pods(job: Job) -> int:
    return job.status.active or 0


def reclaimable_pods(
    job: Job, seen: Collection[tuple[str, int | None]] = ()
) -> tuple[ReclaimablePod, ...]:
    """The pods of a Job whose quota can go back before the Job ends (Kueue's
    `ReclaimablePods` of batch/v1 Jobs): once fewer pods remain to run than the Job's
    parallel slots, that many of them will never be used again. Its slots are its pod count,
    min(parallelism, completions) (Kueue subtracts from the parallelism alone, which for a
    parallelism above the completions claims more pods than the Workload has, a count its
    validation refuses). The pods done are
    `status.succeeded`, or for an Indexed Job its completed and failed indexes; `seen`, its
    pods seen Succeeded (name, completion index), counts them before the Job controller does
    (a Succeeded pod never runs again, and the Job counts every one)."""
    parallelism = pod_count(job)
    completions = job.spec.completions if job.spec.completions is not None else parallelism
    if job.spec.completion_mode == "Indexed":
        status = job.status
        indexes = {i for _, i in seen if i is not None}
        done = terminal_indexes(
            status.completed_indexes, status.failed_indexes, completions, also=indexes
        )
    else:
        done = max(job.status.succeeded or 0, len(seen))
    if parallelism <= 1 or done <= 0:
        return ()
    remaining = max(completions - done, 0)
    if remaining >= parallelism:
        return ()
    return (ReclaimablePod(name=MAIN_POD_SET, count=parallelism - remaining),)


def succeeded_job_pod(pod: Pod) -> tuple[str, str, int | None] | None:
    """(its Job's UID, the Job's name, its completion index) of a Succeeded pod a batch/v1
    Job controls; None for any other pod."""
    if pod.status.phase != "Succeeded":
        return None
    owner = next(
        (
            o
            for o in pod.metadata.owner_references or ()
            if o.controller and o.kind == "Job" and o.api_version == "batch/v1"
        ),
        None,
    )
    if owner is None:
        return None
    raw = (pod.metadata.annotations or {}).get(keys.JOB_COMPLETION_INDEX_ANNOTATION)
    index = int(raw) if raw is not None and raw.isdigit() else None
    return owner.uid, owner.name, index


def terminal_indexes(
    completed: str | None, failed: str | None, completions: int, *, also: Iterable[int] = ()
) -> int:
    """How many indexes below `completions` the interval lists `completed` and `failed`
    (`0,2-4`) and the indexes `also` name together, each counted once; malformed intervals
    are skipped."""
    seen: set[int] = {i for i in also if 0 <= i < completions}
    for listing in (completed, failed):
        for part in (listing or "").split(","):
            first, dash, last = part.strip().partition("-")
            try:
                lo, hi = int(first), int(last if dash else first)
            except ValueError:
                continue
            if 0 <= lo <= hi:
                seen.update(range(lo, min(hi, completions - 1) + 1))
    return len(seen)


@dataclass(frozen=True, slots=True, kw_only=True)
class TemplateStart:
    """What starting writes into one pod template: the merged fields."""

    node_selector: Mapping[str, str]
    tolerations: tuple[Toleration, ...]
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    scheduling_gates: tuple[str, ...] = ()
    """The pod template's gates after the start: with a topology assignment the pods are
    created gated until the ungater pins each to its domain."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobStart(TemplateStart):
    """What starting a Job writes: the merged template fields and the unsuspend."""

    parallelism: int | None
    """Set for partial admission (the admitted count), else None."""


def _merge(kind: str, base: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    merged = dict(base)
    for key, value in extra.items():
        if key in merged and merged[key] != value:
            raise StartConflictError(
                f"{kind} key {key!r} is {merged[key]!r} in the Job but the admission needs "
                f"{value!r}"
            )
        merged[key] = value
    return merged


def check_updates(wl: Workload, pod_set: str) -> tuple[PodSetUpdate, ...]:
    """The `podSetUpdates` the Workload's Ready admission checks ask for on this pod set."""
    return tuple(
        u
        for s in wl.status.admission_checks or ()
        if s.state is CheckState.READY
        for u in s.pod_set_updates or ()
        if u.name == pod_set
    )


def template_start(
    template: PodTemplateSpec,
    *,
    pod_set: str,
    workload: str,
    cluster_queue: str,
    local_queue: str,
    flavors: Sequence[ResourceFlavor],
    topology: bool = False,
    updates: Sequence[PodSetUpdate] = (),
) -> TemplateStart:
    """Merge an admitted pod set into its pod template: the flavors' node labels and
    tolerations, the admission checks' `updates` (labels, annotations, node selector,
    tolerations), Kueue's labels and the workload annotation (Kueue's `podset.Merge`).
    Raises StartConflictError on a conflicting key."""
    spec = template.spec
    meta = template.metadata or PodTemplateMeta()
    node_labels: dict[str, str] = {}
    tolerations = list(spec.tolerations or ())
    extra_tolerations = [t for f in flavors for t in f.spec.tolerations or ()]
    extra_tolerations += [t for u in updates for t in u.tolerations or ()]
    for flavor in flavors:
        node_labels = _merge("flavor nodeLabels", node_labels, flavor.spec.node_labels or {})
    for tol in extra_tolerations:
        if tol not in tolerations:
            tolerations.append(tol)
    node_selector = _merge("nodeSelector", spec.node_selector or {}, node_labels)
    base_labels, base_annotations = dict(meta.labels or {}), dict(meta.annotations or {})
    for u in updates:
        node_selector = _merge("nodeSelector", node_selector, u.node_selector or {})
        base_labels = _merge("label", base_labels, u.labels or {})
        base_annotations = _merge("annotation", base_annotations, u.annotations or {})
    queue_labels = {keys.PODSET_LABEL: pod_set, keys.LOCAL_QUEUE_LABEL: local_queue}
    if len(cluster_queue) <= 63:
        queue_labels[keys.CLUSTER_QUEUE_LABEL] = cluster_queue
    labels = _merge("label", base_labels, queue_labels)
    annotations = _merge("annotation", base_annotations, {keys.WORKLOAD_ANNOTATION: workload})
    gates = tuple(g.name for g in spec.scheduling_gates or ())
    if topology and TOPOLOGY_GATE not in gates:
        gates += (TOPOLOGY_GATE,)
    return TemplateStart(
        node_selector=node_selector,
        tolerations=tuple(tolerations),
        labels=labels,
        annotations=annotations,
        scheduling_gates=gates,
    )


def start_plan(
    job: Job,
    *,
    workload: str,
    cluster_queue: str,
    local_queue: str,
    flavors: Sequence[ResourceFlavor],
    admitted_count: int,
    topology: bool = False,
    updates: Sequence[PodSetUpdate] = (),
) -> JobStart:
    """Merge the admission into the Job's template: the flavors' node labels and tolerations,
    the admission checks' `updates`, Kueue's labels and the workload annotation. Raises
    StartConflictError on a conflicting key."""
    merged = template_start(
        job.spec.template,
        pod_set=MAIN_POD_SET,
        workload=workload,
        cluster_queue=cluster_queue,
        local_queue=local_queue,
        flavors=flavors,
        topology=topology,
        updates=updates,
    )
    full = pod_count(job)
    return JobStart(
        node_selector=merged.node_selector,
        tolerations=merged.tolerations,
        labels=merged.labels,
        annotations=merged.annotations,
        parallelism=admitted_count if admitted_count != full else None,
        scheduling_gates=merged.scheduling_gates,
    )


# -- the Job update rules (mirrors pkg/controller/jobframework/validation.go and the
# -- equivalence check of reconciler.go `EquivalentToWorkload`) --------------------------------

QUEUE_NAME_FIELD = f"metadata.labels[{keys.QUEUE_NAME_LABEL}]"
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN_MAX = 253


def queue_name_error(name: str) -> str | None:
    """Why `name` cannot name a LocalQueue (a DNS-1123 subdomain, as Kueue requires), as a
    Kubernetes field error naming the label; None when it can."""
    why = None
    if len(name) > _DNS1123_SUBDOMAIN_MAX:
        why = f"must be no more than {_DNS1123_SUBDOMAIN_MAX} characters"
    elif not all(_DNS1123_LABEL.fullmatch(part) for part in name.split(".")):
        why = (
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
            "characters, '-' or '.', and must start and end with an alphanumeric character"
        )
    return None if why is None else f'{QUEUE_NAME_FIELD}: Invalid value: "{name}": {why}'


def job_errors(job: KubeObject) -> list[str]:
    """What the webhook refuses in a Job it manages, on CREATE and on UPDATE."""
    name = queue_name(job)
    error = None if name is None else queue_name_error(name)
    return [error] if error else []


MAX_EXEC_LABEL_UNCHECKED: Final[frozenset[str]] = frozenset({LeaderWorkerSet.KIND})
"""The kinds whose Kueue webhook does not check the `kueue.x-k8s.io/max-exec-time-seconds`
label (every other managed kind's does)."""


def job_create_errors(job: KubeObject) -> list[str]:
    """What the webhook refuses in an object it manages on CREATE (and what a simulator
    scenario refuses in its workloads): `job_errors`, and an invalid
    `kueue.x-k8s.io/max-exec-time-seconds` label unless its kind is one of
    `MAX_EXEC_LABEL_UNCHECKED`."""
    checked = job.KIND not in MAX_EXEC_LABEL_UNCHECKED
    error = max_exec_label_error(job) if checked else None
    return [*job_errors(job), *([error] if error else [])]


def job_update_errors(
    old: KubeObject,
    new: KubeObject,
    *,
    suspended: bool | None = None,
    was_suspended: bool | None = None,
    has_default: bool = False,
) -> list[str]:
    """What the webhook refuses in a managed object's UPDATE, as Kueue does:
    - a queue name change: an invalid name, or any change (removal included) while the
      object runs, i.e. is unsuspended after the update (`suspended`);
    - the removal of the queue name in a namespace with a default LocalQueue (`has_default`),
      suspended or not;
    - a `kueue.x-k8s.io/max-exec-time-seconds` change (kinds not in
      `MAX_EXEC_LABEL_UNCHECKED`): an invalid value, or any change (removal included) unless
      the object is suspended both before (`was_suspended`) and after the update;
    - the removal of the `kueue.x-k8s.io/priority-class` label, suspended or not, and its
      addition to an object that runs after the update.
    `suspended` and `was_suspended` default to `spec.suspend` of a Job or JobSet. Updates
    that change neither label pass (Kueue checks a Job's labels again on every update), so
    atoll can still stop a Job whose invalid label was set while the webhook was bypassed."""
    if suspended is None:
        assert isinstance(new, Job | JobSet)
        suspended = bool(new.spec.suspend)
    if was_suspended is None:
        assert isinstance(old, Job | JobSet)
        was_suspended = bool(old.spec.suspend)
    errors: list[str] = []
    if queue_name(new) != queue_name(old):
        errors.extend(job_errors(new))
        if not suspended:
            errors.append(
                f'{QUEUE_NAME_FIELD}: Invalid value: "{queue_name(new) or ""}": field is immutable'
            )
        if not queue_name(new) and has_default:
            errors.append(
                f'{QUEUE_NAME_FIELD}: Invalid value: "": queue-name must not be empty in '
                "namespace with default queue"
            )
    errors.extend(_max_exec_label_update_errors(old, new, suspended and was_suspended))
    errors.extend(_priority_class_update_errors(old, new, suspended))
    return errors


PRIORITY_CLASS_FIELD = f"metadata.labels[{keys.PRIORITY_CLASS_LABEL}]"


def _priority_class_update_errors(old: KubeObject, new: KubeObject, suspended: bool) -> list[str]:
    """Kueue's rules for the WorkloadPriorityClass label on UPDATE: it cannot be removed
    (suspended or not) nor added to an object that runs after the update."""
    before, after = ((o.metadata.labels or {}).get(keys.PRIORITY_CLASS_LABEL) for o in (old, new))
    if not before and after and not suspended:
        return [
            f'{PRIORITY_CLASS_FIELD}: Invalid value: "{after}": WorkloadPriorityClass cannot be '
            "added to a non-suspended workload"
        ]
    if before and not after:
        return [
            f'{PRIORITY_CLASS_FIELD}: Invalid value: "": WorkloadPriorityClass cannot be removed '
            "from a workload"
        ]
    return []


def _max_exec_label_update_errors(old: KubeObject, new: KubeObject, suspended: bool) -> list[str]:
    if new.KIND in MAX_EXEC_LABEL_UNCHECKED:
        return []
    label = keys.MAX_EXEC_TIME_SECONDS_LABEL
    before, after = ((o.metadata.labels or {}).get(label) for o in (old, new))
    if before == after:
        return []
    error = max_exec_label_error(new)
    errors = [error] if error else []
    if not suspended:
        errors.append(f'{MAX_EXEC_TIME_FIELD}: Invalid value: "{after or ""}": field is immutable')
    return errors


def suspends_on_update(old: Job, new: Job) -> bool:
    """Whether the webhook suspends a Job in the same write as this UPDATE: a running Job
    whose pod count changes no longer matches its Workload, and would start pods beyond its
    admission before the reconciler could stop it (atoll's own; Kueue stops it afterwards)."""
    return not old.spec.suspend and not new.spec.suspend and pod_count(old) != pod_count(new)


def carries_admission(job: Job) -> bool:
    """Whether the Job's template still carries what starting it injected (the workload
    annotation): a Job suspended that way must still have its template restored."""
    return templates_carry_admission((job.spec.template,))


def templates_carry_admission(templates: Iterable[PodTemplateSpec]) -> bool:
    """Whether one of an owner's pod templates still carries the workload annotation."""
    for template in templates:
        meta = template.metadata
        if keys.WORKLOAD_ANNOTATION in ((meta.annotations if meta else None) or {}):
            return True
    return False


def _resources(containers: Sequence[Container] | None) -> list[tuple[str, object, object]]:
    return [
        (
            c.name,
            (c.resources.requests if c.resources else None) or {},
            (c.resources.limits if c.resources else None) or {},
        )
        for c in containers or ()
    ]


def template_resources(template: PodTemplateSpec) -> tuple[object, object]:
    """The containers' and init containers' names and resources (what must match)."""
    return _resources(template.spec.containers), _resources(template.spec.init_containers)


def pod_sets_mismatch(
    owner: KubeObject, mine: Sequence[PodSet], wl: Workload, what: str
) -> str | None:
    """Why an owner with several pod sets (one per `what`: replicated job, replica type) no
    longer matches its Workload: their names, pod counts or containers' resources, or the
    maximum execution time changed (Kueue's `EquivalentToWorkload`)."""
    theirs = wl.spec.pod_sets
    if [p.name for p in mine] != [p.name for p in theirs]:
        return f"the {owner.KIND}'s {what}s changed"
    for new, old in zip(mine, theirs, strict=True):
        if new.count != old.count:
            return f"{what} {new.name} has {new.count} pods, its pod set {old.count}"
        if template_resources(new.template) != template_resources(old.template):
            return f"the containers' resources of {what} {new.name} changed"
    if max_exec_seconds(owner) != wl.spec.maximum_execution_time_seconds:
        return "the maximum execution time changed"
    return None


def workload_mismatch(job: Job, wl: Workload, *, admitted_count: int | None = None) -> str | None:
    """Why the Job no longer matches its Workload (None when it does): its pod count, its
    minimum count, the containers' resources or the maximum execution time changed. A Job
    started by a partial admission may run `admitted_count` pods instead; without one, an
    admission of fewer pods than the Workload's less its reclaimable ones (a gang requeued
    after some of its pods succeeded asks only for the rest), or of more than the Workload's,
    was made for an older spec. Mirrors Kueue's `EquivalentToWorkload` (which compares
    counts and containers)."""
    pod_set = wl.spec.pod_sets[0]
    partial = pod_set.min_count is not None
    left = wls.counts_after_reclaim(wl)[pod_set.name]
    if admitted_count is not None and not partial and not left <= admitted_count <= pod_set.count:
        return f"its admission is for {admitted_count} pods, its Workload {pod_set.count}"
    count = pod_count(job)
    if count not in (pod_set.count, admitted_count if partial else None):
        return f"the Job has {count} pods, its Workload {pod_set.count}"
    try:
        min_count = _min_count(job, pod_set.count)
    except ComposeError as e:
        return str(e)
    if min_count != pod_set.min_count:
        return f"the Job's minimum count is {min_count}, its Workload's {pod_set.min_count}"
    spec, wl_spec = job.spec.template.spec, pod_set.template.spec
    if _resources(spec.containers) != _resources(wl_spec.containers) or _resources(
        spec.init_containers
    ) != _resources(wl_spec.init_containers):
        return "the containers' resources changed"
    if max_exec_seconds(job) != wl.spec.maximum_execution_time_seconds:
        return "the maximum execution time changed"
    return None
