"""A status write whose remembered base says there is nothing to do asks the server before
it gives up: an old admitted version must not turn a pending Workload's admission into "no
change", which the scheduler would take back and decide again, without end and without
ever yielding to the event loop (seen live: ~950,000 cycles in 4 minutes)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from kubernetes_asyncio import client

from atoll.kube.ratelimit import TokenBucket
from atoll.kube.writers import KubeWriter
from atoll.state import lifecycle as lc
from atoll.state import workloads as wls
from tests.control.builders import gpu_admit, job, workload_for

NOW = dt.datetime(2026, 12, 6, tzinfo=dt.UTC)


async def _write(
    remembered_admitted: bool, server_admitted: bool, *, confirm: bool = True
) -> tuple[Any, int, int]:
    pending = workload_for(job("a", pods=2))
    key = wls.wl_key(pending)
    admitted = lc.applied(pending, lc.admit(gpu_admit(key), NOW))
    old = admitted.model_copy(
        update={"metadata": pending.metadata.model_copy(update={"resource_version": "5"})}
    )
    on_server = (admitted if server_admitted else pending).to_dict()
    on_server["metadata"]["resourceVersion"] = "9"
    calls = {"get": 0, "patch": 0}

    async def get(_key: str) -> dict[str, Any]:
        calls["get"] += 1
        return on_server

    async def patch(_ns: str, _name: str, _body: dict[str, Any]) -> str:
        calls["patch"] += 1
        return "10"

    async with client.ApiClient(client.Configuration()) as api:
        kw = KubeWriter(api, TokenBucket(100, 100))
        kw._get_workload = get  # type: ignore[method-assign]
        kw._patch_status = patch  # type: ignore[method-assign]
        kw.observe_workload(old if remembered_admitted else pending)
        written = await kw.update_workload_status(
            key, lc.admit(gpu_admit(key), NOW), confirm_unchanged=confirm
        )
    return written, calls["get"], calls["patch"]


async def test_a_stale_admitted_base_is_read_again_and_the_admission_written() -> None:
    written, gets, patches = await _write(remembered_admitted=True, server_admitted=False)
    assert (gets, patches) == (1, 1)
    assert written is not None
    assert wls.has_quota(written)
    assert written.metadata.resource_version == "10"


async def test_nothing_to_write_on_the_servers_version_is_nothing() -> None:
    written, gets, patches = await _write(remembered_admitted=True, server_admitted=True)
    assert (written, gets, patches) == (None, 1, 0)


async def test_unconfirmed_nothing_to_write_costs_no_read() -> None:
    """Only a caller that takes a decision back on "nothing to write" (the scheduler's
    admission) asks for the read; a pending message already written is left at that."""
    written, gets, patches = await _write(
        remembered_admitted=True, server_admitted=False, confirm=False
    )
    assert (written, gets, patches) == (None, 0, 0)


async def test_a_fresh_base_is_written_without_a_read() -> None:
    written, gets, patches = await _write(remembered_admitted=False, server_admitted=False)
    assert written is not None
    assert (gets, patches) == (0, 1)


async def test_a_newer_version_seen_while_writing_stays_the_base() -> None:
    """The root cause of the stale base: the watch brings version 11 (the admission taken
    back) before the write's answer (version 10, admitted) is read. The next admission is
    written on version 11 at once, without a read."""
    pending = workload_for(job("a", pods=2))
    key = wls.wl_key(pending)
    base = pending.model_copy(
        update={"metadata": pending.metadata.model_copy(update={"resource_version": "9"})}
    )
    taken_back = pending.model_copy(
        update={"metadata": pending.metadata.model_copy(update={"resource_version": "11"})}
    )
    calls = {"get": 0, "patch": 0}
    bases: list[str | None] = []

    async def get(_key: str) -> dict[str, Any]:
        calls["get"] += 1
        raise AssertionError("no read expected")

    async with client.ApiClient(client.Configuration()) as api:
        kw = KubeWriter(api, TokenBucket(100, 100))

        async def patch(_ns: str, _name: str, body: dict[str, Any]) -> str:
            calls["patch"] += 1
            bases.append(body["metadata"]["resourceVersion"])
            if calls["patch"] == 1:
                kw.observe_workload(taken_back)  # the watch overtakes the answer
                return "10"
            return "12"

        kw._get_workload = get  # type: ignore[method-assign]
        kw._patch_status = patch  # type: ignore[method-assign]
        kw.observe_workload(base)
        first = await kw.update_workload_status(key, lc.admit(gpu_admit(key), NOW))
        second = await kw.update_workload_status(key, lc.admit(gpu_admit(key), NOW))
    assert first is not None
    assert first.metadata.resource_version == "10"
    assert second is not None
    assert wls.has_quota(second)
    assert bases == ["9", "11"]
    assert calls == {"get": 0, "patch": 2}
