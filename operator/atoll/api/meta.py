"""The model base classes and the apimachinery types every kind shares (meta/v1).

`ApiModel` is what every model derives from: frozen, camelCase aliases (Python code may use
either spelling), attribute docstrings as descriptions (they become the CRD descriptions), and
unknown fields ignored when reading so that a newer Kueue or Kubernetes does not break us.
`PreservingModel` keeps unknown fields instead; it is used only where a whole Kubernetes
sub-object must survive a round trip (a pod template), mirroring
`x-kubernetes-preserve-unknown-fields` in the CRD.

Models are frozen, so each instance's set of explicitly set field names (pydantic's
`model_fields_set`, a `set` of at least 216 bytes) is shared with every other instance that
set the same names: about a third of a parsed Workload's memory otherwise. pydantic mutates
that set only in place of a copy (`model_copy` copies it first) or on attribute assignment,
which frozen models refuse; a copy's set is shared again (the cache holds copies: a status
change of a Workload is its known form with the new metadata and status).
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Final, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints
from pydantic.alias_generators import to_camel

# Name patterns as Kubernetes and Kueue validate them.
DNS1123_SUBDOMAIN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1123_LABEL: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
QUALIFIED_NAME: Final = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
ATOMIC: Final = {"x-kubernetes-list-type": "atomic"}
"""Schema marker of a list replaced whole by server-side apply."""
SET: Final = {"x-kubernetes-list-type": "set"}
"""Schema marker of a list of unique scalars."""
CONDITION_REASON: Final = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"

INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1

Int32 = Annotated[int, Field(ge=INT32_MIN, le=INT32_MAX, json_schema_extra={"format": "int32"})]
"""A Kubernetes int32 field (the CRD generator drops the implied bounds)."""
Int64 = Annotated[int, Field(json_schema_extra={"format": "int64"})]
"""A Kubernetes int64 field."""


class _Shared:
    """One copy of each equal string parsed lately: a string seen before is that first copy.
    Bounded (unlike `sys.intern`, whose strings CPython 3.12.0–3.12.4 never frees): when the
    strings held reach `limit` characters the table starts again, so a stream of unique
    values (uids, per-object messages) costs at most that."""

    __slots__ = ("_chars", "_limit", "_seen")

    def __init__(self, limit: int) -> None:
        self._seen: dict[str, str] = {}
        self._chars = 0
        self._limit = limit

    def __call__(self, value: str) -> str:
        found = self._seen.get(value)
        if found is not None:
            return found
        if self._chars + len(value) > self._limit:
            self._seen.clear()
            self._chars = 0
        self._seen[value] = value
        self._chars += len(value)
        return value

    def __len__(self) -> int:
        return len(self._seen)


SHARED_STRINGS: Final = _Shared(4 * 1024 * 1024)
"""The table behind `INTERNED` (at most 4 Mi characters held)."""
INTERNED: Final = AfterValidator(SHARED_STRINGS)
"""Marks a string field whose values repeat across objects (an object's apiVersion and kind,
a namespace, a queue, flavor or priority class name, a condition's reason and message):
each parsed value is one shared copy (`SHARED_STRINGS`), not a string per object (10,000
pending Workloads held ~1 KiB each of such copies)."""
Interned = Annotated[str, INTERNED]
"""A string of few distinct values (see `INTERNED`)."""
DnsSubdomain = Annotated[
    str, StringConstraints(max_length=253, pattern=DNS1123_SUBDOMAIN), INTERNED
]
"""The name of an object another refers to (a queue, a flavor, a priority class: RFC 1123
subdomain, at most 253 characters); interned (`INTERNED`)."""
DnsLabel = Annotated[str, StringConstraints(max_length=63, pattern=DNS1123_LABEL)]
"""An RFC 1123 label (at most 63 characters)."""
ResourceName = Annotated[str, StringConstraints(min_length=1, max_length=317)]
"""A resource name such as `cpu`, `memory` or `nvidia.com/gpu`."""
Time = datetime.datetime
"""A meta/v1 Time, written as RFC 3339 in UTC."""


_FIELDS_SETS: dict[frozenset[str], set[str]] = {}
"""One `model_fields_set` per distinct set of names (see the module docstring)."""


class ApiModel(BaseModel):
    """Base of every atoll API model."""

    model_config = ConfigDict(
        frozen=True,
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        use_attribute_docstrings=True,
        extra="ignore",
    )

    def model_post_init(self, context: Any, /) -> None:
        """Share this instance's set of set field names with equal ones (never mutated: the
        model is frozen)."""
        names = self.__pydantic_fields_set__
        shared = _FIELDS_SETS.setdefault(frozenset(names), names)
        if shared is not names:
            object.__setattr__(self, "__pydantic_fields_set__", shared)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """pydantic's copy, with its set of set field names shared as a parsed model's is."""
        copied = super().model_copy(update=update, deep=deep)
        copied.model_post_init(None)
        return copied

    def to_dict(self) -> dict[str, Any]:
        """The JSON form to send to the API server: camelCase, only the fields we model and set."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Self:
        """Parse a raw JSON object (as read from the API server or a manifest)."""
        return cls.model_validate(raw)


class PreservingModel(ApiModel):
    """A model that keeps fields it does not declare, so that writing it back loses nothing."""

    model_config = ConfigDict(extra="allow")


