"""Parsed strings that repeat across objects share one copy, in a bounded table."""

from __future__ import annotations

from atoll.api.meta import _Shared


def test_an_equal_string_is_the_first_copy() -> None:
    shared = _Shared(100)
    first = "".join(["waiting for ", "quota"])
    again = "".join(["waiting for ", "quota"])
    assert first is not again
    assert shared(first) is first
    assert shared(again) is first


def test_the_table_starts_again_when_it_holds_its_limit() -> None:
    shared = _Shared(10)
    a, b = "abcdef", "ghijk"
    assert shared(a) is a
    assert len(shared) == 1
    assert shared(b) is b  # 6 + 5 > 10: the table was emptied first
    assert len(shared) == 1
    copy = "".join(["abc", "def"])
    assert shared(copy) is copy  # `a` is no longer held
