"""atoll's own list-and-watch loop (`atoll.kube.watch`) against the sandbox API server:
listed objects, then ADDED / MODIFIED / DELETED in order; a start at a known
resourceVersion lists nothing; a re-list reports what vanished meanwhile as DELETED."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from kubernetes_asyncio import client

from atoll.kube import watch as w

pytestmark = pytest.mark.cluster


def _cm(namespace: str, name: str, value: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "data": {"v": value}}


class Seen:
    """What the handler saw of one namespace's ConfigMaps: (type, name, data.v)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.events: list[tuple[str | None, str, str | None]] = []
        self.keys: set[str] = set()

    def __call__(self, type_: str | None, obj: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        if meta.get("namespace") != self.namespace:
            return
        key = w.object_key(obj)
        (self.keys.discard if type_ == "DELETED" else self.keys.add)(key)
        self.events.append((type_, meta["name"], (obj.get("data") or {}).get("v")))

    async def until(self, n: int) -> None:
        deadline = time.monotonic() + 30
        while len(self.events) < n:
            assert time.monotonic() < deadline, f"saw only {self.events}"
            await asyncio.sleep(0.05)


def _watches(seen: Seen, *, known: bool = True) -> w.Watches:
    watches = w.Watches()
    watches.on("", "v1", "configmaps", seen, known=lambda: list(seen.keys) if known else ())
    return watches


@contextlib.asynccontextmanager
async def running(watches: w.Watches, api: client.ApiClient) -> AsyncIterator[None]:
    task = asyncio.create_task(watches.run(api))
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_loop_lists_then_streams_every_change_in_order(
    api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_config_map(namespace, _cm(namespace, "a"))
    seen = Seen(namespace)
    async with running(_watches(seen), api):
        await seen.until(1)
        assert seen.events == [(None, "a", "1")]
        await core.create_namespaced_config_map(namespace, _cm(namespace, "b"))
        await core.patch_namespaced_config_map("b", namespace, {"data": {"v": "2"}})
        await core.delete_namespaced_config_map("a", namespace)
        await seen.until(4)
        assert seen.events[1:] == [
            ("ADDED", "b", "1"),
            ("MODIFIED", "b", "2"),
            ("DELETED", "a", "1"),
        ]
        assert seen.keys == {f"{namespace}/b"}


async def test_a_relist_reports_what_vanished_and_a_known_version_lists_nothing(
    api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_config_map(namespace, _cm(namespace, "kept"))
    seen = Seen(namespace)
    seen.keys = {f"{namespace}/kept", f"{namespace}/vanished"}
    (one,) = _watches(seen).watches.values()
    await w._list(api, one)
    assert (None, "kept", "1") in seen.events
    assert ("DELETED", "vanished", None) in seen.events
    assert seen.keys == {f"{namespace}/kept"}
    listed_at = one.resource_version
    assert listed_at

    after = Seen(namespace)
    later = _watches(after, known=False)
    later.start_at("", "v1", "configmaps", listed_at)
    async with running(later, api):
        await core.create_namespaced_config_map(namespace, _cm(namespace, "new"))
        await after.until(1)
        assert after.events == [("ADDED", "new", "1")]  # started at the listed version: no LIST
