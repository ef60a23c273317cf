"""kubernetes_asyncio's client package, with its API classes and models imported on first use.

`import kubernetes_asyncio.client` runs a generated `__init__` that imports every API class
and every one of its ~770 models: ~37 MiB of the operator's resident memory, for the dozen
classes atoll uses. `install()` (called when `atoll.kube` is imported, before anything
imports kubernetes_asyncio) puts in `sys.modules` two package modules, `client` and
`client.models`, that import `kubernetes_asyncio.client.<module>` only when one of its names
is first read, the same names from the same modules as the generated `__init__`s list them.
When kubernetes_asyncio's client is already imported, `install()` changes nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import types
from pathlib import Path
from typing import Any

_FROM = re.compile(r"^from (kubernetes_asyncio\.client\.[\w.]+) import (\w+)$", re.M)


class _LazyPackage(types.ModuleType):
    """A package whose names resolve to `from <module> import <name>` on first access."""

    def __init__(self, name: str, init: Path, names: dict[str, str]) -> None:
        super().__init__(name)
        self.__path__ = [str(init.parent)]
        self.__file__ = str(init)
        self.__package__ = name
        self._names = names

    def __getattr__(self, name: str) -> Any:
        module = self.__dict__["_names"].get(name)
        if module is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(self, name, value)
        return value


def _package(name: str, init: Path) -> _LazyPackage | None:
    try:
        text = init.read_text()
    except OSError:
        return None
    names = {attr: module for module, attr in _FROM.findall(text)}
    package = _LazyPackage(name, init, names)
    version = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    if version:
        package.__version__ = version.group(1)  # type: ignore[attr-defined]
    return package


def install() -> bool:
    """Install the lazy packages unless kubernetes_asyncio's client is imported already;
    True when installed."""
    if "kubernetes_asyncio" in sys.modules or "kubernetes_asyncio.client" in sys.modules:
        return False
    # find_spec of the top-level package finds it without importing it (its __init__
    # imports the client)
    top = importlib.util.find_spec("kubernetes_asyncio")
    if top is None or not top.submodule_search_locations:
        return False
    root = Path(next(iter(top.submodule_search_locations))) / "client"
    client = _package("kubernetes_asyncio.client", root / "__init__.py")
    models = _package("kubernetes_asyncio.client.models", root / "models" / "__init__.py")
    if client is None or models is None or not client._names or not models._names:
        return False
    sys.modules["kubernetes_asyncio.client.models"] = models
    sys.modules["kubernetes_asyncio.client"] = client
    client.models = models  # type: ignore[attr-defined]
    return True
