"""Kubernetes quantities parsed to exact milli-units and written back canonically."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from atoll.api.quantity import (
    QUANTITY_PATTERN,
    Quantity,
    QuantityError,
    format_quantity,
    parse_quantity,
)

KI = 1024


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        pytest.param("0", 0, id="zero"),
        pytest.param("7", 7_000, id="units"),
        pytest.param("500m", 500, id="milli"),
        pytest.param("1.5", 1_500, id="decimal"),
        pytest.param(".5", 500, id="leading-dot"),
        pytest.param("5.", 5_000, id="trailing-dot"),
        pytest.param("+3", 3_000, id="plus-sign"),
        pytest.param("-2", -2_000, id="negative"),
        pytest.param("1n", 1, id="nano-rounds-up"),
        pytest.param("1500u", 2, id="micro-rounds-up"),
        pytest.param("2k", 2_000_000, id="kilo"),
        pytest.param("3M", 3 * 10**9, id="mega"),
        pytest.param("1G", 10**12, id="giga"),
        pytest.param("1T", 10**15, id="tera"),
        pytest.param("1P", 10**18, id="peta"),
        pytest.param("1E", 10**21, id="exa"),
        pytest.param("1Ki", KI * 1000, id="kibi"),
        pytest.param("200Mi", 200 * KI**2 * 1000, id="mebi"),
        pytest.param("9Gi", 9 * KI**3 * 1000, id="gibi"),
        pytest.param("2Ti", 2 * KI**4 * 1000, id="tebi"),
        pytest.param("1Pi", KI**5 * 1000, id="pebi"),
        pytest.param("1Ei", KI**6 * 1000, id="exbi"),
        pytest.param("1.5Gi", 3 * KI**3 * 500, id="decimal-binary"),
        pytest.param("1e3", 1_000_000, id="exponent"),
        pytest.param("1E3", 1_000_000, id="capital-exponent"),
        pytest.param("25e-3", 25, id="negative-exponent"),
        pytest.param("1.5e+2", 150_000, id="decimal-exponent"),
    ],
)
def test_parse_is_exact(text: str, milli: int) -> None:
    assert parse_quantity(text) == Quantity(milli)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("m", id="suffix-only"),
        pytest.param("1.2.3", id="two-dots"),
        pytest.param("9Gb", id="unknown-suffix"),
        pytest.param("1ki", id="lowercase-binary"),
        pytest.param("1Ki5", id="digits-after-suffix"),
        pytest.param("1e", id="bare-exponent"),
        pytest.param("1e1.5", id="fractional-exponent"),
        pytest.param("1e99", id="exponent-too-large"),
        pytest.param("--1", id="double-sign"),
        pytest.param(" 1", id="leading-space"),
        pytest.param("1 ", id="trailing-space"),
        pytest.param("one", id="words"),
    ],
)
def test_invalid_string_is_rejected_naming_it(text: str) -> None:
    with pytest.raises(QuantityError, match=re.escape(repr(text))):
        parse_quantity(text)


def test_boolean_is_not_a_quantity() -> None:
    with pytest.raises(QuantityError, match="boolean"):
        parse_quantity(True)


@pytest.mark.parametrize(
    ("milli", "text"),
    [
        pytest.param(0, "0", id="zero"),
        pytest.param(1_500, "1500m", id="fraction-as-milli"),
        pytest.param(7_000, "7", id="units"),
        pytest.param(1_000_000, "1k", id="decimal-suffix"),
        pytest.param(9 * KI**3 * 1000, "9Gi", id="binary-suffix"),
        pytest.param(1536 * KI**2 * 1000, "1536Mi", id="largest-exact-binary"),
        pytest.param(-250, "-250m", id="negative"),
        pytest.param(1001 * 1000, "1001", id="no-suffix-fits"),
    ],
)
def test_format_is_canonical(milli: int, text: str) -> None:
    assert format_quantity(Quantity(milli)) == text


@pytest.mark.parametrize(
    ("text", "units"),
    [("1500m", 2), ("1", 1), ("1m", 1), ("0", 0), ("-1500m", -1), ("9Gi", 9 * KI**3)],
)
def test_value_rounds_up_to_whole_units(text: str, units: int) -> None:
    assert parse_quantity(text).value == units


@given(st.integers(min_value=-(10**24), max_value=10**24))
def test_format_then_parse_is_identity(milli: int) -> None:
    assert parse_quantity(format_quantity(Quantity(milli))) == Quantity(milli)


_NUMBER = st.from_regex(r"\A[0-9]{1,6}(\.[0-9]{0,3})?\Z")
_SUFFIX = st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi", "Ti", "e3", "e-2"])


@given(_NUMBER, _SUFFIX, st.sampled_from(["", "+", "-"]))
def test_parse_format_parse_round_trip(number: str, suffix: str, sign: str) -> None:
    text = f"{sign}{number}{suffix}"
    assert re.fullmatch(QUANTITY_PATTERN, text), text
    once = parse_quantity(text)
    assert parse_quantity(str(once)) == once
    assert re.fullmatch(QUANTITY_PATTERN, str(once))


@given(st.integers(min_value=0, max_value=10**12), st.integers(min_value=0, max_value=10**12))
def test_arithmetic_is_exact(a: int, b: int) -> None:
    assert (Quantity(a) + Quantity(b)) - Quantity(b) == Quantity(a)
    assert -Quantity(a) == Quantity(-a)
    assert (Quantity(a) < Quantity(b)) == (a < b)


class _Holder(BaseModel):
    q: Quantity


@pytest.mark.parametrize(
    ("raw", "milli"),
    [
        pytest.param("9Gi", 9 * KI**3 * 1000, id="string"),
        pytest.param(9, 9000, id="int"),
        pytest.param(0.75, 750, id="yaml-float"),
        pytest.param(Quantity(5), 5, id="quantity"),
    ],
)
def test_models_accept_int_string_and_yaml_float(raw: object, milli: int) -> None:
    assert _Holder.model_validate({"q": raw}).q == Quantity(milli)


def test_models_write_the_canonical_string() -> None:
    assert _Holder(q=Quantity(1500)).model_dump(mode="json") == {"q": "1500m"}


def test_model_error_names_the_bad_string() -> None:
    with pytest.raises(ValidationError, match="9Gb"):
        _Holder.model_validate({"q": "9Gb"})
