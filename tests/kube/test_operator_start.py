"""How a replica starts (without a cluster): its webhook server listens and the CRDs'
conversion webhook points at it before the initial listing (which may need it: objects stored
as v1beta1 by Kueue v0.15 or older), and a listing that waits on the conversion webhook makes
a replica in `service` mode ready early, so that the Service routes the conversions to it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from atoll.kube import bootstrap, connection, webhook
from atoll.kube.admission import AdmissionServer
from atoll.kube.operator import Operator, RunOptions, needs_conversion
from atoll.sandbox.processes import free_port

SERVICE = "atoll-system/atoll-webhook-service"


def _failed(kind: str, url: str) -> bytes:
    """The Status the API server answers a LIST with when a conversion webhook call failed."""
    return (
        b'{"kind":"Status","status":"Failure","message":"conversion webhook for '
        + f'kueue.x-k8s.io/v1beta1, Kind={kind} failed: Post \\"{url}/convert?timeout=30s'.encode()
        + b'\\": no endpoints available for service","reason":"InternalError","code":500}'
    )


OURS = _failed("ClusterQueue", "https://atoll-webhook-service.atoll-system.svc:443")


def _error(status: int, body: bytes | None) -> ApiException:
    e = ApiException(status=status, reason="Internal Server Error")
    e.body = body
    return e


def test_only_a_listing_failed_on_this_replicas_conversion_service_counts() -> None:
    assert needs_conversion(_error(500, OURS), SERVICE)
    local = _failed("LocalQueue", "https://atoll-webhook-service.atoll-system.svc:443")
    assert needs_conversion(_error(500, local), SERVICE)
    # Kueue's own Workload CRD left in place, calling Kueue's Service: not ours to answer
    kueue = _failed("Workload", "https://kueue-webhook-service.kueue-system.svc:443")
    assert not needs_conversion(_error(500, kueue), SERVICE)
    other_kind = _failed("Workload", "https://atoll-webhook-service.atoll-system.svc:443")
    assert not needs_conversion(_error(500, other_kind), SERVICE)
    # the webhook answered, refusing an object: routing more to it does not help
    refused = (
        b'{"message":"conversion webhook for kueue.x-k8s.io/v1beta1, Kind=ClusterQueue failed:'
        b" cannot convert ClusterQueue a to kueue.x-k8s.io/v1beta2: spec.admissionChecks: must"
        b' be a list of names","code":500}'
    )
    assert not needs_conversion(_error(500, refused), SERVICE)
    assert not needs_conversion(
        _error(500, b'{"message":"etcdserver: request timed out"}'), SERVICE
    )
    assert not needs_conversion(_error(503, OURS), SERVICE)
    assert not needs_conversion(_error(500, None), SERVICE)
    assert not needs_conversion(ConnectionResetError("reset"), SERVICE)


def _service_operator(api: client.ApiClient, *, leader_elect: bool = True) -> Operator:
    opts = RunOptions(
        webhook="service",
        webhook_service=SERVICE,
        leader_elect=leader_elect,
        webhook_port=free_port(),
    )
    return Operator(opts, api)


async def test_a_service_replica_is_ready_early_only_while_its_listing_waits_on_conversion() -> (
    None
):
    """With leader election (the Lease is tried only after the listing): ready once the
    server listens while the listing waits on this replica's conversion webhook, and after the
    listing until the Lease was tried; then as any replica."""
    async with client.ApiClient() as api:
        op = _service_operator(api)
        assert op.elector is not None
        assert op.not_ready() == "initial sync not done"
        op._listing_retried(1, _error(500, b'{"message":"etcdserver: request timed out"}'))
        assert op.not_ready() == "initial sync not done"
        op._listing_retried(2, _error(500, OURS))
        assert op.listing_converts
        assert op.not_ready() == "webhook server not listening yet"
        server = AdmissionServer(addr="127.0.0.1", port=0, context=None)
        server.listening.set()
        op._service_server = server
        assert op.not_ready() is None
        op.synced.set()
        assert op.not_ready() is None  # the Lease not tried yet: no gap between the two
        op.elector.problem = "lease atoll-system/x: forbidden"
        assert op.elector.tried
        assert op.not_ready() is not None
        assert "forbidden" in str(op.not_ready())


async def test_a_url_replica_is_never_ready_before_its_listing() -> None:
    """The sandbox's replica: the API server calls its own URL, which needs no Service."""
    async with client.ApiClient() as api:
        url = Operator(RunOptions(webhook="url", leader_elect=False, webhook_port=free_port()), api)
        url._listing_retried(1, _error(500, OURS))
        assert url.not_ready() == "initial sync not done"
        url.listing_converts = True
        assert url.not_ready() == "initial sync not done"


