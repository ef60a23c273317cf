"""The mutating admission webhook on Job CREATE: a Job that atoll manages starts suspended.

Mirrors Kueue's `/mutate-batch-v1-job` (pkg/controller/jobs/job/job_webhook.go): the handler id
is the webhook path. kopf serves it and keeps the MutatingWebhookConfiguration (name from the
configuration) pointing at it with our CA bundle. Certificates come from `atoll.pki`.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import kopf

from atoll import pki
from atoll.api.core import Job
from atoll.api.labels import QUEUE_NAME_LABEL

WEBHOOK_ID = "mutate-batch-v1-job"


def register(
    registry: kopf.OperatorRegistry, manages: Callable[[Job], bool], *, all_jobs: bool
) -> None:
    """With `all_jobs` False (manageJobsWithoutQueueName off, the default) the webhook only
    sees Jobs that carry the queue-name label, so no other Job depends on atoll running."""
    labels = None if all_jobs else {QUEUE_NAME_LABEL: kopf.PRESENT}

    @kopf.on.mutate(
        "batch",
        "v1",
        "jobs",
        id=WEBHOOK_ID,
        operation="CREATE",
        labels=labels,
        registry=registry,
    )
    def suspend_managed_jobs(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        try:
            job = Job.from_dict(dict(body))
        except ValueError:
            return  # the API server validates Jobs; never block one we cannot read
        if not manages(job) or job.spec.suspend:
            return
        patch.setdefault("spec", {})["suspend"] = True


class ServiceWebhookServer(kopf.WebhookServer):
    """A kopf webhook server that the API server reaches through a Service (in a cluster)."""

    def __init__(self, *, service_namespace: str, service_name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.service_namespace = service_namespace
        self.service_name = service_name

    async def __call__(self, fn: Any) -> AsyncIterator[Any]:
        async for config in super().__call__(fn):
            yield {
                "caBundle": config.get("caBundle"),
                "service": {
                    "namespace": self.service_namespace,
                    "name": self.service_name,
                    "port": 443,
                    "path": "",
                },
            }


def make_server(
    *, addr: str, port: int, host: str, service: str | None, cert_dir: Path | None
) -> kopf.WebhookServer:
    """Generate a CA and a serving certificate (for `host` and the Service's DNS names) and
    build the server: URL-based for the sandbox, Service-based with `service=ns/name`."""
    folder = cert_dir or Path(tempfile.mkdtemp(prefix="atoll-webhook-"))
    names = [host] if host and not host[0].isdigit() else []
    ips = [host] if host and host[0].isdigit() else []
    if service:
        ns, _, name = service.partition("/")
        names += [f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local"]
    files = pki.write_serving_pki(folder, dns=tuple(names), ips=tuple(ips))
    common: dict[str, Any] = {
        "addr": addr,
        "port": port,
        "host": host,
        "certfile": files.serving_cert,
        "pkeyfile": files.serving_key,
        "cadata": files.ca_cert.read_bytes(),
    }
    if service:
        ns, _, name = service.partition("/")
        return ServiceWebhookServer(service_namespace=ns, service_name=name, **common)
    return kopf.WebhookServer(**common)
