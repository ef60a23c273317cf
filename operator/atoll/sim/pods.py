"""The pods of one Job in the simulated cluster: what each asks for, where they are bound.

A gang is the workload's pods: `count` copies of each pod set's template (one pod set for a
Job, one per replicated job of a JobSet, …). Under atoll each template is merged with its
admitted flavors' nodeLabels and tolerations before the pods exist, as
`control/jobframework.template_start` does for a real object; under greedy placement the
template is used as written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from atoll.api.core import Pod
from atoll.engine import model as m
from atoll.engine.inventory import Placement
from atoll.sim.nodes import GPU, NodePool, Signature
from atoll.state import convert


def signature(ps: m.PodSet, flavors: Iterable[m.ResourceFlavor] = ()) -> Signature:
    selector = dict(ps.node_selector)
    tolerations = list(ps.tolerations)
    for f in flavors:
        selector.update(f.node_labels)
        tolerations.extend(t for t in f.tolerations if t not in tolerations)
    return Signature(
        node_selector=frozenset(selector.items()),
        affinity=ps.required_affinity,
        tolerations=tuple(tolerations),
    )


def request(ps: m.PodSet) -> dict[str, int]:
    """Per-pod requests as kube-scheduler counts them (one `pods` slot included)."""
    return {**dict(ps.requests), m.PODS: 1}


@dataclass(frozen=True, slots=True, kw_only=True)
class Part:
    """The pods of one pod set of a gang: where they may go, what each asks for."""

    sig: Signature
    req: Mapping[str, int]
    size: int
    pins: tuple[int, ...] = ()
    """Node index of each pod as atoll placed the pod set (topology or devices); empty: the
    pods go wherever kube-scheduler's rules put them."""

    @property
    def gpus_per_pod(self) -> int:
        return self.req.get(GPU, 0)


@dataclass(slots=True, kw_only=True)
class Gang:
    """The pods of a workload, pod set after pod set (`parts`), bound in that order."""

    owner: str
    parts: tuple[Part, ...]
    placed: list[int] = field(default_factory=list)
    """Node index of every bound pod."""

    @classmethod
    def single(cls, owner: str, sig: Signature, req: Mapping[str, int], size: int) -> Gang:
        """A gang of one pod set."""
        return cls(owner=owner, parts=(Part(sig=sig, req=req, size=size),))

    @property
    def size(self) -> int:
        return sum(p.size for p in self.parts)

    @property
    def gpus(self) -> int:
        """GPUs of all its pods."""
        return sum(p.size * p.gpus_per_pod for p in self.parts)

    def part_at(self, index: int) -> tuple[Part, int]:
        """The pod set of the gang's `index`-th pod, and the pod's index in it."""
        for part in self.parts:
            if index < part.size:
                return part, index
            index -= part.size
        return self.parts[-1], index + self.parts[-1].size

    @property
    def complete(self) -> bool:
        return len(self.placed) >= self.size

    def place(self, pool: NodePool, created: int | None = None) -> int:
        """Bind pods (of the first `created`, default all) one by one where they fit now;
        returns how many were bound."""
        limit = self.size if created is None else min(created, self.size)
        bound = 0
        while len(self.placed) < limit:
            if not self.place_one(pool):
                break
            bound += 1
        return bound

    def _next_node(self, pool: NodePool) -> int | None:
        """Where the next pod goes: its pinned node while that has room, else where
        kube-scheduler would bind it."""
        part, index = self.part_at(len(self.placed))
        if part.pins:
            pin = part.pins[index % len(part.pins)]
            return pin if pool.fits(pin, part.req) else None
        return pool.find(part.sig, part.req)

    def place_one(self, pool: NodePool) -> bool:
        node = self._next_node(pool)
        if node is None:
            return False
        pool.bind(node, self.owner, self.part_at(len(self.placed))[0].req)
        self.placed.append(node)
        return True

    def release(self, pool: NodePool) -> None:
        pool.release(self.owner, ((i, self.part_at(k)[0].req) for k, i in enumerate(self.placed)))
        self.placed.clear()


def domain_text(placement: Placement) -> str:
    """Where atoll placed a gang, for the Jobs table: the domain of the level that holds
    each pod set (`rack=rack-3`), else how many nodes it spans."""
    parts = []
    for ps in placement.pod_sets:
        nodes = {p.node for p in ps.pods}
        if ps.level and ps.domain:
            label = ps.level.rsplit("/", 1)[-1]
            parts.append(f"{label}={ps.domain[-1]}")
        elif len(nodes) == 1:
            parts.append(f"node={next(iter(nodes))}")
        else:
            parts.append(f"{len(nodes)} nodes")
    return ", ".join(parts)


def sim_pod(namespace: str, name: str, node: str, req: Mapping[str, int]) -> Pod:
    """A running pod bound to `node` asking for `req` (what the inventory reads of a pod)."""
    requests = {k: str(convert.quantity(k, v)) for k, v in req.items() if k != m.PODS and v}
    return Pod.from_dict(
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "resources": {"requests": requests}}],
            },
            "status": {"phase": "Running"},
        }
    )
