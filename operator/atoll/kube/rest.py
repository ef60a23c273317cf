"""Requests to the API server on kubernetes_asyncio's own session and credentials, without its
per-call machinery.

Every call through a generated API method (`CustomObjectsApi.patch_…`) walks the parameters
and the body through `sanitize_for_serialization`, builds tuples of them, encodes the body with
`json.dumps` and, unless told not to, decodes the answer into models: about a seventh of the
operator's CPU under load went there (py-spy, `bench/kueue_baseline/jobs.py --profile`), for
requests whose path and body atoll already has as plain JSON. `Rest` sends them directly on the
client's aiohttp session (the same TLS context, connection pool, proxy and server name) with
the same credentials (`Configuration.auth_settings`, which refreshes an expiring token), encodes
bodies with orjson and returns the answer's bytes. A refusal is the `ApiException` the generated
methods raise (`read_ok`), so callers and `retry` see no difference.

Paths: `Resource.path` builds the REST path of any object or collection from its group, version,
namespace, plural and name (`Resource` holds the group, version and plural of a kind).

Collections are read a page at a time (`Rest.pages`, `Rest.list`), as client-go's pager and
reflector read them: `limit` objects per request, then the rest from the answer's `continue`
token, so that at most a page of a collection's text and decoded objects is held at once (a
LIST of 10,000 Workloads answered and decoded at once held them all twice over).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar
from urllib.parse import quote, urlencode

import aiohttp
import orjson
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.client.rest import RESTResponse

T = TypeVar("T")
Listed: TypeAlias = tuple[list[T], str]
"""The objects of a LIST and the list's resourceVersion."""
JSON = "application/json"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
PAGE = 500
"""Objects per LIST page (client-go's pager asks for as many)."""
LIST_TIMEOUT_S = 60
"""Bound of one LIST request (a page, or a whole collection)."""


def decode(data: bytes) -> Any:
    """JSON text from the API server as Python objects, with orjson: decoding the watch
    streams (every pod, Job and Workload event) was the operator's biggest single CPU cost
    under load after the socket writes, and orjson does it faster than `json`. It reads
    what `json` reads for everything the API server sends: the API server holds JSON
    numbers as int64 or float64 (a longer integer is stored as a float), and orjson reads
    every int64 exactly (it would read a longer integer as a float). Text orjson refuses (a
    lone surrogate, a number beyond a double) is read with `json`; invalid JSON raises
    `json.JSONDecodeError` either way."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


async def read_ok(resp: aiohttp.ClientResponse) -> bytes:
    """The body of a response left unread; an `ApiException` (as
    kubernetes_asyncio raises) when its status is not 2xx."""
    data = await resp.read()
    if not 200 <= resp.status <= 299:
        raise ApiException(http_resp=RESTResponse(resp, data))  # type: ignore[arg-type]
    return data


def encode(body: Any) -> bytes:
    """`body` as JSON bytes: orjson, or `json` for what orjson refuses (an integer beyond 64
    bits)."""
    try:
        return orjson.dumps(body)
    except TypeError:
        return json.dumps(body, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class Resource:
    """Where objects of one kind live: `group` "" is the core API (`/api/v1`)."""

    group: str
    version: str
    plural: str

    def __str__(self) -> str:
        return f"{self.plural}.{self.group or 'core'}"

    def path(self, namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
        """The REST path of the collection (no `name`; no `namespace`: of every namespace),
        of one object, or of its subresource `sub` (`status`)."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
            if sub:
                base += f"/{sub}"
        return base


WORKLOADS = Resource("kueue.x-k8s.io", "v1beta2", "workloads")
CLUSTER_QUEUES = Resource("kueue.x-k8s.io", "v1beta2", "clusterqueues")
LOCAL_QUEUES = Resource("kueue.x-k8s.io", "v1beta2", "localqueues")
JOBS = Resource("batch", "v1", "jobs")
PODS = Resource("", "v1", "pods")
EVENTS = Resource("", "v1", "events")
NAMESPACES = Resource("", "v1", "namespaces")
SECRETS = Resource("", "v1", "secrets")
LEASES = Resource("coordination.k8s.io", "v1", "leases")
MUTATING_WEBHOOKS = Resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")


