"""CustomResourceDefinitions generated from the API models (what `atoll crds` writes).

Plays the part of controller-gen for Kueue's apis/kueue/v1beta2 markers: pydantic's JSON
schema of each kind is turned into a structural openAPIV3Schema ($refs inlined, Optional
unions collapsed, titles dropped, quantities as int-or-string), and the names, scope, status
subresource, printer columns and short names are Kueue's (docs/architecture.md, "Compatibility
with Kueue").
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, Final

import yaml

from atoll.api import v1beta1
from atoll.api.admissioncheck import AdmissionCheck
from atoll.api.clusterqueue import GROUP, VERSION, ClusterQueue
from atoll.api.cohort import Cohort
from atoll.api.localqueue import LocalQueue
from atoll.api.meta import INT32_MAX, INT32_MIN, KubeObject
from atoll.api.priority import WorkloadPriorityClass
from atoll.api.resourceflavor import ResourceFlavor
from atoll.api.topology import Topology
from atoll.api.workload import Workload

Schema = dict[str, Any]

# Keys a structural schema node may carry; anything else pydantic emits is a bug here.
ALLOWED_KEYS: Final = frozenset(
    {
        "type",
        "format",
        "description",
        "default",
        "enum",
        "properties",
        "required",
        "items",
        "additionalProperties",
        "maxItems",
        "minItems",
        "maxLength",
        "minLength",
        "maxProperties",
        "minProperties",
        "minimum",
        "maximum",
        "pattern",
        "anyOf",
        "nullable",
        "x-kubernetes-int-or-string",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-validations",
    }
)
_DROPPED_KEYS: Final = frozenset({"title", "examples", "$schema"})
_PRESERVE: Final = "x-kubernetes-preserve-unknown-fields"
_VALIDATIONS: Final = "x-kubernetes-validations"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PrinterColumn:
    """A column of `kubectl get`."""

    name: str
    type: str
    json_path: str
    description: str
    priority: int = 0

    def to_dict(self) -> dict[str, Any]:
        column: dict[str, Any] = {
            "name": self.name,
            "type": self.type,
            "jsonPath": self.json_path,
            "description": self.description,
        }
        if self.priority:
            column["priority"] = self.priority
        return column


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CrdSpec:
    """What a CRD says besides the schema."""

    model: type[KubeObject]
    plural: str
    scope: str
    short_names: tuple[str, ...] = ()
    status: bool = False
    columns: tuple[PrinterColumn, ...] = ()
    selectable_fields: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        return self.model.KIND

    @property
    def name(self) -> str:
        return f"{self.plural}.{GROUP}"

    @property
    def filename(self) -> str:
        return f"{GROUP}_{self.plural}.yaml"


_PENDING = "Number of pending workloads"
_ADMITTED = "Number of admitted workloads that haven't finished yet"

KINDS: Final[tuple[CrdSpec, ...]] = (
    CrdSpec(
        model=ClusterQueue,
        plural="clusterqueues",
        scope="Cluster",
        short_names=("cq",),
        status=True,
        columns=(
            PrinterColumn(
                name="Cohort",
                type="string",
                json_path=".spec.cohortName",
                description="Cohort this ClusterQueue belongs to",
            ),
            PrinterColumn(
                name="Strategy",
                type="string",
                json_path=".spec.queueingStrategy",
                description="Queueing strategy of the ClusterQueue",
                priority=1,
            ),
            PrinterColumn(
                name="Pending Workloads",
                type="integer",
                json_path=".status.pendingWorkloads",
                description=_PENDING,
            ),
            PrinterColumn(
                name="Admitted Workloads",
                type="integer",
                json_path=".status.admittedWorkloads",
                description=_ADMITTED,
                priority=1,
            ),
        ),
    ),
    CrdSpec(
        model=LocalQueue,
        plural="localqueues",
        scope="Namespaced",
        short_names=("queue", "queues", "lq"),
        status=True,
        columns=(
            PrinterColumn(
                name="ClusterQueue",
                type="string",
                json_path=".spec.clusterQueue",
                description="ClusterQueue backing this LocalQueue",
            ),
            PrinterColumn(
                name="Pending Workloads",
                type="integer",
                json_path=".status.pendingWorkloads",
                description=_PENDING,
            ),
            PrinterColumn(
                name="Admitted Workloads",
                type="integer",
                json_path=".status.admittedWorkloads",
                description=_ADMITTED,
            ),
        ),
    ),
    CrdSpec(
        model=ResourceFlavor,
        plural="resourceflavors",
        scope="Cluster",
        short_names=("flavor", "flavors", "rf"),
    ),
    CrdSpec(model=Cohort, plural="cohorts", scope="Cluster", short_names=("co",), status=True),
    CrdSpec(model=Topology, plural="topologies", scope="Cluster", short_names=("topo",)),
    CrdSpec(
        model=WorkloadPriorityClass,
        plural="workloadpriorityclasses",
        scope="Cluster",
        short_names=("wpc",),
        columns=(
            PrinterColumn(
                name="Value",
                type="integer",
                json_path=".value",
                description="Priority of Workloads of this class",
            ),
        ),
    ),
    CrdSpec(
        model=AdmissionCheck,
        plural="admissionchecks",
        scope="Cluster",
        short_names=("ac",),
        status=True,
    ),
    CrdSpec(
        model=Workload,
        plural="workloads",
        scope="Namespaced",
        short_names=("kwl", "kueueworkload", "kueueworkloads"),
        status=True,
        columns=(
            PrinterColumn(
                name="Queue",
                type="string",
                json_path=".spec.queueName",
                description="LocalQueue the Workload was submitted to",
            ),
            PrinterColumn(
                name="Reserved in",
                type="string",
                json_path=".status.admission.clusterQueue",
                description="ClusterQueue where the Workload reserves quota",
            ),
            PrinterColumn(
                name="Admitted",
                type="string",
                json_path=".status.conditions[?(@.type=='Admitted')].status",
                description="Whether the Workload is admitted",
            ),
            PrinterColumn(
                name="Finished",
                type="string",
                json_path=".status.conditions[?(@.type=='Finished')].status",
                description="Whether the Workload finished",
            ),
            PrinterColumn(
                name="Age",
                type="date",
                json_path=".metadata.creationTimestamp",
                description="Time the Workload was created",
            ),
        ),
        selectable_fields=(".status.admission.clusterQueue",),
    ),
)


def openapi_schema(model: type[KubeObject]) -> Schema:
    """The structural openAPIV3Schema of a kind."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs: Mapping[str, Schema] = raw.pop("$defs", {})
    schema = _Structurizer(defs).node(raw)
    properties = schema["properties"]
    properties["apiVersion"] = {
        "type": "string",
        "description": "Versioned schema of this representation of an object.",
    }
    properties["kind"] = {"type": "string", "description": "REST resource this object represents."}
    properties["metadata"] = {"type": "object"}
    for name in ("spec", "status"):
        if name in properties:
            properties[name].pop("default", None)
    schema.pop("title", None)
    return schema


