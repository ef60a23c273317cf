"""The mutating admission webhooks: of Jobs, of the managed custom kinds and of plain pods. On
Job CREATE and UPDATE, a Job that atoll manages starts suspended, its queue name must be a
DNS-1123 subdomain and cannot change while it runs (Kueue's queue-name rules of
pkg/controller/jobframework/validation.go).

Mirrors Kueue's `/mutate-batch-v1-job` (pkg/controller/jobs/job/job_webhook.go): the handler id
is the webhook path. atoll's own HTTPS server serves it (`atoll.kube.admission`: AdmissionReview
v1 in and out, each handler a plain function returning a merge patch, sent to the API server as
a JSON patch). The MutatingWebhookConfiguration belongs to the
deployment, not to one process, and no replica ever removes or empties it: in a cluster
(`service` mode) it is installed by `deploy/` and every replica serves one certificate kept in
a Secret, whose CA the operator patches into the configuration; in the sandbox (`url` mode)
a replica points it at its own URL and CA when it is missing or names a URL where nothing
listens any more, and it stays after that replica stops. With `failurePolicy: Fail`, a
managed Job created while no replica serves is refused (the API server says the webhook is
unreachable), never let through unsuspended.
Certificates come from `atoll.pki`, run in a short-lived child Python process
(`serving_certificate`): `cryptography` is about 8 MiB resident (its Rust extension alone),
and a certificate made once at start-up must not keep it loaded in the operator for its life.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import os
import subprocess
import sys
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from atoll.api import v1beta1
from atoll.api.core import Job, Pod
from atoll.api.labels import (
    MANAGED_LABEL,
    POD_FINALIZER,
    QUEUE_NAME_LABEL,
    ROLE_HASH_ANNOTATION,
    SUSPENDED_BY_PARENT_ANNOTATION,
)
from atoll.control import jobframework as jf
from atoll.control import podgroups
from atoll.kube import retry
from atoll.kube.admission import (
    CONVERT_PATH,
    AdmissionServer,
    Refused,
    Webhook,
    server_context,
)
from atoll.kube.kinds import CUSTOM_KINDS, CustomKind
from atoll.kube.rest import CRDS, MERGE, MUTATING_WEBHOOKS, SECRETS, Rest, decode

log = structlog.get_logger("atoll.webhook")

WEBHOOK_ID = "mutate-batch-v1-job"
POD_WEBHOOK_ID = "mutate--v1-pod"
"""Kueue's path of the pod webhook."""
RULES: dict[str, tuple[str, str, str]] = {
    WEBHOOK_ID: ("batch", "v1", "jobs"),
    **{k.webhook_id: (k.group, k.version, k.plural) for k in CUSTOM_KINDS.values()},
    POD_WEBHOOK_ID: ("", "v1", "pods"),
}
"""(group, version, plural) each mutating handler is called for."""


def _refuse(errors: list[str]) -> None:
    if errors:
        raise Refused(errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]", code=422)


