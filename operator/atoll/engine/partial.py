"""Partial admission: the largest pod counts, down to each pod set's minCount, that fit.

Mirrors Kueue's pkg/scheduler/flavorassigner/podset_reducer.go: all reducible pod sets
shrink together, proportionally to (count − minCount), found by binary search.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from atoll.engine.model import PodSet

T = TypeVar("T")


def can_be_partially_admitted(pod_sets: tuple[PodSet, ...]) -> bool:
    return any(ps.min_count is not None and ps.min_count < ps.count for ps in pod_sets)


def counts_at(pod_sets: tuple[PodSet, ...], step: int, steps: int) -> tuple[int, ...]:
    """Pod counts `step` of `steps` of the way from full counts down to minCounts."""
    return tuple(
        ps.count - (ps.count - (ps.count if ps.min_count is None else ps.min_count)) * step // steps
        for ps in pod_sets
    )


def largest_fitting(
    pod_sets: tuple[PodSet, ...], attempt: Callable[[tuple[int, ...]], T | None]
) -> T | None:
    """The result of `attempt` for the largest counts it accepts, or None. Assumes that
    fewer pods never fit worse (as Kueue does)."""
    steps = sum(ps.count - (ps.count if ps.min_count is None else ps.min_count) for ps in pod_sets)
    if steps == 0:
        return None
    low, high = 0, steps + 1
    best: tuple[int, T] | None = None
    while low < high:
        mid = (low + high) // 2
        result = attempt(counts_at(pod_sets, mid, steps))
        if result is not None:
            best = (mid, result)
            high = mid
        else:
            low = mid + 1
    if best is None or best[0] != low:
        return None
    return best[1]
