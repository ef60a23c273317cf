"""Plain list-and-watch loops for the busiest kinds, without kopf's per-event machinery.

kopf handles each event through its causes, diff-base, per-object loggers and a deep copy of
the body: most of the operator's CPU under load went there (py-spy, `make bench-kueue
BENCH_ARGS=--profile`). A `Watches` registry runs one loop per registered resource instead:
LIST (a page at a time: `Rest.pages`) then WATCH from the list's resourceVersion with
bookmarks, decode each line (`decode`: orjson) and call the handler with the event type and
the raw object. The loop starts at a resourceVersion the initial listing already read
(`start_at`, so the start-up LIST is not repeated), re-lists on `410 Gone` (also a continue
token that expired between two pages) (objects that disappeared meanwhile get a
synthesized DELETED event carrying only their namespace and name) and retries any failure
with `retry.DEFAULT`'s backoff, forever: a watch outlives API server outages.

Handlers are plain functions: they run on the event loop, between two reads of the stream.
To watch another kind, register it with `Watches.on` (see `handlers.register_watches`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from atoll.kube import retry
from atoll.kube.rest import Resource, Rest, decode, read_ok

log = structlog.get_logger("atoll.watch")

Handler = Callable[[str | None, Mapping[str, Any]], None]
"""Called with the event type (None for an object of a LIST, else ADDED, MODIFIED or
DELETED) and the object as the API server sent it."""

SERVER_TIMEOUT_S = 300
"""The API server ends each WATCH after this long; the loop then watches again."""
READ_TIMEOUT_S = SERVER_TIMEOUT_S + 30


class GoneError(Exception):
    """The resourceVersion the watch started from is too old: list again."""


def object_key(obj: Mapping[str, Any]) -> str:
    """`namespace/name` (`name` for a cluster-scoped object), as the cache keys objects."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name', '')}" if ns else str(meta.get("name", ""))


def _stub(key: str) -> dict[str, Any]:
    ns, _, name = key.rpartition("/")
    meta = {"namespace": ns, "name": name} if ns else {"name": name}
    return {"metadata": meta}


@dataclass(slots=True)
class Watch:
    """One resource's loop state."""

    resource: Resource
    handler: Handler
    known: Callable[[], Iterable[str]]
    """Keys (`object_key`) of the objects the handler holds: after a re-list, those the
    list lacks are reported DELETED."""
    resource_version: str | None = None
    events: int = 0
    field_selector: str | None = None
    """Only the objects it selects (e.g. `metadata.name=X` for one object)."""


@dataclass(slots=True)
class Watches:
    """The resources watched without kopf, each with its handler."""

    watches: dict[Resource, Watch] = field(default_factory=dict)

    def on(
        self,
        group: str,
        version: str,
        plural: str,
        handler: Handler,
        *,
        known: Callable[[], Iterable[str]],
        field_selector: str | None = None,
    ) -> None:
        resource = Resource(group, version, plural)
        existing = self.watches.get(resource)
        if existing is None:
            self.watches[resource] = Watch(resource, handler, known, field_selector=field_selector)
            return
        # a second reader of the same resource (the JobSets of the JobSet integration and
        # those Trainer made for TrainJobs): one loop, each event to both, in order
        if existing.field_selector != field_selector:
            raise ValueError(f"{resource} is watched twice with different selectors")
        first, first_known = existing.handler, existing.known

        def both(type: str | None, body: Mapping[str, Any]) -> None:
            for each in (first, handler):
                try:
                    each(type, body)
                except Exception as e:  # one reader's failure never hides the event from another
                    log.exception(
                        "watch handler failed", resource=str(resource), object=object_key(body),
                        error=e,
                    )  # fmt: skip

        existing.handler = both
        existing.known = lambda: {*first_known(), *known()}

    def start_at(self, group: str, version: str, plural: str, resource_version: str) -> None:
        """The initial listing already handed every object to the cache: watch from there."""
        watch = self.watches.get(Resource(group, version, plural))
        if watch is not None and resource_version:
            watch.resource_version = resource_version

    async def run(self, api: client.ApiClient) -> None:
        """Every loop, until cancelled."""
        async with asyncio.TaskGroup() as tg:
            for watch in self.watches.values():
                tg.create_task(_loop(api, watch))


