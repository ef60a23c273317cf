"""A keyed work queue: a key added many times is processed once; `add_after` schedules a
retry or a timeout check. Like client-go's workqueue, in asyncio."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger("atoll.workqueue")


class WorkQueue:
    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._active: set[str] = set()
        self._dirty: set[str] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def add(self, key: str) -> None:
        if key in self._active:
            self._dirty.add(key)
            return
        if key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def add_after(self, key: str, delay: float) -> None:
        """Process `key` again after `delay` seconds (the earliest pending timer wins)."""
        loop = asyncio.get_running_loop()
        existing = self._timers.get(key)
        when = loop.time() + max(0.0, delay)
        if existing is not None and existing.when() <= when:
            return
        if existing is not None:
            existing.cancel()
        self._timers[key] = loop.call_at(when, self._fire, key)

    def _fire(self, key: str) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def __len__(self) -> int:
        return len(self._queued) + len(self._active)

    async def work(self, handle: Callable[[str], Awaitable[float | None]]) -> None:
        """Process keys forever; `handle` returns seconds after which to look again, or None.
        An exception is logged and the key retried with backoff."""
        failures: dict[str, int] = {}
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._active.add(key)
            try:
                again = await handle(key)
                failures.pop(key, None)
            except Exception as e:
                n = failures[key] = failures.get(key, 0) + 1
                again = min(0.05 * 2**n, 30.0)
                log.warning("reconcile failed", queue=self.name, key=key, error=str(e)[:2000])
            finally:
                self._active.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self.add(key)
            elif again is not None:
                self.add_after(key, again)
