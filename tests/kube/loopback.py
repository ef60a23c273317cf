"""A small HTTP server on the loopback address that answers every request with `handle`, for
tests of what goes on the wire (`kube.rest`, the paged listing)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from aiohttp import web


@asynccontextmanager
async def serve(handle: Callable[[web.Request], Awaitable[web.Response]]) -> AsyncIterator[str]:
    """The server's URL (`http://127.0.0.1:PORT`) while it runs."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
