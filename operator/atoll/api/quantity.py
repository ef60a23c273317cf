"""Kubernetes resource quantities as exact integers of milli-units.

Mirrors k8s.io/apimachinery/pkg/api/resource (quantity.go): the same grammar, binary suffixes
(Ki … Ei), decimal suffixes (n u m "" k M G T P E) and decimal exponents (`1e3`). A value is held
as an integer number of milli-units, never as a float. Precision finer than a milli-unit is
rounded up, as Kubernetes' `MilliValue()` does, so `1n` reads as `1m`.

`format_quantity` writes the canonical form used when atoll emits a quantity: a milli suffix
when the value is not a whole number of units, else the largest binary suffix that divides it
exactly, else the largest decimal one (`9Gi`, `1500m`, `2k`, `7`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from fractions import Fraction
from typing import Any, Final

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

# The pattern Kubernetes publishes in OpenAPI for int-or-string quantities.
QUANTITY_PATTERN: Final = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

_GRAMMAR: Final = re.compile(
    r"(?P<sign>[+-])?(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?:(?P<binary>[KMGTPE]i)|(?P<decimal>[numkMGTPE])|[eE](?P<exp>[+-]?[0-9]+))?"
)
_BINARY: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL: Final = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# Exponents outside this range cannot describe a resource; refusing them bounds the arithmetic.
_MAX_EXPONENT: Final = 30
_MAX_LENGTH: Final = 100


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class Quantity:
    """An exact Kubernetes quantity: `milli` is the value in thousandths of a unit."""

    milli: int

    @classmethod
    def parse(cls, text: str) -> Quantity:
        return parse_quantity(text)

    @classmethod
    def from_units(cls, units: int) -> Quantity:
        return cls(units * 1000)

    @classmethod
    def from_milli(cls, milli: int) -> Quantity:
        return cls(milli)

    @property
    def value(self) -> int:
        """Whole units, rounded up (Kubernetes `Value()`): 1500m -> 2, 9Gi -> 9663676416."""
        return -((-self.milli) // 1000)

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(self.milli + other.milli)

    def __sub__(self, other: Quantity) -> Quantity:
        return Quantity(self.milli - other.milli)

    def __neg__(self) -> Quantity:
        return Quantity(-self.milli)

    def __str__(self) -> str:
        return format_quantity(self)

    def __repr__(self) -> str:
        return f"Quantity({format_quantity(self)!r})"

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            _coerce,
            serialization=core_schema.plain_serializer_function_ser_schema(
                format_quantity, when_used="json"
            ),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }


def parse_quantity(text: str | int) -> Quantity:
    """Parse a Kubernetes quantity (`500m`, `1.5`, `9Gi`, `1e3`, `2k`, or an int) exactly."""
    if isinstance(text, bool):
        raise QuantityError(f"invalid quantity {text!r}: a boolean is not a quantity")
    if isinstance(text, int):
        return Quantity(text * 1000)
    if not isinstance(text, str):
        raise QuantityError(f"invalid quantity {text!r}: expected a string or an integer")
    if len(text) > _MAX_LENGTH:
        raise QuantityError(f"invalid quantity {text[:20]!r}...: longer than {_MAX_LENGTH}")
    return _parse_text(text)


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Quantity:
    """A quantity string's value, remembered: the same few strings ("8", "64Gi") come with
    every pod, node and Workload parsed, and the exact arithmetic (Fractions) showed in the
    operator's profile. Quantities are immutable; an invalid string raises each time."""
    match = _GRAMMAR.fullmatch(text)
    if match is None or not (match["int"] or match["frac"]):
        raise QuantityError(
            f"invalid quantity {text!r}: expected a number with an optional suffix "
            "(n u m k M G T P E, Ki Mi Gi Ti Pi Ei, or an exponent such as e3)"
        )
    digits = (match["int"] or "") + (match["frac"] or "")
    amount = Fraction(int(digits or "0"), 10 ** len(match["frac"] or ""))
    if match["binary"]:
        amount *= 2 ** _BINARY[match["binary"]]
    else:
        exponent = _DECIMAL[match["decimal"]] if match["decimal"] else int(match["exp"] or 0)
        if abs(exponent) > _MAX_EXPONENT:
            raise QuantityError(f"invalid quantity {text!r}: exponent {exponent} out of range")
        amount *= Fraction(10) ** exponent
    milli = amount * 1000
    rounded = -((-milli.numerator) // milli.denominator)  # round up, as MilliValue()
    return Quantity(-rounded if match["sign"] == "-" else rounded)


def format_quantity(quantity: Quantity) -> str:
    """The canonical string of a quantity; `parse_quantity` reads it back unchanged."""
    milli = quantity.milli
    sign = "-" if milli < 0 else ""
    milli = abs(milli)
    if milli % 1000:
        return f"{sign}{milli}m"
    units = milli // 1000
    if units == 0:
        return "0"
    for suffix, shift in reversed(_BINARY.items()):
        if units % (1 << shift) == 0:
            return f"{sign}{units >> shift}{suffix}"
    for suffix in ("E", "P", "T", "G", "M", "k"):
        scale = 10 ** _DECIMAL[suffix]
        if units % scale == 0:
            return f"{sign}{units // scale}{suffix}"
    return f"{sign}{units}"


def _coerce(value: object) -> Quantity:
    if isinstance(value, Quantity):
        return value
    if isinstance(value, float):
        # YAML turns an unquoted `0.5` into a float; its shortest repr is the decimal written.
        if not math.isfinite(value):
            raise QuantityError(f"invalid quantity {value!r}")
        return parse_quantity(repr(value))
    if isinstance(value, str | int):
        return parse_quantity(value)
    raise QuantityError(f"invalid quantity {value!r}: expected a string or an integer")
