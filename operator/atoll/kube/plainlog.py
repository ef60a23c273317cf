"""structlog imported without rich.

`import structlog` imports rich (and pygments through it) whenever rich is installed, only to
offer rich tracebacks to its console renderer: ~4 MiB of resident memory and ~70 modules in
the operator, which renders plain tracebacks (`operator.configure_logging`). `install()`
(called when `atoll.kube` is imported, before anything in this package imports structlog)
imports structlog with rich hidden: structlog then takes rich for absent. rich stays
importable afterwards (the CLI's tables import it); when structlog or rich is imported
already, `install()` changes nothing.
"""

from __future__ import annotations

import importlib
import sys

HIDDEN = "rich"


def install() -> bool:
    """Import structlog with rich hidden unless either is imported already; True when it
    did."""
    if "structlog" in sys.modules or HIDDEN in sys.modules:
        return False
    sys.modules[HIDDEN] = None  # type: ignore[assignment]  # `import rich` raises ImportError
    try:
        importlib.import_module("structlog")
    finally:
        if HIDDEN in sys.modules and sys.modules[HIDDEN] is None:
            del sys.modules[HIDDEN]
    return True
