"""The pods of one Job in the simulated cluster: what each asks for, where they are bound.

A gang is the Job's pods (`count` copies of its pod template). Under atoll the template is
merged with the admitted flavors' nodeLabels and tolerations before the pods exist, as
`control/jobframework.start_plan` does for a real Job; under greedy placement the template
is used as written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from atoll.engine import model as m
from atoll.sim.nodes import GPU, NodePool, Signature


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


@dataclass(slots=True, kw_only=True)
class Gang:
    owner: str
    sig: Signature
    req: Mapping[str, int]
    size: int
    placed: list[int] = field(default_factory=list)
    """Node index of every bound pod."""

    @property
    def gpus_per_pod(self) -> int:
        return self.req.get(GPU, 0)

    @property
    def complete(self) -> bool:
        return len(self.placed) >= self.size

    def place(self, pool: NodePool, created: int | None = None) -> int:
        """Bind pods (of the first `created`, default all) one by one where they fit now;
        returns how many were bound."""
        limit = self.size if created is None else min(created, self.size)
        bound = 0
        while len(self.placed) < limit:
            node = pool.find(self.sig, self.req)
            if node is None:
                break
            pool.bind(node, self.owner, self.req)
            self.placed.append(node)
            bound += 1
        return bound

    def place_one(self, pool: NodePool) -> bool:
        node = pool.find(self.sig, self.req)
        if node is None:
            return False
        pool.bind(node, self.owner, self.req)
        self.placed.append(node)
        return True

    def release(self, pool: NodePool) -> None:
        pool.release(self.owner, ((i, self.req) for i in self.placed))
        self.placed.clear()
