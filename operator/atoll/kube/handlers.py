"""Watch event handlers: parse each object into an `atoll.api` model, put it in the cache, wake
the scheduling loop or queue the Job for reconciliation.

The busy kinds (Workloads, Jobs, pods, nodes), the queue objects, the priority classes, the
namespaces and the other managed kinds with what they read (`register_kind`, for the kinds
whose CRD is served at start) are watched by atoll's own loops (`atoll.kube.watch`,
registered by `register_watches`: plain functions called on the event loop); the kinds a
cluster may not serve (Topologies, the DRA objects) by kopf (`register`), which follows what
is served. Only kopf `on.event` handlers:
kopf writes no annotation or finalizer on any object. Every kopf handler is `async def`: kopf
runs plain `def` handlers in worker threads, and the cache is single-threaded (the loop reads
it between awaits).
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import kopf
import orjson
import structlog
from pydantic import ValidationError

from atoll.api.admissioncheck import AdmissionCheck
from atoll.api.clusterqueue import ClusterQueue, not_run
from atoll.api.cohort import Cohort
from atoll.api.core import Job, Node, Pod, PodSpec, PodStatus, PodTemplateSpec, PriorityClass
from atoll.api.labels import IS_GROUP_WORKLOAD_ANNOTATION as IS_GROUP_WORKLOAD
from atoll.api.labels import (
    MANAGED_LABEL,
    SUSPENDED_BY_PARENT_ANNOTATION,
    WORKLOAD_ANNOTATION,
)
from atoll.api.localqueue import LocalQueue
from atoll.api.meta import Condition, KubeObject, ObjectMeta
from atoll.api.priority import WorkloadPriorityClass
from atoll.api.resource import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from atoll.api.resourceflavor import ResourceFlavor
from atoll.api.topology import Topology
from atoll.api.workload import Workload, WorkloadStatus
from atoll.control import jobframework as jf
from atoll.control import leaderworkerset as lws
from atoll.control.ungater import Ungater
from atoll.control.workqueue import WorkQueue
from atoll.kube.kinds import CustomKind, ReadKind
from atoll.kube.watch import Watches, object_key
from atoll.state import admissionchecks
from atoll.state import workloads as wls
from atoll.state.cache import Cache

log = structlog.get_logger("atoll.handlers")
K = TypeVar("K", bound=KubeObject)
P = TypeVar("P")
D = TypeVar("D")
KUEUE = ("kueue.x-k8s.io", "v1beta2")
JSON_SEPARATORS = (",", ":")
POD_SPECS = 1024
"""Parsed pod specs kept by their JSON text (the pods of a Job share theirs until bound)."""
POD_STATUSES = 256
"""Parsed pod statuses kept by the JSON text of what a PodStatus reads (the pods of a gang
go through the same few: conditions are kept without their times)."""
POD_TEMPLATES = 1024
"""Parsed pod-set templates of Workloads kept by their JSON text (the Workloads of Jobs made
from one manifest share theirs: the Job controller's labels are left out of a Workload's
template)."""
CONDITIONS = 1024
"""Parsed Workload conditions kept by their JSON text (the Workloads left pending in one
second with one message carry equal ones: 10,000 pending Workloads had 192 distinct)."""
OWN_INVENTORY = (("", "v1", "nodes"), ("", "v1", "pods"))
"""Inventory kinds watched by atoll's own loops (`register_watches`), not by kopf."""


class Parsers:
    """Parsers of the kinds whose objects share parts (the Workloads and the Jobs made from
    one manifest), each with its table of parts parsed lately (`Shared`). One per operator,
    used by its watches and its initial listing alike (`bootstrap.load`), so that Workloads
    listed at start share their pod-set templates as those seen on the watch do, and with
    them."""

    __slots__ = ("conditions", "pod_specs", "templates")

    def __init__(self) -> None:
        self.templates: Shared[PodTemplateSpec] = Shared(POD_TEMPLATES)
        self.conditions: Shared[Condition] = Shared(CONDITIONS)
        self.pod_specs: Shared[PodSpec] = Shared(POD_SPECS)

    def workload(self, body: Mapping[str, Any], known: Workload | None = None) -> Workload | None:
        """`body` as a Workload (`known`: the cached one of that key; see `_parse_workload`);
        None (logged) when it cannot be parsed."""
        return _parse_workload(body, known, self.templates, self.conditions)

    def job(self, body: Mapping[str, Any]) -> Job | None:
        """`body` as a Job; its pods' spec equal to one parsed before is that one (the Jobs
        made from one manifest differ in their template's labels, not in its spec)."""
        path = ("spec", "template", "spec")
        return _parse_sharing(Job, body, path, self.pod_specs, lambda job: job.spec.template.spec)


