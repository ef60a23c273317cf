"""The layer contract of docs/architecture.md ("Layers"), checked on every module's imports
(an `ast` walk)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "operator" / "atoll"
LAYERS = ("cli", "kube", "control", "sim", "state", "engine", "api", "sandbox", "agent")

# Which atoll layers each layer may import (besides itself and the package root).
MAY_IMPORT: dict[str, frozenset[str]] = {
    "cli": frozenset(LAYERS),
    "kube": frozenset({"control", "state", "engine", "api"}),
    "control": frozenset({"state", "engine", "api"}),
    "sim": frozenset({"control", "state", "engine", "api"}),
    "state": frozenset({"engine", "api"}),
    "engine": frozenset(),
    "api": frozenset(),
    "sandbox": frozenset(),
    "agent": frozenset({"api"}),
}

_K8S_CLIENTS = frozenset({"kopf", "kubernetes_asyncio", "kubernetes", "aiohttp"})
_OBSERVABILITY = frozenset({"structlog", "prometheus_client", "logging"})
# Third-party and stdlib modules each layer must not import.
MUST_NOT_IMPORT: dict[str, frozenset[str]] = {
    "engine": _K8S_CLIENTS
    | _OBSERVABILITY
    | {"asyncio", "pydantic", "time", "datetime", "random", "subprocess", "socket"},
    "state": _K8S_CLIENTS | _OBSERVABILITY | {"asyncio", "subprocess", "socket"},
    "control": _K8S_CLIENTS,
    "sim": _K8S_CLIENTS,
    "api": _K8S_CLIENTS | {"asyncio"},
    "sandbox": frozenset({"kopf", "kubernetes_asyncio"}),
    "agent": _K8S_CLIENTS | {"asyncio"},
}


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError(f"{path}:{node.lineno}: use absolute imports (atoll.<layer>)")
            if node.module:
                found.append((node.lineno, node.module))
    return found


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py"))


def _layer_of(path: Path) -> str | None:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else None


def test_every_subpackage_is_a_known_layer() -> None:
    subpackages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert subpackages <= set(LAYERS), f"unknown layer(s): {sorted(subpackages - set(LAYERS))}"


def test_operator_dir_is_a_source_root_not_a_package() -> None:
    assert not (PACKAGE.parent / "__init__.py").exists()


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_respects_layer_contract(path: Path) -> None:
    layer = _layer_of(path)
    if layer is None:  # atoll/__init__.py and __main__.py sit above every layer
        return
    errors = []
    for lineno, module in _imports(path):
        parts = module.split(".")
        if parts[0] == "atoll" and len(parts) > 1 and parts[1] in LAYERS:
            target = parts[1]
            if target != layer and target not in MAY_IMPORT[layer]:
                errors.append(f"line {lineno}: {layer} must not import atoll.{target}")
        elif parts[0] in MUST_NOT_IMPORT.get(layer, frozenset()):
            errors.append(f"line {lineno}: {layer} must not import {parts[0]}")
    assert not errors, f"{path.relative_to(PACKAGE)}: " + "; ".join(errors)


def test_contract_detects_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import time\nfrom atoll.kube import handlers\n")
    assert [m for _, m in _imports(bad)] == ["time", "atoll.kube"]
    assert "time" in MUST_NOT_IMPORT["engine"]
    assert "kube" not in MAY_IMPORT["engine"]
