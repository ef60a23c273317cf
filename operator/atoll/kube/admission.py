"""atoll's HTTPS server for its mutating admission webhooks: AdmissionReview v1 in, v1 out.

Each webhook is a plain function of the object (and, on UPDATE, the old object) that returns
a merge patch (RFC 7386: a mapping merges into the object, a list or a scalar replaces the
value, None removes it) or raises `Refused`. The server turns that merge patch into the
JSON patch (RFC 6902) the API server applies (`json_patch`), or a refusal into
`allowed: false` with its status code and message. A webhook is served at `/<its id>`.

The same server answers the API server's ConversionReviews (apiextensions.k8s.io/v1) at
`/convert`: Kueue's v1beta1 objects to v1beta2 and back (`atoll.api.v1beta1.convert`). An
object that cannot be converted fails the whole review with a message naming it and the field.

A request the server cannot read is answered with an HTTP error, never with a review: a body
over `MAX_REVIEW_BYTES` 413, a body that is not an AdmissionReview v1 400, a path that names
no webhook 404 (with `failurePolicy: Fail` the API server then refuses the request).

The server may listen before the replica's cache is filled (`serve(..., ready=...)`): the
conversions need nothing of the cluster, and the API server needs them to list ClusterQueues
and LocalQueues still stored as v1beta1, the replica's own initial listing included. An
admission review whose webhook reads the cache (a namespace's default LocalQueue) waits for
`ready` up to `READY_WAIT` seconds, then is answered 503; one that lets everything through
(a disabled integration's path) is answered at once.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import structlog
from aiohttp import web

from atoll.api import v1beta1
from atoll.kube.rest import decode

log = structlog.get_logger("atoll.webhook")

MAX_REVIEW_BYTES = 32 * 1024 * 1024
"""The largest AdmissionReview the server reads (413 above). The API server takes request
bodies up to 3 MiB and an UPDATE review carries the object twice (old and new), so this
leaves room for JSON escaping; aiohttp's default (1 MiB) answered 413 to labelled Jobs above
~1 MiB."""
REVIEW_API_VERSION = "admission.k8s.io/v1"
CONVERSION_API_VERSION = "apiextensions.k8s.io/v1"
CONVERT_PATH = "/convert"
READY_WAIT = 8.0
"""Seconds an admission review waits for the cache to be filled before it is answered 503:
under the 10 s `timeoutSeconds` of deploy/webhook.yaml, so the API server reads the 503
(and its reason) rather than a timeout."""

Admit = Callable[[Mapping[str, Any], Mapping[str, Any] | None], Mapping[str, Any]]
"""A webhook's function: (object, old object on UPDATE else None) → merge patch (empty: no
change); raises `Refused` to refuse the request."""


class Refused(Exception):  # noqa: N818 (a refusal, not an error of atoll)
    """The request under review is refused: `allowed: false` with this code and message."""

    def __init__(self, message: str, code: int = 422) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class BadReviewError(ValueError):
    """The body is not an AdmissionReview v1 request (answered 400)."""


@dataclass(frozen=True, slots=True)
class Webhook:
    """One mutating webhook: its id (its path), the resource and operations it is called
    for, and its function."""

    id: str
    group: str
    version: str
    plural: str
    operations: tuple[str, ...]
    admit: Admit
    reads_cache: bool = True
    """Whether `admit` reads the replica's cache (a namespace's default LocalQueue): such a
    webhook's reviews wait for the initial listing (`AdmissionServer.serve`)."""


@dataclass(frozen=True, slots=True)
class Review:
    """What a webhook reads of an AdmissionReview request."""

    uid: str
    operation: str
    resource: tuple[str, str, str]
    """(group, version, resource) of the request, after the API server's conversion."""
    object: Mapping[str, Any] | None
    old_object: Mapping[str, Any] | None