def _merge(into: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """Merge the merge patch `patch` into the merge patch `into` (mappings deeply)."""
    for key, value in patch.items():
        if isinstance(value, Mapping):
            if not isinstance(into.get(key), dict):
                into[key] = {}
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def _defaulted(
    obj: Any, manages: Callable[[Any], bool], defaults: jf.Defaults
) -> tuple[Any, dict[str, Any]]:
    """A new object as Kueue's webhook defaults it, when atoll then manages it (its kind is
    enabled, its namespace managed, no managed kind owns it): without a queue name in a
    namespace with a default LocalQueue, labelled with it (LocalQueue defaulting); without a
    priority class while the WorkloadPriorityClass `default` applies, labelled with that
    (WorkloadPriorityClass defaulting); and the labels' merge patch. Else the object
    unchanged and no patch."""
    labelled = defaults.apply(obj)
    if labelled is obj or not manages(labelled):
        return obj, {}
    return labelled, {"metadata": {"labels": _added_labels(obj, labelled)}}


def _added_labels(before: Any, after: Any) -> dict[str, str]:
    had = before.metadata.labels or {}
    return {k: v for k, v in (after.metadata.labels or {}).items() if had.get(k) != v}


def job_webhook(manages: Callable[[Job], bool], defaults: jf.Defaults = jf.NO_DEFAULTS) -> Webhook:
    """The Job webhook. It filters Jobs itself rather than with a label filter, on the new
    and the old object: a Job whose queue-name label is removed must still be seen, and a
    new Job without one is labelled with its namespace's default LocalQueue, as Kueue's
    webhook does (`defaults`; also the WorkloadPriorityClass `default`). In a
    cluster the configuration sends it every Job outside the system namespaces
    (deploy/webhook.yaml); manageJobsWithoutQueueName is read by `manages`."""

    def admit_jobs(body: Mapping[str, Any], old: Mapping[str, Any] | None) -> dict[str, Any]:
        try:
            job = Job.from_dict(body)
            before = Job.from_dict(old) if old else None
        except ValueError:
            return {}  # the API server validates Jobs; never block one we cannot read
        patch: dict[str, Any] = {}
        if before is None:
            job, patch = _defaulted(job, manages, defaults)
        if not manages(job) and not (before is not None and manages(before)):
            return {}
        _refuse(
            jf.job_update_errors(
                before, job, has_default=defaults.queue(job.namespace or "default")
            )
            if before is not None
            else jf.job_create_errors(job)
        )
        if (before is None and not job.spec.suspend) or (
            before is not None and jf.suspends_on_update(before, job)  # its Workload rebuilt
        ):
            _merge(patch, {"spec": {"suspend": True}})
        return patch

    return Webhook(WEBHOOK_ID, *RULES[WEBHOOK_ID], ("CREATE", "UPDATE"), admit_jobs)


def kind_webhook(
    manages: Callable[[Any], bool],
    kind: CustomKind,
    defaults: jf.Defaults = jf.NO_DEFAULTS,
) -> Webhook:
    """A managed custom kind's webhook (Kueue's): a managed object is suspended at creation,
    gets its namespace's default LocalQueue when it names none (and the WorkloadPriorityClass
    `default`, `defaults`), and its queue name follows the same rules as a Job's."""

    def admit_owner(body: Mapping[str, Any], old: Mapping[str, Any] | None) -> dict[str, Any]:
        try:
            obj = kind.model.from_dict(body)
            before = kind.model.from_dict(old) if old else None
        except ValueError:
            return {}  # the kind's own webhook validates it; never block one we cannot read
        patch: dict[str, Any] = {}
        if before is None:
            obj, patch = _defaulted(obj, manages, defaults)
        if not manages(obj) and not (before is not None and manages(before)):
            return {}
        _refuse(
            jf.job_update_errors(
                before,
                obj,
                suspended=kind.suspended(obj),
                was_suspended=kind.suspended(before),
                has_default=defaults.queue(obj.namespace or "default"),
            )
            if before is not None
            else jf.job_create_errors(obj)
        )
        if before is None and not kind.suspended(obj):
            _merge(patch, kind.suspend_patch)
        if kind.defaults is not None and manages(obj):
            _merge(patch, kind.defaults(obj))
        return patch

    return Webhook(kind.webhook_id, *RULES[kind.webhook_id], ("CREATE", "UPDATE"), admit_owner)


def pod_webhook(
    manages: Callable[[Pod], bool],
    *,
    parents: frozenset[str] = frozenset(),
    defaults: jf.Defaults = jf.NO_DEFAULTS,
) -> Webhook:
    """The plain-pod integration's webhook (Kueue's): a pod created with a queue name and no
    controller (a Job's pods belong to their Job) is labelled `kueue.x-k8s.io/managed`, gets
    the `kueue.x-k8s.io/managed` finalizer (kept until its Workload has accounted for it), a
    grouped one its `kueue.x-k8s.io/role-hash`, and
    is gated with `kueue.x-k8s.io/admission` until its gang is admitted (and with
    `kueue.x-k8s.io/topology` when it asks for a topology: `podgroups.creation_gates`); a pod
    of a group must
    say the group's size; one without a priority class gets the WorkloadPriorityClass
    `default` when `defaults` says it applies. A pod whose template a managed owner marked
    with Kueue's `pod-suspending-parent` annotation, naming one of the enabled `parents` frameworks
    (LeaderWorkerSet), is gated whatever its controller."""

    def admit_pods(body: Mapping[str, Any], _old: Mapping[str, Any] | None) -> dict[str, Any]:
        try:
            pod = Pod.from_dict(body)
        except ValueError:
            return {}  # the API server validates pods; never block one we cannot read
        gated = podgroups.gated(pod)
        gates = [*((body.get("spec") or {}).get("schedulingGates") or ())]
        new = [{"name": g} for g in podgroups.creation_gates(pod)]
        gate = {"spec": {"schedulingGates": [*gates, *new]}}
        parent = (pod.metadata.annotations or {}).get(SUSPENDED_BY_PARENT_ANNOTATION)
        if parent is not None and parent in parents:
            return {} if gated else gate
        labels = pod.metadata.labels or {}
        owned = any(r.controller for r in pod.metadata.owner_references or ())
        if QUEUE_NAME_LABEL not in labels or owned or not manages(pod):
            return {}
        _refuse([*jf.job_create_errors(pod), *filter(None, [podgroups.total_count_error(pod)])])
        labelled = jf.with_default_priority_class(pod, defaults.priority_class())
        meta: dict[str, Any] = {"labels": {**_added_labels(pod, labelled), MANAGED_LABEL: "true"}}
        if podgroups.group_name(pod) is not None:
            meta["annotations"] = {ROLE_HASH_ANNOTATION: podgroups.shape_hash(pod)}
        finalizers = [*((body.get("metadata") or {}).get("finalizers") or ())]
        if POD_FINALIZER not in finalizers:
            meta["finalizers"] = [*finalizers, POD_FINALIZER]
        return {"metadata": meta, **({} if gated else gate)}

    return Webhook(POD_WEBHOOK_ID, *RULES[POD_WEBHOOK_ID], ("CREATE",), admit_pods)


def _unchanged(_body: Mapping[str, Any], _old: Mapping[str, Any] | None) -> dict[str, Any]:
    return {}


def passthrough(served: Iterable[Webhook]) -> list[Webhook]:
    """A webhook that lets every request through unchanged at each path of `RULES` not in
    `served`: the paths of the integrations that are not enabled, which `deploy/webhook.yaml`
    configures all the same (Kueue registers a no-op webhook for every disabled framework),
    so that the API server, whose webhooks fail closed, is never refused there."""
    ids = {h.id for h in served}
    return [
        Webhook(i, *rule, (), _unchanged, reads_cache=False)
        for i, rule in RULES.items()
        if i not in ids
    ]


@dataclass(frozen=True, slots=True)
class UrlServer:
    """A webhook server reached by URL (the sandbox), and what its configuration needs."""

    server: AdmissionServer
    url: str
    ca: bytes


def serving_certificate(
    *, dns: tuple[str, ...] = (), ips: tuple[str, ...] = ()
) -> tuple[bytes, bytes, bytes]:
    """A fresh CA and a serving certificate for `dns` and `ips` (the first name is its
    subject), as PEM: (CA certificate, certificate, key). Made by `python -m atoll.pki` in a
    child process, so that `cryptography` is never loaded in the operator."""
    if not dns and not ips:
        raise ValueError("a serving certificate needs a DNS name or an IP address")
    root = str(Path(__file__).resolve().parents[2])  # the folder holding the atoll package
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    names = json.dumps({"dns": list(dns), "ips": list(ips)})
    try:
        out = subprocess.run(
            [sys.executable, "-P", "-m", "atoll.pki", names],
            env=dict(os.environ, PYTHONPATH=path),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=True,
            timeout=300,
        )
    except subprocess.CalledProcessError as e:
        why = (e.stderr or b"").decode(errors="replace").strip().splitlines()[-1:]
        raise RuntimeError(f"making the webhook certificate failed: {''.join(why)}") from e
    ca, cert, key = json.loads(out.stdout)
    return ca.encode(), cert.encode(), key.encode()


def make_url_server(*, addr: str, port: int, host: str) -> UrlServer:
    """For the sandbox: a fresh CA and serving certificate for `host`, served at
    `https://host:port`."""
    is_ip = host.replace(".", "").isdigit()
    ca, cert, key = serving_certificate(dns=() if is_ip else (host,), ips=(host,) if is_ip else ())
    server = AdmissionServer(addr=addr, port=port, context=server_context(cert, key))
    return UrlServer(server=server, url=f"https://{host}:{port}", ca=ca)


def object_selector(hook_id: str) -> dict[str, Any] | None:
    """Which objects the API server sends to the webhook `hook_id` (as deploy/webhook.yaml
    selects them): every Job and every object of a managed kind (a new one without a queue
    name may get its namespace's default LocalQueue, as with Kueue), but only the plain
    pods that name a queue, so that no other pod depends on atoll running."""
    if hook_id != POD_WEBHOOK_ID:
        return None
    return {"matchExpressions": [{"key": QUEUE_NAME_LABEL, "operator": "Exists"}]}


def url_webhooks(
    hooks: Iterable[Webhook],
    *,
    configuration: str,
    url: str,
    ca: bytes,
    skip_namespaces: tuple[str, ...],
) -> list[dict[str, Any]]:
    """The webhooks of the configuration `configuration` for `hooks` (named
    `<webhook id>.<configuration>`), called at `url`: the same shape as deploy/webhook.yaml,
    with a URL instead of a Service."""
    config = []
    for hook in hooks:
        config.append(
            {
                "name": f"{hook.id}.{configuration}",
                "admissionReviewVersions": ["v1"],
                "clientConfig": {
                    "url": f"{url}/{urllib.parse.quote(hook.id)}",
                    "caBundle": base64.b64encode(ca).decode(),
                },
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "matchPolicy": "Equivalent",
                "reinvocationPolicy": "Never",
                "timeoutSeconds": 10,
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": list(skip_namespaces),
                        }
                    ]
                },
                "objectSelector": object_selector(hook.id),
                "rules": [
                    {
                        "apiGroups": [hook.group],
                        "apiVersions": [hook.version],
                        "operations": list(hook.operations),
                        "resources": [hook.plural],
                        "scope": "Namespaced",
                    }
                ],
            }
        )
    return config


