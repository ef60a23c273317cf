"""Which API failures are transient, and how atoll waits before trying again.

One policy for every request atoll makes (writers, Events, the initial listing, the leader
Lease, the webhook's caBundle) and for kopf's own requests and watches (`Backoff` is what
`settings.networking.error_backoffs` iterates): a request that failed because the API server
was restarting, overloaded or unreachable is retried after a capped exponential backoff with
jitter, honouring the server's `Retry-After`; any other failure is raised at once.

Transient: connection refused or reset, broken pipe, a server that disconnected, a timeout,
HTTP 429, 500, 502, 503 and 504 (also as the `ApiError` of `atoll.control.ports`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import aiohttp
import structlog
from kubernetes_asyncio.client.exceptions import ApiException

from atoll.control.ports import ApiError

log = structlog.get_logger("atoll.kube")
T = TypeVar("T")
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """Delays before retry n = 1, 2, …: `base * 2**(n-1)` capped at `cap`, each scaled by a
    random factor in [1 - jitter, 1] so that replicas do not retry in step. Iterating gives an
    endless sequence (kopf then never gives up on a request or a watch)."""

    base: float = 0.2
    cap: float = 5.0
    jitter: float = 0.5

    def delay(self, attempt: int) -> float:
        raw = min(self.cap, self.base * 2.0 ** min(max(attempt - 1, 0), 30))
        return raw * (1.0 - self.jitter * random.random())

    def __iter__(self) -> Iterator[float]:
        attempt = 0
        while True:
            attempt += 1
            yield self.delay(attempt)


DEFAULT = Backoff()


def status_of(error: BaseException) -> int | None:
    """The HTTP status of a failed request, if it got an answer."""
    if isinstance(error, ApiException):
        return int(error.status) if error.status else None
    if isinstance(error, ApiError):
        return error.status
    if isinstance(error, aiohttp.ClientResponseError):
        return error.status
    return None


def is_transient(error: BaseException) -> bool:
    """True when the same request may well succeed later, unchanged."""
    status = status_of(error)
    if status is not None:
        return status in TRANSIENT_STATUS
    if isinstance(error, aiohttp.ClientConnectorCertificateError):
        return False  # a wrong CA does not heal by waiting
    return isinstance(
        error,
        aiohttp.ClientConnectionError | aiohttp.ClientPayloadError | ConnectionError | TimeoutError,
    )


def retry_after(error: BaseException) -> float | None:
    """Seconds the server asked us to wait (`Retry-After` on a 429 or 503)."""
    headers = getattr(error, "headers", None)
    if not headers:
        return None
    try:
        value = headers.get("Retry-After")
    except AttributeError:
        return None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def describe(error: BaseException) -> str:
    """One short line for a log: the status and reason, or the connection error."""
    status = status_of(error)
    if status is not None:
        reason = getattr(error, "reason", None) or getattr(error, "message", None) or ""
        return f"{status} {reason}".strip()
    return f"{type(error).__name__}: {error}"[:300]


def log_retry(what: str, attempt: int, error: BaseException) -> None:
    """The warning `call` logs of a retried failure, on the 1st, 2nd, 4th, 8th … retry (for
    an `on_retry` that replaces it but keeps it)."""
    if attempt & (attempt - 1) == 0:
        log.warning("API request retried", what=what, attempt=attempt, error=describe(error))


async def call(
    fn: Callable[[], Awaitable[T]],
    *,
    what: str,
    backoff: Backoff = DEFAULT,
    attempts: int | None = None,
    on_retry: Callable[[int, BaseException], None] | None = None,
) -> T:
    """`await fn()`, retried while it fails transiently (at most `attempts` times in all, or
    forever when None). A warning is logged on the 1st, 2nd, 4th, 8th … retry."""
    attempt = 0
    while True:
        try:
            return await fn()
        except Exception as e:
            attempt += 1
            if not is_transient(e) or (attempts is not None and attempt >= attempts):
                raise
            wait = max(backoff.delay(attempt), retry_after(e) or 0.0)
            if on_retry is not None:
                on_retry(attempt, e)
            else:
                log_retry(what, attempt, e)
            await asyncio.sleep(wait)