def decode_review(body: bytes) -> Review:
    """The request of an AdmissionReview v1 JSON body; `BadReviewError` names what is wrong."""
    try:
        data = decode(body)
    except ValueError as e:
        raise BadReviewError(f"the body is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise BadReviewError("the body is not a JSON object")
    if data.get("apiVersion") != REVIEW_API_VERSION or data.get("kind") != "AdmissionReview":
        raise BadReviewError(
            f"expected apiVersion {REVIEW_API_VERSION} kind AdmissionReview, got "
            f"apiVersion {data.get('apiVersion')!r} kind {data.get('kind')!r}"
        )
    request = data.get("request")
    if not isinstance(request, dict):
        raise BadReviewError("request: missing or not an object")
    uid, operation = request.get("uid"), request.get("operation")
    if not isinstance(uid, str) or not uid:
        raise BadReviewError("request.uid: missing or not a string")
    if not isinstance(operation, str) or not operation:
        raise BadReviewError("request.operation: missing or not a string")
    resource = request.get("resource")
    if not isinstance(resource, dict) or not all(
        isinstance(resource.get(k), str) for k in ("group", "version", "resource")
    ):
        raise BadReviewError("request.resource: needs group, version and resource strings")
    objects = {}
    for field in ("object", "oldObject"):
        value = request.get(field)
        if value is not None and not isinstance(value, dict):
            raise BadReviewError(f"request.{field}: not an object")
        objects[field] = value
    return Review(
        uid=uid,
        operation=operation,
        resource=(resource["group"], resource["version"], resource["resource"]),
        object=objects["object"],
        old_object=objects["oldObject"],
    )


def _pointer(path: Iterable[str]) -> str:
    """An RFC 6901 JSON pointer (`~` and `/` escaped: label keys hold `/`)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _pruned(merge: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch as the value it sets where nothing was (its None entries dropped)."""
    return {
        k: _pruned(v) if isinstance(v, Mapping) else v for k, v in merge.items() if v is not None
    }


def _same(a: Any, b: Any) -> bool:
    """Equal JSON values, of the same JSON types all the way down (Python's `==` has
    1 == True == 1.0, inside lists and maps too)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def json_patch(obj: Mapping[str, Any], merge: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch ops (RFC 6902) that turn `obj` into `obj` with the merge patch `merge`
    applied (RFC 7386). Changes that change nothing (a value already there, a removal of
    what is absent) give no op, so an empty list means the object is let through as it is.
    A list is replaced whole (a merge patch has no list operations); the API server applies
    the ops to the object it sent, so the result is the same as an element-wise diff's."""
    ops: list[dict[str, Any]] = []

    def walk(have: Mapping[str, Any], patch: Mapping[str, Any], path: tuple[str, ...]) -> None:
        for key, value in patch.items():
            here = (*path, key)
            present = key in have
            if value is None:
                if present:
                    ops.append({"op": "remove", "path": _pointer(here)})
            elif isinstance(value, Mapping):
                current = have.get(key)
                if isinstance(current, Mapping):
                    walk(current, value, here)
                else:
                    op = "replace" if present else "add"
                    ops.append({"op": op, "path": _pointer(here), "value": _pruned(value)})
            elif not present:
                ops.append({"op": "add", "path": _pointer(here), "value": value})
            elif not _same(have[key], value):
                ops.append({"op": "replace", "path": _pointer(here), "value": value})

    walk(obj, merge, ())
    return ops


def respond(hook: Webhook, review: Review) -> dict[str, Any]:
    """The AdmissionReview v1 answer of `hook` to `review`: allowed, with the JSON patch of
    the hook's merge patch (none when it changes nothing), or refused. A review of another
    resource than the hook's is a `BadReviewError`; an operation the hook is not for is allowed
    unchanged."""
    group, version, plural = review.resource
    if (group, version, plural) != (hook.group, hook.version, hook.plural):
        raise BadReviewError(
            f"request.resource: webhook {hook.id} serves {hook.group}/{hook.version} "
            f"{hook.plural}, not {group}/{version} {plural}"
        )
    answer: dict[str, Any] = {"uid": review.uid, "allowed": True}
    if review.operation in hook.operations:
        if review.object is None:
            raise BadReviewError(f"request.object: missing on {review.operation}")
        old = review.old_object if review.operation == "UPDATE" else None
        try:
            merge = hook.admit(review.object, old)
        except Refused as e:
            answer["allowed"] = False
            answer["status"] = {"code": e.code, "message": e.message}
            merge = {}
        except Exception as e:  # a bug: refuse (as failurePolicy Fail would), say why
            log.exception("webhook failed", webhook=hook.id, uid=review.uid)
            answer["allowed"] = False
            answer["status"] = {"code": 500, "message": f"webhook {hook.id} failed: {e!r}"}
            merge = {}
        ops = json_patch(review.object, merge) if merge else []
        if ops:
            answer["patchType"] = "JSONPatch"
            answer["patch"] = base64.b64encode(orjson.dumps(ops)).decode("ascii")
    return {"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview", "response": answer}


def convert_review(body: bytes) -> dict[str, Any]:
    """The ConversionReview v1 answer to a request body: every object converted to the
    desired version, or `Failed` with the first object that cannot be. `BadReviewError` when
    the body is not a ConversionReview v1 request."""
    try:
        data = decode(body)
    except ValueError as e:
        raise BadReviewError(f"the body is not JSON: {e}") from None
    if not isinstance(data, dict) or (data.get("apiVersion"), data.get("kind")) != (
        CONVERSION_API_VERSION,
        "ConversionReview",
    ):
        raise BadReviewError(f"expected apiVersion {CONVERSION_API_VERSION} kind ConversionReview")
    request = data.get("request")
    if not isinstance(request, dict):
        raise BadReviewError("request: missing or not an object")
    uid, desired, objects = (
        request.get("uid"),
        request.get("desiredAPIVersion"),
        request.get("objects"),
    )
    if not isinstance(uid, str) or not uid:
        raise BadReviewError("request.uid: missing or not a string")
    if not isinstance(desired, str) or not isinstance(objects, list):
        raise BadReviewError("request: needs desiredAPIVersion and a list of objects")
    answer: dict[str, Any] = {"uid": uid}
    converted = []
    for i, obj in enumerate(objects):
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        meta = meta if isinstance(meta, dict) else {}
        name = "/".join(str(p) for p in (meta.get("namespace"), meta.get("name")) if p)
        try:
            if not isinstance(obj, dict):
                raise v1beta1.ConversionError("not an object")
            converted.append(v1beta1.convert(obj, desired))
        except v1beta1.ConversionError as e:
            kind = obj.get("kind") if isinstance(obj, dict) else None
            answer["result"] = {
                "status": "Failed",
                "message": f"cannot convert {kind or 'object'} {name or f'#{i}'} to {desired}: {e}",
            }
            log.warning("conversion failed", object=name, to=desired, error=str(e))
            break
    else:
        answer["convertedObjects"] = converted
        answer["result"] = {"status": "Success"}
    return {"apiVersion": CONVERSION_API_VERSION, "kind": "ConversionReview", "response": answer}


def server_context(cert: bytes, key: bytes) -> ssl.SSLContext:
    """A TLS server context for the PEM certificate (chain) and key (written to a private
    temporary folder only while `ssl` loads them)."""
    context = ssl.create_default_context(purpose=ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory(prefix="atoll-webhook-") as folder:  # 0700
        certfile, keyfile = Path(folder) / "tls.crt", Path(folder) / "tls.key"
        certfile.write_bytes(cert)
        keyfile.touch(mode=0o600)
        keyfile.write_bytes(key)
        context.load_cert_chain(certfile, keyfile)
    return context


class AdmissionServer:
    """Serves webhooks over HTTPS at `https://addr:port/<webhook id>`."""

    def __init__(self, *, addr: str, port: int, context: ssl.SSLContext | None) -> None:
        self.addr = addr
        self.port = port
        self.context = context
        """None only in tests: plain HTTP."""
        self.listening = asyncio.Event()
        """Set once `serve` listens (cleared when it stops)."""

    def app(self, hooks: Sequence[Webhook], ready: asyncio.Event | None = None) -> web.Application:
        by_id = {h.id: h for h in hooks}

        async def serve(request: web.Request) -> web.Response:
            hook = by_id.get(request.match_info["id"])
            if hook is None:
                raise web.HTTPNotFound(text=f"no webhook at {request.path}")
            if hook.reads_cache and ready is not None and not ready.is_set():
                try:
                    async with asyncio.timeout(READY_WAIT):
                        await ready.wait()
                except TimeoutError:
                    raise web.HTTPServiceUnavailable(
                        text="atoll has not finished listing the cluster yet; retry"
                    ) from None
            body = await request.read()  # 413 past client_max_size
            try:
                answer = respond(hook, decode_review(body))
            except BadReviewError as e:
                raise web.HTTPBadRequest(text=f"not an AdmissionReview v1 request: {e}") from None
            return web.Response(body=orjson.dumps(answer), content_type="application/json")

        async def convert(request: web.Request) -> web.Response:
            body = await request.read()
            try:
                # In a thread: one review may hold every LocalQueue of the cluster (the API
                # server fills its v1beta1 watch cache with one list), whose conversion must
                # not stop the event loop (lease, admissions) for as long.
                answer = await asyncio.to_thread(lambda: orjson.dumps(convert_review(body)))
            except BadReviewError as e:
                raise web.HTTPBadRequest(text=f"not a ConversionReview v1 request: {e}") from None
            return web.Response(body=answer, content_type="application/json")

        app = web.Application(client_max_size=MAX_REVIEW_BYTES)
        app.router.add_post(CONVERT_PATH, convert)
        app.router.add_post("/{id}", serve)
        return app

    async def serve(self, hooks: Sequence[Webhook], ready: asyncio.Event | None = None) -> None:
        """Listen until cancelled; admission reviews wait for `ready` (None: ready now),
        conversions never do."""
        runner = web.AppRunner(self.app(hooks, ready), handle_signals=False, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(
                runner, self.addr or None, self.port, ssl_context=self.context, reuse_address=True
            )
            await site.start()
            log.info("webhook server listening", addr=self.addr, port=self.port)
            self.listening.set()
            await asyncio.Event().wait()
        finally:
            self.listening.clear()
            await runner.cleanup()