async def listening(url: str) -> bool:
    """Something accepts TCP connections at the host and port of `url` (within a second)."""
    parts = urllib.parse.urlsplit(url)
    try:
        async with asyncio.timeout(1.0):
            _, writer = await asyncio.open_connection(parts.hostname, parts.port or 443)
    except (OSError, TimeoutError):
        return False
    writer.close()
    return True


async def own_url_configuration(
    api: client.ApiClient, name: str, webhooks: list[dict[str, Any]]
) -> None:
    """Create the MutatingWebhookConfiguration `name`, or point its webhooks at this replica
    (retried while the API server is unreachable). Nothing in atoll ever deletes it."""
    rest = Rest(api)

    async def once() -> None:
        try:
            raw = decode(await rest.request("GET", MUTATING_WEBHOOKS.path(None, name)))
        except ApiException as e:
            if e.status != 404:
                raise
            body = {
                "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "atoll"}},
                "webhooks": webhooks,
            }
            await rest.request("POST", MUTATING_WEBHOOKS.path(None), body)
            return
        raw["webhooks"] = webhooks
        await rest.request("PUT", MUTATING_WEBHOOKS.path(None, name), raw)

    for _ in range(5):
        try:
            await retry.call(once, what=f"MutatingWebhookConfiguration {name}")
            return
        except ApiException as e:
            if e.status != 409:
                raise
    raise RuntimeError(f"MutatingWebhookConfiguration {name} kept changing")


