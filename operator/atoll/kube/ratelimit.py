"""A token bucket for API requests (QPS and burst), as client-go's flowcontrol limiter.
kopf has none of its own; every write atoll makes goes through one."""

from __future__ import annotations

import asyncio
import time


class TokenBucket:
    def __init__(self, qps: float, burst: int) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"rate limit needs qps > 0 and burst >= 1 (got {qps}, {burst})")
        self.qps = qps
        self.burst = burst
        self._tokens = float(burst)
        self._last = time.monotonic()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
        self._last = now

    async def acquire(self) -> None:
        async with self._lock:
            self._refill()
            if self._tokens < 1:
                await asyncio.sleep((1 - self._tokens) / self.qps)
                self._refill()
            self._tokens -= 1

    def try_acquire(self, *, reserve: float = 0.0) -> bool:
        """Take a token now only if `reserve` tokens would still be left (for work that must
        not delay more important requests); never waits."""
        self._refill()
        if self._tokens - 1 < reserve:
            return False
        self._tokens -= 1
        return True

    async def acquire_spare(self, *, reserve: float) -> None:
        """Wait until a token can be taken with `reserve` tokens left for other requests."""
        while not self.try_acquire(reserve=reserve):
            await self.wait_spare(reserve=reserve)

    async def wait_spare(self, *, reserve: float) -> None:
        """Wait until a token could be taken with `reserve` tokens left, without taking it
        (the request that follows takes its own)."""
        while True:
            self._refill()
            if self._tokens - 1 >= reserve:
                return
            await asyncio.sleep((reserve + 1 - self._tokens) / self.qps)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *_: object) -> None:
        return None
