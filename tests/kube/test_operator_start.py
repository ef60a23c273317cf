"""How a replica starts (without a cluster): its webhook server listens and the CRDs'
conversion webhook points at it before the initial listing (which may need it: objects stored
as v1beta1 by Kueue v0.15 or older), and a listing that waits on the conversion webhook makes
a replica in `service` mode ready early, so that the Service routes the conversions to it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from atoll.kube import bootstrap, connection, webhook
from atoll.kube import operator as op_mod
from atoll.kube.admission import AdmissionServer
from atoll.kube.operator import Operator, RunOptions, needs_conversion
from atoll.sandbox.processes import free_port

CONVERSION_FAILED = (
    b'{"kind":"Status","status":"Failure","message":"conversion webhook for '
    b'kueue.x-k8s.io/v1beta1, Kind=ClusterQueue failed: Post \\"https://x/convert\\": '
    b'connection refused","code":500}'
)


def _error(status: int, body: bytes | None) -> ApiException:
    e = ApiException(status=status, reason="Internal Server Error")
    e.body = body
    return e


def test_a_listing_failed_by_the_conversion_webhook_is_told_from_other_errors() -> None:
    assert needs_conversion(_error(500, CONVERSION_FAILED))
    assert not needs_conversion(_error(500, b'{"message":"etcdserver: request timed out"}'))
    assert not needs_conversion(_error(503, CONVERSION_FAILED))
    assert not needs_conversion(_error(500, None))
    assert not needs_conversion(ConnectionResetError("reset"))


def _service_operator(api: client.ApiClient) -> Operator:
    opts = RunOptions(webhook="service", leader_elect=False, webhook_port=free_port())
    return Operator(opts, api)


async def test_a_service_replica_is_ready_early_only_while_its_listing_waits_on_conversion() -> (
    None
):
    async with client.ApiClient() as api:
        op = _service_operator(api)
        assert op.not_ready() == "initial sync not done"
        op._listing_retried(1, _error(500, b'{"message":"etcdserver: request timed out"}'))
        assert op.not_ready() == "initial sync not done"
        op._listing_retried(2, _error(500, CONVERSION_FAILED))
        assert op.listing_converts
        assert op.not_ready() == "webhook server not listening yet"
        server = AdmissionServer(addr="127.0.0.1", port=0, context=None)
        server.listening.set()
        op._service_server = server
        assert op.not_ready() is None
        # url mode (the sandbox): the API server calls the replica's own URL, not a Service
        url = Operator(RunOptions(webhook="off", leader_elect=False), api)
        url._listing_retried(1, _error(500, CONVERSION_FAILED))
        assert url.listing_converts
        assert url.not_ready() == "initial sync not done"


async def test_the_webhook_server_listens_and_conversion_points_at_it_before_the_listing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    steps: list[str] = []

    async def nothing(*_a: Any, **_k: Any) -> None:
        return None

    async def certificate(*_a: Any, **_k: Any) -> webhook.SharedCert:
        steps.append("certificate")
        return webhook.SharedCert(ca=b"ca", cert=b"cert", key=b"key")

    async def point(*_a: Any, **_k: Any) -> list[str]:
        assert server.listening.is_set()
        steps.append("conversion")
        return []

    async def load(*_a: Any, **_k: Any) -> dict[str, int]:
        assert server.listening.is_set()
        steps.append("listing")
        return {}

    server = AdmissionServer(addr="127.0.0.1", port=free_port(), context=None)
    monkeypatch.setattr(connection, "wait_for_server", nothing)
    monkeypatch.setattr(webhook, "shared_certificate", certificate)
    monkeypatch.setattr(webhook, "patch_ca_bundle", nothing)
    monkeypatch.setattr(webhook, "make_service_server", lambda **_k: server)
    monkeypatch.setattr(webhook, "point_conversion", point)
    monkeypatch.setattr(bootstrap, "load", load)
    async with client.ApiClient() as api:
        op = _service_operator(api)
        monkeypatch.setattr(op, "_watch_kinds", nothing)
        try:
            await op._start()
            assert steps == ["certificate", "conversion", "listing"]
            assert op.synced.is_set()
        finally:
            assert op._webhook_task is not None
            op._webhook_task.cancel()
            await asyncio.gather(op._webhook_task, return_exceptions=True)


async def test_a_webhook_port_in_use_fails_the_start_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def nothing(*_a: Any, **_k: Any) -> None:
        return None

    async def certificate(*_a: Any, **_k: Any) -> webhook.SharedCert:
        return webhook.SharedCert(ca=b"ca", cert=b"cert", key=b"key")

    async def load(*_a: Any, **_k: Any) -> dict[str, int]:
        raise AssertionError("listed although the webhook server could not listen")

    taken = await asyncio.start_server(lambda _r, _w: None, "127.0.0.1", 0)
    port = taken.sockets[0].getsockname()[1]
    server = AdmissionServer(addr="127.0.0.1", port=port, context=None)
    monkeypatch.setattr(connection, "wait_for_server", nothing)
    monkeypatch.setattr(webhook, "shared_certificate", certificate)
    monkeypatch.setattr(webhook, "patch_ca_bundle", nothing)
    monkeypatch.setattr(webhook, "make_service_server", lambda **_k: server)
    monkeypatch.setattr(bootstrap, "load", load)
    monkeypatch.setattr(op_mod, "CONVERSION_CHECK_INTERVAL", 3600.0)
    try:
        async with client.ApiClient() as api:
            op = _service_operator(api)
            with pytest.raises(OSError, match="address already in use"):
                await op._start()
            assert op._webhook_task is not None
            assert op._webhook_task.done()
    finally:
        taken.close()
        await taken.wait_closed()
