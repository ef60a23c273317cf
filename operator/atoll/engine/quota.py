"""Hierarchical quota: subtree quota, lending and borrowing limits, available capacity.

Mirrors Kueue's pkg/cache/scheduler/resource_node.go. Every ClusterQueue and Cohort is a
node of one tree per root cohort; a ClusterQueue without cohort is a tree of its own.

- A ClusterQueue's subtree quota is its nominal quota; a Cohort's is its own nominal plus,
  for each child, what the child lends (child subtree quota minus its local quota).
- Local quota = subtree quota − lendingLimit (at least 0) when a lending limit is set, else 0:
  the part a node keeps for itself and never shows its parent.
- Usage counts at a node; only the part above the node's local quota bubbles up to the parent.
- available(root) = subtree quota − usage; below the root it is the unused local quota plus
  what the parent has available, capped by the borrowing limit.

`usage` arguments are sequences indexed by node id, one mapping per node (see overlay.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from atoll.engine.model import (
    ClusterQueueName,
    CohortName,
    FlavorResource,
)

NO_PARENT = -1
Usage = Sequence[Mapping[FlavorResource, int]]


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaNode:
    name: str
    is_cluster_queue: bool
    parent: int
    children: tuple[int, ...]
    nominal: Mapping[FlavorResource, int]
    borrowing_limit: Mapping[FlavorResource, int]
    """Only resources with a limit appear; absent = unlimited."""
    lending_limit: Mapping[FlavorResource, int]
    subtree_quota: Mapping[FlavorResource, int]
    local_quota: Mapping[FlavorResource, int]
    height: int
    """Distance to the furthest leaf (a ClusterQueue has height 0)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaTree:
    nodes: tuple[QuotaNode, ...]
    cluster_queues: Mapping[ClusterQueueName, int]
    cohorts: Mapping[CohortName, int]

    def path_to_root(self, node: int) -> list[int]:
        """The node's ancestors, parent first."""
        path = []
        parent = self.nodes[node].parent
        while parent != NO_PARENT:
            path.append(parent)
            parent = self.nodes[parent].parent
        return path

    def root(self, node: int) -> int:
        while self.nodes[node].parent != NO_PARENT:
            node = self.nodes[node].parent
        return node

    def subtree_cluster_queues(self, node: int) -> list[int]:
        found: list[int] = []
        stack = [node]
        while stack:
            current = self.nodes[stack.pop()]
            for child in current.children:
                if self.nodes[child].is_cluster_queue:
                    found.append(child)
                else:
                    stack.append(child)
        return sorted(found)


def local_available(node: QuotaNode, used: Mapping[FlavorResource, int], fr: FlavorResource) -> int:
    return max(0, node.local_quota.get(fr, 0) - used.get(fr, 0))


def available(tree: QuotaTree, usage: Usage, n: int, fr: FlavorResource) -> int:
    """Capacity left for node `n` in `fr`, including what it may borrow; may be negative
    after over-admission (quota removed under running workloads)."""
    node = tree.nodes[n]
    used = usage[n].get(fr, 0)
    subtree = node.subtree_quota.get(fr, 0)
    if node.parent == NO_PARENT:
        return subtree - used
    from_parent = available(tree, usage, node.parent, fr)
    limit = node.borrowing_limit.get(fr)
    local = node.local_quota.get(fr, 0)
    if limit is not None:
        stored_in_parent = subtree - local
        used_in_parent = max(0, used - local)
        from_parent = min(from_parent, stored_in_parent - used_in_parent + limit)
    return max(0, local - used) + from_parent


def potential_available(tree: QuotaTree, n: int, fr: FlavorResource) -> int:
    """The most node `n` could ever use in `fr` if nothing else were running."""
    node = tree.nodes[n]
    if node.parent == NO_PARENT:
        return node.subtree_quota.get(fr, 0)
    total = node.local_quota.get(fr, 0) + potential_available(tree, node.parent, fr)
    limit = node.borrowing_limit.get(fr)
    if limit is not None:
        total = min(total, node.subtree_quota.get(fr, 0) + limit)
    return total


def borrowing_with(tree: QuotaTree, usage: Usage, n: int, fr: FlavorResource, extra: int) -> bool:
    """Would node `n` use more than its own (subtree) quota with `extra` more?"""
    return tree.nodes[n].subtree_quota.get(fr, 0) < usage[n].get(fr, 0) + extra


