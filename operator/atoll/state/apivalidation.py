"""Kueue objects checked offline the way the API server checks them online.

The API server validates a custom resource against its CRD: the structural schema (types,
enums, patterns, limits), then every CEL rule (`x-kubernetes-validations`) on the defaulted
object, and with `kubectl apply`'s default strict field validation it refuses fields the
schema does not know. atoll's CRDs are generated from its `atoll.api` models
(`api/crdgen.py`), so the same three checks run here on the same sources: the model
(pydantic) for the schema, the generated schema for unknown fields, and the generated CEL
rules evaluated with cel-expr-python (with the CEL `lists`, `strings`, `optional` and
two-variable comprehension libraries the rules use, as the API server's CEL environment
has them). Transition rules (those naming `oldSelf`) compare an update with the stored
object and do not apply to a new object.

`atoll simulate` and `atoll what-if --scenario` use it, so that a scenario is accepted or
rejected as `kubectl apply --server-side -f` would accept or reject it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from cel_expr_python import cel
from pydantic import ValidationError

from atoll.api.crdgen import Schema, openapi_schema
from atoll.api.meta import KubeObject

_ENV_CONFIG: Final = """
extensions:
  - name: lists
  - name: strings
  - name: optional
  - name: two-var-comprehensions
variables:
  - name: self
    type_name: dyn
"""
ObjectT = TypeVar("ObjectT", bound=KubeObject)
_PRESERVE: Final = "x-kubernetes-preserve-unknown-fields"
_VALIDATIONS: Final = "x-kubernetes-validations"


@dataclass(frozen=True, slots=True)
class Problem:
    """One reason the API server would refuse an object: the field and the rule."""

    path: str
    """The field, as the API server names it (`spec.resourceGroups[0].flavors[0]`)."""
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def field_path(loc: Sequence[int | str]) -> str:
    """A pydantic error location as a field path: `spec.resourceGroups[0].name`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def model_problems(error: ValidationError) -> list[Problem]:
    """A pydantic ValidationError as problems, one per field (without the echo of an inner
    error on the list that holds it: "should have at least 1 item after validation")."""
    found = [Problem(field_path(e["loc"]), e["msg"]) for e in error.errors()]
    return [
        p
        for p in found
        if "after validation" not in p.message
        or not any(q.path.startswith((p.path + ".", p.path + "[")) for q in found)
    ]


@functools.cache
def _env() -> Any:
    return cel.NewEnv(config=cel.NewEnvConfigFromYaml(_ENV_CONFIG))


@functools.cache
def _program(rule: str) -> Any:
    return _env().compile(rule)


@functools.cache
def _schema(model: type[KubeObject]) -> Schema:
    return openapi_schema(model)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _duplicates(value: list[Any], schema: Schema, path: str) -> Iterator[Problem]:
    """Entries of a list-type map (or set) that repeat a key (or a value)."""
    keys: Sequence[str] = schema.get("x-kubernetes-list-map-keys", ())
    seen: set[str] = set()
    for item in value:
        if keys and isinstance(item, Mapping):
            key = ",".join(f'{k}="{item.get(k)}"' for k in keys)
        elif schema.get("x-kubernetes-list-type") == "set":
            key = repr(item)
        else:
            return
        if key in seen:
            yield Problem(path, f"duplicate entries for key [{key}]")
        seen.add(key)


_UNKNOWN: Final = object()
"""A field the schema does not declare (no sub-schema to walk)."""


def _children(value: Any, schema: Schema, path: str) -> Iterator[tuple[Any, Any, str]]:
    """(value, its schema or `_UNKNOWN`, its path) for each field or item of `value`."""
    if isinstance(value, Mapping):
        props: Mapping[str, Schema] = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            if key in props:
                yield sub, props[key], _join(path, str(key))
            elif isinstance(extra, dict):
                yield sub, extra, f"{path}[{key}]"
            elif props and not schema.get(_PRESERVE):
                yield sub, _UNKNOWN, _join(path, str(key))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            yield item, schema["items"], f"{path}[{i}]"


def unknown_fields(value: Any, schema: Schema, path: str = "") -> Iterator[Problem]:
    """Fields of `value` that `schema` does not declare (what strict field validation
    refuses and the API server would otherwise drop), and repeated keys of list-type maps."""
    if isinstance(value, list):
        yield from _duplicates(value, schema, path)
    for sub, sub_schema, sub_path in _children(value, schema, path):
        if sub_schema is _UNKNOWN:
            yield Problem(sub_path, "unknown field")
        else:
            yield from unknown_fields(sub, sub_schema, sub_path)


def rule_problems(value: Any, schema: Schema, path: str = "") -> Iterator[Problem]:
    """The CEL rules of `schema` that `value` breaks, innermost fields last."""
    for entry in schema.get(_VALIDATIONS, ()):
        rule = entry["rule"]
        if "oldSelf" in rule:
            continue
        result = _program(rule).eval(data={"self": value})
        where = path + entry.get("fieldPath", "") if path else entry.get("fieldPath", "")[1:]
        if result.type() == cel.Type.ERROR:
            yield Problem(where, f"{entry['message']} (the rule failed: {result.value()})")
        elif result.value() is not True:
            yield Problem(where, entry["message"])
    for sub, sub_schema, sub_path in _children(value, schema, path):
        if sub_schema is not _UNKNOWN:
            yield from rule_problems(sub, sub_schema, sub_path)


def check_object(
    raw: Mapping[str, Any], model: type[ObjectT]
) -> tuple[ObjectT | None, list[Problem]]:
    """`raw` parsed as `model`, and every reason the API server would refuse it (the object
    is None when the schema refuses it)."""
    unknown = list(unknown_fields(raw, _schema(model)))
    try:
        obj = model.model_validate(raw)
    except ValidationError as e:
        return None, [*unknown, *model_problems(e)]
    broken = list(rule_problems(obj.to_dict(), _schema(model)))
    return obj, [*unknown, *broken]
