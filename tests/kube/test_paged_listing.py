"""Collections read a page at a time (`Rest.pages`, `Rest.list`, the watch loop's LIST and the
initial listing), against a small HTTP server on the loopback address (`tests.kube.loopback`)
that pages as the API server does: `limit` objects per answer, a `continue` token for the
rest, and (when told to) 410 Gone for a continue token, as for one whose resourceVersion was
compacted away."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client

from atoll.api.configuration import Configuration
from atoll.api.workload import Workload
from atoll.engine.decisions import PendingReason
from atoll.kube import bootstrap
from atoll.kube.handlers import Parsers
from atoll.kube.operator import Operator, RunOptions
from atoll.kube.rest import PAGE, WORKLOADS, Rest, raw
from atoll.kube.watch import GoneError, Watch, _list
from atoll.state import lifecycle
from atoll.state.cache import Cache
from tests.api.builders import pod_set, workload
from tests.kube.loopback import serve


@dataclass
class Api:
    """What the server serves (objects by collection path) and what it was asked."""

    host: str = ""
    collections: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    expire_continue: bool = False
    asked: list[dict[str, str]] = field(default_factory=list)


@pytest.fixture
async def api_server() -> AsyncIterator[Api]:
    served = Api()

    async def handle(request: web.Request) -> web.Response:
        query = dict(request.query)
        served.asked.append({"method": request.method, "path": request.path, **query})
        if request.method == "PATCH":
            return web.json_response({"metadata": {"resourceVersion": "43"}})
        if "continue" in query and served.expire_continue:
            status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
            return web.json_response(status, status=410)
        items = served.collections.get(request.path, [])
        start = int(query.get("continue", "0"))
        limit = int(query["limit"]) if "limit" in query else len(items)
        page = items[start : start + limit]
        meta = {"resourceVersion": "42"}
        if start + limit < len(items):
            meta["continue"] = str(start + limit)
        return web.json_response({"kind": "List", "metadata": meta, "items": page})

    async with serve(handle) as served.host:
        yield served


def _objects(n: int) -> list[dict[str, Any]]:
    return [{"metadata": {"namespace": "ns", "name": f"o{i}"}} for i in range(n)]


def _names(objs: list[Mapping[str, Any]]) -> list[str]:
    return [o["metadata"]["name"] for o in objs]


async def test_pages_follow_the_continue_token_until_the_last_page(api_server: Api) -> None:
    api_server.collections[WORKLOADS.path(None)] = _objects(7)
    async with client.ApiClient(client.Configuration(host=api_server.host)) as api:
        pages = [p async for p in Rest(api).pages(WORKLOADS, page=3)]
    assert [_names(p["items"]) for p in pages] == [
        ["o0", "o1", "o2"],
        ["o3", "o4", "o5"],
        ["o6"],
    ]
    assert [(a.get("limit"), a.get("continue")) for a in api_server.asked] == [
        ("3", None),
        ("3", "3"),
        ("3", "6"),
    ]


async def test_list_parses_each_object_as_its_page_comes_and_gives_the_lists_version(
    api_server: Api,
) -> None:
    api_server.collections[WORKLOADS.path(None)] = _objects(PAGE + 2)

    def odd(obj: dict[str, Any]) -> str | None:
        name: str = obj["metadata"]["name"]
        return name if int(name[1:]) % 2 else None  # None: left out

    async with client.ApiClient(client.Configuration(host=api_server.host)) as api:
        names, version = await Rest(api).list(WORKLOADS, odd)
    assert names == [f"o{i}" for i in range(1, PAGE + 2, 2)]
    assert version == "42"
    assert [a["limit"] for a in api_server.asked] == [str(PAGE), str(PAGE)]


async def test_an_expired_continue_token_reads_the_collection_again_in_one_list(
    api_server: Api,
) -> None:
    api_server.collections[WORKLOADS.path(None)] = _objects(5)
    api_server.expire_continue = True
    async with client.ApiClient(client.Configuration(host=api_server.host)) as api:
        objs, version = await Rest(api).list(WORKLOADS, raw, page=2)
    # the first page's objects are not kept twice: only the full list's
    assert _names(objs) == ["o0", "o1", "o2", "o3", "o4"]
    assert version == "42"
    asked = [(a.get("limit"), a.get("continue")) for a in api_server.asked]
    assert asked == [("2", None), ("2", "2"), (None, None)]


async def test_the_watch_loop_lists_every_page_and_lists_again_when_a_token_expires(
    api_server: Api,
) -> None:
    api_server.collections[WORKLOADS.path(None)] = _objects(PAGE + 1)
    seen: list[tuple[str | None, str]] = []
    watch = Watch(
        WORKLOADS,
        lambda kind, obj: seen.append((kind, obj["metadata"]["name"])),
        known=lambda: ["ns/gone"],
    )
    async with client.ApiClient(client.Configuration(host=api_server.host)) as api:
        await _list(api, watch)
        assert len(seen) == PAGE + 2
        assert seen[-1] == ("DELETED", "gone")  # known, but on no page
        assert watch.resource_version == "42"
        api_server.expire_continue = True
        with pytest.raises(GoneError):
            await _list(api, watch)


async def test_the_initial_listing_shares_equal_templates_across_pages_and_with_the_watch(
    api_server: Api,
) -> None:
    listed = []
    for i in range(PAGE + 3):
        body = workload(name=f"w{i}", pod_sets=[pod_set(count=1)], queueName="q")
        body["metadata"] |= {"uid": f"u{i}", "generation": 1, "resourceVersion": str(i + 1)}
        listed.append(body)
    api_server.collections[WORKLOADS.path(None)] = listed
    cache, parsers = Cache(), Parsers()
    async with client.ApiClient(client.Configuration(host=api_server.host)) as api:
        counts = await bootstrap.load(api, cache, attempts=1, parsers=parsers)
    assert counts["workloads"] == PAGE + 3
    wls = list(cache.workloads.values())
    assert [w.name for w in wls] == [f"w{i}" for i in range(PAGE + 3)]
    first = wls[0].spec.pod_sets[0].template
    assert all(w.spec.pod_sets[0].template is first for w in wls)
    assert wls[-1] == Workload.from_dict(listed[-1])  # the same Workload as a full parse
    later = workload(name="new", pod_sets=[pod_set(count=1)], queueName="q")
    seen = parsers.workload(later)  # as the Workload watch parses one created later
    assert seen is not None
    assert seen.spec.pod_sets[0].template is first


async def test_a_restarted_operator_writes_a_listed_workloads_status_without_reading_it(
    api_server: Api,
) -> None:
    """The writer takes each listed Workload as the base of its next status write, as it
    takes one seen on the watch: no GET (and no second parse held) per Workload."""
    body = workload(name="w", pod_sets=[pod_set(count=1)], queueName="q")
    body["metadata"] |= {"uid": "u", "generation": 1, "resourceVersion": "5"}
    api_server.collections[WORKLOADS.path(None)] = [body]
    opts = RunOptions(configuration=Configuration(), webhook="off", leader_elect=False)
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    pending = lifecycle.pending(PendingReason.WAITING_FOR_QUOTA, "no quota", now)
    async with client.ApiClient(client.Configuration(host=api_server.host)) as api:
        op = Operator(opts, api)
        await op._start()
        api_server.asked.clear()
        written = await op.writer.update_workload_status("default/w", pending)
    assert written is not None
    assert [(a["method"], a["path"]) for a in api_server.asked] == [
        ("PATCH", WORKLOADS.path("default", "w", "status"))
    ]
