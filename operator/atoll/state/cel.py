"""DRA device selectors (CEL) through cel-expr-python, the way kube-scheduler evaluates them.

Mirrors k8s.io/dynamic-resource-allocation/cel/compile.go: the `device` variable with
`driver`, `attributes[domain].id`, `capacity[domain].id` and `allowMultipleAllocations`;
unqualified names under the driver's domain; an unknown domain is an empty map; a missing key
is a runtime error that fails the pod's scheduling attempt (a DeviceSelectorError, never a
silent false). The Kubernetes quantity and semver libraries are provided as functions
(k8s.io/apiserver pkg/cel/library quantity.go, semverlib.go): cel-expr-python cannot carry
opaque Python objects, so a quantity is an exact integer of milli-units and a version its
canonical string. Known deviation: `quantity("1") == 1000` is true where Kubernetes reports a
type error.

Expressions compile once (a compile error is a SelectorCompileError); results are cached per
(expression, device, pool generation), as the allocator's cache does. cel-expr-python (about
20 MiB resident) is imported when the first expression is compiled: a cluster without DRA
selectors never loads it.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from atoll.api.quantity import QuantityError, parse_quantity
from atoll.engine.devices import Device, DeviceSelectorError, Version

if TYPE_CHECKING:
    from cel_expr_python import cel

MAX_EXPRESSION_LENGTH: Final = 10 * 1024
_DOMAIN_LITERAL = re.compile(r"""(?:attributes|capacity)\s*\[\s*["']([^"']+)["']\s*\]""")
_SEMVER = re.compile(
    r"^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)


@functools.cache
def _cel() -> ModuleType:
    """cel_expr_python's `cel` module, imported on first use."""
    return importlib.import_module("cel_expr_python.cel")


class SelectorCompileError(ValueError):
    """An expression that does not compile (the API server would have rejected it)."""


def _quantity(text: str) -> int:
    try:
        return parse_quantity(text).milli
    except QuantityError as e:
        raise ValueError(f"invalid quantity {text!r}: {e}") from e


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


def _semver_parts(text: str) -> tuple[int, int, int, tuple[tuple[int, int | str], ...] | None]:
    m = _SEMVER.match(text)
    if m is None or text.startswith("v"):
        raise ValueError(f"invalid semver {text!r}")
    pre = None
    if m.group(4):
        pre = tuple((0, int(p)) if p.isdigit() else (1, p) for p in m.group(4).split("."))
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), pre


def _semver_key(text: str) -> tuple[int, int, int, int, tuple[tuple[int, int | str], ...]]:
    major, minor, patch, pre = _semver_parts(text)
    return (major, minor, patch, 1 if pre is None else 0, pre or ())


def _semver(text: str) -> str:
    _semver_parts(text)
    return text


def _is_semver(text: str) -> bool:
    try:
        _semver_parts(text)
    except ValueError:
        return False
    return True


def _cmp(a: Any, b: Any) -> int:
    return int(a > b) - int(a < b)


def _vcmp(a: str, b: str) -> int:
    return _cmp(_semver_key(a), _semver_key(b))


def _as_integer(milli: int) -> int:
    if milli % 1000:
        raise ValueError("quantity is not an integer")
    return milli // 1000


def _fn(name: str, *overloads: cel.Overload) -> cel.FunctionDecl:
    decl: cel.FunctionDecl = _cel().FunctionDecl(name, list(overloads))
    return decl


def _member(oid: str, ret: Any, args: list[Any], impl: Any) -> cel.Overload:
    overload: cel.Overload = _cel().Overload(oid, ret, args, is_member=True, impl=impl)
    return overload


def _functions() -> list[cel.FunctionDecl]:
    cel = _cel()
    T = cel.Type  # noqa: N806 - reads like the CEL type names
    return [
        _fn("quantity", cel.Overload("quantity_string", T.INT, [T.STRING], impl=_quantity)),
        _fn(
            "isQuantity", cel.Overload("is_quantity_string", T.BOOL, [T.STRING], impl=_is_quantity)
        ),
        _fn("semver", cel.Overload("semver_string", T.STRING, [T.STRING], impl=_semver)),
        _fn("isSemver", cel.Overload("is_semver_string", T.BOOL, [T.STRING], impl=_is_semver)),
        _fn(
            "compareTo",
            _member("quantity_compareTo", T.INT, [T.INT, T.INT], _cmp),
            _member("semver_compareTo", T.INT, [T.STRING, T.STRING], _vcmp),
        ),
        _fn(
            "isGreaterThan",
            _member("quantity_isGreaterThan", T.BOOL, [T.INT, T.INT], lambda a, b: a > b),
            _member(
                "semver_isGreaterThan", T.BOOL, [T.STRING, T.STRING], lambda a, b: _vcmp(a, b) > 0
            ),
        ),
        _fn(
            "isLessThan",
            _member("quantity_isLessThan", T.BOOL, [T.INT, T.INT], lambda a, b: a < b),
            _member(
                "semver_isLessThan", T.BOOL, [T.STRING, T.STRING], lambda a, b: _vcmp(a, b) < 0
            ),
        ),
        _fn("add", _member("quantity_add", T.INT, [T.INT, T.INT], lambda a, b: a + b)),
        _fn("sub", _member("quantity_sub", T.INT, [T.INT, T.INT], lambda a, b: a - b)),
        _fn("sign", _member("quantity_sign", T.INT, [T.INT], lambda a: _cmp(a, 0))),
        _fn("isInteger", _member("quantity_isInteger", T.BOOL, [T.INT], lambda a: a % 1000 == 0)),
        _fn("asInteger", _member("quantity_asInteger", T.INT, [T.INT], _as_integer)),
        _fn(
            "asApproximateFloat",
            _member("quantity_asApproximateFloat", T.DOUBLE, [T.INT], lambda a: a / 1000),
        ),
        _fn("major", _member("semver_major", T.INT, [T.STRING], lambda v: _semver_parts(v)[0])),
        _fn("minor", _member("semver_minor", T.INT, [T.STRING], lambda v: _semver_parts(v)[1])),
        _fn("patch", _member("semver_patch", T.INT, [T.STRING], lambda v: _semver_parts(v)[2])),
    ]


