"""The hosts a backfill reservation holds: where its holder will run at the reservation's start.

A reservation of quota alone (`engine.backfill`) does not keep a gang's hosts free: small
Jobs backfilled onto partly free nodes keep the whole nodes (or the one topology domain) a
gang needs from ever freeing. So, when the holder is a gang that placement places (topology
or devices), its reservation also holds hosts:

- Planning (`Planner`): at each time the reservation step considers (the admitted workloads'
  ends, in order), the live inventory with the placements of the workloads gone by then
  given back (and the hosts of earlier reservations held then taken) is asked to place the
  gang, with the placer the cycle itself uses (`engine.placement.place`: one domain of its
  required or preferred level when it has one, best fit). The first time it is placed is
  the reservation's start, and the nodes it is placed on are reserved: those that free
  soonest enough to hold the gang.
- Backfill (`Fence`): a candidate of a backfill queue whose guaranteed end comes after the
  start may use a reserved node only for what is left there at the start beside the holder
  (and beside what still runs then); placement sees each reserved node with the smaller of
  its free amounts now and that. A candidate that ends before the start is not fenced.

Pure: the inventory and the ledger's placements are arguments (`Hosts`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from atoll.engine import domainpreemption as dp
from atoll.engine.devices import NodeDevices
from atoll.engine.flavors import Assignment
from atoll.engine.inventory import Gang, Inventory, NodeInventory, Placement
from atoll.engine.model import ClusterQueueName, Workload
from atoll.engine.placement import place


@dataclass(frozen=True, slots=True, kw_only=True)
class Hosts:
    """What host reservations plan on: the live inventory (with the other preemptors'
    nominated domains taken), the placements the ledger holds by workload key, and the gang
    a workload would be with an assignment (None: placement is not involved)."""

    inventory: Inventory
    held: Mapping[str, Placement]
    gang: Callable[[Workload, ClusterQueueName, Assignment], Gang | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class HostHold:
    """The hosts a reservation holds from its start."""

    placement: Placement
    """Where the holder would be placed at the start."""
    nodes: frozenset[str]
    at_start: Inventory = field(compare=False, repr=False)
    """The inventory at the start, with the holder placed (what is left for the others)."""

    @property
    def where(self) -> str:
        """`rack-2` (the one domain of the holder's level), else the nodes."""
        domains = {(ps.level, ps.domain) for ps in self.placement.pod_sets}
        if len(domains) == 1:
            level, domain = next(iter(domains))
            if level is not None and domain:
                return domain[-1]
        names = sorted(self.nodes)
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        return f"{'node' if len(names) == 1 else 'nodes'} {shown}"


@dataclass(slots=True)
class Planner:
    """Where one holder would be placed at each time the reservation step considers, in
    order: the inventory is released incrementally (`gone` only grows), and a time at which
    nothing more was given back and the same hosts are taken is not placed again."""

    hosts: Hosts
    gang: Gang
    _inventory: Inventory | None = None
    _released: int = 0
    _failed: tuple[int, tuple[int, ...]] | None = None

    def at(self, gone: Sequence[str], taken: Sequence[Placement]) -> HostHold | None:
        """Where the gang is placed once the workloads `gone` (a list that only grows
        between calls) have given their hosts back, with the hosts `taken` (other
        reservations held then) out of the way; None when it is not."""
        if self._inventory is None:
            self._inventory = self.hosts.inventory
        fresh = [self.hosts.held[k] for k in gone[self._released :] if k in self.hosts.held]
        self._released = len(gone)
        if fresh:
            self._inventory = dp.release(self._inventory, fresh)
        token = (id(self._inventory), tuple(id(p) for p in taken))
        if token == self._failed:
            return None  # nothing changed since it last did not fit
        inventory = dp.reserve(self._inventory, taken)
        got = place(inventory, self.gang)
        if not isinstance(got, Placement):
            self._failed = token
            return None
        return HostHold(
            placement=got,
            nodes=frozenset(p.node for p in got.pods),
            at_start=dp.reserve(inventory, [got]),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Fenced:
    """One reserved set of hosts a candidate must leave room on."""

    hold: HostHold
    start: float
    holder: str
    """The holder's key, for messages."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Fence:
    """The reserved hosts a candidate (whose guaranteed end comes after their starts) may use
    only for what the holders leave there at their starts."""

    fenced: tuple[Fenced, ...]
    ends: Mapping[str, float | None]
    """Guaranteed ends of the workloads admitted earlier in the cycle (None: unknown)."""

    def apply(self, inventory: Inventory, placed: Mapping[str, Placement]) -> Inventory:
        """`inventory` (now, with `placed`: this cycle's placements) with each reserved node
        cut down to what is left there at the start: free amounts the smaller of the two,
        devices busy in either busy."""
        for f in self.fenced:
            late = [p for k, p in placed.items() if _after(self.ends.get(k), f.start)]
            later = dp.reserve(f.hold.at_start, late)
            nodes = tuple(
                _smaller(n, later.by_name[n.name]) if n.name in f.hold.nodes else n
                for n in inventory.nodes
            )
            inventory = Inventory(
                nodes=nodes,
                topologies=inventory.topologies,
                island_attribute=inventory.island_attribute,
            )
        return inventory

    def message(self, describe: Callable[[Fenced], str]) -> str:
        held = "; ".join(describe(f) for f in self.fenced)
        return (
            f"The hosts it would need are reserved ({held}), and its guaranteed end comes "
            "after the reservation starts"
        )


def _after(end: float | None, start: float) -> bool:
    return end is None or end > start


def _smaller(now: NodeInventory, later: NodeInventory) -> NodeInventory:
    free = {r: min(now.free.get(r, 0), later.free.get(r, 0)) for r in now.free.keys() | later.free}
    islands = now.islands
    if islands is not None and later.islands is not None:
        pairs = zip(islands.free, later.islands.free, strict=True)
        islands = replace(islands, free=tuple(min(a, b) for a, b in pairs))
    d = now.devices
    busy = d.busy | later.devices.busy
    devices = (
        d
        if busy == d.busy
        else NodeDevices(
            free=tuple(x for x in d.all if x.id not in busy),
            busy=busy,
            all=d.all,
            incomplete=d.incomplete,
        )
    )
    return replace(now, free=free, islands=islands, devices=devices)
