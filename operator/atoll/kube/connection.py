"""Reaching the API server: which credentials (a kubeconfig or the in-cluster service
account), and waiting at start-up until the server answers.

A kubeconfig that is missing or unreadable is a `KubeconfigError` with one line saying why
(`atoll run` exits 2 on it); a server that does not answer yet is waited for, with one log
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

log = structlog.get_logger("atoll.kube")
SERVICE_ACCOUNT_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


class KubeconfigError(RuntimeError):
    """No usable credentials: the kubeconfig is missing, unreadable or incomplete."""


async def load(kubeconfig: Path | None, *, in_cluster: bool = False) -> None:
    """Configure kubernetes_asyncio's default client from `kubeconfig`, else in-cluster
    credentials (when `in_cluster`), else $KUBECONFIG or ~/.kube/config."""
    where = str(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG", "~/.kube/config")
    try:
        if kubeconfig is not None:
            if not await asyncio.to_thread(kubeconfig.is_file):
                raise KubeconfigError(f"cannot load the kubeconfig {kubeconfig}: no such file")
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
    version = client.VersionApi(api)
    url = server_url(api)

    def waiting(attempt: int, error: BaseException) -> None:
        if attempt & (attempt - 1) == 0:
            log.warning(f"waiting for the API server at {url}: {retry.describe(error)}")

    await retry.call(version.get_code, what="GET /version", on_retry=waiting)
