"""The operator's loop exception handler: kopf's watch stream that fails to close at
shutdown is a warning line, anything else goes to asyncio's default handler."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, MutableMapping
from typing import Any

from structlog.testing import capture_logs

from atoll.kube.operator import exception_handler

MESSAGE = "an error occurred during closing of asynchronous generator <async_generator>"


def _generator_from(filename: str) -> Callable[[], AsyncIterator[int]]:
    """An async generator function whose code says it comes from `filename`."""
    scope: dict[str, Any] = {}
    exec(compile("async def infinite_watch():\n    yield 1\n", filename, "exec"), scope)
    fn: Callable[[], AsyncIterator[int]] = scope["infinite_watch"]
    return fn


class _Loop:
    def __init__(self) -> None:
        self.defaulted: list[dict[str, Any]] = []

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        self.defaulted.append(context)


def _handle(filename: str, message: str = MESSAGE) -> tuple[_Loop, list[MutableMapping[str, Any]]]:
    gen = _generator_from(filename)()
    loop = _Loop()
    context = {
        "message": message,
        "asyncgen": gen,
        "exception": RuntimeError("generator didn't stop after athrow()"),
    }
    with capture_logs() as logs:
        exception_handler(loop, context)  # type: ignore[arg-type]
    asyncio.run(gen.aclose())  # type: ignore[attr-defined]
    return loop, logs


def test_a_kopf_watch_stream_failing_to_close_is_a_warning() -> None:
    path = os.sep.join(["", "venv", "site-packages", "kopf", "_cogs", "clients", "watching.py"])
    loop, logs = _handle(path)
    assert loop.defaulted == []
    (entry,) = logs
    assert entry["log_level"] == "warning"
    assert entry["stream"] == "infinite_watch"
    assert "didn't stop" in entry["error"]


def test_other_generators_and_errors_go_to_asyncios_handler() -> None:
    loop, logs = _handle(os.sep.join(["", "src", "atoll", "kube", "watch.py"]))
    assert len(loop.defaulted) == 1
    assert logs == []
    path = os.sep.join(["", "venv", "site-packages", "kopf", "_core", "reactor.py"])
    loop, logs = _handle(path, message="Task exception was never retrieved")
    assert len(loop.defaulted) == 1
    assert logs == []
