"""The order of a cycle's heads under fair sharing: a tournament up the cohort tree.

Mirrors Kueue's pkg/scheduler/fair_sharing_iterator.go: at every cohort, each child offers
its best head; the one whose subtree would have the lowest share after admitting it wins
(a sticky preemptor first, for the reason `ordering.cycle_key` gives; then subtrees that
would not borrow on the workload's resources, then lower DRS, then higher priority, then
older). The shares are recomputed before every pick, so each admission in the cycle moves
the next winner.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol, TypeVar

from atoll.engine import quota
from atoll.engine.fairsharing import Share, compare, dominant_share
from atoll.engine.model import FlavorResource, Workload, WorkloadKey
from atoll.engine.overlay import UsageOverlay


class _HasUsage(Protocol):
    @property
    def usage(self) -> Mapping[FlavorResource, int]: ...


class Head(Protocol):
    """What the tournament reads from a nominated head (cycle.Entry)."""

    @property
    def workload(self) -> Workload: ...

    @property
    def node(self) -> int: ...

    @property
    def assignment(self) -> _HasUsage: ...


H = TypeVar("H", bound=Head)


def _shares(ov: UsageOverlay, heads: Sequence[Head]) -> dict[tuple[int, WorkloadKey], Share]:
    """For each head and each cohort above it: the share of the child of that cohort on
    the head's path, as if the head were admitted. Cached per head while the usage along
    its path is unchanged."""
    shares: dict[tuple[int, WorkloadKey], Share] = {}
    for h in heads:
        path = [h.node, *ov.tree.path_to_root(h.node)]
        key = ("head-shares", h.workload.key, *(ov.versions.get(n, 0) for n in path[:-1]))
        cached = ov.memo.get(key)
        if cached is None:
            ov.begin()
            ov.add(h.node, h.assignment.usage)
            cached = ov.memo[key] = [dominant_share(ov, n) for n in path[:-1]]
            ov.rollback()
        assert isinstance(cached, list)
        for ancestor, share in zip(path[1:], cached, strict=True):
            shares[(ancestor, h.workload.key)] = share
    return shares


def _before(a: Head, b: Head, sa: Share, sb: Share) -> bool:
    if a.workload.sticky != b.workload.sticky:
        return a.workload.sticky
    a_borrows = any(fr in sa.borrowed for fr, v in a.assignment.usage.items() if v > 0)
    b_borrows = any(fr in sb.borrowed for fr, v in b.assignment.usage.items() if v > 0)
    if a_borrows != b_borrows:
        return not a_borrows
    if (c := compare(sa, sb)) != 0:
        return c < 0
    wa, wb = a.workload, b.workload
    if wa.priority != wb.priority:
        return wa.priority > wb.priority
    return (wa.queued_at, wa.key) < (wb.queued_at, wb.key)


def _winner(
    ov: UsageOverlay,
    cohort: int,
    by_node: dict[int, list[Head]],
    shares: dict[tuple[int, WorkloadKey], Share],
) -> Head | None:
    candidates: list[Head] = []
    for child in ov.tree.nodes[cohort].children:
        if ov.tree.nodes[child].is_cluster_queue:
            candidates += by_node.get(child, [])
        elif (best := _winner(ov, child, by_node, shares)) is not None:
            candidates.append(best)
    if not candidates:
        return None
    best = candidates[0]
    for h in candidates[1:]:
        key_h, key_b = (cohort, h.workload.key), (cohort, best.workload.key)
        if _before(h, best, shares[key_h], shares[key_b]):
            best = h
    return best


def fair_order(ov: UsageOverlay, heads: Sequence[H]) -> Iterator[H]:
    remaining = list(heads)
    while remaining:
        first = min(remaining, key=lambda h: (h.node, h.workload.key))
        if ov.tree.nodes[first.node].parent == quota.NO_PARENT:
            remaining.remove(first)
            yield first
            continue
        root = ov.tree.root(first.node)
        in_tree = [h for h in remaining if ov.tree.root(h.node) == root]
        by_node: dict[int, list[Head]] = {}
        for h in in_tree:
            by_node.setdefault(h.node, []).append(h)
        winner = _winner(ov, root, by_node, _shares(ov, in_tree))
        assert winner is not None
        chosen = next(h for h in remaining if h is winner)
        remaining.remove(chosen)
        yield chosen
