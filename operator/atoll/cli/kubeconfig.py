"""The kubeconfig a command will use, checked before any client reads it, so that a missing
or unparseable file is a one-line usage error rather than a client library's traceback."""

from __future__ import annotations

import os
from pathlib import Path

import yaml


class KubeconfigError(ValueError):
    """The kubeconfig is missing or not a kubeconfig; the message names the file."""


def _candidates(explicit: Path | None) -> tuple[list[Path], str]:
    if explicit is not None:
        return [explicit], "--kubeconfig"
    env = os.environ.get("KUBECONFIG", "")
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p], "$KUBECONFIG"
    return [Path.home() / ".kube" / "config"], "the default"


def check_kubeconfig(explicit: Path | None, *, in_cluster: bool = False) -> None:
    """Raise KubeconfigError unless the kubeconfig the client will load (`explicit`, else
    $KUBECONFIG, else ~/.kube/config; nothing when `in_cluster` without `explicit`) exists
    and is a YAML mapping with a current context."""
    if explicit is None and in_cluster:
        return
    paths, origin = _candidates(explicit)
    existing = [p for p in paths if p.exists()]
    if not existing:
        names = ", ".join(str(p) for p in paths)
        raise KubeconfigError(
            f"kubeconfig {names} ({origin}) does not exist: give --kubeconfig FILE or set "
            "KUBECONFIG"
        )
    current = None
    for path in existing:
        try:
            doc = yaml.safe_load(path.read_text())
        except OSError as e:
            raise KubeconfigError(f"kubeconfig {path}: cannot read it: {e.strerror}") from e
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise KubeconfigError(f"kubeconfig {path}: not valid YAML{where}") from e
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise KubeconfigError(
                f"kubeconfig {path}: the top level is a {type(doc).__name__}, not a mapping "
                "(apiVersion: v1, kind: Config, clusters, users, contexts, current-context)"
            )
        current = current or doc.get("current-context")
    if not current:
        names = ", ".join(str(p) for p in existing)
        raise KubeconfigError(f"kubeconfig {names}: no current-context set")