@dataclass(frozen=True, slots=True)
class SharedCert:
    ca: bytes
    cert: bytes
    key: bytes


async def shared_certificate(
    api: client.ApiClient, *, namespace: str, secret: str, service: str
) -> SharedCert:
    """In a cluster every replica must serve the same certificate (the Service spreads calls
    across them): the first creates it in a Secret, the others read it (create is atomic)."""
    rest = Rest(api)
    for _ in range(5):
        try:
            found = decode(
                await retry.call(
                    lambda: rest.request("GET", SECRETS.path(namespace, secret)),
                    what="webhook Secret",
                )
            )
            data = found.get("data") or {}
            return SharedCert(
                ca=base64.b64decode(data["ca.crt"]),
                cert=base64.b64decode(data["tls.crt"]),
                key=base64.b64decode(data["tls.key"]),
            )
        except ApiException as e:
            if e.status != 404:
                raise
        names = (f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local")
        ca, cert, key = await asyncio.to_thread(serving_certificate, dns=names)
        made = SharedCert(ca=ca, cert=cert, key=key)
        body = {
            "metadata": {"name": secret, "namespace": namespace},
            "type": "kubernetes.io/tls",
            "data": {
                "ca.crt": base64.b64encode(made.ca).decode(),
                "tls.crt": base64.b64encode(made.cert).decode(),
                "tls.key": base64.b64encode(made.key).decode(),
            },
        }
        try:
            await retry.call(
                lambda body=body: rest.request("POST", SECRETS.path(namespace), body),  # type: ignore[misc]
                what="webhook Secret",
            )
            return made
        except ApiException as e:
            if e.status != 409:
                raise  # 409: another replica won the race; read its certificate
    raise RuntimeError(f"webhook certificate Secret {namespace}/{secret} kept changing")


def selector_differences(raw: Mapping[str, Any]) -> list[str]:
    """The webhooks of an installed configuration whose objectSelector is not atoll's
    (`object_selector`), as warnings: an older deploy/webhook.yaml sent only labelled Jobs,
    so a namespace's default LocalQueue would never be applied."""
    out = []
    for hook in raw.get("webhooks") or ():
        service = (hook.get("clientConfig") or {}).get("service") or {}
        handler = str(service.get("path") or "").removeprefix("/")
        if handler not in RULES:
            continue
        have, want = hook.get("objectSelector") or None, object_selector(handler)
        if have != want:
            out.append(
                f"webhook {hook.get('name')} has objectSelector {json.dumps(have)}, atoll's "
                f"deploy/webhook.yaml has {json.dumps(want)}"
                + (
                    ": objects without a queue name are not sent to atoll, so a namespace's "
                    "LocalQueue named default is not applied to them (re-apply deploy/)"
                    if want is None
                    else ""
                )
            )
    return out


async def patch_ca_bundle(api: client.ApiClient, configuration: str, ca: bytes) -> None:
    """Fill `caBundle` of every webhook of the installed MutatingWebhookConfiguration (and
    warn of objectSelectors that are not atoll's: `selector_differences`)."""
    rest = Rest(api)
    path = MUTATING_WEBHOOKS.path(None, configuration)
    warned = False
    for _ in range(5):
        raw = decode(
            await retry.call(
                lambda: rest.request("GET", path),
                what=f"MutatingWebhookConfiguration {configuration}",
            )
        )
        if not warned:
            warned = True
            for message in selector_differences(raw):
                log.warning(
                    "webhook configuration differs", configuration=configuration, why=message
                )
        bundle = base64.b64encode(ca).decode()
        hooks = raw.get("webhooks") or []
        if all(h.get("clientConfig", {}).get("caBundle") == bundle for h in hooks):
            return
        for hook in hooks:
            hook.setdefault("clientConfig", {})["caBundle"] = bundle
        try:
            await retry.call(
                lambda raw=raw: rest.request("PUT", path, raw),  # type: ignore[misc]
                what=f"MutatingWebhookConfiguration {configuration}",
            )
            return
        except ApiException as e:
            if e.status != 409:
                raise
    raise RuntimeError(f"MutatingWebhookConfiguration {configuration} kept changing")


def make_service_server(*, addr: str, port: int, cert: SharedCert) -> AdmissionServer:
    """For a cluster: the shared certificate (`shared_certificate`), served at addr:port."""
    return AdmissionServer(addr=addr, port=port, context=server_context(cert.cert, cert.key))


def conversion_service(service: str, ca: bytes) -> dict[str, Any]:
    """A conversion webhook's clientConfig for the Service `NAMESPACE/NAME` (port 443)."""
    namespace, _, name = service.partition("/")
    return {
        "service": {"namespace": namespace, "name": name, "path": CONVERT_PATH, "port": 443},
        "caBundle": base64.b64encode(ca).decode(),
    }


def conversion_url(url: str, ca: bytes) -> dict[str, Any]:
    """A conversion webhook's clientConfig for a replica reached by URL (the sandbox)."""
    return {"url": f"{url}{CONVERT_PATH}", "caBundle": base64.b64encode(ca).decode()}


CONVERSION_ATTEMPTS = 4
"""Tries of each CRD request of `point_conversion` (it must not hold up start-up)."""


async def _answers(url: str) -> bool:
    """`listening`, False for a URL that names no usable host and port."""
    try:
        return await listening(url)
    except ValueError:
        return False


async def point_conversion(
    api: client.ApiClient,
    client_config: Mapping[str, Any],
    *,
    take_from_live: bool,
    take_from_service: bool = True,
    attempts: int = CONVERSION_ATTEMPTS,
) -> list[str]:
    """Make the conversion webhook of each CRD of `v1beta1.CONVERTED_CRDS` call `client_config`, so
    that the API server can serve Kueue's v1beta1 objects; the names of the CRDs changed.

    A CRD that is not installed, or that does not serve v1beta1 (an older crds/), is left as it
    is with a warning. With `take_from_live` False, a CRD whose webhook is another replica's
    URL where something listens is left to it (the sandbox's replicas); with
    `take_from_service` False, so is one that names a Service (the sandbox's periodic check
    replaces only a replica that stopped, never what someone configured). Failures (no
    permission, the API server unreachable after a few tries, anything unforeseen) are
    warnings too: only v1beta1 requests and objects still stored as v1beta1 depend on it (the
    initial listing then waits, and says why), so the operator runs on without. A CRD
    update closes the API server's watches of that resource, so nothing is written when the
    CRD already says the same."""
    rest = Rest(api)
    changed: list[str] = []
    for name in v1beta1.CONVERTED_CRDS:
        path = CRDS.path(None, name)
        try:
            raw = decode(
                await retry.call(
                    lambda path=path: rest.request("GET", path),  # type: ignore[misc]
                    what=f"CRD {name}",
                    attempts=attempts,
                )
            )
            spec = raw.get("spec") or {}
            served = {v.get("name") for v in spec.get("versions") or () if v.get("served")}
            if "v1beta1" not in served:
                log.warning(
                    "CRD does not serve kueue.x-k8s.io/v1beta1: re-apply atoll's crds/",
                    crd=name,
                )
                continue
            webhook_ = (spec.get("conversion") or {}).get("webhook") or {}
            have = webhook_.get("clientConfig") or {}
            if have == dict(client_config):
                continue
            other = have.get("url")
            if not take_from_live and other and await _answers(str(other)):
                continue
            if not take_from_service and have.get("service"):
                continue
            patch_config: dict[str, Any] = {"url": None, "service": None, **client_config}
            body = {
                "spec": {
                    "conversion": {
                        "strategy": "Webhook",
                        "webhook": {
                            "conversionReviewVersions": ["v1"],
                            "clientConfig": patch_config,
                        },
                    }
                }
            }
            await retry.call(
                lambda path=path, body=body: rest.request("PATCH", path, body, content_type=MERGE),  # type: ignore[misc]
                what=f"CRD {name}",
                attempts=attempts,
            )
            changed.append(name)
        except ApiException as e:
            if e.status == 404:
                log.warning("CRD not installed: v1beta1 objects are not served", crd=name)
                continue
            log.warning(
                "conversion webhook not configured: kueue.x-k8s.io/v1beta1 requests will fail",
                crd=name,
                status=e.status,
                why=str(e.body or e.reason)[:400],
            )
        except Exception as e:  # the API server gone, a bug: v1beta2 still works
            log.warning(
                "conversion webhook not configured: kueue.x-k8s.io/v1beta1 requests will fail",
                crd=name,
                why=repr(e)[:400],
            )
    if changed:
        log.info("conversion webhook configured", crds=changed)
    return changed
