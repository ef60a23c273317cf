"""Kueue's deprecated `kueue.x-k8s.io/v1beta1`: its schemas and its conversion to and from
v1beta2, the version atoll stores and reads.

Kueue still serves v1beta1 (deprecated since v0.16) beside its storage version v1beta2, so
that manifests written for older Kueue releases keep working. atoll serves it for the kinds an
admin writes (`V1BETA1_KINDS`): ClusterQueue and LocalQueue, whose fields differ, are converted
by atoll's webhook (`/convert`, `atoll.kube.admission`), which calls `convert`; ResourceFlavor,
Cohort, Topology, WorkloadPriorityClass and AdmissionCheck have the same spec in both versions
and need no webhook. `atoll simulate` reads v1beta1 objects through the same `convert`.

Workloads are served in v1beta2 only, unlike Kueue. The API server keeps a watch cache per
served version, and fills a converted version's cache through the webhook: with a v1beta1
Workload, every Workload change (creation, each status write) would be sent through the webhook
whether or not anyone reads v1beta1: on the sandbox, 1,000 pending Workloads made 2,000
conversions and 2.48 s of operator CPU (measured while atoll served it). atoll writes the
Workloads itself, so no admin's manifest holds one; a tool that reads them in v1beta1 only (a
kueuectl or dashboard older than Kueue v0.15) gets "the server doesn't have a resource type".
A ClusterQueue's or LocalQueue's status is written at most once a second.

The differences, as Kueue's apis/kueue/v1beta1/*_conversion.go defines them (fields that
only one version has and that Kueue drops are pruned by the API server for the kinds it
converts alone: AdmissionCheck's `retryDelayMinutes`, a Cohort status's
`admissionFairSharingStatus`):

- ClusterQueue: `spec.cohort` is v1beta2's `spec.cohortName`; v1beta1's list of names
  `spec.admissionChecks` becomes `spec.admissionChecksStrategy.admissionChecks[].name` (and
  replaces a strategy given beside it); `flavorFungibility`'s `Borrow` and `Preempt` are
  `MayStopSearch`. v1beta1 has no `concurrentAdmissionPolicy`. Its deprecated
  `status.pendingWorkloadsStatus` and `status.fairSharing.admissionFairSharingStatus` are
  dropped.
- LocalQueue: `status.flavorUsage` is v1beta2's `status.flavorsUsage`; the deprecated
  `status.flavors` is dropped.
- AdmissionCheck: v1beta1's `spec.retryDelayMinutes` (deprecated, without effect) is accepted
  and dropped.

Going up and down again gives back the same object except where v1beta2 has no place for a
field (the ones dropped above) or two v1beta1 forms mean the same (`admissionChecks` comes back
as a strategy, `Borrow` as `MayStopSearch`), as with Kueue. Going down and up again loses
what v1beta1 has no place for: a ClusterQueue written back in v1beta1 (`kubectl edit` of a
v1beta1 read) loses its `concurrentAdmissionPolicy`, as with Kueue.

`convert` raises only `ConversionError`, naming the field, whatever the input: the webhook
answers with it, and `atoll simulate` prints it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, Final

from atoll.api.clusterqueue import GROUP

V1BETA1: Final = f"{GROUP}/v1beta1"
V1BETA2: Final = f"{GROUP}/v1beta2"
DEPRECATION_WARNING: Final = "kueue.x-k8s.io/v1beta1 is deprecated; use kueue.x-k8s.io/v1beta2"
CONVERTED_PLURALS: Final = {"ClusterQueue": "clusterqueues", "LocalQueue": "localqueues"}
"""The kinds whose CRD converts through the webhook (and their plurals); the others only
change apiVersion."""
CONVERTED_KINDS: Final = frozenset(CONVERTED_PLURALS)
CONVERTED_CRDS: Final = tuple(f"{p}.{GROUP}" for p in CONVERTED_PLURALS.values())
V1BETA1_KINDS: Final = frozenset(
    {
        "ClusterQueue",
        "LocalQueue",
        "ResourceFlavor",
        "Cohort",
        "Topology",
        "WorkloadPriorityClass",
        "AdmissionCheck",
    }
)
"""The kinds served in v1beta1 too: all but Workload (see the module's docstring)."""

_FUNGIBILITY: Final = {"whenCanBorrow": "Borrow", "whenCanPreempt": "Preempt"}
"""v1beta1's extra value of each flavorFungibility field; v1beta2 says MayStopSearch."""

Obj = dict[str, Any]
Schema = dict[str, Any]


class ConversionError(ValueError):
    """An object that cannot be converted; the message names the field."""


def _dict(obj: Mapping[str, Any], key: str) -> Obj | None:
    value = obj.get(key)
    return value if isinstance(value, dict) else None


def _rename(obj: Obj | None, old: str, new: str) -> None:
    if obj is not None and old in obj:
        value = obj.pop(old)
        obj[new] = value


# ----------------------------------------------------------------------------- up: v1beta2


def _cluster_queue_up(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    if spec is not None:
        cohort = spec.pop("cohort", None)
        if cohort:
            spec["cohortName"] = cohort
        checks = spec.pop("admissionChecks", None)
        if checks:
            if not isinstance(checks, list) or not all(isinstance(c, str) for c in checks):
                raise ConversionError("spec.admissionChecks: must be a list of names")
            spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
        fungibility = _dict(spec, "flavorFungibility")
        for key, old in _FUNGIBILITY.items():
            if fungibility is not None and fungibility.get(key) == old:
                fungibility[key] = "MayStopSearch"
    status = _dict(obj, "status")
    if status is not None:
        status.pop("pendingWorkloadsStatus", None)
        fair = _dict(status, "fairSharing")
        if fair is not None:
            fair.pop("admissionFairSharingStatus", None)


def _local_queue_up(obj: Obj) -> None:
    status = _dict(obj, "status")
    if status is not None:
        status.pop("flavors", None)
        _rename(status, "flavorUsage", "flavorsUsage")


# --------------------------------------------------------------------------- down: v1beta1


def _cluster_queue_down(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    if spec is not None:
        _rename(spec, "cohortName", "cohort")
        spec.pop("concurrentAdmissionPolicy", None)


def _local_queue_down(obj: Obj) -> None:
    _rename(_dict(obj, "status"), "flavorsUsage", "flavorUsage")


def _admission_check_up(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    if spec is not None:
        spec.pop("retryDelayMinutes", None)


_UP: Final[dict[str, Callable[[Obj], None]]] = {
    "ClusterQueue": _cluster_queue_up,
    "LocalQueue": _local_queue_up,
    "AdmissionCheck": _admission_check_up,
}
_DOWN: Final[dict[str, Callable[[Obj], None]]] = {
    "ClusterQueue": _cluster_queue_down,
    "LocalQueue": _local_queue_down,
}


def convert(obj: Mapping[str, Any], api_version: str) -> Obj:
    """A copy of the Kueue object `obj` (v1beta1 or v1beta2) in `api_version`. Anything but
    the fields named in the module's docstring is kept as it is, `metadata` included."""
    have = obj.get("apiVersion")
    if have not in (V1BETA1, V1BETA2):
        raise ConversionError(f"apiVersion: {have!r} is neither {V1BETA1} nor {V1BETA2}")
    if api_version not in (V1BETA1, V1BETA2):
        raise ConversionError(f"cannot convert to {api_version!r}: only {V1BETA1} and {V1BETA2}")
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in V1BETA1_KINDS:
        raise ConversionError(f"kind: {kind!r} is served in {V1BETA2} only")
    try:
        out = copy.deepcopy(dict(obj))
        if have != api_version:
            step = (_UP if api_version == V1BETA2 else _DOWN).get(kind)
            if step is not None:
                step(out)
            out["apiVersion"] = api_version
    except ConversionError:
        raise
    except (TypeError, ValueError, LookupError, AttributeError, RecursionError) as e:
        # A shape no check above foresaw (or nested past Python's recursion limit): still an
        # answer that names the object.
        raise ConversionError(f"malformed {kind}: {type(e).__name__}: {e}") from None
    return out


# ------------------------------------------------------------------------------- schemas


def _props(node: Schema, *path: str) -> Schema:
    for key in path:
        node = node["properties"][key]
    return node["properties"]  # type: ignore[no-any-return]


_V1BETA1_PATHS: Final = {
    ".spec.cohortName": ".spec.cohort",
    ".status.flavorsUsage": ".status.flavorUsage",
}
"""v1beta2 field paths and their v1beta1 names (what the schemas and conversions rename)."""


def field_path(path: str) -> str:
    """A v1beta2 JSON path (a printer column's) as v1beta1 names it."""
    for new, old in _V1BETA1_PATHS.items():
        if path == new or path.startswith(new + "."):
            return old + path[len(new) :]
    return path


def _cluster_queue_schema(schema: Schema) -> None:
    spec = schema["properties"]["spec"]
    props = spec["properties"]
    props["cohort"] = props.pop("cohortName")
    props.pop("concurrentAdmissionPolicy", None)
    rules = props["admissionChecksStrategy"]["properties"]["admissionChecks"]
    props["admissionChecks"] = {
        "type": "array",
        "description": "Names of the AdmissionChecks every Workload of this queue needs "
        "(deprecated: use admissionChecksStrategy).",
        "items": copy.deepcopy(rules["items"]["properties"]["name"]),
        "x-kubernetes-list-type": "set",
    }
    if "maxItems" in rules:
        props["admissionChecks"]["maxItems"] = rules["maxItems"]
    for rule in spec.get("x-kubernetes-validations", ()):
        rule["rule"] = rule["rule"].replace("self.cohortName", "self.cohort")
    fungibility = props["flavorFungibility"]["properties"]
    for key, old in _FUNGIBILITY.items():
        fungibility[key]["enum"] = [*fungibility[key]["enum"], old]


def _local_queue_schema(schema: Schema) -> None:
    status = _props(schema, "status")
    status["flavorUsage"] = status.pop("flavorsUsage")


def _admission_check_schema(schema: Schema) -> None:
    _props(schema, "spec")["retryDelayMinutes"] = {
        "type": "integer",
        "format": "int64",
        "description": "Deprecated and without effect; dropped in v1beta2.",
    }


_SCHEMAS: Final[dict[str, Callable[[Schema], None]]] = {
    "ClusterQueue": _cluster_queue_schema,
    "LocalQueue": _local_queue_schema,
    "AdmissionCheck": _admission_check_schema,
}


def schema(kind: str, v1beta2: Schema) -> Schema:
    """The v1beta1 openAPIV3Schema of `kind`, from its v1beta2 one."""
    out = copy.deepcopy(v1beta2)
    change = _SCHEMAS.get(kind)
    if change is not None:
        change(out)
    return out