async def _nothing(*_a: Any, **_k: Any) -> None:
    return None


async def _certificate(*_a: Any, **_k: Any) -> webhook.SharedCert:
    return webhook.SharedCert(ca=b"ca", cert=b"cert", key=b"key")


async def _pointed(*_a: Any, **_k: Any) -> list[str]:
    return []


def _no_cluster(
    monkeypatch: pytest.MonkeyPatch,
    server: AdmissionServer,
    load: Callable[..., Awaitable[dict[str, int]]],
    point: Callable[..., Awaitable[list[str]]] = _pointed,
) -> None:
    """A service-mode start with no API server: the certificate and the CRD and webhook
    configuration writes faked, `server` as the webhook server, `load` as the listing."""
    monkeypatch.setattr(connection, "wait_for_server", _nothing)
    monkeypatch.setattr(webhook, "shared_certificate", _certificate)
    monkeypatch.setattr(webhook, "patch_ca_bundle", _nothing)
    monkeypatch.setattr(webhook, "make_service_server", lambda **_k: server)
    monkeypatch.setattr(webhook, "point_conversion", point)
    monkeypatch.setattr(bootstrap, "load", load)


async def test_the_webhook_server_listens_and_conversion_points_at_it_before_the_listing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    steps: list[str] = []

    async def point(*_a: Any, **_k: Any) -> list[str]:
        assert server.listening.is_set()
        steps.append("conversion")
        return []

    async def load(*_a: Any, **_k: Any) -> dict[str, int]:
        assert server.listening.is_set()
        steps.append("listing")
        return {}

    server = AdmissionServer(addr="127.0.0.1", port=free_port(), context=None)
    _no_cluster(monkeypatch, server, load, point)
    async with client.ApiClient() as api:
        op = _service_operator(api, leader_elect=False)
        monkeypatch.setattr(op, "_watch_kinds", _nothing)
        try:
            await op._start()
            assert steps == ["conversion", "listing"]
            assert op.synced.is_set()
        finally:
            assert op._webhook_task is not None
            op._webhook_task.cancel()
            await asyncio.gather(op._webhook_task, return_exceptions=True)


async def test_a_webhook_port_in_use_fails_the_start_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def load(*_a: Any, **_k: Any) -> dict[str, int]:
        raise AssertionError("listed although the webhook server could not listen")

    taken = await asyncio.start_server(lambda _r, _w: None, "127.0.0.1", 0)
    port = taken.sockets[0].getsockname()[1]
    _no_cluster(monkeypatch, AdmissionServer(addr="127.0.0.1", port=port, context=None), load)
    try:
        async with client.ApiClient() as api:
            op = _service_operator(api, leader_elect=False)
            with pytest.raises(OSError, match="address already in use"):
                await op._start()
            assert op._webhook_task is not None
            assert op._webhook_task.done()
    finally:
        taken.close()
        await taken.wait_closed()


async def test_a_webhook_server_that_dies_during_the_listing_stops_the_operator_with_its_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def load(*_a: Any, **_k: Any) -> dict[str, int]:
        await asyncio.Event().wait()  # a listing that waits (on conversions, say)
        return {}

    server = AdmissionServer(addr="127.0.0.1", port=free_port(), context=None)

    async def serve(*_a: Any, **_k: Any) -> None:
        server.listening.set()
        await asyncio.sleep(0.1)
        raise RuntimeError("the webhook server broke")

    monkeypatch.setattr(server, "serve", serve)
    _no_cluster(monkeypatch, server, load)
    async with client.ApiClient() as api:
        opts = RunOptions(
            webhook="service",
            webhook_service=SERVICE,
            leader_elect=False,
            metrics_port=free_port(),
            health_port=free_port(),
        )
        op = Operator(opts, api)
        loop = asyncio.get_running_loop()
        handler = loop.get_exception_handler()  # `run` sets its own on the (shared) loop
        try:
            with pytest.raises(RuntimeError, match="the webhook server broke"):
                await asyncio.wait_for(op.run(), 30)
        finally:
            loop.set_exception_handler(handler)
