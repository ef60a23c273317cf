"""A `handlers.Wiring` whose callbacks do nothing, for tests that look at what the handlers
register or store."""

from __future__ import annotations

from typing import Any

from atoll.control.ungater import Ungater
from atoll.control.workqueue import WorkQueue
from atoll.kube import handlers
from atoll.state.cache import Cache


def bare_wiring(cache: Cache, **overrides: Any) -> handlers.Wiring:
    """Wiring into `cache`; `overrides` replaces fields (e.g. `group_pod`)."""
    fields: dict[str, Any] = {
        "cache": cache,
        "wake": lambda: None,
        "jobs": WorkQueue("jobs"),
        "queues_changed": lambda: None,
        "ungater": Ungater(cache, None, None, None),  # type: ignore[arg-type]
        "pods": WorkQueue("pods"),
        "seen_workload": lambda _wl: None,
        "gone_workload": lambda _key: None,
    }
    return handlers.Wiring(**(fields | overrides))
