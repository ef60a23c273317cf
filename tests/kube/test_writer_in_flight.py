"""The writer keeps at most `in_flight(qps)` requests open at once: each holds a connection
to the API server and its TLS buffer, so a burst of writes must not open one per request."""

from __future__ import annotations

import asyncio

from kubernetes_asyncio import client

from atoll.kube.ratelimit import TokenBucket
from atoll.kube.writers import MIN_IN_FLIGHT, KubeWriter, in_flight


def test_the_bound_keeps_up_the_rate_at_a_tenth_of_a_second_per_request() -> None:
    assert in_flight(300) == 30
    assert in_flight(301) == 31
    assert in_flight(5) == MIN_IN_FLIGHT


async def test_a_burst_of_requests_runs_at_most_the_bound_at_once() -> None:
    open_now = 0
    most = 0
    done = 0

    async def request() -> None:
        nonlocal open_now, most, done
        open_now += 1
        most = max(most, open_now)
        await asyncio.sleep(0.01)
        open_now -= 1
        done += 1

    async with client.ApiClient(client.Configuration()) as api:
        kw = KubeWriter(api, TokenBucket(100, 1000))
        await asyncio.gather(*(kw._call("patch", "workloads", request) for _ in range(100)))
    assert done == 100
    assert most == in_flight(100) == 10