@dataclass(slots=True)
class Wiring:
    """Where parsed objects go."""

    cache: Cache
    wake: Callable[[], None]
    jobs: WorkQueue
    queues_changed: Callable[[], None]
    ungater: Ungater
    pods: WorkQueue
    seen_workload: Callable[[Workload], None]
    """The Workload as seen, for the writer's next status write (no GET before it)."""
    gone_workload: Callable[[str], None]
    owners: dict[str, WorkQueue] = field(default_factory=dict)
    """The reconcile queue of each other managed kind (JobSet, …), by kind; Jobs use `jobs`."""
    group_pod: Callable[[Pod, bool], None] | None = None
    """Sees every pod (and whether it was deleted): the plain-pod integration's hook."""
    parsers: Parsers = field(default_factory=Parsers)
    """The Workload and Job parsers of the watches (and of the initial listing)."""


def json_text(obj: object) -> bytes:
    """`obj` as compact JSON, to compare or key by (orjson: an order of magnitude faster
    than `json.dumps`, which took most of a digest's time); `json` for what orjson refuses
    (an integer beyond 64 bits)."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj, separators=JSON_SEPARATORS).encode()


class Shared(Generic[P]):
    """The last `size` parsed parts (pod specs, pod templates, conditions, pod statuses) by a
    digest of their JSON text (`json_text`), or of a text of all that the part's model reads
    when that is less (a pod's status): a part equal to one parsed before is not parsed
    again, and the objects holding it share one parsed form (models are frozen).

    A part met inside an object: `find` it (or `swap_each` for a list of parts) and put the
    one found in the raw object in place of its raw form, parse the object whole (so that a
    part shared by an object that is not valid is refused with it), then `put` (`learn`)
    the parsed parts not found, under the keys `find` gave. A part parsed alone: `parse`.
    Keyed by a 128-bit BLAKE2b digest, not by the text, so that a large template that is
    never seen again costs 16 bytes of key here, not its whole text; a text is digested
    once."""

    __slots__ = ("_by_digest", "_size")

    def __init__(self, size: int) -> None:
        self._by_digest: OrderedDict[bytes, P] = OrderedDict()
        self._size = size

    def find(self, text: bytes) -> tuple[P | None, bytes]:
        """The part held for `text` (None when none is), now the last used, and the key of
        `text`, to `put` the part parsed from it."""
        key = hashlib.blake2b(text, digest_size=16).digest()
        found = self._by_digest.get(key)
        if found is not None:
            self._by_digest.move_to_end(key)
        return found, key

    def put(self, key: bytes, part: P) -> None:
        """`part` held under `key` (from `find`), the last used; the least recently used part
        goes when there are more than `size`."""
        self._by_digest[key] = part
        self._by_digest.move_to_end(key)
        if len(self._by_digest) > self._size:
            self._by_digest.popitem(last=False)

    def parse(self, text: bytes, raw: Any, parse: Callable[[Any], P]) -> P:
        """`raw` (of text `text`) parsed alone by `parse`, which may raise: the part held for
        `text`, else `parse(raw)`, which joins."""
        known, key = self.find(text)
        if known is None:
            known = parse(raw)
            self.put(key, known)
        return known

    def swap_each(
        self, items: list[Any], field: str | None = None
    ) -> tuple[list[Any] | None, list[bytes | None]]:
        """`items` with each part (an item's `field`; None: the item itself) held for its
        JSON text in the place of its raw form (None when none is: `items` stand as they
        are), and per item the key of its part when not found (None when found or absent),
        for `learn`."""
        out: list[Any] = []
        keys: list[bytes | None] = []
        found = False
        for item in items:
            if field is None:
                part = item
            elif isinstance(item, Mapping) and field in item:
                part = item[field]
            else:
                out.append(item)
                keys.append(None)
                continue
            known, key = self.find(json_text(part))
            if known is None:
                out.append(item)
                keys.append(key)
            else:
                found = True
                out.append(known if field is None else {**item, field: known})
                keys.append(None)
        return (out if found else None), keys

    def learn(self, keys: list[bytes | None], parsed: Sequence[P]) -> None:
        """`parsed`: the parts as the object parsed them, one per key of `swap_each`; each
        not found joins (none when the counts differ)."""
        if len(parsed) == len(keys):
            for key, part in zip(keys, parsed, strict=True):
                if key is not None:
                    self.put(key, part)

    def __len__(self) -> int:
        return len(self._by_digest)


def _parse(model: type[K], body: Mapping[str, Any]) -> K | None:
    try:
        return model.from_dict(dict(body))
    except ValidationError as e:
        meta = body.get("metadata") or {}
        where = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        log.warning("object not understood, ignored", kind=model.KIND, object=where, error=str(e))
        return None


def _parse_workload(
    body: Mapping[str, Any],
    known: Workload | None,
    templates: Shared[PodTemplateSpec],
    conditions: Shared[Condition] | None = None,
) -> Workload | None:
    """`body` as a Workload. When the cache holds the same object at the same
    metadata.generation, its spec is unchanged (the API server bumps the generation of a
    custom resource with a status subresource on every spec change): only the metadata and
    the status are parsed, and the known spec is shared (most of a Workload's parsing cost
    is its pod templates), and so are its apiVersion and kind (the interned strings of its
    first parse). Otherwise each pod-set template equal to one in `templates` is that one
    (parsed once, held once). Likewise each condition equal to one in `conditions`."""
    meta = body.get("metadata") or {}
    if (
        known is None
        or meta.get("generation") is None
        or meta.get("generation") != known.metadata.generation
        or meta.get("uid") != known.metadata.uid
        or body.get("apiVersion") != known.api_version
        or body.get("kind") != known.kind
    ):
        return _parse_shared(body, templates, conditions)
    status, keys = _swap_conditions(body.get("status") or {}, conditions)
    try:
        parsed = known.model_copy(
            update={
                "metadata": ObjectMeta.from_dict(meta),
                "status": WorkloadStatus.from_dict(status),
            }
        )
    except ValidationError:
        return _parse(Workload, body)  # logs what is wrong
    _learn_conditions(parsed, keys, conditions)
    return parsed


def _parse_sharing(
    model: type[K],
    body: Mapping[str, Any],
    path: tuple[str, ...],
    parts: Shared[P],
    part_of: Callable[[K], P],
) -> K | None:
    """`body` as a `model`; its part at `path` (raw keys) is the one in `parts` when equal to
    one parsed before, else the parsed one (`part_of`) joins `parts`."""
    outer: list[Mapping[str, Any]] = []
    here: Any = body
    for step in path:
        if not isinstance(here, Mapping) or step not in here:
            return _parse(model, body)
        outer.append(here)
        here = here[step]
    known, key = parts.find(json_text(here))
    if known is not None:
        value: Any = known
        for step, holder in zip(reversed(path), reversed(outer), strict=True):
            value = {**holder, step: value}
        body = value
    parsed = _parse(model, body)
    if parsed is not None and known is None:
        parts.put(key, part_of(parsed))
    return parsed


def _parse_shared(
    body: Mapping[str, Any],
    templates: Shared[PodTemplateSpec],
    conditions: Shared[Condition] | None = None,
) -> Workload | None:
    spec = body.get("spec")
    pod_sets = spec.get("podSets") if isinstance(spec, Mapping) else None
    keys: list[bytes | None] = []
    if isinstance(spec, Mapping) and isinstance(pod_sets, list):
        sets, keys = templates.swap_each(pod_sets, "template")
        if sets is not None:
            body = {**body, "spec": {**spec, "podSets": sets}}
    status, condition_keys = _swap_conditions(body.get("status"), conditions)
    if status is not body.get("status"):
        body = {**body, "status": status}
    wl = _parse(Workload, body)
    if wl is not None:
        templates.learn(keys, [ps.template for ps in wl.spec.pod_sets])
        _learn_conditions(wl, condition_keys, conditions)
    return wl


def _swap_conditions(
    status: Any, conditions: Shared[Condition] | None
) -> tuple[Any, list[bytes | None]]:
    """A raw Workload status with its conditions equal to ones parsed before in their place
    (`Shared.swap_each`), `status` itself when none is; and the keys to `learn`."""
    raw = status.get("conditions") if isinstance(status, Mapping) else None
    if conditions is None or not isinstance(raw, list):
        return status, []
    shared, keys = conditions.swap_each(raw)
    return (status if shared is None else {**status, "conditions": shared}), keys


def _learn_conditions(
    wl: Workload, keys: list[bytes | None], conditions: Shared[Condition] | None
) -> None:
    if conditions is not None and keys:
        conditions.learn(keys, (wl.status.conditions or ()) if wl.status else ())


def queue_owner(wl: Workload, w: Wiring) -> None:
    """Queue the Workload's owner (a Job, or an object of another managed kind)."""
    job = wls.owner_job_key(wl)
    if job is not None:
        w.jobs.add(job)
    for ref in wl.metadata.owner_references or ():
        queue = w.owners.get(ref.kind)
        if queue is not None and ref.controller:
            queue.add(wls.key_of(wl.namespace, ref.name))
    pods = w.owners.get("Pod")
    if pods is not None and (wl.metadata.annotations or {}).get(IS_GROUP_WORKLOAD) == "true":
        pods.add(wls.key_of(wl.namespace, wl.name))  # a pod group's Workload: its group
    groups = w.owners.get(lws.LeaderWorkerSet.KIND)
    if groups is not None and (group := lws.workload_group_key(wl)) is not None:
        groups.add(group)  # a LeaderWorkerSet group's Workload (not a controller reference)


def register(registry: kopf.OperatorRegistry, w: Wiring) -> None:
    """Register the kinds atoll watches with kopf on `registry`: the Topologies and the DRA
    objects (a cluster may not serve them; kopf follows what is served)."""

    def wake(_obj: object, _deleted: bool) -> None:
        w.cache.bump()  # capacity or topology changed: parked workloads may fit now
        w.wake()

    for kind in inventory_kinds(w.cache):
        if kind.resource in OWN_INVENTORY:
            continue
        _watch(
            registry, kind.resource, kind.model, upsert=kind.upsert, delete=kind.delete, after=wake
        )


def register_kind(watches: Watches, w: Wiring, queue: WorkQueue, kind: CustomKind) -> None:
    """Watch a managed custom kind (JobSet, MPIJob, TrainJob, LeaderWorkerSet) with the plain
    list-and-watch loop: cache its objects and queue them for reconciling (kopf's per-event
    machinery was a quarter of the operator's CPU with JobSets: `bench/kueue_baseline/jobs.py
    --kind jobset --profile`)."""

    def owner(type: str | None, body: Mapping[str, Any]) -> None:
        key = object_key(body)
        objects = kind.objects(w.cache)
        if type == "DELETED":
            # a re-list reports a deletion with only the key: the cached object stands in
            obj = objects.pop(key, None)
        else:
            obj = _parse(kind.model, body)
            if obj is None:
                return
            objects[key] = obj
        keys = kind.reconcile_keys(w.cache, obj) if kind.reconcile_keys and obj else (key,)
        for each in keys:
            queue.add(each)

    watches.on(
        kind.group, kind.version, kind.plural, owner, known=lambda: list(kind.objects(w.cache))
    )
    for read in kind.reads:
        register_read(watches, w, queue, read)


def register_read(watches: Watches, w: Wiring, queue: WorkQueue, read: ReadKind) -> None:
    """Watch a kind read for a managed one (a TrainJob's runtimes): cache its objects and
    queue the managed objects that use it (a TrainJob waiting for its runtime)."""

    def on(type: str | None, body: Mapping[str, Any]) -> None:
        key = object_key(body)
        objects = read.objects(w.cache)
        if type == "DELETED":
            if objects.pop(key, None) is None:
                return  # never kept: nobody uses it
        else:
            obj = _parse(read.model, body)
            if obj is None:
                return
            if read.kept(obj):
                objects[read.key(obj)] = obj
            elif objects.pop(key, None) is None:
                return  # neither kept nor known: nobody uses it
        for each in read.users(w.cache, key):
            queue.add(each)

    watches.on(read.group, read.version, read.plural, on, known=lambda: list(read.objects(w.cache)))


def _queue_kinds(watches: Watches, w: Wiring) -> None:
    """The queue objects and priority classes: stored, and the scheduling loop and the queue
    status writer woken (a deletion is by key: a re-list reports it without a body)."""

    def queue_kind(
        resource: tuple[str, str, str],
        model: type[K],
        kind: str,
        *,
        store: Callable[[K], None],
        known: Callable[[], Iterable[str]],
    ) -> None:
        def on(type: str | None, body: Mapping[str, Any]) -> None:
            if type == "DELETED":
                w.cache.delete(kind, object_key(body))
            else:
                obj = _parse(model, body)
                if obj is None:
                    return
                store(obj)
            w.wake()
            w.queues_changed()

        watches.on(*resource, on, known=known)

    c = w.cache
    for resource, model, kind, store, table in (
        ((*KUEUE, "resourceflavors"), ResourceFlavor, "rf", c.set_flavor, "flavors"),
        (
            (*KUEUE, "admissionchecks"),
            AdmissionCheck,
            "ac",
            warned_check(c),
            "admission_checks",
        ),
        ((*KUEUE, "clusterqueues"), ClusterQueue, "cq", warned(c), "cluster_queues"),
        ((*KUEUE, "cohorts"), Cohort, "co", c.set_cohort, "cohorts"),
        ((*KUEUE, "localqueues"), LocalQueue, "lq", c.set_local_queue, "local_queues"),
        (
            (*KUEUE, "workloadpriorityclasses"),
            WorkloadPriorityClass,
            "wpc",
            c.set_workload_class,
            "workload_classes",
        ),
        (
            ("scheduling.k8s.io", "v1", "priorityclasses"),
            PriorityClass,
            "pc",
            c.set_priority_class,
            "priority_classes",
        ),
    ):
        queue_kind(
            resource,
            model,
            kind,
            store=store,  # type: ignore[arg-type]
            known=lambda table=table: list(getattr(c, table)),  # type: ignore[misc]
        )


def warned(c: Any) -> Callable[[ClusterQueue], None]:
    """`c.set_cluster_queue`, logging a warning when a new or changed ClusterQueue asks for
    something that will not apply (`clusterqueue.not_run`)."""

    def store(cq: ClusterQueue) -> None:
        old = c.cluster_queues.get(cq.name)
        afs = c.afs is not None
        why = not_run(cq, admission_fair_sharing=afs)
        if why is not None and (old is None or not_run(old, admission_fair_sharing=afs) is None):
            log.warning("clusterqueue feature not run", cluster_queue=cq.name, reason=why)
        c.set_cluster_queue(cq)

    return store


def warned_check(c: Any) -> Callable[[AdmissionCheck], None]:
    """`c.set_admission_check`, logging a warning when a new AdmissionCheck waits for one of
    Kueue's own controllers (`admissionchecks.not_run`)."""

    def store(check: AdmissionCheck) -> None:
        why = admissionchecks.not_run(check)
        if why is not None and check.name not in c.admission_checks:
            log.warning("admission check not run", admission_check=check.name, reason=why)
        c.set_admission_check(check)

    return store


def register_watches(watches: Watches, w: Wiring) -> None:
    """Register the kinds atoll watches without kopf (`atoll.kube.watch`) on `watches`."""

    def workload(type: str | None, body: Mapping[str, Any]) -> None:
        key = object_key(body)
        if type == "DELETED":
            wl = w.cache.workloads.get(key)
            w.cache.delete_workload(key)
            w.gone_workload(key)
        else:
            wl = w.parsers.workload(body, w.cache.workloads.get(key))
            if wl is None:
                return
            w.cache.set_workload(wl)
            w.seen_workload(wl)
        if wl is not None:
            queue_owner(wl, w)
        w.wake()
        w.queues_changed()

    watches.on(*KUEUE, "workloads", workload, known=lambda: list(w.cache.workloads))
    _queue_kinds(watches, w)
    _core_kinds(watches, w)


class Digests(Generic[D]):
    """A digest, by key, of the part of each object its model reads (`job_digest`,
    `node_digest`, `pod_digest`): an event whose digest is the one last seen (a heartbeat, a
    container status, only a new resourceVersion) is not parsed nor handled. The keys are
    those of the objects held (`known` of a watch)."""

    __slots__ = ("_digests",)

    def __init__(self) -> None:
        self._digests: dict[str, D] = {}

    def changed(self, key: str, digest: D) -> bool:
        """Whether `digest` differs from the one last `seen` under `key` (an event to handle)."""
        return self._digests.get(key) != digest

    def seen(self, key: str, digest: D) -> None:
        self._digests[key] = digest

    def parse(
        self,
        key: str,
        digest: D,
        body: Mapping[str, Any],
        parse: Callable[[Mapping[str, Any]], K | None],
    ) -> K | None:
        """`parse(body)` when `body` (of digest `digest`) changed what its model reads since
        the last event of `key` (None when it did not, or cannot be parsed)."""
        if not self.changed(key, digest):
            return None
        parsed = parse(body)
        if parsed is not None:
            self.seen(key, digest)
        return parsed

    def forget(self, key: str) -> None:
        self._digests.pop(key, None)

    def keys(self) -> list[str]:
        return list(self._digests)


def _conditions(status: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """Conditions as the models keep them (no timestamps)."""
    return [
        (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
        for c in status.get("conditions") or ()
    ]


def _meta_view(body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    return {k: v for k, v in meta.items() if k not in ("resourceVersion", "managedFields")}


def model_digest(*status_fields: str) -> Callable[[Mapping[str, Any]], int]:
    """A digest of what a model reads of an object: its metadata but the resourceVersion and
    the managedFields, its spec, the `status_fields` of its status and its conditions
    without their times."""

    def digest(body: Mapping[str, Any]) -> int:
        status = body.get("status") or {}
        view = (
            _meta_view(body),
            body.get("spec"),
            [status.get(f) for f in status_fields],
            _conditions(status),
        )
        return hash(json_text(view))

    return digest


JOB_STATUS_FIELDS = (
    "active",
    "ready",
    "succeeded",
    "failed",
    "startTime",
    "completionTime",
    "uncountedTerminatedPods",
    "completedIndexes",
    "failedIndexes",
)
POD_STATUS_FIELDS = ("phase", "message", "resourceClaimStatuses")
"""Not its container statuses, IPs, start time."""
NODE_STATUS_FIELDS = ("capacity", "allocatable")
"""Not its heartbeats, images, addresses."""
job_digest = model_digest(*JOB_STATUS_FIELDS)
node_digest = model_digest(*NODE_STATUS_FIELDS)
PodDigest = tuple[int, int, int]
"""What a Pod reads of a pod (as `model_digest(*POD_STATUS_FIELDS)`), as one digest per
part: its metadata (but the resourceVersion and managedFields), its spec, its status. An
event is handled when any part changed; a kept pod whose spec did not change is parsed only
in its changed parts (`_reparse_pod`)."""


def pod_digest(body: Mapping[str, Any]) -> tuple[PodDigest, bytes]:
    """The `PodDigest` of `body` and the JSON text of its status part (all a PodStatus reads:
    equal texts parse to equal statuses)."""
    status = body.get("status") or {}
    status_text = json_text(([status.get(f) for f in POD_STATUS_FIELDS], _conditions(status)))
    digest = (
        hash(json_text(_meta_view(body))),
        hash(json_text(body.get("spec"))),
        hash(status_text),
    )
    return digest, status_text


def _kept(pod: Pod) -> bool:
    """Whether a pod's last state is needed to handle its deletion when a re-list finds it
    gone (its group, its Workload's seats); any other pod is forgotten by name."""
    ann = pod.metadata.annotations or {}
    return (
        WORKLOAD_ANNOTATION in ann
        or SUSPENDED_BY_PARENT_ANNOTATION in ann
        or MANAGED_LABEL in (pod.metadata.labels or {})
    )


def _core_kinds(watches: Watches, w: Wiring) -> None:
    """Namespaces, Jobs, nodes and pods: every object is needed (a Job may be managed
    without a queue-name label, every bound pod uses node capacity), so nothing is selected
    server side; events that change nothing a model reads are dropped (`Digests`)."""
    c = w.cache

    def namespace(type: str | None, body: Mapping[str, Any]) -> None:
        name = object_key(body)
        if type == "DELETED":
            c.delete("ns", name)
        else:
            c.set_namespace(name, dict((body.get("metadata") or {}).get("labels") or {}))
        w.wake()

    watches.on("", "v1", "namespaces", namespace, known=lambda: list(c.namespaces))
    jobs: Digests[int] = Digests()

    def job(type: str | None, body: Mapping[str, Any]) -> None:
        key = object_key(body)
        if type == "DELETED":
            jobs.forget(key)
            c.delete_job(key)
        else:
            parsed = jobs.parse(key, job_digest(body), body, w.parsers.job)
            if parsed is None:
                return
            c.set_job(parsed)
        w.jobs.add(key)

    watches.on("batch", "v1", "jobs", job, known=lambda: list(c.jobs))
    nodes: Digests[int] = Digests()

    def node(type: str | None, body: Mapping[str, Any]) -> None:
        name = object_key(body)
        if type == "DELETED":
            nodes.forget(name)
            c.inventory.delete_node(name)
        else:
            parsed = nodes.parse(name, node_digest(body), body, lambda raw: _parse(Node, raw))
            if parsed is None:
                return
            c.inventory.upsert_node(parsed)
        _capacity_changed(w)

    watches.on("", "v1", "nodes", node, known=nodes.keys)
    _pods(watches, w)


def _capacity_changed(w: Wiring) -> None:
    w.cache.bump()  # parked workloads may fit now
    w.wake()


def _pods(watches: Watches, w: Wiring) -> None:
    pods: Digests[PodDigest] = Digests()
    last: dict[str, tuple[Pod, PodDigest]] = {}
    """The last state of the pods `_kept` needs, by key, with its digest."""
    specs: Shared[PodSpec] = Shared(POD_SPECS)
    statuses: Shared[PodStatus] = Shared(POD_STATUSES)

    def gone(key: str, body: Mapping[str, Any]) -> Pod | None:
        pods.forget(key)
        known = last.pop(key, None)
        # a re-list reports a pod gone with only its name: its last state stands in
        if known is not None and "spec" not in body:
            return known[0]
        return _parse(Pod, body)

    def pod(type: str | None, body: Mapping[str, Any]) -> None:
        key = object_key(body)
        deleted = type == "DELETED"
        before = last.get(key)
        if deleted:
            parsed = gone(key, body)
            if parsed is None:
                return
            w.cache.inventory.delete_pod(parsed.namespace or "", parsed.name)
        else:
            digest, status_text = pod_digest(body)
            if not pods.changed(key, digest):
                return

            def status_of(raw: Mapping[str, Any]) -> PodStatus:
                return statuses.parse(status_text, raw, PodStatus.from_dict)

            parsed = (
                None
                if before is None
                else _reparse_pod(before[0], before[1], digest, body, status_of)
            )
            if parsed is None:
                parsed = _parse_pod(body, status_text, specs, statuses)
            if parsed is None:
                return
            pods.seen(key, digest)
            w.cache.inventory.upsert_pod(parsed)
            if _kept(parsed):
                last[key] = (parsed, digest)
            else:
                last.pop(key, None)
        if w.group_pod is not None:
            w.group_pod(parsed, deleted)
        seen = w.ungater.observe(parsed, deleted=deleted)
        if seen is not None:
            w.pods.add(seen)
        was_over = before is not None and before[0].status.phase in _OVER
        if (deleted or parsed.status.phase in _OVER) and not was_over:
            # its node has room again (a pod already seen over left the inventory then)
            _capacity_changed(w)
        if not deleted:
            _job_pod_succeeded(w, parsed)

    watches.on("", "v1", "pods", pod, known=pods.keys)


RECLAIM_BATCH = 0.25
"""Seconds a Job's reconcile waits after its first pod seen Succeeded, so that the pods of a
gang that end together are reported as reclaimable in one write, not one write each."""


def _job_pod_succeeded(w: Wiring, pod: Pod) -> None:
    """A Job's pod seen Succeeded for the first time: its Job is reconciled shortly after
    (`RECLAIM_BATCH`), as its reclaimable pods may have grown (before the Job controller
    counts the pod, about a second later)."""
    done = jf.succeeded_job_pod(pod)
    if done is None:
        return
    uid, name, index = done
    key = wls.key_of(pod.namespace, name)
    job = w.cache.jobs.get(key)
    if job is not None and job.metadata.uid == uid and w.cache.pod_succeeded(uid, pod.name, index):
        w.jobs.add_after(key, RECLAIM_BATCH)


def _parse_pod(
    body: Mapping[str, Any],
    status_text: bytes,
    specs: Shared[PodSpec],
    statuses: Shared[PodStatus],
) -> Pod | None:
    """`body` as a Pod; a spec parsed before (most of a pod's parsing cost) is shared, and so
    is a status that reads as one parsed before (`status_text`: see `pod_digest`), as
    `Shared` tells."""
    known, key = statuses.find(status_text)
    if known is not None:
        body = {**body, "status": known}
    parsed = _parse_sharing(Pod, body, ("spec",), specs, lambda pod: pod.spec)
    if parsed is not None and known is None:
        statuses.put(key, parsed.status)
    return parsed


_OVER = ("Succeeded", "Failed")
"""Pod phases after which a pod uses no capacity."""


def _reparse_pod(
    known: Pod,
    before: PodDigest,
    digest: PodDigest,
    body: Mapping[str, Any],
    status_of: Callable[[Mapping[str, Any]], PodStatus],
) -> Pod | None:
    """`body` (of digest `digest`) as a Pod, from `known` (the pod's last state, of digest
    `before`) when the spec is unchanged: only the changed metadata and status are parsed
    (the status by `status_of`), the spec is shared (as `_parse_workload` does for a
    Workload of an unchanged generation). None when it cannot be (spec changed, not a plain
    pod body): parse it all."""
    meta, status = body.get("metadata"), body.get("status")
    if (
        digest[1] != before[1]
        or not isinstance(meta, Mapping)
        or not isinstance(status, Mapping)
        or body.get("apiVersion") != known.api_version
        or body.get("kind") != known.kind
    ):
        return None
    update: dict[str, Any] = {}
    try:
        if digest[0] != before[0]:
            update["metadata"] = ObjectMeta.from_dict(meta)
        elif meta.get("resourceVersion") != known.metadata.resource_version:
            version = meta.get("resourceVersion")
            update["metadata"] = known.metadata.model_copy(update={"resource_version": version})
        if digest[2] != before[2]:
            update["status"] = status_of(status)
    except ValidationError:
        return None  # parsed whole, which logs what is wrong
    return known.model_copy(update=update) if update else known


def _watch(
    registry: kopf.OperatorRegistry,
    resource: tuple[str, str, str],
    model: type[K],
    *,
    upsert: Callable[[K], None],
    delete: Callable[[K], None],
    after: Callable[[K, bool], None],
) -> None:
    @kopf.on.event(*resource, registry=registry)
    async def _on(type: str | None, body: kopf.Body, **_: Any) -> None:
        obj = _parse(model, body)
        if obj is None:
            return
        deleted = type == "DELETED"
        if deleted:
            delete(obj)
        else:
            upsert(obj)
        after(obj, deleted)


@dataclass(frozen=True, slots=True)
class InventoryKind:
    """A kind placement reads: where it is served and how the cache stores it."""

    resource: tuple[str, str, str]
    """(group, version, plural)."""
    model: type[KubeObject]
    upsert: Callable[[Any], None]
    delete: Callable[[Any], None]


def inventory_kinds(cache: Cache) -> tuple[InventoryKind, ...]:
    """Nodes, pods, Topologies and the DRA objects, in the order they are best read (the
    operator watches them; `atoll explain` lists them once)."""
    inv = cache.inventory
    dra = ("resource.k8s.io", "v1")
    return (
        InventoryKind(
            ("", "v1", "nodes"), Node, inv.upsert_node, lambda o: inv.delete_node(o.name)
        ),
        InventoryKind(
            ("", "v1", "pods"),
            Pod,
            inv.upsert_pod,
            lambda o: inv.delete_pod(o.namespace or "", o.name),
        ),
        InventoryKind(
            (*KUEUE, "topologies"),
            Topology,
            inv.upsert_topology,
            lambda o: inv.delete_topology(o.name),
        ),
        InventoryKind(
            (*dra, "deviceclasses"),
            DeviceClass,
            inv.upsert_device_class,
            lambda o: inv.delete_device_class(o.name),
        ),
        InventoryKind(
            (*dra, "resourceslices"),
            ResourceSlice,
            inv.upsert_slice,
            lambda o: inv.delete_slice(o.name),
        ),
        InventoryKind(
            (*dra, "resourceclaims"),
            ResourceClaim,
            inv.upsert_claim,
            lambda o: inv.delete_claim(o.namespace or "", o.name),
        ),
        InventoryKind(
            (*dra, "resourceclaimtemplates"),
            ResourceClaimTemplate,
            cache.set_claim_template,
            lambda o: cache.delete_claim_template(o.namespace or "", o.name),
        ),
    )