CONVERSION_SERVICE: Final = {
    "namespace": "atoll-system",
    "name": "atoll-webhook-service",
    "path": "/convert",
    "port": 443,
}
"""Where the API server sends ConversionReviews (deploy/service.yaml); the operator fills in
`caBundle` at start, and in the sandbox points it at its own URL (`atoll.kube.webhook`)."""


def _version(spec: CrdSpec, name: str, schema: Schema) -> dict[str, Any]:
    version: dict[str, Any] = {
        "name": name,
        "served": True,
        "storage": name == VERSION,
        "schema": {"openAPIV3Schema": schema},
    }
    if name != VERSION:
        version["deprecated"] = True
        version["deprecationWarning"] = v1beta1.DEPRECATION_WARNING
    if spec.status:
        version["subresources"] = {"status": {}}
    if spec.columns:
        columns = [c.to_dict() for c in spec.columns]
        if name != VERSION:
            for column in columns:
                column["jsonPath"] = v1beta1.field_path(column["jsonPath"])
        version["additionalPrinterColumns"] = columns
    if spec.selectable_fields and name == VERSION:
        # On v1beta2 only: the API server takes settings the same in every version as the
        # CRD's own, and refuses selectableFields there when the schemas differ.
        version["selectableFields"] = [{"jsonPath": p} for p in spec.selectable_fields]
    return version


