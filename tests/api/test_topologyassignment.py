"""Kueue's compressed `topologyAssignment` (`compact`, `expand`): the compression Kueue's
pkg/util/tas writes, and that expanding gives back every domain in order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from atoll.api.topologyassignment import compact, expand

HOSTS = "kubernetes.io/hostname"


def test_an_overlapping_prefix_and_suffix_keep_the_suffix_as_kueue_does() -> None:
    """Kueue takes both from the whole values and shortens the prefix where they overlap:
    ababa and aba share the prefix aba and the suffix aba, and become roots ab and ''."""
    ta = compact([HOSTS], [(("ababa",), 1), (("aba",), 1)])
    (level,) = ta.slices[0].values_per_level
    assert level.individual is not None
    assert (level.individual.prefix, level.individual.suffix) == (None, "aba")
    assert level.individual.roots == ("ab", "")
    assert expand(ta) == [(("ababa",), 1), (("aba",), 1)]


def test_shared_values_and_counts_are_universal_and_no_domains_no_slices() -> None:
    ta = compact(["rack", HOSTS], [(("r1", "node-1"), 2), (("r1", "node-2"), 2)])
    (sl,) = ta.slices
    assert sl.domain_count == 2
    assert sl.values_per_level[0].universal == "r1"
    ind = sl.values_per_level[1].individual
    assert ind is not None
    assert (ind.prefix, ind.suffix, ind.roots) == ("node-", None, ("1", "2"))
    assert sl.pod_counts.universal == 2
    assert compact([HOSTS], []).slices == ()
    assert expand(compact([HOSTS], [])) == []


VALUES = st.text(alphabet="ab-01", min_size=1, max_size=6)
DOMAINS = st.integers(min_value=1, max_value=3).flatmap(
    lambda levels: st.lists(
        st.tuples(st.tuples(*[VALUES] * levels), st.integers(1, 9)), min_size=1, max_size=8
    )
)


@given(DOMAINS)
def test_expanding_gives_back_every_domain_in_order(
    domains: list[tuple[tuple[str, ...], int]],
) -> None:
    levels = [f"level-{i}" for i in range(len(domains[0][0]))]
    assert expand(compact(levels, domains)) == domains


@given(st.lists(VALUES, min_size=2, max_size=6, unique=True))
def test_prefix_and_suffix_never_overlap_and_are_shared(values: list[str]) -> None:
    """Kueue's rule: the longest common prefix and suffix, the prefix cut where together
    they would be longer than the shortest value."""
    (level,) = compact([HOSTS], [((v,), 1) for v in values]).slices[0].values_per_level
    assert level.individual is not None
    prefix, suffix = level.individual.prefix or "", level.individual.suffix or ""
    assert len(prefix) + len(suffix) <= min(len(v) for v in values)
    assert all(v.startswith(prefix) and v.endswith(suffix) for v in values)
