"""Installing atoll's CRDs on a sandbox, again and again.

The CRDs in `crds/` send the API server's ConversionReviews (Kueue's v1beta1 objects) to the
webhook Service of `deploy/`. The sandbox has no Service network, so an operator started there
(`--webhook url`) points each converting CRD at its own URL instead. Applying `crds/` again
as they are would then ask for a Service and a URL at once, which the API server refuses
("exactly one of url or service"). `apply_crds` keeps the URL a sandbox operator set.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
"""`Sandbox.kubectl`: (*args, input=None, check=True, timeout=...) → the finished kubectl."""


def _webhook(crd: dict[str, Any]) -> dict[str, Any] | None:
    conversion = (crd.get("spec") or {}).get("conversion") or {}
    found = conversion.get("webhook")
    return found if isinstance(found, dict) else None


def with_live_urls(
    documents: list[dict[str, Any]], live: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """`documents` (CRDs) with the conversion clientConfig of each whose installed copy in
    `live` (by name) calls a URL: that URL and its caBundle instead of the Service."""
    out = []
    for doc in documents:
        name = (doc.get("metadata") or {}).get("name")
        theirs = _webhook(live.get(str(name)) or {}) or {}
        have = theirs.get("clientConfig") or {}
        copied = json.loads(json.dumps(doc))
        ours = _webhook(copied)
        if ours is not None and have.get("url"):
            ours["clientConfig"] = {k: v for k, v in have.items() if k in ("url", "caBundle")}
        out.append(copied)
    return out


def apply_crds(kubectl: Kubectl, folder: Path, *, timeout: float = 60) -> list[str]:
    """Apply the CRDs of `folder` server-side (taking over fields others set), keeping the
    URL a sandbox operator gave a conversion webhook, and wait until every one is
    Established; their `crd/NAME` names."""
    documents = [
        doc
        for path in sorted(folder.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition"
    ]
    if not documents:
        raise FileNotFoundError(f"no CRDs in {folder}: run `make crds`")
    names = [f"crd/{doc['metadata']['name']}" for doc in documents]
    got = kubectl("get", *names, "-o", "json", "--ignore-not-found")
    listed = json.loads(got.stdout or "{}")
    items = listed.get("items", [listed]) if listed else []
    live = {item["metadata"]["name"]: item for item in items if item.get("metadata")}
    body = {"apiVersion": "v1", "kind": "List", "items": with_live_urls(documents, live)}
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(body))
    kubectl(
        "wait",
        "--for=condition=Established",
        f"--timeout={int(timeout)}s",
        *names,
        timeout=timeout + 30,
    )
    return names