def device_map(device: Device, extra_domains: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The CEL `device` value: attributes and capacity grouped by domain."""
    attributes: dict[str, dict[str, Any]] = {d: {} for d in extra_domains}
    for name, value in device.attributes.items():
        domain, _, ident = name.rpartition("/")
        plain = value.text if isinstance(value, Version) else value
        attributes.setdefault(domain or device.driver, {})[ident] = plain
    capacity: dict[str, dict[str, int]] = {d: {} for d in extra_domains}
    for name, milli in device.capacity.items():
        domain, _, ident = name.rpartition("/")
        capacity.setdefault(domain or device.driver, {})[ident] = milli
    return {
        "driver": device.driver,
        "attributes": attributes,
        "capacity": capacity,
        "allowMultipleAllocations": False,
    }


@dataclass(slots=True, eq=False)
class Selector:
    """A compiled selector; call it on a device (engine DeviceMatcher)."""

    expression: str
    compiler: SelectorCompiler
    program: Any
    domains: frozenset[str]
    """Domains the expression names literally (seen as empty maps when a device lacks them)."""
    results: dict[tuple[str, int], bool] = field(default_factory=dict)

    def __call__(self, device: Device) -> bool:
        key = (device.id, device.generation)
        hit = self.results.get(key)
        if hit is not None:
            return hit
        value = self.program.eval(self.compiler.activation(device, self.domains))
        kind = value.type()
        types = _cel().Type
        if kind == types.ERROR:
            raise DeviceSelectorError(self.expression, str(value))
        if kind != types.BOOL:
            raise DeviceSelectorError(self.expression, f"expression returned {kind}, not bool")
        result = bool(value.value())
        self.results[key] = result
        return result


class SelectorCompiler:
    """Compiles each expression once and keeps one CEL activation per device generation."""

    def __init__(self) -> None:
        self._cel_env: Any = None
        self._selectors: dict[str, Selector] = {}
        self._activations: dict[tuple[str, int, frozenset[str]], Any] = {}

    @property
    def _env(self) -> Any:
        """The CEL environment, made (and cel-expr-python imported) on first use."""
        if self._cel_env is None:
            cel = _cel()
            ext = "cel_expr_python.ext.ext_"
            self._cel_env = cel.NewEnv(
                variables={"device": cel.Type.DYN},
                functions=_functions(),
                extensions=[
                    importlib.import_module(ext + "optional").ExtOptional(),
                    importlib.import_module(ext + "bindings").ExtBindings(),
                    importlib.import_module(ext + "strings").ExtStrings(),
                ],
            )
        return self._cel_env

    def compile(self, expression: str) -> Selector:
        """The selector for `expression`; raises SelectorCompileError."""
        got = self._selectors.get(expression)
        if got is not None:
            return got
        if len(expression) > MAX_EXPRESSION_LENGTH:
            raise SelectorCompileError(f"expression longer than {MAX_EXPRESSION_LENGTH} bytes")
        try:
            program = self._env.compile(expression)
        except RuntimeError as e:
            raise SelectorCompileError(f"compiling {expression!r}: {e}") from e
        domains = frozenset(_DOMAIN_LITERAL.findall(expression))
        got = Selector(expression=expression, compiler=self, program=program, domains=domains)
        self._selectors[expression] = got
        return got

    def activation(self, device: Device, domains: frozenset[str]) -> Any:
        present = {n.rpartition("/")[0] or device.driver for n in device.attributes}
        present |= {n.rpartition("/")[0] or device.driver for n in device.capacity}
        extra = domains - present
        key = (device.id, device.generation, extra)
        act = self._activations.get(key)
        if act is None:
            act = self._env.Activation({"device": device_map(device, extra)})
            self._activations[key] = act
        return act

    def forget(self, keep: Mapping[str, int]) -> None:
        """Drop cached activations and results of devices not in `keep` (id → generation)."""
        self._activations = {k: v for k, v in self._activations.items() if keep.get(k[0]) == k[1]}
        for s in self._selectors.values():
            s.results = {k: v for k, v in s.results.items() if keep.get(k[0]) == k[1]}
