"""`kube.rest`: what goes on the wire (method, quoted path, query, credentials, content type,
JSON body) and what comes back (bytes, or kubernetes_asyncio's `ApiException` for a refusal),
against a small HTTP server on the loopback address."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from atoll.kube.rest import JSON, MERGE, PODS, WORKLOADS, Resource, Rest, decode, encode
from atoll.kube.writers import api_message
from tests.kube.loopback import serve

Seen = list[dict[str, Any]]


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, Seen]]:
    seen: Seen = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        seen.append(
            {
                "method": request.method,
                "raw_path": request.raw_path,
                "query": dict(request.query),
                "auth": request.headers.get("authorization"),
                "type": request.headers.get("Content-Type"),
                "accept": request.headers.get("Accept"),
                "body": json.loads(body) if body else None,
            }
        )
        if request.path.endswith("/missing"):
            status = {"kind": "Status", "code": 404, "message": 'pods "missing" not found'}
            return web.json_response(status, status=404)
        return web.json_response({"metadata": {"resourceVersion": "7"}})

    async with serve(handle) as host:
        yield host, seen


def _config(host: str) -> client.Configuration:
    config = client.Configuration(host=host)
    config.api_key = {"BearerToken": "t0ken"}
    config.api_key_prefix = {"BearerToken": "Bearer"}
    return config


async def test_a_merge_patch_of_a_status_goes_out_as_the_client_would_send_it(
    server: tuple[str, Seen],
) -> None:
    host, seen = server
    async with client.ApiClient(_config(host)) as api:
        answer = await Rest(api).request(
            "PATCH",
            WORKLOADS.path("team a", "job-x/1", "status"),
            {"status": {"conditions": None}},
            content_type=MERGE,
        )
    assert decode(answer) == {"metadata": {"resourceVersion": "7"}}
    (req,) = seen
    assert req["method"] == "PATCH"
    assert req["raw_path"] == (
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/team%20a/workloads/job-x%2F1/status"
    )
    assert req["auth"] == "Bearer t0ken"
    assert req["type"] == MERGE
    assert req["accept"] == JSON
    assert req["body"] == {"status": {"conditions": None}}


async def test_a_get_with_a_query_sends_no_body(server: tuple[str, Seen]) -> None:
    host, seen = server
    async with client.ApiClient(_config(host)) as api:
        resp = await Rest(api).send(
            "GET", PODS.path(None), query=[("watch", "true"), ("fieldSelector", "a=b,c!=d")]
        )
        resp.release()
    (req,) = seen
    assert req["raw_path"].startswith("/api/v1/pods?")
    assert req["query"] == {"watch": "true", "fieldSelector": "a=b,c!=d"}
    assert req["body"] is None
    assert req["type"] is None


async def test_a_refusal_is_the_clients_api_exception_with_the_servers_body(
    server: tuple[str, Seen],
) -> None:
    host, _ = server
    async with client.ApiClient(_config(host)) as api:
        with pytest.raises(ApiException) as refused:
            await Rest(api).request("DELETE", PODS.path("ns", "missing"))
    assert refused.value.status == 404
    assert api_message(refused.value) == 'pods "missing" not found'  # what callers report


def test_paths_of_collections_objects_and_cluster_scoped_kinds() -> None:
    leases = Resource("coordination.k8s.io", "v1", "leases")
    assert (
        leases.path("kube-system") == "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
    )
    assert Resource("", "v1", "namespaces").path(None, "a") == "/api/v1/namespaces/a"
    assert WORKLOADS.path(None) == "/apis/kueue.x-k8s.io/v1beta2/workloads"
    assert str(PODS) == "pods.core"


def test_bodies_beyond_64_bit_integers_are_still_encoded() -> None:
    assert json.loads(encode({"n": 2**70})) == {"n": 2**70}
    assert json.loads(encode({"s": "ü"})) == {"s": "ü"}