class Rest:
    """Plain requests on `api`'s session (see the module's docstring)."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api

    async def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": JSON, "User-Agent": str(self.api.user_agent)}
        if content_type:
            headers["Content-Type"] = content_type
        # the client's own rule for credentials: a bearer token (refreshed by the
        # configuration's hook when it expires); client certificates are in the session
        auth = (await self.api.configuration.auth_settings()).get("BearerToken")
        if auth:
            headers[auth["key"]] = auth["value"]
        return headers

    async def send(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = JSON,
        query: list[tuple[str, Any]] | None = None,
        limit: aiohttp.ClientTimeout | float | None = None,
    ) -> aiohttp.ClientResponse:
        """The response, unread: the caller reads it (`read_ok`) or streams it. `limit`: an
        aiohttp timeout, or seconds for the whole request (none by default)."""
        rest = self.api.rest_client
        url = self.api.configuration.host + path
        if query:
            url += "?" + urlencode(query)
        args: dict[str, Any] = {
            "headers": await self._headers(content_type if body is not None else None),
            "timeout": limit
            if isinstance(limit, aiohttp.ClientTimeout)
            else aiohttp.ClientTimeout(total=limit),
        }
        if body is not None:
            args["data"] = encode(body)
        if rest.proxy:
            args["proxy"] = rest.proxy
            if rest.proxy_headers:
                args["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            args["server_hostname"] = rest.server_hostname
        resp: aiohttp.ClientResponse = await rest.pool_manager.request(method, url, **args)
        return resp

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = JSON,
        query: list[tuple[str, Any]] | None = None,
        limit: aiohttp.ClientTimeout | float | None = None,
    ) -> bytes:
        """The answer's body; an `ApiException` when the status is not 2xx."""
        resp = await self.send(
            method, path, body, content_type=content_type, query=query, limit=limit
        )
        return await read_ok(resp)

    async def pages(
        self, resource: Resource, query: Sequence[tuple[str, Any]] = (), *, page: int = PAGE
    ) -> AsyncIterator[dict[str, Any]]:
        """Each page of a LIST of every `resource` object (all namespaces; `query` adds
        selectors), decoded: at most `page` objects each (0: the whole collection in one),
        the next one asked for with the last one's `metadata.continue` token until a page
        has none. Every page is read at the first one's resourceVersion, so the last page's
        `metadata.resourceVersion` is the list's. A continue token the API server no longer
        honours (its resourceVersion compacted away between two pages) is refused with
        `ApiException` 410."""
        cont: str | None = None
        while True:
            asked = [*query, ("limit", page)] if page else [*query]
            if cont:
                asked.append(("continue", cont))
            body: dict[str, Any] = decode(
                await self.request("GET", resource.path(None), query=asked, limit=LIST_TIMEOUT_S)
            )
            cont = (body.get("metadata") or {}).get("continue")
            yield body
            del body  # not held while the next page is read
            if not cont:
                return

    async def list(
        self,
        resource: Resource,
        parse: Callable[[dict[str, Any]], T | None],
        *,
        page: int = PAGE,
    ) -> Listed[T]:
        """Every object of `resource` (all namespaces), each through `parse` as its page
        arrives (None: left out), so that only one page of raw objects is held at a time;
        and the list's resourceVersion. When a continue token has expired (410 between two
        pages), what was parsed is dropped and the collection read again in one LIST, as
        client-go's pager falls back to a full list."""
        try:
            return await self._list(resource, parse, page)
        except ApiException as e:
            if e.status != 410 or not page:
                raise
        return await self._list(resource, parse, 0)

    async def _list(
        self, resource: Resource, parse: Callable[[dict[str, Any]], T | None], page: int
    ) -> Listed[T]:
        items: list[T] = []
        version = ""
        async for body in self.pages(resource, page=page):
            for item in body.get("items") or ():
                parsed = parse(item)
                if parsed is not None:
                    items.append(parsed)
            version = str((body.get("metadata") or {}).get("resourceVersion") or "")
        return items, version


def raw(obj: dict[str, Any]) -> dict[str, Any]:
    """`Rest.list`'s `parse` that keeps each object as the API server sent it."""
    return obj