def within_nominal(tree: QuotaTree, usage: Usage, n: int, frs: Iterable[FlavorResource]) -> bool:
    quota = tree.nodes[n].subtree_quota
    used = usage[n]
    return all(used.get(fr, 0) <= quota.get(fr, 0) for fr in frs)


def quantities_fit_in_quota(
    tree: QuotaTree, usage: Usage, n: int, requests: Mapping[FlavorResource, int]
) -> tuple[bool, dict[FlavorResource, int]]:
    """Whether `requests` fit in node `n`'s own quota, and what is left for its parent."""
    node = tree.nodes[n]
    used = usage[n]
    fits = True
    remaining: dict[FlavorResource, int] = {}
    for fr, value in requests.items():
        if node.subtree_quota.get(fr, 0) < used.get(fr, 0) + value:
            fits = False
        remaining[fr] = max(0, value - local_available(node, used, fr))
    return fits, remaining


def lowest_fitting_subtree(
    tree: QuotaTree, usage: Usage, cq: int, fr: FlavorResource, value: int
) -> tuple[int, bool]:
    """Height of the lowest subtree around `cq` whose quota holds `value` more of `fr`
    (0: the ClusterQueue's own quota), and whether that subtree is smaller than the whole
    tree (so capacity lent to others in it can be reclaimed)."""
    node = tree.nodes[cq]
    has_parent = node.parent != NO_PARENT
    if not has_parent or not borrowing_with(tree, usage, cq, fr, value):
        return 0, has_parent
    remaining = value - local_available(node, usage[cq], fr)
    current = node.parent
    while current != NO_PARENT:
        ancestor = tree.nodes[current]
        if not borrowing_with(tree, usage, current, fr, remaining):
            return ancestor.height, ancestor.parent != NO_PARENT
        remaining -= local_available(ancestor, usage[current], fr)
        current = ancestor.parent
    return tree.nodes[tree.root(cq)].height, False


def add_usage(
    tree: QuotaTree, writable: UsageWriter, n: int, fr: FlavorResource, value: int
) -> None:
    """Charge `value` to node `n`; what exceeds its unused local quota bubbles up."""
    while True:
        node = tree.nodes[n]
        used = writable.writable(n)
        free_local = max(0, node.local_quota.get(fr, 0) - used.get(fr, 0))
        used[fr] = used.get(fr, 0) + value
        if node.parent == NO_PARENT or value <= free_local:
            return
        value -= free_local
        n = node.parent


def remove_usage(
    tree: QuotaTree, writable: UsageWriter, n: int, fr: FlavorResource, value: int
) -> None:
    """Release `value` from node `n` and the part of it that was stored in ancestors."""
    while True:
        node = tree.nodes[n]
        used = writable.writable(n)
        stored_in_parent = used.get(fr, 0) - node.local_quota.get(fr, 0)
        used[fr] = used.get(fr, 0) - value
        if stored_in_parent <= 0 or node.parent == NO_PARENT:
            return
        value = min(value, stored_in_parent)
        n = node.parent


class UsageWriter(Protocol):
    """What add_usage/remove_usage need: a mutable mapping per node (see overlay.py)."""

    def writable(self, n: int) -> dict[FlavorResource, int]: ...


class LiveUsage:
    """Usage per node kept up to date one workload at a time (a cache between cycles), equal
    at every step to charging the current workloads from scratch (snapshot.charge_tree),
    zero entries included: there are none. Exact while every usage is positive: what a node
    passes up to its parent is always its usage above its local quota, so a removal takes
    back exactly what the additions passed up."""

    __slots__ = ("touched", "tree", "usage")

    def __init__(self, tree: QuotaTree, usage: list[dict[FlavorResource, int]]) -> None:
        self.tree = tree
        self.usage = usage
        self.touched: set[int] = set()
        """Nodes changed since the owner last cleared this."""

    def writable(self, n: int) -> dict[FlavorResource, int]:
        self.touched.add(n)
        return self.usage[n]

    def add(self, n: int, usage: Mapping[FlavorResource, int]) -> None:
        for fr, value in usage.items():
            add_usage(self.tree, self, n, fr, value)

    def remove(self, n: int, usage: Mapping[FlavorResource, int]) -> None:
        for fr, value in usage.items():
            remove_usage(self.tree, self, n, fr, value)
        while n != NO_PARENT:
            used = self.usage[n]
            for fr in [fr for fr in usage if used.get(fr) == 0]:
                del used[fr]
            n = self.tree.nodes[n].parent