class StrEnum(enum.StrEnum):
    """A string enum whose members are written as their value."""


class OwnerReference(ApiModel):
    """A reference to an owning object."""

    api_version: Interned
    """API version of the owner."""
    kind: Interned
    """Kind of the owner."""
    name: str
    """Name of the owner."""
    uid: str
    """UID of the owner."""
    controller: bool | None = None
    """True if the owner is the managing controller."""
    block_owner_deletion: bool | None = None
    """True if the owner cannot be deleted before this object."""


class ObjectMeta(ApiModel):
    """The subset of object metadata atoll reads and writes."""

    name: str | None = None
    """Name of the object, unique within its namespace."""
    generate_name: str | None = None
    """Prefix the server uses to generate a name."""
    namespace: Interned | None = None
    """Namespace of the object (namespaced kinds only)."""
    uid: str | None = None
    """UID assigned by the server."""
    resource_version: str | None = None
    """Opaque version for optimistic concurrency."""
    generation: int | None = None
    """Sequence number of the desired state."""
    creation_timestamp: Time | None = None
    """When the object was created."""
    deletion_timestamp: Time | None = None
    """When the object was asked to be deleted."""
    labels: dict[str, Interned] | None = None
    """Labels of the object."""
    annotations: dict[str, str] | None = None
    """Annotations of the object."""
    owner_references: tuple[OwnerReference, ...] | None = None
    """Objects this one depends on."""
    finalizers: tuple[str, ...] | None = None
    """Finalizers that must be removed before deletion completes."""


class LabelSelectorOperator(StrEnum):
    """Operator of a label selector requirement."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class LabelSelectorRequirement(ApiModel):
    """One requirement of a label selector: a key, an operator and values."""

    key: str
    """The label key."""
    operator: LabelSelectorOperator
    """How the key relates to the values: In, NotIn, Exists or DoesNotExist."""
    values: Annotated[tuple[str, ...], Field(json_schema_extra=ATOMIC)] | None = None
    """Values for In and NotIn; empty for Exists and DoesNotExist."""


class LabelSelector(ApiModel):
    """A label query. An empty selector matches every object."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-map-type": "atomic"})

    match_labels: dict[str, str] | None = None
    """Labels that must all be present with these values."""
    match_expressions: (
        Annotated[tuple[LabelSelectorRequirement, ...], Field(json_schema_extra=ATOMIC)] | None
    ) = None
    """Requirements that must all hold."""

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether `labels` satisfy this selector (an empty selector matches everything)."""
        for key, value in (self.match_labels or {}).items():
            if labels.get(key) != value:
                return False
        for req in self.match_expressions or ():
            present = req.key in labels
            values = req.values or ()
            match req.operator:
                case LabelSelectorOperator.IN:
                    ok = present and labels[req.key] in values
                case LabelSelectorOperator.NOT_IN:
                    ok = not present or labels[req.key] not in values
                case LabelSelectorOperator.EXISTS:
                    ok = present
                case LabelSelectorOperator.DOES_NOT_EXIST:
                    ok = not present
            if not ok:
                return False
        return True


class ConditionStatus(StrEnum):
    """Status of a condition."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(ApiModel):
    """A meta/v1 Condition: one observation of an aspect of an object's state."""

    type: Annotated[str, StringConstraints(max_length=316), INTERNED]
    """Type of the condition, in CamelCase."""
    status: ConditionStatus
    """True, False or Unknown."""
    last_transition_time: Time
    """When the status last changed."""
    reason: Annotated[
        str, StringConstraints(min_length=1, max_length=1024, pattern=CONDITION_REASON), INTERNED
    ]
    """Machine-readable CamelCase reason for the last transition."""
    message: Annotated[str, StringConstraints(max_length=32768), INTERNED]
    """Human-readable details about the last transition."""
    observed_generation: Annotated[int, Field(ge=0)] | None = None
    """The metadata.generation the condition was set for."""


class KubeObject(ApiModel):
    """A top-level Kubernetes object: apiVersion, kind and metadata."""

    API_VERSION: ClassVar[str] = ""
    KIND: ClassVar[str] = ""

    api_version: Interned | None = None
    """APIVersion of the object."""
    kind: Interned | None = None
    """Kind of the object."""
    metadata: ObjectMeta = ObjectMeta()
    """Standard object metadata."""

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def namespace(self) -> str | None:
        return self.metadata.namespace

    def to_dict(self) -> dict[str, Any]:
        body = super().to_dict()
        head = {"apiVersion": self.api_version or self.API_VERSION, "kind": self.kind or self.KIND}
        return head | body


def conditions_by_type(conditions: tuple[Condition, ...] | None) -> dict[str, Condition]:
    """Index a condition list by type."""
    return {c.type: c for c in conditions or ()}


def cel(rule: str, message: str, *, field_path: str | None = None) -> dict[str, str]:
    """One `x-kubernetes-validations` entry: a CEL rule the API server checks."""
    entry = {"rule": rule, "message": message}
    if field_path:
        entry["fieldPath"] = field_path
    return entry


def list_map(*keys: str) -> dict[str, Any]:
    """Schema markers of a list whose items are keyed by `keys` (merged by server-side apply)."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


def validations(*rules: dict[str, str]) -> dict[str, Any]:
    """Schema markers holding CEL rules."""
    return {"x-kubernetes-validations": list(rules)}
