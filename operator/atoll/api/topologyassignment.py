"""Where a Workload's pods go in the topology: the compact `topologyAssignment` of a podSet.

Mirrors the TopologyAssignment types of apis/kueue/v1beta2/workload_types.go (v1beta2's
compressed form: slices of domains, each level's values either shared or one per domain).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import ConfigDict, Field, StringConstraints

from atoll.api.meta import ATOMIC, ApiModel, Int32, StrEnum, cel, validations


class DelayedTopologyRequestState(StrEnum):
    """Whether a topology assignment is still to be computed."""

    PENDING = "Pending"
    READY = "Ready"


class TopologyAssignmentSliceLevelIndividualValues(ApiModel):
    """Domain values of one level, one per domain, with a shared prefix and suffix."""

    prefix: Annotated[str, StringConstraints(max_length=63)] | None = None
    """Common prefix of the values."""
    suffix: Annotated[str, StringConstraints(max_length=63)] | None = None
    """Common suffix of the values."""
    roots: Annotated[
        tuple[Annotated[str, StringConstraints(max_length=63)], ...],
        Field(min_length=1, max_length=100000, json_schema_extra=ATOMIC),
    ]
    """The values without prefix and suffix, one per domain."""


class TopologyAssignmentSliceLevelValues(ApiModel):
    """Domain values of one level: one value for all domains, or one per domain."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.universal) != has(self.individual)",
                "exactly one of the fields in [universal individual] must be set",
            )
        )
    )

    universal: Annotated[str, StringConstraints(max_length=63)] | None = None
    """The value shared by every domain of the slice."""
    individual: TopologyAssignmentSliceLevelIndividualValues | None = None
    """One value per domain."""


class TopologyAssignmentSlicePodCounts(ApiModel):
    """Pods per domain: one count for all domains, or one per domain."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.universal) != has(self.individual)",
                "exactly one of the fields in [universal individual] must be set",
            )
        )
    )

    universal: Annotated[Int32, Field(ge=1)] | None = None
    """Pods in every domain of the slice."""
    individual: (
        Annotated[
            tuple[Annotated[Int32, Field(ge=1)], ...],
            Field(min_length=1, max_length=100000, json_schema_extra=ATOMIC),
        ]
        | None
    ) = None
    """Pods per domain."""


class TopologyAssignmentSlice(ApiModel):
    """A run of domains described compactly."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.podCounts.universal)"
                " || size(self.podCounts.individual) == self.domainCount",
                "podCounts.individual must have length equal to domainCount",
            ),
            cel(
                "self.valuesPerLevel.all(v, has(v.universal)"
                " || size(v.individual.roots) == self.domainCount)",
                "valuesPerLevel.individual, if set, must have roots of length equal to"
                " domainCount of this TopologyAssignmentSlice",
            ),
        )
    )

    domain_count: Annotated[Int32, Field(ge=1)]
    """Number of domains in the slice."""
    values_per_level: Annotated[
        tuple[TopologyAssignmentSliceLevelValues, ...],
        Field(min_length=1, max_length=16, json_schema_extra=ATOMIC),
    ]
    """Domain values for each level of the assignment."""
    pod_counts: TopologyAssignmentSlicePodCounts
    """Pods per domain."""


class TopologyAssignment(ApiModel):
    """The topology domains a podSet's pods are assigned to."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.slices.all(s, size(s.valuesPerLevel) == size(self.levels))",
                "valuesPerLevel must have the same length as the number of levels in this"
                " TopologyAssignment",
            )
        )
    )

    levels: Annotated[
        tuple[Annotated[str, StringConstraints(max_length=317)], ...],
        Field(min_length=1, max_length=16, json_schema_extra=ATOMIC),
    ]
    """Node labels of the levels the domains are given at."""
    slices: Annotated[
        tuple[TopologyAssignmentSlice, ...], Field(max_length=1000, json_schema_extra=ATOMIC)
    ]
    """The domains and their pod counts."""


def _common_prefix(values: Sequence[str]) -> str:
    first = min(values)
    last = max(values)
    n = 0
    while n < len(first) and first[n] == last[n]:
        n += 1
    return first[:n]


def _common_suffix(values: Sequence[str]) -> str:
    return _common_prefix([v[::-1] for v in values])[::-1]


def _level_values(values: Sequence[str]) -> TopologyAssignmentSliceLevelValues:
    if len(set(values)) == 1:
        return TopologyAssignmentSliceLevelValues(universal=values[0])
    # As Kueue: the common prefix and suffix of the whole values, the prefix shortened where
    # the two would overlap.
    prefix, suffix = _common_prefix(values), _common_suffix(values)
    shortest = min(len(v) for v in values)
    if len(prefix) + len(suffix) > shortest:
        prefix = prefix[: shortest - len(suffix)]
    roots = tuple(v[len(prefix) : len(v) - len(suffix)] for v in values)
    return TopologyAssignmentSliceLevelValues(
        individual=TopologyAssignmentSliceLevelIndividualValues(
            prefix=prefix or None, suffix=suffix or None, roots=roots
        )
    )


def compact(
    levels: Sequence[str], domains: Sequence[tuple[Sequence[str], int]]
) -> TopologyAssignment:
    """The compressed form of `domains` (each: its value at every level, its pod count), as
    Kueue's pkg/util/tas writes it: one slice of all domains; per level one `universal` value
    when every domain shares it, else `individual` roots with their longest common prefix and
    suffix taken out; pod counts `universal` when equal, else `individual`."""
    if not domains:
        return TopologyAssignment(levels=tuple(levels), slices=())
    counts = [n for _, n in domains]
    per_level = tuple(_level_values([d[i] for d, _ in domains]) for i in range(len(levels)))
    pod_counts = (
        TopologyAssignmentSlicePodCounts(universal=counts[0])
        if len(set(counts)) == 1
        else TopologyAssignmentSlicePodCounts(individual=tuple(counts))
    )
    return TopologyAssignment(
        levels=tuple(levels),
        slices=(
            TopologyAssignmentSlice(
                domain_count=len(domains), values_per_level=per_level, pod_counts=pod_counts
            ),
        ),
    )


def expand(assignment: TopologyAssignment) -> list[tuple[tuple[str, ...], int]]:
    """The inverse of `compact`: each domain's value at every level and its pod count, in
    order, from any slices of the compressed form."""
    out: list[tuple[tuple[str, ...], int]] = []
    for sl in assignment.slices:
        n = sl.domain_count
        columns: list[list[str]] = []
        for lv in sl.values_per_level:
            if lv.universal is not None:
                columns.append([lv.universal] * n)
            elif lv.individual is not None:
                ind = lv.individual
                columns.append([f"{ind.prefix or ''}{r}{ind.suffix or ''}" for r in ind.roots])
            else:
                columns.append([""] * n)
        pc = sl.pod_counts
        counts = [pc.universal] * n if pc.universal is not None else list(pc.individual or ())
        for i in range(n):
            out.append((tuple(col[i] for col in columns), counts[i] if i < len(counts) else 0))
    return out
