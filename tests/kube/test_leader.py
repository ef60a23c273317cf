"""Leader election on a fake API server (the requests `Rest` sends): a missing namespace is
created or named, a lost lease makes the replica follow and compete again (never exit),
readiness follows."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from atoll.kube.leader import LeaderElector, LeaseSettings

LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/lease-ns/leases"


class FakeApi:
    """The API server's Lease requests and namespace creation, as `Rest.request` sends
    them (method and path; bytes back)."""

    def __init__(self, *, namespace_exists: bool = True, may_create_namespace: bool = True) -> None:
        self.lease: dict[str, Any] | None = None
        self.namespace_exists = namespace_exists
        self.may_create_namespace = may_create_namespace
        self.down = False

    async def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "", limit: Any = None
    ) -> bytes:
        del content_type
        assert limit == 0.2, "each Lease request is bounded by the renew deadline"
        if self.down:
            raise ConnectionResetError("connection reset by peer")
        match method, path:
            case "GET", p if p == f"{LEASE_PATH}/lease":
                if self.lease is None:
                    raise ApiException(status=404, reason="Not Found")
                return json.dumps(self.lease).encode()
            case "POST", p if p == LEASE_PATH:
                if not self.namespace_exists:
                    raise ApiException(status=404, reason="namespaces lease-ns not found")
                if self.lease is not None:
                    raise ApiException(status=409, reason="Conflict")
                self.lease = copy.deepcopy(body)
            case "PUT", p if p == f"{LEASE_PATH}/lease":
                self.lease = copy.deepcopy(body)
            case "POST", "/api/v1/namespaces":
                if not self.may_create_namespace:
                    raise ApiException(status=403, reason="Forbidden")
                self.namespace_exists = True
            case _:
                raise AssertionError(f"unexpected request {method} {path}")
        return b"{}"


def _elector(fake: FakeApi) -> LeaderElector:
    settings = LeaseSettings(
        namespace="lease-ns",
        name="lease",
        identity="me",
        lease_duration=0.5,
        renew_deadline=0.2,
        retry_period=0.01,
    )
    elector = LeaderElector(client.ApiClient(), settings)
    elector.rest = fake  # type: ignore[assignment]
    return elector


async def _until(check: Any, what: str) -> None:
    """Poll `check()` until it holds (bounded, so that a broken elector fails the test)."""
    for _ in range(2000):
        if check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never: {what}")


async def test_a_missing_lease_namespace_is_created_then_the_lease_is_taken() -> None:
    fake = FakeApi(namespace_exists=False)
    elector = _elector(fake)
    terms = 0

    async def work() -> None:
        nonlocal terms
        terms += 1
        await asyncio.Event().wait()

    task = asyncio.create_task(elector.lead(work))
    try:
        await _until(lambda: terms == 1, "leading")
        assert fake.namespace_exists
        assert fake.lease is not None
        assert fake.lease["spec"]["holderIdentity"] == "me"
        assert elector.healthy()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_lease_namespace_that_may_not_be_created_is_named_and_not_ready() -> None:
    fake = FakeApi(namespace_exists=False, may_create_namespace=False)
    elector = _elector(fake)

    task = asyncio.create_task(elector.lead(asyncio.Event().wait))
    try:
        await _until(lambda: elector.problem and "lease-ns" in elector.problem, "the problem")
        assert not elector.healthy()
        assert not elector.is_leader
        assert "does not exist" in (elector.problem or "")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_losing_the_lease_stops_the_work_then_the_replica_leads_again() -> None:
    fake = FakeApi()
    elector = _elector(fake)
    terms = 0
    cancelled = 0

    async def work() -> None:
        nonlocal terms, cancelled
        terms += 1
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled += 1
            raise

    task = asyncio.create_task(elector.lead(work))
    try:
        await _until(lambda: terms == 1, "first term")
        fake.down = True
        await _until(lambda: cancelled == 1, "work cancelled after the renew deadline")
        assert not elector.is_leader
        assert not task.done()  # following, not exited
        assert "reset" in (elector.problem or "")
        fake.down = False
        await _until(lambda: terms == 2, "second term")
        assert elector.is_leader
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert elector.is_leader  # cancelled while leading: `release` still gives the lease up
    await elector.release()
    assert fake.lease is not None
    assert fake.lease["spec"]["holderIdentity"] == ""
