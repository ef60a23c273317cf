"""The watch decodes with orjson (`rest.decode`) and the digests key by orjson's text
(`handlers.json_text`): both read and write what `json` does for what the API server sends
(its numbers are int64 or float64), fall back to `json` for what orjson refuses, and refuse
invalid JSON as `json` does."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from atoll.kube.handlers import json_text
from atoll.kube.rest import decode

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
"""The API server's integers: it stores a JSON number as an int64, else a float64."""
SCALARS = (
    st.none() | st.booleans() | INT64 | st.floats(allow_nan=False, allow_infinity=False) | st.text()
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(JSON_VALUES)
def test_decode_reads_what_json_reads(value: Any) -> None:
    text = json.dumps(value).encode()
    # compared as text: 2**64 and 2.0**64 are equal, but an int read as a float is not
    assert json.dumps(decode(text)) == json.dumps(json.loads(text))


@given(JSON_VALUES)
def test_json_text_is_json_and_equal_values_have_equal_text(value: Any) -> None:
    assert json.loads(json_text(value)) == value
    assert json_text(value) == json_text(json.loads(json.dumps(value)))


def test_integers_beyond_64_bits_are_written_through_json() -> None:
    big = {"spec": {"replicas": 2**80, "floor": -(2**63) - 1}}
    assert json.loads(json_text(big)) == big
    assert json_text(big) != json_text({"spec": {"replicas": 2**80 + 1, "floor": -(2**63) - 1}})


def test_a_number_beyond_a_double_is_read_as_json_reads_it() -> None:
    line = b'{"spec": {"x": 1e400}}'
    assert decode(line) == json.loads(line)


def test_a_lone_surrogate_is_read_as_json_reads_it() -> None:
    line = b'{"metadata": {"name": "\\ud800"}}'
    assert decode(line) == json.loads(line)


@pytest.mark.parametrize("line", [b"", b"{", b'{"a": }', b"nul"])
def test_invalid_json_is_refused_as_json_refuses_it(line: bytes) -> None:
    with pytest.raises(json.JSONDecodeError):
        decode(line)