async def _loop(api: client.ApiClient, watch: Watch) -> None:
    failures = 0
    while True:
        try:
            if watch.resource_version is None:
                await _list(api, watch)
            await _stream(api, watch)
            failures = 0
        except GoneError:
            watch.resource_version = None
        except asyncio.CancelledError:
            raise
        except Exception as e:
            failures += 1
            if failures & (failures - 1) == 0:
                log.warning("watch failed, retrying", resource=str(watch.resource), error=_why(e))
            await asyncio.sleep(retry.DEFAULT.delay(failures))


def _why(e: BaseException) -> str:
    if isinstance(e, ApiException | aiohttp.ClientError | OSError | TimeoutError):
        return retry.describe(e)
    return f"{type(e).__name__}: {e}"[:300]


async def _get(
    api: client.ApiClient, path: str, query: list[tuple[str, Any]], *, limit: Any
) -> aiohttp.ClientResponse:
    resp = await Rest(api).send("GET", path, query=query, limit=limit)
    if resp.status == 410:
        resp.release()
        raise GoneError()
    if not 200 <= resp.status <= 299:
        await read_ok(resp)
    return resp


def _selector(watch: Watch) -> list[tuple[str, Any]]:
    return [("fieldSelector", watch.field_selector)] if watch.field_selector else []


async def _list(api: client.ApiClient, watch: Watch) -> None:
    seen: set[str] = set()
    meta: dict[str, Any] = {}
    try:
        async for body in Rest(api).pages(watch.resource, _selector(watch)):
            for item in body.get("items") or ():
                seen.add(object_key(item))
                _handle(watch, None, item)
            meta = body.get("metadata") or {}
    except ApiException as e:
        if e.status == 410:  # a continue token expired: list again from the start
            raise GoneError() from e
        raise
    for key in [k for k in watch.known() if k not in seen]:
        _handle(watch, "DELETED", _stub(key))
    watch.resource_version = str(meta.get("resourceVersion") or "") or None
    if watch.resource_version is None:
        raise RuntimeError(f"LIST {watch.resource} returned no resourceVersion")


async def _stream(api: client.ApiClient, watch: Watch) -> None:
    query: list[tuple[str, Any]] = [
        ("watch", "true"),
        ("allowWatchBookmarks", "true"),
        ("resourceVersion", watch.resource_version),
        ("timeoutSeconds", SERVER_TIMEOUT_S),
        *_selector(watch),
    ]
    timeout = aiohttp.ClientTimeout(connect=30, sock_connect=30, sock_read=READ_TIMEOUT_S)
    resp = await _get(api, watch.resource.path(None), query, limit=timeout)
    try:
        buffer = b""
        async for chunk in resp.content.iter_any():
            buffer += chunk
            if b"\n" not in chunk:
                continue
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line:
                    _event(watch, decode(line))
        if buffer.strip():
            _event(watch, decode(buffer))
    finally:
        resp.release()


def _event(watch: Watch, event: Mapping[str, Any]) -> None:
    kind = event.get("type")
    obj = event.get("object") or {}
    if kind == "ERROR":
        if obj.get("code") == 410:
            raise GoneError()
        raise ApiException(status=obj.get("code") or 0, reason=str(obj.get("message", "")))
    version = (obj.get("metadata") or {}).get("resourceVersion")
    if version:
        watch.resource_version = str(version)
    if kind == "BOOKMARK":
        return
    watch.events += 1
    _handle(watch, kind, obj)


def _handle(watch: Watch, kind: str | None, obj: Mapping[str, Any]) -> None:
    try:
        watch.handler(kind, obj)
    except Exception as e:  # one bad object never stops the watch
        log.exception(
            "watch handler failed", resource=str(watch.resource), object=object_key(obj), error=e
        )
