"""The simulated nodes and where kube-scheduler puts a pod on them.

Placement follows kube-scheduler's defaults closely enough for capacity questions: a pod
fits a node whose labels match its nodeSelector and required node affinity, whose
NoSchedule/NoExecute taints it tolerates, and whose free allocatable covers its requests;
among those, the node with the most free GPUs wins (NodeResourcesFit `LeastAllocated`, the
default scoring), ties broken by node order. Pods without GPUs go to the node with the most
free CPU. Nodes are indexed by free GPU count per pod signature, so a placement costs a few
bucket look-ups rather than a scan of every node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from atoll.api.core import Node
from atoll.engine import model as m
from atoll.engine.matching import requirement_matches, untolerated_taint
from atoll.sim.results import MAX_NODE_ROWS, NodeTimeline
from atoll.state import convert

GPU = "nvidia.com/gpu"
GROUP_LABEL = "atoll.dev/node-group"
"""Node label naming the node group (set by cluster shapes); nodes without it group as
`nodes`."""


@dataclass(frozen=True, slots=True)
class Signature:
    """What decides which nodes a pod may use at all (its requests aside)."""

    node_selector: m.Labels
    affinity: tuple[m.NodeSelectorTerm, ...]
    tolerations: tuple[m.Toleration, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeInfo:
    name: str
    group: str
    labels: Mapping[str, str]
    taints: tuple[m.Taint, ...]
    allocatable: Mapping[str, int]
    schedulable: bool = True


def node_info(node: Node) -> NodeInfo:
    labels = dict(node.metadata.labels or {})
    alloc = node.status.allocatable or node.status.capacity or {}
    return NodeInfo(
        name=node.name,
        group=labels.get(GROUP_LABEL, "nodes"),
        labels=labels,
        taints=tuple(convert.taint(t) for t in node.spec.taints or ()),
        allocatable={k: convert.amount(k, q) for k, q in alloc.items()},
        schedulable=not node.spec.unschedulable,
    )


def feasible(info: NodeInfo, sig: Signature) -> bool:
    if not info.schedulable:
        return False
    if any(info.labels.get(k) != v for k, v in sig.node_selector):
        return False
    if sig.affinity and not any(
        all(requirement_matches(r, info.labels) for r in term.match_expressions)
        for term in sig.affinity
    ):
        return False
    return untolerated_taint(info.taints, sig.tolerations) is None


@dataclass(slots=True)
class _Index:
    nodes: tuple[int, ...]
    max_gpus: int
    by_free: dict[int, set[int]] = field(default_factory=dict)


@dataclass(slots=True)
class NodePool:
    """Free resources per node and which owner (a Job) holds how many pods and GPUs where."""

    infos: list[NodeInfo]
    free: list[dict[str, int]] = field(default_factory=list)
    holders: list[dict[str, list[int]]] = field(default_factory=list)
    """Per node: owner → [pods, GPUs]."""
    group_used: dict[str, int] = field(default_factory=dict)
    """GPUs bound to pods now, per node group."""
    _index: dict[Signature, _Index] = field(default_factory=dict)
    _sigs_of: list[list[Signature]] = field(default_factory=list)
    _names: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, nodes: Iterable[Node]) -> NodePool:
        infos = [node_info(n) for n in nodes]
        pool = cls(infos=infos)
        pool.free = [dict(i.allocatable) for i in infos]
        pool.holders = [{} for _ in infos]
        pool._sigs_of = [[] for _ in infos]
        pool.group_used = dict.fromkeys(pool.groups(), 0)
        return pool

    def groups(self) -> dict[str, int]:
        """GPU capacity per node group, in node order."""
        out: dict[str, int] = {}
        for info in self.infos:
            out[info.group] = out.get(info.group, 0) + info.allocatable.get(GPU, 0)
        return out

    def _index_of(self, sig: Signature) -> _Index:
        idx = self._index.get(sig)
        if idx is None:
            nodes = tuple(i for i, info in enumerate(self.infos) if feasible(info, sig))
            idx = _Index(
                nodes=nodes, max_gpus=max((self.free[i].get(GPU, 0) for i in nodes), default=0)
            )
            for i in nodes:
                idx.by_free.setdefault(self.free[i].get(GPU, 0), set()).add(i)
                self._sigs_of[i].append(sig)
            self._index[sig] = idx
        return idx

    def fits(self, i: int, req: Mapping[str, int]) -> bool:
        free = self.free[i]
        return all(free.get(k, 0) >= v for k, v in req.items() if v)

    def index(self, name: str) -> int | None:
        """The index of the node named `name`."""
        if not self._names:
            self._names = {info.name: i for i, info in enumerate(self.infos)}
        return self._names.get(name)

    def find(self, sig: Signature, req: Mapping[str, int]) -> int | None:
        """The node kube-scheduler would bind this pod to now, or None."""
        idx = self._index_of(sig)
        gpus = req.get(GPU, 0)
        if gpus:
            for free in range(idx.max_gpus, gpus - 1, -1):
                bucket = idx.by_free.get(free)
                if bucket:
                    for i in sorted(bucket):
                        if self.fits(i, req):
                            return i
            return None
        best: int | None = None
        for i in idx.nodes:
            if self.fits(i, req) and (
                best is None or self.free[i].get("cpu", 0) > self.free[best].get("cpu", 0)
            ):
                best = i
        return best

    def _move(self, i: int, req: Mapping[str, int], sign: int) -> None:
        old = self.free[i].get(GPU, 0)
        for k, v in req.items():
            self.free[i][k] = self.free[i].get(k, 0) - sign * v
        new = self.free[i].get(GPU, 0)
        if new != old:
            self.group_used[self.infos[i].group] += old - new
            for sig in self._sigs_of[i]:
                by_free = self._index[sig].by_free
                by_free[old].discard(i)
                by_free.setdefault(new, set()).add(i)

    def bind(self, i: int, owner: str, req: Mapping[str, int]) -> None:
        self._move(i, req, +1)
        held = self.holders[i].setdefault(owner, [0, 0])
        held[0] += 1
        held[1] += req.get(GPU, 0)

    def release(self, owner: str, placed: Iterable[tuple[int, Mapping[str, int]]]) -> None:
        for i, req in placed:
            self._move(i, req, -1)
            held = self.holders[i].get(owner)
            if held is not None:
                held[0] -= 1
                held[1] -= req.get(GPU, 0)
                if held[0] <= 0:
                    del self.holders[i][owner]

    def gpus_bound(self) -> tuple[int, ...]:
        """GPUs bound to pods on each node, in node order."""
        return tuple(
            info.allocatable.get(GPU, 0) - free.get(GPU, 0)
            for info, free in zip(self.infos, self.free, strict=True)
        )

    def node_timeline(self) -> NodeTimeline | None:
        """An empty per-node timeline for this pool (None when it has too many nodes)."""
        if len(self.infos) > MAX_NODE_ROWS:
            return None
        return NodeTimeline(
            names=tuple(i.name for i in self.infos),
            capacity=tuple(i.allocatable.get(GPU, 0) for i in self.infos),
        )

    def feasible_nodes(self, sig: Signature) -> tuple[int, ...]:
        return self._index_of(sig).nodes
