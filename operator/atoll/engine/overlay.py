"""Usage overlays: a cycle's (or a what-if's) changes on top of an immutable snapshot.

Mirrors the mutable side of Kueue's pkg/cache/scheduler/snapshot.go (AddWorkload,
RemoveWorkload, SimulateUsageAddition/Removal): Kueue clones the usage maps of every node
for each cycle; here a node's usage map is copied only when first written, so a cycle that
touches ten ClusterQueues copies ten small maps, whatever the size of the cluster.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from atoll.engine import quota
from atoll.engine.model import ClusterQueueName, FlavorResource, WorkloadKey
from atoll.engine.snapshot import Snapshot

_Saved = tuple[Mapping[FlavorResource, int], dict[FlavorResource, int] | None, int]
"""A node's map, its owned copy (if any) and its version before a what-if wrote to it."""


class UsageOverlay:
    """Copy-on-write usage per quota-tree node. Not shared between threads."""

    __slots__ = (
        "_based",
        "_clock",
        "_frames",
        "_owned",
        "maps",
        "memo",
        "snapshot",
        "tree",
        "versions",
    )

    def __init__(self, snapshot: Snapshot, maps: list[Mapping[FlavorResource, int]] | None = None):
        self.snapshot = snapshot
        self.tree = snapshot.tree
        self.maps: list[Mapping[FlavorResource, int]] = (
            list(snapshot.base_usage) if maps is None else maps
        )
        self._owned: dict[int, dict[FlavorResource, int]] = {}
        self._frames: list[dict[int, _Saved]] = []
        self._based = maps is None
        self.memo: dict[tuple[object, ...], object] = {}
        """Derived data; a key must name everything its value depends on (the snapshot,
        `pristine`, or a node's entry in `versions`)."""
        self.versions: dict[int, int] = {}
        """Per node, a number that names its usage: a write gives it a number never used
        before; a rollback gives back the number the restored usage had."""
        self._clock = 0

    def writable(self, n: int) -> dict[FlavorResource, int]:
        owned = self._owned.get(n)
        if self._frames:
            frame = self._frames[-1]
            if n not in frame:
                frame[n] = (self.maps[n], owned, self.versions.get(n, 0))
                owned = None  # copy again: the frame keeps the map as it was
        self._clock += 1
        self.versions[n] = self._clock
        if owned is None:
            owned = self._owned[n] = dict(self.maps[n])
            self.maps[n] = owned
        return owned

    def begin(self) -> None:
        """Start a what-if: every change until the matching rollback() is undone by it."""
        self._frames.append({})

    def rollback(self) -> None:
        for n, (previous, owned, version) in self._frames.pop().items():
            self.versions[n] = version
            self.maps[n] = previous
            if owned is not None:
                self._owned[n] = owned
            else:
                del self._owned[n]

    @property
    def pristine(self) -> bool:
        """No change outside a what-if: usage is the snapshot's."""
        return self._based and not self._owned

    def fork(self) -> UsageOverlay:
        """An independent overlay starting from this one's current state."""
        if self._frames:
            raise RuntimeError("fork() inside a what-if")
        self._owned = {}  # both sides copy again before their next write
        self._based = False
        return UsageOverlay(self.snapshot, list(self.maps))

    def node(self, cq: ClusterQueueName) -> int:
        return self.tree.cluster_queues[cq]

    def used(self, n: int, fr: FlavorResource) -> int:
        return self.maps[n].get(fr, 0)

    def available(self, n: int, fr: FlavorResource) -> int:
        """Kueue's ClusterQueueSnapshot.Available: never negative."""
        return max(0, quota.available(self.tree, self.maps, n, fr))

    def potential_available(self, n: int, fr: FlavorResource) -> int:
        return quota.potential_available(self.tree, n, fr)

    def borrowing_with(self, n: int, fr: FlavorResource, extra: int = 0) -> bool:
        return quota.borrowing_with(self.tree, self.maps, n, fr, extra)

    def fits(self, n: int, usage: Mapping[FlavorResource, int]) -> bool:
        return all(v <= self.available(n, fr) for fr, v in usage.items())

    def add(self, n: int, usage: Mapping[FlavorResource, int]) -> None:
        for fr, value in usage.items():
            quota.add_usage(self.tree, self, n, fr, value)

    def remove(self, n: int, usage: Mapping[FlavorResource, int]) -> None:
        for fr, value in usage.items():
            quota.remove_usage(self.tree, self, n, fr, value)

    def _workload_node(self, key: WorkloadKey) -> int | None:
        return self.tree.cluster_queues.get(self.snapshot.admitted[key].cluster_queue)

    def remove_workloads(
        self, keys: Iterable[WorkloadKey], only: Collection[FlavorResource] | None = None
    ) -> None:
        """Release the workloads' usage; with `only`, just for those flavor/resources (a
        what-if that reads nothing else may skip the rest, and must restore the same way)."""
        for key in keys:
            n = self._workload_node(key)
            if n is not None:
                usage = self.snapshot.workload_usage[key]
                for fr, value in usage.items():
                    if only is None or fr in only:
                        quota.remove_usage(self.tree, self, n, fr, value)

    def add_workloads(
        self, keys: Iterable[WorkloadKey], only: Collection[FlavorResource] | None = None
    ) -> None:
        for key in keys:
            n = self._workload_node(key)
            if n is not None:
                usage = self.snapshot.workload_usage[key]
                for fr, value in usage.items():
                    if only is None or fr in only:
                        quota.add_usage(self.tree, self, n, fr, value)
