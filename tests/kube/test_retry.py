"""The retry policy: which failures are transient, how long it waits, when it gives up."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from atoll.control.ports import ApiError
from atoll.kube import retry


def _api(status: int, retry_after: str | None = None) -> ApiException:
    e = ApiException(status=status, reason="r")
    if retry_after is not None:
        e.headers = {"Retry-After": retry_after}
    return e


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        pytest.param(ConnectionRefusedError(), True, id="refused"),
        pytest.param(ConnectionResetError(), True, id="reset"),
        pytest.param(BrokenPipeError(), True, id="broken-pipe"),
        pytest.param(TimeoutError(), True, id="timeout"),
        pytest.param(aiohttp.ServerDisconnectedError(), True, id="server-disconnected"),
        pytest.param(aiohttp.ClientOSError(104, "reset"), True, id="client-os-error"),
        pytest.param(aiohttp.ClientPayloadError("cut"), True, id="payload"),
        pytest.param(_api(429), True, id="429"),
        pytest.param(_api(500), True, id="500"),
        pytest.param(_api(503), True, id="503"),
        pytest.param(_api(504), True, id="504"),
        pytest.param(ApiError(503, "busy"), True, id="port-503"),
        pytest.param(_api(400), False, id="400"),
        pytest.param(_api(403), False, id="403"),
        pytest.param(_api(404), False, id="404"),
        pytest.param(_api(409), False, id="409"),
        pytest.param(_api(422), False, id="422"),
        pytest.param(ValueError("bug"), False, id="bug"),
        pytest.param(FileNotFoundError(), False, id="file-not-found"),
    ],
)
def test_transient_errors_are_told_from_permanent_ones(error: Exception, transient: bool) -> None:
    assert retry.is_transient(error) is transient


def test_backoff_grows_exponentially_up_to_the_cap_with_jitter() -> None:
    policy = retry.Backoff(base=1.0, cap=8.0, jitter=0.5)

    delays = [policy.delay(n) for n in range(1, 8)]

    for n, d in enumerate(delays, start=1):
        ceiling = min(8.0, 2.0 ** (n - 1))
        assert ceiling / 2 <= d <= ceiling
    it = iter(policy)
    assert all(next(it) <= 8.0 for _ in range(100))  # endless, never above the cap


def test_retry_after_is_read_from_the_answer() -> None:
    assert retry.retry_after(_api(429, "3")) == 3.0
    assert retry.retry_after(_api(429)) is None
    assert retry.retry_after(_api(429, "soon")) is None


class Flaky:
    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


FAST = retry.Backoff(base=0.001, cap=0.002)


def test_call_retries_transient_failures_until_success() -> None:
    fn = Flaky(ConnectionResetError(), _api(503), aiohttp.ServerDisconnectedError())

    assert asyncio.run(retry.call(fn, what="x", backoff=FAST)) == "ok"
    assert fn.calls == 4


def test_call_raises_a_permanent_failure_at_once() -> None:
    fn = Flaky(_api(403))

    with pytest.raises(ApiException):
        asyncio.run(retry.call(fn, what="x", backoff=FAST))
    assert fn.calls == 1


def test_call_gives_up_after_its_attempts() -> None:
    fn = Flaky(*[ConnectionRefusedError()] * 5)
    seen: list[int] = []

    with pytest.raises(ConnectionRefusedError):
        asyncio.run(
            retry.call(
                fn, what="x", backoff=FAST, attempts=3, on_retry=lambda n, _e: seen.append(n)
            )
        )
    assert fn.calls == 3
    assert seen == [1, 2]


def test_call_waits_at_least_what_the_server_asks() -> None:
    fn = Flaky(_api(429, "0.05"))
    loop_times: list[float] = []

    async def timed() -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await retry.call(fn, what="x", backoff=FAST)
        loop_times.append(loop.time() - start)

    asyncio.run(timed())
    assert loop_times[0] >= 0.05
