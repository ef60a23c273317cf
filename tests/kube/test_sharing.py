"""The one way parsed parts are shared by their JSON text (`handlers.Shared`), used for Jobs'
and pods' specs, Workloads' pod-set templates and conditions, and pod statuses: a part whose
text was seen is the object parsed then, any other is parsed anew, only what the whole object
parsed is learnt, and the table keeps the last used within its size."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from atoll.kube.handlers import Shared, json_text


class Part:
    """A parsed part: a new object on every parse (identity tells a shared one)."""

    __slots__ = ("raw",)

    def __init__(self, raw: Any) -> None:
        self.raw = raw


json_values = st.recursive(
    st.none() | st.integers(-3, 3) | st.text("ab", max_size=2) | st.booleans(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("ab"), inner),
    max_leaves=6,
)


def _parse_through(table: Shared[Part], raw: Any) -> Part:
    """`raw` parsed as one object's part: the one held for its text, else parsed, then put."""
    known, key = table.find(json_text(raw))
    if known is not None:
        return known
    part = Part(raw)
    table.put(key, part)
    return part


@given(st.lists(json_values, max_size=8))
def test_parts_of_equal_text_are_one_object_and_others_are_their_own(raws: list[Any]) -> None:
    table: Shared[Part] = Shared(64)
    parts = [_parse_through(table, raw) for raw in raws]
    for part, raw in zip(parts, raws, strict=True):
        assert json_text(part.raw) == json_text(raw)
    for (a, x), (b, y) in itertools.combinations(zip(raws, parts, strict=True), 2):
        assert (x is y) == (json_text(a) == json_text(b))
    assert len(table) == len({json_text(raw) for raw in raws})


@given(st.lists(json_values, max_size=6), st.lists(json_values, max_size=6))
def test_a_list_s_parts_seen_in_an_earlier_list_are_those_it_parsed(
    first: list[Any], second: list[Any]
) -> None:
    """`swap_each` then `learn` over the parts of two objects in turn: each part of the
    second whose text the first had is the part the first parsed (the last of equal ones),
    any other is parsed anew."""
    table: Shared[Part] = Shared(64)
    parsed_lists = []
    for raws in (first, second):
        swapped, keys = table.swap_each(raws)
        items = raws if swapped is None else swapped
        parsed = [item if isinstance(item, Part) else Part(item) for item in items]
        table.learn(keys, parsed)
        parsed_lists.append(parsed)
    firsts, seconds = parsed_lists
    learnt = {json_text(part.raw): part for part in firsts}
    for raw, part in zip(second, seconds, strict=True):
        assert json_text(part.raw) == json_text(raw)
        if json_text(raw) in learnt:
            assert part is learnt[json_text(raw)]
        else:
            assert all(part is not other for other in firsts)
    assert len(table) == len({json_text(raw) for raw in first + second})


def test_a_part_keyed_by_a_given_text_is_shared_by_that_text_alone() -> None:
    """A pod status is keyed by the text of what its model reads, not by its raw JSON."""
    table: Shared[Part] = Shared(4)
    first = {"phase": "Running", "podIP": "10.0.0.1"}
    parsed = table.parse(b"Running", first, Part)
    same_reading = {"phase": "Running", "podIP": "10.0.0.2"}
    assert table.parse(b"Running", same_reading, Part) is parsed
    other = table.parse(b"Failed", {"phase": "Failed"}, Part)
    assert other is not parsed
    assert other.raw == {"phase": "Failed"}
    assert table.parse(json_text(first), first, Part) is not parsed  # its own text: not held


def test_each_item_s_field_is_swapped_and_learnt_in_its_place() -> None:
    """Pod sets share their template; a pod set without one keeps its place in the order."""
    table: Shared[Part] = Shared(8)
    items: list[Any] = [{"name": "a", "template": {"x": 1}}, {"name": "b"}, {"template": {"x": 2}}]
    swapped, keys = table.swap_each(items, "template")
    assert swapped is None  # nothing known yet: the items stand
    a, c = Part({"x": 1}), Part({"x": 2})
    table.learn(keys, [a, Part(None), c])  # as the object parsed them, in order
    assert len(table) == 2
    again, keys = table.swap_each([*items, {"template": {"x": 3}}], "template")
    assert again is not None
    assert again[0] == {"name": "a", "template": a}
    assert again[1] is items[1]
    assert again[2] == {"template": c}
    assert again[3] == {"template": {"x": 3}}
    assert [key is None for key in keys] == [True, True, True, False]


def test_parts_are_learnt_only_when_the_object_parsed_as_many() -> None:
    """When the parsed object does not hold one part per part looked up, which is which is not
    known: nothing is learnt."""
    table: Shared[Part] = Shared(8)
    swapped, keys = table.swap_each([{"x": 1}, {"x": 2}])
    assert swapped is None
    table.learn(keys, [Part({"x": 1})])
    assert len(table) == 0
    assert table.swap_each([{"x": 1}])[0] is None


def test_the_table_keeps_the_last_used_parts_within_its_size() -> None:
    table: Shared[Part] = Shared(2)
    a = _parse_through(table, "a")
    b = _parse_through(table, "b")
    assert _parse_through(table, "a") is a  # now the last used
    _parse_through(table, "c")  # b, the least recently used, is forgotten
    assert len(table) == 2
    assert _parse_through(table, "a") is a
    assert _parse_through(table, "b") is not b
