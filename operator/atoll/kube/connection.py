"""Reaching the API server: which credentials (a kubeconfig or the in-cluster service
account), and waiting at start-up until the server answers.

A kubeconfig that is missing, unreadable or not a kubeconfig is a `KubeconfigError` with one
line naming the file and saying why (`check_kubeconfig`, which the commands also call before
anything else, so that it is a usage error with exit 2 rather than a client library's
traceback); a server that does not answer yet is waited for, with one log
line per backoff window ("waiting for the API server at URL: <error>").
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import structlog
import yaml
from kubernetes_asyncio import client, config

from atoll.kube import retry
from atoll.kube.rest import Rest

log = structlog.get_logger("atoll.kube")
SERVICE_ACCOUNT_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


class KubeconfigError(ValueError):
    """No usable credentials: the kubeconfig is missing, unreadable or incomplete; the
    message names the file."""


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


async def load(kubeconfig: Path | None, *, in_cluster: bool = False) -> None:
    """Configure kubernetes_asyncio's default client from `kubeconfig`, else in-cluster
    credentials (when `in_cluster`), else $KUBECONFIG or ~/.kube/config."""
    where = str(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG", "~/.kube/config")
    try:
        await asyncio.to_thread(check_kubeconfig, kubeconfig, in_cluster=in_cluster)
        if kubeconfig is not None:
            await config.load_kube_config(config_file=str(kubeconfig))
        elif in_cluster:
            config.load_incluster_config()
            where = "in-cluster service account"
        else:
            await config.load_kube_config()
    except KubeconfigError:
        raise
    except (config.ConfigException, OSError, TypeError, ValueError, yaml.YAMLError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise KubeconfigError(f"cannot load the kubeconfig {where}: {first}") from e


class RefusedError(RuntimeError):
    """The API server refused, for good, a request atoll cannot run without."""


def refused(error: Exception) -> RefusedError:
    """One line for an API refusal that ends `atoll run` (with a hint for a missing CRD)."""
    status = retry.status_of(error)
    hint = ""
    if status == 404:
        hint = " (are the CRDs installed? kubectl apply --server-side -f crds/)"
    elif status in (401, 403):
        hint = " (do the credentials have atoll's RBAC? see deploy/rbac.yaml)"
    return RefusedError(f"the API server refused a request: {retry.describe(error)}{hint}")


def server_url(api: client.ApiClient) -> str:
    return str(getattr(api.configuration, "host", "") or "?")


async def wait_for_server(api: client.ApiClient) -> None:
    """Return once the API server answers `/version`; until then log one line per backoff
    window (the 1st, 2nd, 4th … failed attempt), never a traceback."""
    rest = Rest(api)
    url = server_url(api)

    def waiting(attempt: int, error: BaseException) -> None:
        if attempt & (attempt - 1) == 0:
            log.warning(f"waiting for the API server at {url}: {retry.describe(error)}")

    await retry.call(lambda: rest.request("GET", "/version"), what="GET /version", on_retry=waiting)
