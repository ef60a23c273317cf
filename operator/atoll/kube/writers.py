"""The ports of `atoll.control.ports`, implemented with plain requests on kubernetes_asyncio's
session (`rest.Rest`).

Workload status is written with a read-modify-write on the status subresource: a JSON merge
patch of what changed in the fields atoll models, carrying the resourceVersion the change was
computed from (a concurrent change is a 409 and the mutation is re-applied to the fresh
object); fields of the status that atoll does not model are left untouched. The base of a
write is the parsed Workload last seen on the watch or in a response: no raw body is kept.
Jobs are changed with JSON merge patches carrying the resourceVersion they were computed from.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import json
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from atoll.api import labels as keys
from atoll.api import mpijob, trainjob
from atoll.api.clusterqueue import ClusterQueueStatus
from atoll.api.core import Job, PodTemplateSpec
from atoll.api.localqueue import LocalQueueStatus
from atoll.api.meta import OwnerReference
from atoll.api.workload import Workload, WorkloadSpec
from atoll.control import podgroups
from atoll.control import trainjob as trainer_rules
from atoll.control.jobframework import JOB_CONTROLLER_LABELS, JobStart, TemplateStart
from atoll.control.ports import ApiError, NotFoundError, ObjectRef, StatusMutation
from atoll.kube import retry
from atoll.kube.ratelimit import TokenBucket
from atoll.kube.rest import (
    CLUSTER_QUEUES,
    EVENTS,
    JOBS,
    JSON,
    LOCAL_QUEUES,
    MERGE,
    PODS,
    STRATEGIC,
    WORKLOADS,
    Resource,
    Rest,
    decode,
)

log = structlog.get_logger("atoll.kube")

_JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets")
_MPIJOBS = Resource(mpijob.GROUP, mpijob.VERSION, mpijob.PLURAL)
_TRAINJOBS = Resource(trainjob.GROUP, trainjob.VERSION, trainjob.PLURAL)
_RETRIES = 8
_TRANSIENT_ATTEMPTS = 12
"""Tries of one request that fails transiently (about a minute with `retry.DEFAULT`); then
the caller's work queue takes over with its own backoff."""
_REMEMBERED = 200_000
"""Workloads whose last seen version the writer keeps as the base of its next write (the
parsed Workloads the cache holds too: a reference each)."""
_EVENT_QUEUE = 1000
REQUEST_SECONDS = 0.1
"""The request time the writer's concurrency is sized for (`in_flight`)."""
MIN_IN_FLIGHT = 8
_EVENT_ATTEMPTS = 5
T = TypeVar("T")


def api_message(e: ApiException) -> str:
    """The API server's own message of a failed request (its Status body), else the reason."""
    try:
        body = json.loads(e.body or "{}")
    except (TypeError, ValueError):
        body = {}
    return str(body.get("message") or e.reason or e.status)


def _split(key: str) -> tuple[str, str]:
    ns, _, name = key.partition("/")
    return ns, name