def crd(spec: CrdSpec) -> dict[str, Any]:
    """The CustomResourceDefinition of one kind: v1beta2 stored, v1beta1 served (deprecated)
    for the kinds an admin writes, converted by atoll's webhook for those whose fields differ
    (`atoll.api.v1beta1`)."""
    schema = openapi_schema(spec.model)
    versions = [_version(spec, VERSION, schema)]
    if spec.kind in v1beta1.V1BETA1_KINDS:
        versions.append(_version(spec, "v1beta1", v1beta1.schema(spec.kind, schema)))
    names: dict[str, Any] = {
        "kind": spec.kind,
        "listKind": f"{spec.kind}List",
        "plural": spec.plural,
        "singular": spec.kind.lower(),
    }
    if spec.short_names:
        names["shortNames"] = list(spec.short_names)
    body: dict[str, Any] = {
        "group": GROUP,
        "names": names,
        "scope": spec.scope,
        "versions": versions,
    }
    if spec.kind in v1beta1.CONVERTED_KINDS:
        body["conversion"] = {
            "strategy": "Webhook",
            "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {"service": dict(CONVERSION_SERVICE)},
            },
        }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": spec.name,
            "annotations": {"atoll.dev/generated-by": "atoll crds"},
        },
        "spec": body,
    }


def render(document: Mapping[str, Any]) -> str:
    """YAML of one CRD, stable from run to run."""
    body = yaml.safe_dump(dict(document), sort_keys=True, width=100, allow_unicode=True)
    return "---\n" + body


def generate() -> dict[str, str]:
    """File name -> YAML text of every CRD atoll installs."""
    return {spec.filename: render(crd(spec)) for spec in KINDS}


def walk(schema: Schema, path: str = "") -> Iterator[tuple[str, Schema]]:
    """Every schema node with a readable path, depth first."""
    yield path or ".", schema
    for name, child in schema.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


def structural_problems(schema: Schema) -> list[str]:
    """Why a schema is not structural (empty when it is), as the API server would judge."""
    problems = []
    for path, node in walk(schema):
        unknown = set(node) - ALLOWED_KEYS
        if unknown:
            problems.append(f"{path}: unexpected keys {sorted(unknown)}")
        special = node.get("x-kubernetes-int-or-string") or node.get(_PRESERVE)
        if "type" not in node and not special:
            problems.append(f"{path}: no type")
        if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
            problems.append(f"{path}: anyOf outside an int-or-string")
        if "properties" in node and "additionalProperties" in node:
            problems.append(f"{path}: both properties and additionalProperties")
    return problems


class _Structurizer:
    """Rewrites pydantic's JSON schema into a structural one."""

    def __init__(self, defs: Mapping[str, Schema]) -> None:
        self._defs = defs

    def node(self, node: Schema) -> Schema:
        node = dict(node)
        ref = node.pop("$ref", None)
        if ref is not None:
            node = _merge(self._definition(ref), node)
        if "allOf" in node and len(node["allOf"]) == 1:
            node = _merge(self.node(node.pop("allOf")[0]), node)
        if "anyOf" in node:
            branches = [b for b in node["anyOf"] if b != {"type": "null"}]
            if len(branches) == 1:
                del node["anyOf"]
                node = _merge(self.node(branches[0]), node)
            else:
                node["anyOf"] = branches
        if node.get(_PRESERVE):
            kept = {"type": "object", _PRESERVE: True}
            if "description" in node:
                kept["description"] = node["description"]
            return kept
        for key in _DROPPED_KEYS:
            node.pop(key, None)
        if "const" in node:
            node["enum"] = [node.pop("const")]
        if "description" in node:
            node["description"] = " ".join(str(node["description"]).split())
        self._default(node)
        if node.get("format") == "int32":
            if node.get("minimum") == INT32_MIN:
                del node["minimum"]
            if node.get("maximum") == INT32_MAX:
                del node["maximum"]
        if "properties" in node:
            node["properties"] = {k: self.node(v) for k, v in node["properties"].items()}
        if isinstance(node.get("items"), dict):
            node["items"] = self.node(node["items"])
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            node["additionalProperties"] = self.node(extra)
        elif extra is not None:
            del node["additionalProperties"]
        return node

    def _definition(self, ref: str) -> Schema:
        name = ref.rsplit("/", 1)[-1]
        return self.node(copy.deepcopy(self._defs[name]))

    @staticmethod
    def _default(node: Schema) -> None:
        if "default" not in node:
            return
        value = node["default"]
        if value is None or value in ([], ()):
            del node["default"]
        elif isinstance(value, dict):
            node["default"] = {}  # nested defaults fill in the rest, as Kueue's `default={}`
        elif node.get("x-kubernetes-int-or-string") and isinstance(value, str) and value.isdigit():
            node["default"] = int(value)


def _merge(base: Schema, override: Schema) -> Schema:
    """`base` with the keys of `override` on top; CEL rule lists are concatenated."""
    merged = {**base, **override}
    if _VALIDATIONS in base and _VALIDATIONS in override:
        merged[_VALIDATIONS] = [*base[_VALIDATIONS], *override[_VALIDATIONS]]
    return merged
