"""Topology domains and how a number of pods (or slices of pods) is split across them.

Mirrors Kueue's pkg/cache/scheduler/tas_flavor_snapshot.go (`findTopologyAssignment`,
`sortedDomains`, the BestFit algorithm of KEP-2724 "Computing the assignment"): capacities are
summed bottom-up; at each level the fewest domains are taken, largest first, and the last one
is the tightest that still holds the remainder, so large domains stay whole. Unconstrained
placement fills the least free nodes first (Kueue's LeastFreeCapacity).

A domain is identified by its path: the node label values from the top level down to it. The
node name is always appended as the last path element, so nodes are the leaves even when the
Topology has no hostname level.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

HOSTNAME_LABEL = "kubernetes.io/hostname"

Path = tuple[str, ...]


class SplitMode(Enum):
    BEST_FIT = "BestFit"
    """Fewest domains, largest first, the tightest one for the remainder."""
    LEAST_FREE = "LeastFreeCapacity"
    """Least free domains first (unconstrained placement): packs partly used nodes."""
    FIRST_FIT = "FirstFit"
    """Domains in name order (a baseline for measurements)."""
    MOST_FREE = "MostFreeCapacity"
    """Most free domains first: kube-scheduler's default spreading (LeastAllocated)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """A node that can take `cap` pods, with its path in the topology."""

    path: Path
    node: str
    cap: int
    weight: int = 0
    """Free accelerators left on the node (devices and extended resources): the tie-break
    that makes "tightest" mean fewest free GPUs when pod counts are equal."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Units:
    """How capacity is counted: pods, or slices of `size` pods at depth `slice_depth`."""

    slice_depth: int | None = None
    size: int = 1

    def in_slices(self, depth: int) -> bool:
        return self.slice_depth is not None and depth <= self.slice_depth


def node_path(levels: Sequence[str], labels: Mapping[str, str], node: str) -> Path | None:
    """The node's path, or None when it lacks a level's label (Kueue skips such nodes)."""
    values = []
    for level in levels:
        value = labels.get(level)
        if value is None:
            return None
        values.append(value)
    values.append(node)
    return tuple(values)


def group(entries: Sequence[Entry], depth: int) -> dict[Path, list[Entry]]:
    """Entries by their domain at `depth` (key = path prefix), in path order."""
    out: dict[Path, list[Entry]] = {}
    for e in entries:
        out.setdefault(e.path[: depth + 1], []).append(e)
    return out


def capacity(entries: Sequence[Entry], depth: int, units: Units) -> int:
    """Capacity of one domain at `depth` (root: -1) in the units counted at that depth."""
    pods = sum(e.cap for e in entries)
    if not units.in_slices(depth):
        return pods
    if depth == units.slice_depth:
        return pods // units.size
    return sum(capacity(g, depth + 1, units) for g in group(entries, depth + 1).values())


Cap = tuple[Path, int, int]
"""A domain's key, capacity (in units) and weight."""


def choose(caps: Sequence[Cap], need: int, mode: SplitMode) -> list[tuple[Path, int]] | None:
    """Which domains take how much of `need`, or None when together they are too small."""
    if need <= 0:
        return []
    if sum(c[1] for c in caps) < need:
        return None
    out: list[tuple[Path, int]] = []
    rest = need
    if mode is not SplitMode.BEST_FIT:
        sign = {SplitMode.LEAST_FREE: 1, SplitMode.MOST_FREE: -1}.get(mode, 0)
        for key, cap, _ in sorted(
            (c for c in caps if c[1] > 0), key=lambda c: (sign * c[1], sign * c[2], c[0])
        ):
            take = min(cap, rest)
            out.append((key, take))
            rest -= take
            if rest == 0:
                break
        return out
    order = sorted(caps, key=lambda c: (-c[1], -c[2], c[0]))
    for i, (key, cap, _) in enumerate(order):
        if cap >= rest:
            tight = min((c[1], c[2], c[0]) for c in order[i:] if c[1] >= rest)
            out.append((tight[2], rest))
            return out
        out.append((key, cap))
        rest -= cap
    return None  # pragma: no cover - excluded by the sum check above


def split(
    entries: Sequence[Entry], depth: int, need: int, units: Units, mode: SplitMode
) -> list[tuple[str, int]] | None:
    """Pods per node for `need` units inside one domain at `depth` (-1 for the root)."""
    if entries and depth == len(entries[0].path) - 1:
        return [(entries[0].node, need)]
    child_need = need * units.size if depth == units.slice_depth else need
    groups = group(entries, depth + 1)
    caps = [(k, capacity(g, depth + 1, units), sum(e.weight for e in g)) for k, g in groups.items()]
    picks = choose(caps, child_need, mode)
    if picks is None:
        return None
    out: list[tuple[str, int]] = []
    for key, take in picks:
        got = split(groups[key], depth + 1, take, units, mode)
        if got is None:
            return None
        out.extend(got)
    return out


def tightest(
    entries: Sequence[Entry], depth: int, need: int, units: Units, mode: SplitMode
) -> tuple[Path, list[Entry]] | None:
    """The domain at `depth` with the least capacity that still holds `need` (best fit; the
    first one in name order for FIRST_FIT)."""
    best: tuple[int, int, Path] | None = None
    groups = group(entries, depth)
    for key, members in sorted(groups.items()):
        cap = capacity(members, depth, units)
        if cap < need:
            continue
        if mode is SplitMode.FIRST_FIT:
            return key, members
        weight = sum(e.weight for e in members)
        score = (-cap, -weight) if mode is SplitMode.MOST_FREE else (cap, weight)
        if best is None or (*score, key) < best:
            best = (*score, key)
    return None if best is None else (best[2], groups[best[2]])


def largest(entries: Sequence[Entry], depth: int, units: Units) -> tuple[Path, int]:
    """The domain at `depth` with the most capacity (for pending messages)."""
    best: tuple[Path, int] = ((), 0)
    for key, members in group(entries, depth).items():
        cap = capacity(members, depth, units)
        if cap > best[1] or (cap == best[1] and best[0] == ()):
            best = (key, cap)
    return best


def assignment_levels(levels: Sequence[str]) -> tuple[str, ...]:
    """Levels of Kueue's topologyAssignment: only the hostname when it is a level."""
    return (HOSTNAME_LABEL,) if HOSTNAME_LABEL in levels else tuple(levels)