def _set_or_drop(obj: dict[str, Any], field: str, value: Any) -> None:
    """Set `obj[field]`, or drop it when `value` is empty."""
    if value:
        obj[field] = value
    else:
        obj.pop(field, None)


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns `old` into `new`: changed keys, maps
    recursively, lists whole, and None for keys `new` lacks."""
    patch: dict[str, Any] = {}
    for k, v in new.items():
        o = old.get(k)
        if o == v:
            continue
        patch[k] = merge_patch(o, v) if isinstance(o, dict) and isinstance(v, dict) else v
    for k in old:
        if k not in new:
            patch[k] = None
    return patch


def with_deletions(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """`new` whole, with None for each map key `old` has and `new` lacks (at any depth): a
    merge patch that sets everything `new` says, whatever the server holds, and removes
    what `new` dropped since `old` (such as a resource leaving
    `admissionFairSharingStatus.consumedResources`)."""
    out = dict(new)
    for k, v in old.items():
        if k not in new:
            out[k] = None
        elif isinstance(v, Mapping) and isinstance(new[k], Mapping):
            out[k] = with_deletions(v, new[k])
    return out


def _newer_or_same(seen: str | None, known: str | None) -> bool:
    if not seen or not known or not seen.isdigit() or not known.isdigit():
        return True
    return int(seen) >= int(known)


def _override_index(raw: dict[str, Any]) -> int | None:
    annotations = (raw.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(trainjob.OVERRIDE_IDX_ANNOTATION)
    return int(value) if isinstance(value, str) and value.isdigit() else None


def _recorded_overrides(raw: dict[str, Any]) -> list[dict[str, Any]] | None:
    return trainer_rules.recorded_user_overrides((raw.get("metadata") or {}).get("annotations"))


def _mpijob_suspended(raw: dict[str, Any]) -> bool:
    return bool(((raw.get("spec") or {}).get("runPolicy") or {}).get("suspend"))


def _replica_template(raw: dict[str, Any], replica_type: str) -> dict[str, Any]:
    specs = (raw.get("spec") or {}).get("mpiReplicaSpecs") or {}
    template: dict[str, Any] = (specs.get(replica_type) or {}).get("template") or {}
    return template


def _mpijob_patch(suspend: bool, pods: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = {"runPolicy": {"suspend": suspend}}
    if pods:
        spec["mpiReplicaSpecs"] = {t: {"template": pod} for t, pod in pods.items()}
    return {"spec": spec}


def _template_patch(
    current: dict[str, Any],
    *,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    node_selector: Mapping[str, str],
    tolerations: list[Any],
    gates: list[Any],
) -> dict[str, Any]:
    """A merge patch turning the pod template `current` into one with exactly these labels,
    annotations, node selector, tolerations and scheduling gates (empty when it has them)."""
    meta = current.get("metadata") or {}
    spec = current.get("spec") or {}
    out: dict[str, Any] = {}
    for part, field, have, want in (
        ("metadata", "labels", meta, labels),
        ("metadata", "annotations", meta, annotations),
        ("spec", "nodeSelector", spec, node_selector),
        ("spec", "tolerations", spec, tolerations),
        ("spec", "schedulingGates", spec, gates),
    ):
        old = have.get(field)
        if (old or None) == (want or None):
            continue
        if not want:
            value: Any = None
        elif isinstance(want, Mapping):
            value = _removed(old, dict(want))
        else:
            value = list(want)
        out.setdefault(part, {})[field] = value
    return out


def _removed(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """A merge-patch map that sets `new` and deletes keys of `old` it lacks."""
    patch: dict[str, Any] = dict(new)
    for k in old or {}:
        if k not in new:
            patch[k] = None
    return patch


def in_flight(qps: float) -> int:
    """How many of the writer's requests may be in flight at once: enough to keep up `qps`
    when each takes `REQUEST_SECONDS` (30 at the default 300), at least `MIN_IN_FLIGHT`.
    Each request in flight holds one connection to the API server (HTTP/1.1), and each
    connection a 256 KiB TLS read buffer (asyncio's): unbounded, a burst of status writes
    (10,000 pending Workloads at once) opened the client's 100 connections, ~30 MiB."""
    return max(MIN_IN_FLIGHT, math.ceil(qps * REQUEST_SECONDS))


class KubeWriter:
    """Writes Workloads, Jobs, queue statuses and Events; counts requests per verb (at most
    `in_flight(qps)` at once)."""

    def __init__(
        self,
        api: client.ApiClient,
        limiter: TokenBucket,
        *,
        component: str = "kueue-admission",
        on_request: Callable[[str, str, str, float], None] | None = None,
    ) -> None:
        self.rest = Rest(api)
        self.limiter = limiter
        self.component = component
        self.on_request = on_request
        self._in_flight = asyncio.Semaphore(in_flight(limiter.qps))
        self._last: OrderedDict[str, Workload] = OrderedDict()
        self._events: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=_EVENT_QUEUE)
        self.events_dropped = 0

    def _count(self, verb: str, code: str, resource: str, started: float) -> None:
        """One request ended: its verb, result, resource and seconds (`on_request`)."""
        if self.on_request:
            self.on_request(verb, code, resource, time.perf_counter() - started)

    async def _call(self, verb: str, resource: str, fn: Callable[[], Awaitable[T]]) -> T:
        """One request under the rate limit, retried while it fails transiently (`retry`);
        a refusal becomes `ApiError`."""

        async def once() -> T:
            await self.limiter.acquire()
            async with self._in_flight:
                started = time.perf_counter()
                try:
                    result = await fn()
                except ApiException as e:
                    self._count(verb, str(e.status), resource, started)
                    raise
                except Exception:
                    self._count(verb, "error", resource, started)
                    raise
            self._count(verb, "200", resource, started)
            return result

        try:
            return await retry.call(once, what=verb, attempts=_TRANSIENT_ATTEMPTS)
        except ApiException as e:
            raise ApiError(int(e.status or 0), api_message(e)) from e

    async def _send(
        self,
        verb: str,
        resource: str,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = JSON,
    ) -> bytes:
        """One plain request through `_call`; the answer's body, unread."""
        return await self._call(
            verb, resource, lambda: self.rest.request(method, path, body, content_type=content_type)
        )

    # -- Workloads ------------------------------------------------------------------------
    async def _get_workload(self, key: str) -> dict[str, Any]:
        """The raw Workload (a GET); its parsed form becomes the base of the next write."""
        ns, name = _split(key)
        try:
            raw: dict[str, Any] = decode(
                await self._send("get", "workloads", "GET", WORKLOADS.path(ns, name))
            )
        except ApiError as e:
            if e.status == 404:
                raise NotFoundError(key) from e
            raise
        return raw

    async def _read_workload(self, key: str) -> Workload:
        wl = Workload.from_dict(await self._get_workload(key))
        self._remember(key, wl)
        return wl

    def observe_workload(self, wl: Workload) -> None:
        """A Workload seen on the watch: the base of the next status write, when newer."""
        self._remember(f"{wl.namespace or ''}/{wl.name}", wl)

    def forget_workload(self, key: str) -> None:
        self._last.pop(key, None)

    def _remember(self, key: str, wl: Workload) -> None:
        """`wl` becomes the base of the next write of `key` unless a newer version is known:
        a write's response can come after the watch events that follow it (the runner of a
        benchmark took an admission back before atoll read its own write's answer), and an
        older admitted base would make the next admission "nothing to write"."""
        known = self._last.get(key)
        if known is None or _newer_or_same(
            wl.metadata.resource_version, known.metadata.resource_version
        ):
            self._last[key] = wl
        self._last.move_to_end(key)
        while len(self._last) > _REMEMBERED:
            self._last.popitem(last=False)

    async def create_workload(self, wl: Workload) -> Workload:
        ns = wl.namespace or ""
        try:
            raw: dict[str, Any] = decode(
                await self._send("create", "workloads", "POST", WORKLOADS.path(ns), wl.to_dict())
            )
        except ApiError as e:
            if e.status != 409:
                raise
            raw = await self._get_workload(f"{ns}/{wl.name}")
        created = Workload.from_dict(raw)
        self._remember(f"{ns}/{wl.name}", created)
        return created

    async def update_workload_status(
        self, key: str, mutate: StatusMutation, *, confirm_unchanged: bool = False
    ) -> Workload | None:
        """Read-modify-write of the status. The last version this writer saw or wrote is the
        first base (no GET per write); a 409 means it is stale: read the object and retry.
        The written Workload is the base with the new status and resourceVersion (the
        response is decoded for its resourceVersion only; the watch brings the object).
        `confirm_unchanged`: "nothing to write" on the remembered version is checked on the
        server's (a GET) before it is the answer."""
        ns, name = _split(key)
        wl = self._last.get(key)
        read = False
        for _ in range(_RETRIES):
            if wl is None:
                wl = await self._read_workload(key)
                read = True
            status = mutate(wl)
            if status is None:
                if confirm_unchanged and not read:
                    # Nothing to write on the remembered version, which may be older than
                    # the cache's (a watch event missed): a scheduler told "nothing to do"
                    # for an admission would take it back and admit again, without end.
                    # Decide on the object as the server has it.
                    wl = None
                    continue
                return None
            new = status.to_dict()
            old = wl.status.to_dict() if wl.status is not None else {}
            body = {
                "metadata": {"resourceVersion": wl.metadata.resource_version},
                "status": merge_patch(old, new),
            }
            try:
                version = await self._call(
                    "patch",
                    "workloads/status",
                    lambda body=body: self._patch_status(ns, name, body),  # type: ignore[misc]
                )
            except ApiError as e:
                self._last.pop(key, None)
                if e.status == 409:
                    wl = None
                    continue
                if e.status == 404:
                    raise NotFoundError(key) from e
                raise
            meta = wl.metadata.model_copy(update={"resource_version": version})
            written = wl.model_copy(update={"metadata": meta, "status": status})
            self._remember(key, written)
            return written
        raise RuntimeError(f"workload {key}: status write kept conflicting")

    async def _patch_status(self, ns: str, name: str, body: dict[str, Any]) -> str | None:
        """A merge patch of a Workload's status; the written resourceVersion."""
        path = WORKLOADS.path(ns, name, "status")
        written = decode(await self.rest.request("PATCH", path, body, content_type=MERGE))
        version = (written.get("metadata") or {}).get("resourceVersion")
        return str(version) if version else None

    async def update_workload_spec(self, key: str, spec: WorkloadSpec) -> Workload:
        nulls = {f.alias or n: None for n, f in WorkloadSpec.model_fields.items()}
        for _ in range(_RETRIES):
            raw = await self._get_workload(key)
            version = raw.get("metadata", {}).get("resourceVersion")
            body = {"metadata": {"resourceVersion": version}, "spec": nulls | spec.to_dict()}
            try:
                written = await self._patch_workload(key, body)
            except ApiError as e:
                if e.status != 409:
                    raise
                continue
            updated = Workload.from_dict(written)
            self._remember(key, updated)
            return updated
        raise RuntimeError(f"workload {key}: spec update kept conflicting")

    async def _patch_workload(self, key: str, body: dict[str, Any]) -> dict[str, Any]:
        ns, name = _split(key)
        try:
            written: dict[str, Any] = decode(
                await self._send(
                    "patch",
                    "workloads",
                    "PATCH",
                    WORKLOADS.path(ns, name),
                    body,
                    content_type=MERGE,
                )
            )
        except ApiError as e:
            if e.status == 404:
                raise NotFoundError(key) from e
            raise
        return written

    async def remove_workload_finalizer(self, key: str, finalizer: str) -> None:
        """The base is the version this writer saw or wrote last (no GET; the watch keeps it
        at least as new as the cache): when it lacks the finalizer there is nothing to do,
        else the patch carries its resourceVersion, so a stale base is a 409: read the
        object and retry. The patched version becomes the next base."""
        known = self._last.get(key)
        for attempt in range(_RETRIES):
            base = known if attempt == 0 and known and known.metadata.resource_version else None
            if base is not None:
                finalizers = list(base.metadata.finalizers or [])
                version: Any = base.metadata.resource_version
            else:
                meta = (await self._get_workload(key)).get("metadata", {})
                finalizers = list(meta.get("finalizers") or [])
                version = meta["resourceVersion"]
            if finalizer not in finalizers:
                return
            finalizers.remove(finalizer)
            body = {"metadata": {"finalizers": finalizers, "resourceVersion": version}}
            try:
                written = await self._patch_workload(key, body)
            except ApiError as e:
                if e.status != 409:
                    raise
                continue
            new_version = (written.get("metadata") or {}).get("resourceVersion")
            if base is None or not new_version:
                self._last.pop(key, None)
                return
            seen = {"finalizers": tuple(finalizers) or None, "resource_version": new_version}
            patched = base.metadata.model_copy(update=seen)
            self._remember(key, base.model_copy(update={"metadata": patched}))
            return
        raise RuntimeError(f"workload {key}: finalizer removal kept conflicting")

    async def delete_workload(self, key: str) -> None:
        ns, name = _split(key)
        try:
            await self._send("delete", "workloads", "DELETE", WORKLOADS.path(ns, name))
        except ApiError as e:
            if e.status != 404:
                raise

    async def deactivate_workload(self, key: str) -> None:
        await self._patch_workload(key, {"spec": {"active": False}})

    # -- Jobs -----------------------------------------------------------------------------
    async def _get_job(self, key: str) -> dict[str, Any]:
        """The Job as the API server sends it (decoded as JSON, not into the client's V1Job
        models and back: the build functions read a few fields of the raw object)."""
        ns, name = _split(key)
        try:
            raw: dict[str, Any] = decode(
                await self._send("get", "jobs", "GET", JOBS.path(ns, name))
            )
            return raw
        except ApiError as e:
            if e.status == 404:
                raise NotFoundError(key) from e
            raise

    async def _patch_job(self, key: str, body: dict[str, Any], *, status: bool = False) -> None:
        """A merge patch of a Job (or its status); the response is read, not decoded."""
        ns, name = _split(key)
        path = JOBS.path(ns, name, "status" if status else None)
        try:
            await self._send(
                "patch",
                "jobs/status" if status else "jobs",
                "PATCH",
                path,
                body,
                content_type=MERGE,
            )
        except ApiError as e:
            if e.status == 404:
                raise NotFoundError(key) from e
            raise

    async def _patch_job_retrying(
        self,
        key: str,
        build: Callable[[dict[str, Any]], dict[str, Any] | None],
        first: dict[str, Any] | None = None,
    ) -> None:
        """Merge-patch the Job with what `build` makes of it as read, under its
        resourceVersion; `first`, a patch already carrying the resourceVersion it was built
        from, is tried before any read. A conflict reads the Job and builds again."""
        for attempt in range(_RETRIES):
            if attempt == 0 and first is not None:
                body = first
            else:
                raw = await self._get_job(key)
                built = build(raw)
                if built is None:
                    return
                body = built
                body.setdefault("metadata", {})["resourceVersion"] = raw["metadata"][
                    "resourceVersion"
                ]
            try:
                await self._patch_job(key, body)
                return
            except ApiError as e:
                if e.status != 409:
                    raise
        raise RuntimeError(f"job {key}: patch kept conflicting")

    async def suspend_job(self, key: str) -> None:
        await self._patch_job_retrying(
            key, lambda raw: None if raw["spec"].get("suspend") else {"spec": {"suspend": True}}
        )

    async def start_job(self, key: str, plan: JobStart, seen: Job | None = None) -> None:
        """Unsuspend the Job with the admission merged into its pod template. `seen`, the Job
        as the watch last showed it, is the base of a first patch without a GET (its
        resourceVersion guards it: a stale base is a 409, then the Job is read and the
        patch built again)."""

        def build(
            suspended: bool, node_selector: Mapping[str, str] | None
        ) -> dict[str, Any] | None:
            if not suspended:
                return None
            body: dict[str, Any] = {
                "spec": {
                    "suspend": False,
                    "template": {
                        "metadata": {
                            "labels": dict(plan.labels),
                            "annotations": dict(plan.annotations),
                        },
                        "spec": {
                            "nodeSelector": _removed(
                                dict(node_selector or {}), dict(plan.node_selector)
                            ),
                            "tolerations": [t.to_dict() for t in plan.tolerations] or None,
                            "schedulingGates": [{"name": g} for g in plan.scheduling_gates] or None,
                        },
                    },
                }
            }
            if plan.parallelism is not None:
                body["spec"]["parallelism"] = plan.parallelism
            return body

        first = None
        if seen is not None and seen.metadata.resource_version:
            first = build(bool(seen.spec.suspend), seen.spec.template.spec.node_selector)
            if first is not None:
                first["metadata"] = {"resourceVersion": seen.metadata.resource_version}

        def from_raw(raw: dict[str, Any]) -> dict[str, Any] | None:
            tspec = (raw["spec"].get("template") or {}).get("spec") or {}
            return build(bool(raw["spec"].get("suspend")), tspec.get("nodeSelector"))

        await self._patch_job_retrying(key, from_raw, first)

    async def stop_job(self, key: str, template: PodTemplateSpec, parallelism: int | None) -> None:
        """Kueue's three-step stop: suspend (with the stopping annotation), clear startTime,
        restore the template exactly from the Workload and drop the annotation."""

        def suspend(raw: dict[str, Any]) -> dict[str, Any] | None:
            ann = raw["metadata"].get("annotations") or {}
            if raw["spec"].get("suspend") and keys.STOPPING_ANNOTATION not in ann:
                return None
            return {
                "metadata": {"annotations": {keys.STOPPING_ANNOTATION: "true"}},
                "spec": {"suspend": True},
            }

        await self._patch_job_retrying(key, suspend)
        want = template.to_dict()
        want_meta = want.get("metadata") or {}
        want_spec = want.get("spec") or {}

        def restore(raw: dict[str, Any]) -> dict[str, Any] | None:
            tmpl = raw["spec"].get("template") or {}
            meta = tmpl.get("metadata") or {}
            spec = tmpl.get("spec") or {}
            labels = dict(want_meta.get("labels") or {})
            for k, v in (meta.get("labels") or {}).items():
                if k in JOB_CONTROLLER_LABELS or k.startswith("batch.kubernetes.io/"):
                    labels[k] = v
            body: dict[str, Any] = {
                "metadata": {"annotations": {keys.STOPPING_ANNOTATION: None}},
                "spec": {
                    "template": {
                        "metadata": {
                            "labels": _removed(meta.get("labels"), labels),
                            "annotations": _removed(
                                meta.get("annotations"), dict(want_meta.get("annotations") or {})
                            ),
                        },
                        "spec": {
                            "nodeSelector": _removed(
                                spec.get("nodeSelector"), dict(want_spec.get("nodeSelector") or {})
                            ),
                            "tolerations": want_spec.get("tolerations"),
                            "schedulingGates": want_spec.get("schedulingGates"),
                        },
                    }
                },
            }
            if parallelism is not None:
                body["spec"]["parallelism"] = parallelism
            return body

        for attempt in range(_RETRIES):
            # The Job controller may write a stale startTime back while it processes the
            # suspension; the template is mutable only once startTime is unset.
            raw = await self._get_job(key)
            if (raw.get("status") or {}).get("startTime"):
                await self._patch_job(key, {"status": {"startTime": None}}, status=True)
            try:
                await self._patch_job_retrying(key, restore)
                return
            except ApiError as e:
                if e.status != 422 or attempt == _RETRIES - 1:
                    raise
                await asyncio.sleep(0.1 * (attempt + 1))

    # -- JobSets --------------------------------------------------------------------------
    async def _get_custom(self, res: Resource, key: str) -> dict[str, Any]:
        """GET the custom object `key` of kind `res`."""
        ns, name = _split(key)
        try:
            raw: dict[str, Any] = decode(
                await self._send("get", res.plural, "GET", res.path(ns, name))
            )
        except ApiError as e:
            if e.status == 404:
                raise NotFoundError(key) from e
            raise
        return raw

    async def _patch_jobset_retrying(
        self, key: str, build: Callable[[dict[str, Any]], dict[str, Any] | None]
    ) -> None:
        """Merge-patch the JobSet with what `build` makes of it, under its resourceVersion
        (replicatedJobs is a list: a patch carries all of it)."""
        await self._patch_custom_retrying(_JOBSETS, key, build)

    async def _patch_custom_retrying(
        self,
        res: Resource,
        key: str,
        build: Callable[[dict[str, Any]], dict[str, Any] | None],
    ) -> None:
        """Merge-patch the custom object with what `build` makes of it (None: nothing to
        write), under its resourceVersion; GET and build again on a conflict."""
        ns, name = _split(key)
        for _ in range(_RETRIES):
            raw = await self._get_custom(res, key)
            body = build(raw)
            if body is None:
                return
            body.setdefault("metadata", {})["resourceVersion"] = raw["metadata"]["resourceVersion"]
            try:
                await self._send(
                    "patch", res.plural, "PATCH", res.path(ns, name), body, content_type=MERGE
                )
                return
            except ApiError as e:
                if e.status == 404:
                    raise NotFoundError(key) from e
                if e.status != 409:
                    raise
        raise RuntimeError(f"{res.plural} {key}: patch kept conflicting")

    async def suspend_jobset(self, key: str) -> None:
        await self._patch_jobset_retrying(
            key, lambda raw: None if raw["spec"].get("suspend") else {"spec": {"suspend": True}}
        )

    async def start_jobset(self, key: str, plans: Mapping[str, TemplateStart]) -> None:
        def build(raw: dict[str, Any]) -> dict[str, Any] | None:
            if not raw["spec"].get("suspend"):
                return None
            rjs = copy.deepcopy(raw["spec"].get("replicatedJobs") or [])
            for rj in rjs:
                plan = plans.get(rj.get("name"))
                if plan is None:
                    continue
                pod = (
                    rj.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {})
                )
                meta = pod.setdefault("metadata", {})
                meta["labels"] = dict(plan.labels)
                meta["annotations"] = dict(plan.annotations)
                spec = pod.setdefault("spec", {})
                _set_or_drop(spec, "nodeSelector", dict(plan.node_selector))
                _set_or_drop(spec, "tolerations", [t.to_dict() for t in plan.tolerations])
                _set_or_drop(spec, "schedulingGates", [{"name": g} for g in plan.scheduling_gates])
            return {"spec": {"suspend": False, "replicatedJobs": rjs}}

        await self._patch_jobset_retrying(key, build)

    async def stop_jobset(self, key: str, templates: Mapping[str, PodTemplateSpec]) -> None:
        """Suspend and restore every replicated job's pod template from the Workload in one
        write (JobSet lets a JobSet being suspended change its pod templates), as Kueue's
        stop does for JobSets."""

        def build(raw: dict[str, Any]) -> dict[str, Any] | None:
            rjs = copy.deepcopy(raw["spec"].get("replicatedJobs") or [])
            changed = not raw["spec"].get("suspend")
            for rj in rjs:
                want = templates.get(rj.get("name"))
                if want is None:
                    continue
                want_raw = want.to_dict()
                want_meta = want_raw.get("metadata") or {}
                want_spec = want_raw.get("spec") or {}
                pod = (
                    rj.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {})
                )
                meta = pod.setdefault("metadata", {})
                spec = pod.setdefault("spec", {})
                before = copy.deepcopy(pod)
                _set_or_drop(meta, "labels", dict(want_meta.get("labels") or {}))
                _set_or_drop(meta, "annotations", dict(want_meta.get("annotations") or {}))
                for field in ("nodeSelector", "tolerations", "schedulingGates"):
                    _set_or_drop(spec, field, want_spec.get(field))
                changed = changed or pod != before
            if not changed:
                return None
            return {"spec": {"suspend": True, "replicatedJobs": rjs}}

        await self._patch_jobset_retrying(key, build)

    # -- MPIJobs -------------------------------------------------------------------------
    # mpiReplicaSpecs is a map: each write is a merge patch of the replica types' pod
    # templates alone, with null for what must go, under the MPIJob's resourceVersion.
    async def suspend_mpijob(self, key: str) -> None:
        await self._patch_custom_retrying(
            _MPIJOBS,
            key,
            lambda raw: None if _mpijob_suspended(raw) else _mpijob_patch(True, {}),
        )

    async def start_mpijob(self, key: str, plans: Mapping[str, TemplateStart]) -> None:
        def build(raw: dict[str, Any]) -> dict[str, Any] | None:
            if not _mpijob_suspended(raw):
                return None
            pods = {
                t: _template_patch(
                    _replica_template(raw, t),
                    labels=plan.labels,
                    annotations=plan.annotations,
                    node_selector=plan.node_selector,
                    tolerations=[tol.to_dict() for tol in plan.tolerations],
                    gates=[{"name": g} for g in plan.scheduling_gates],
                )
                for t, plan in plans.items()
            }
            return _mpijob_patch(False, pods)

        await self._patch_custom_retrying(_MPIJOBS, key, build)

    async def stop_mpijob(self, key: str, templates: Mapping[str, PodTemplateSpec]) -> None:
        """Suspend and restore every replica type's pod template from the Workload in one
        write, as Kueue's stop does for MPIJobs."""

        def build(raw: dict[str, Any]) -> dict[str, Any] | None:
            pods = {}
            for t, want in templates.items():
                want_raw = want.to_dict()
                meta = want_raw.get("metadata") or {}
                spec = want_raw.get("spec") or {}
                patch = _template_patch(
                    _replica_template(raw, t),
                    labels=meta.get("labels") or {},
                    annotations=meta.get("annotations") or {},
                    node_selector=spec.get("nodeSelector") or {},
                    tolerations=spec.get("tolerations") or [],
                    gates=spec.get("schedulingGates") or [],
                )
                if patch:
                    pods[t] = patch
            if _mpijob_suspended(raw) and not pods:
                return None
            return _mpijob_patch(True, pods)

        await self._patch_custom_retrying(_MPIJOBS, key, build)

    # -- TrainJobs -----------------------------------------------------------------------
    # Trainer v2.0 accepts override changes only while the TrainJob is suspended, before and
    # after the change: a start writes the overrides first, still suspended, then unsuspends;
    # a stop suspends first, then cuts them.
    async def suspend_trainjob(self, key: str) -> None:
        await self._patch_custom_retrying(
            _TRAINJOBS,
            key,
            lambda raw: None if raw["spec"].get("suspend") else {"spec": {"suspend": True}},
        )

    async def start_trainjob(self, key: str, overrides: Sequence[Mapping[str, Any]]) -> None:
        def add(raw: dict[str, Any]) -> dict[str, Any] | None:
            if not raw["spec"].get("suspend"):
                return None
            current = raw["spec"].get("podSpecOverrides") or []
            recorded = _recorded_overrides(raw)
            merged, first, users = trainer_rules.started_overrides(
                current, _override_index(raw), overrides, recorded
            )
            if merged == current and _override_index(raw) == first and users == recorded:
                return None
            annotations = {
                trainjob.OVERRIDE_IDX_ANNOTATION: str(first),
                trainjob.USER_OVERRIDES_ANNOTATION: None if users is None else json.dumps(users),
            }
            return {"metadata": {"annotations": annotations}, "spec": {"podSpecOverrides": merged}}

        def unsuspend(raw: dict[str, Any]) -> dict[str, Any] | None:
            if not raw["spec"].get("suspend") or _override_index(raw) is None:
                return None
            return {"spec": {"suspend": False}}

        await self._patch_custom_retrying(_TRAINJOBS, key, add)
        await self._patch_custom_retrying(_TRAINJOBS, key, unsuspend)

    async def stop_trainjob(self, key: str) -> None:
        await self.suspend_trainjob(key)

        def build(raw: dict[str, Any]) -> dict[str, Any] | None:
            index = _override_index(raw)
            if index is None:
                return None
            current = raw["spec"].get("podSpecOverrides") or []
            restored = trainer_rules.stopped_overrides(current, index, _recorded_overrides(raw))
            annotations = {
                trainjob.OVERRIDE_IDX_ANNOTATION: None,
                trainjob.USER_OVERRIDES_ANNOTATION: None,
            }
            return {
                "metadata": {"annotations": annotations},
                "spec": {"podSpecOverrides": restored},
            }

        await self._patch_custom_retrying(_TRAINJOBS, key, build)

    # -- pods -----------------------------------------------------------------------------
    async def ungate_pod(
        self, key: str, node_selector: Mapping[str, str], gates: tuple[str, ...]
    ) -> None:
        body = {
            "spec": {
                "nodeSelector": dict(node_selector),
                "schedulingGates": [{"name": g} for g in gates],
            }
        }
        await self._patch_pod(key, body)

    async def _patch_pod(self, key: str, body: dict[str, Any]) -> None:
        """Merge-patch the pod (gone already is fine)."""
        ns, name = _split(key)
        try:
            await self._send(
                "patch", "pods", "PATCH", PODS.path(ns, name), body, content_type=MERGE
            )
        except ApiError as e:
            if e.status != 404:
                raise

    async def start_pod(self, key: str, plan: TemplateStart) -> None:
        """Ungate a plain pod with its admission merged in (labels and annotations may
        change at any time; nodeSelector and tolerations may be added while it is gated)."""
        body = {
            "metadata": {"labels": dict(plan.labels), "annotations": dict(plan.annotations)},
            "spec": {
                "nodeSelector": dict(plan.node_selector) or None,
                "tolerations": [t.to_dict() for t in plan.tolerations] or None,
                "schedulingGates": [{"name": g} for g in plan.scheduling_gates] or None,
            },
        }
        await self._patch_pod(key, body)

    async def delete_pod(self, key: str) -> None:
        """Delete a pod its controller recreates (gone already is fine)."""
        ns, name = _split(key)
        try:
            await self._send("delete", "pods", "DELETE", PODS.path(ns, name))
        except ApiError as e:
            if e.status != 404:
                raise

    async def mark_termination_target(self, key: str, reason: str, message: str) -> None:
        """Set the pod's `TerminationTarget` condition (a strategic merge of its status
        conditions, by type; a pod gone is fine)."""
        ns, name = _split(key)
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition = {
            "type": podgroups.TERMINATION_TARGET,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
        }
        body = {"status": {"conditions": [condition]}}
        try:
            path = PODS.path(ns, name, "status")
            await self._send("patch", "pods/status", "PATCH", path, body, content_type=STRATEGIC)
        except ApiError as e:
            if e.status != 404:
                raise

    async def remove_pod_finalizer(self, key: str, finalizer: str) -> None:
        """Remove `finalizer` from the pod in one strategic merge patch
        (`$deleteFromPrimitiveList`: only that entry goes, whatever else the list holds, so
        neither a read nor a resourceVersion guard is needed); a pod gone, or without the
        finalizer, is left alone."""
        ns, name = _split(key)
        body = {"metadata": {"$deleteFromPrimitiveList/finalizers": [finalizer]}}
        try:
            await self._send(
                "patch", "pods", "PATCH", PODS.path(ns, name), body, content_type=STRATEGIC
            )
        except ApiError as e:
            if e.status != 404:
                raise

    async def add_workload_owners(self, key: str, owners: Sequence[OwnerReference]) -> None:
        """Append the owner references the Workload lacks (by uid), guarded by its
        resourceVersion (a Workload gone is left alone)."""
        for _ in range(_RETRIES):
            try:
                raw = await self._get_workload(key)
            except NotFoundError:
                return
            meta = raw.get("metadata", {})
            refs = list(meta.get("ownerReferences") or [])
            have = {r.get("uid") for r in refs}
            new = [o.to_dict() for o in owners if o.uid not in have]
            if not new:
                return
            body = {
                "metadata": {
                    "ownerReferences": refs + new,
                    "resourceVersion": meta["resourceVersion"],
                }
            }
            try:
                await self._patch_workload(key, body)
                return
            except NotFoundError:
                return
            except ApiError as e:
                if e.status != 409:
                    raise
        raise RuntimeError(f"workload {key}: owner update kept conflicting")

    # -- queue status ---------------------------------------------------------------------
    async def write_cluster_queue_status(self, name: str, status: ClusterQueueStatus) -> None:
        path = CLUSTER_QUEUES.path(None, name, "status")
        await self._send(
            "patch",
            "clusterqueues/status",
            "PATCH",
            path,
            {"status": status.to_dict()},
            content_type=MERGE,
        )

    async def write_local_queue_status(
        self, key: str, status: LocalQueueStatus, before: LocalQueueStatus | None = None
    ) -> None:
        ns, name = _split(key)
        path = LOCAL_QUEUES.path(ns, name, "status")
        new = status.to_dict()
        # a merge patch keeps the map keys it does not name: remove those `status` dropped
        body = new if before is None else with_deletions(before.to_dict(), new)
        await self._send(
            "patch",
            "localqueues/status",
            "PATCH",
            path,
            {"status": body},
            content_type=MERGE,
        )

    # -- events ---------------------------------------------------------------------------
    async def emit(self, ref: ObjectRef, type_: str, reason: str, message: str) -> None:
        """Queue an Event; `send_events` posts them with the API budget the writes leave
        spare. An Event never delays a decision: when the queue is full it is dropped."""
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "metadata": {"generateName": f"{ref.name}.", "namespace": ref.namespace or "default"},
            "involvedObject": {
                "kind": ref.kind,
                "apiVersion": ref.api_version,
                "namespace": ref.namespace,
                "name": ref.name,
                "uid": ref.uid,
            },
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self._events.put_nowait(body)
        except asyncio.QueueFull:
            self.events_dropped += 1

    @property
    def _spare(self) -> float:
        """Tokens left to the writes that matter when a best-effort request may go: half the
        burst of the budget."""
        return self.limiter.burst / 2

    async def wait_spare(self) -> None:
        """Until a best-effort request (an Event, a pending status) may go without delaying
        the others; the request then takes its own token."""
        await self.limiter.wait_spare(reserve=self._spare)

    async def send_events(self) -> None:
        """Forever: post queued Events, only while half the burst of the budget is spare.
        An Event is best effort: one that cannot be posted is logged and dropped, and no
        failure ends this loop."""
        while True:
            body = await self._events.get()
            await self.limiter.acquire_spare(reserve=self._spare)
            ns = body["metadata"]["namespace"]

            async def post(ns: str = ns, body: dict[str, Any] = body) -> None:
                started = time.perf_counter()  # each try counts as one request
                try:
                    await self.rest.request("POST", EVENTS.path(ns), body)
                except ApiException as e:
                    self._count("create", str(e.status), "events", started)
                    raise
                except Exception:
                    self._count("create", "error", "events", started)
                    raise
                self._count("create", "200", "events", started)

            try:
                await retry.call(post, what="create event", attempts=_EVENT_ATTEMPTS)
            except Exception as e:
                self.events_dropped += 1
                log.warning("event not recorded", reason=body["reason"], error=retry.describe(e))
