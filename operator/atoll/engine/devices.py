"""DRA devices and the per-node search that satisfies one pod's ResourceClaims.

Mirrors the structured allocator of k8s.io/dynamic-resource-allocation
(structured/internal/stable/allocator_stable.go): claims, requests with `exactly` or
`firstAvailable` alternatives (tried in order), `ExactCount` or `All`, class and request
selectors (given here as compiled predicates), device taints against request tolerations,
and `matchAttribute` / `distinctAttribute` constraints checked incrementally. The search is a
depth-first backtracking like the allocator's, with two changes: devices of one request are
chosen as combinations (not permutations), and candidates are ordered best-fit (devices of the
smallest group that still holds enough free devices first), so whole islands stay free.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import NewType, Protocol

from atoll.engine.matching import untolerated_taint
from atoll.engine.model import Taint, Toleration

DeviceId = NewType("DeviceId", str)
"""`<driver>/<pool>/<device>`, as the allocator names devices."""

SEARCH_LIMIT = 20_000
"""Device-slot visits per pod and node before the search gives up (answers "no fit")."""


@dataclass(frozen=True, slots=True)
class Version:
    """A semantic-version attribute (kept apart from strings: matchAttribute compares types)."""

    text: str


AttributeValue = int | bool | str | Version


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Device:
    """One device of a complete pool at its newest generation."""

    id: DeviceId
    driver: str
    pool: str
    name: str
    generation: int
    attributes: Mapping[str, AttributeValue]
    """By fully qualified name (`gpu.atoll.dev/island`, `resource.kubernetes.io/pcieRoot`)."""
    capacity: Mapping[str, int]
    """By fully qualified name, in milli-units (exact)."""
    taints: tuple[Taint, ...] = ()


class DeviceSelectorError(Exception):
    """A CEL selector failed at run time; Kubernetes fails the pod's scheduling attempt."""

    def __init__(self, expression: str, message: str) -> None:
        super().__init__(f"{message} (selector {expression!r})")
        self.expression = expression
        self.message = message


class DeviceMatcher(Protocol):
    """A compiled selector (class or request). Raises DeviceSelectorError on CEL errors."""

    def __call__(self, device: Device) -> bool: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestAlternative:
    """An `exactly` request, or one subrequest of `firstAvailable`."""

    name: str
    """`req` or `req/sub`, as allocation results name it."""
    device_class: str
    matchers: tuple[DeviceMatcher, ...]
    """The DeviceClass selectors followed by the request's own; all must match."""
    all_devices: bool = False
    """allocationMode All: every matching device reachable from the node, all free."""
    count: int = 1
    tolerations: tuple[Toleration, ...] = ()
    admin_access: bool = False
    """Admin access may use devices in use and does not consume them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceRequest:
    name: str
    alternatives: tuple[RequestAlternative, ...]
    """One for `exactly`; the `firstAvailable` list otherwise, in order."""


class ConstraintKind(Enum):
    MATCH = "matchAttribute"
    DISTINCT = "distinctAttribute"


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceConstraint:
    kind: ConstraintKind
    attribute: str
    """Fully qualified attribute name."""
    requests: frozenset[str] = frozenset()
    """Request names it covers (a bare name covers its subrequests); empty covers all."""

    def covers(self, alternative: str) -> bool:
        return not self.requests or alternative.split("/", 1)[0] in self.requests


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    """One pod-level claim (generated per pod from a ResourceClaimTemplate)."""

    name: str
    requests: tuple[DeviceRequest, ...]
    constraints: tuple[DeviceConstraint, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceAllocation:
    claim: str
    request: str
    """`req` or `req/sub`."""
    device: DeviceId
    admin_access: bool = False


@dataclass(slots=True)
class _Slot:
    claim: int
    alternative: RequestAlternative
    candidates: list[Device]
    first: bool
    """First slot of its request: combinations start from candidate 0."""


class _Search:
    """One backtracking search over the slots of one choice of alternatives."""

    def __init__(self, slots: list[_Slot], constraints: list[list[DeviceConstraint]]) -> None:
        self.slots = slots
        self.constraints = constraints  # per claim
        self.chosen: list[tuple[int, Device]] = []  # (candidate index, device)
        self.used: set[DeviceId] = set()
        self.budget = SEARCH_LIMIT

    def run(self) -> list[Device] | None:
        return [d for _, d in self.chosen] if self._fill(0) else None

    def _fill(self, i: int) -> bool:
        if i == len(self.slots):
            return True
        slot = self.slots[i]
        start = 0 if slot.first else self.chosen[-1][0] + 1
        for k in range(start, len(slot.candidates)):
            self.budget -= 1
            if self.budget < 0:
                return False
            device = slot.candidates[k]
            if device.id in self.used or not self._fits(i, slot, device):
                continue
            self.chosen.append((k, device))
            self.used.add(device.id)
            if self._fill(i + 1):
                return True
            self.chosen.pop()
            self.used.discard(device.id)
        return False

    def _fits(self, i: int, slot: _Slot, device: Device) -> bool:
        for c in self.constraints[slot.claim]:
            if not c.covers(slot.alternative.name):
                continue
            value = device.attributes.get(c.attribute)
            if value is None:
                return False
            key = (type(value), value)
            for j, (_, other) in enumerate(self.chosen):
                peer = self.slots[j]
                if peer.claim != slot.claim or not c.covers(peer.alternative.name):
                    continue
                ov = other.attributes.get(c.attribute)
                same = (type(ov), ov) == key
                if same != (c.kind is ConstraintKind.MATCH):
                    return False
        return True


def group_sizes(devices: Sequence[Device], attribute: str | None) -> dict[AttributeValue, int]:
    """How many of `devices` share each value of `attribute`."""
    sizes: dict[AttributeValue, int] = {}
    if attribute is None:
        return sizes
    for d in devices:
        v = d.attributes.get(attribute)
        if v is not None:
            sizes[v] = sizes.get(v, 0) + 1
    return sizes


def _order(candidates: list[Device], attribute: str | None, need: int) -> list[Device]:
    """Best fit: devices of the smallest group holding at least `need` first, then smaller
    groups (partly used islands), then the rest; ties keep listing order."""
    if attribute is None:
        return candidates
    sizes = group_sizes(candidates, attribute)

    def key(pair: tuple[int, Device]) -> tuple[int, int, int]:
        v = pair[1].attributes.get(attribute)
        size = sizes.get(v, 0) if v is not None else 1 << 30
        return (0 if size >= need else 1, size, pair[0])

    return [d for _, d in sorted(enumerate(candidates), key=key)]


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeDevices:
    """What a pod's claims can use on one node."""

    free: tuple[Device, ...]
    """Devices not allocated, in the allocator's listing order."""
    busy: frozenset[DeviceId]
    """Devices allocated to someone (seen by `All` requests and admin access)."""
    all: tuple[Device, ...]
    incomplete: bool = False
    """Some pool reachable from the node is incomplete: `All` requests fail."""


def device_matches(alt: RequestAlternative, device: Device) -> bool:
    """Taints tolerated and every selector true (selector errors propagate)."""
    if device.taints and untolerated_taint(device.taints, alt.tolerations) is not None:
        return False
    for m in alt.matchers:  # noqa: SIM110 - a plain loop: this is the hot path
        if not m(device):
            return False
    return True


def _slots_for(
    claim_index: int, alt: RequestAlternative, node: NodeDevices, need: int, group: str | None
) -> list[_Slot] | None:
    """The device slots of one request; `group` None keeps the listing order (first fit)."""
    pool = node.all if alt.admin_access else node.free
    candidates = [d for d in pool if device_matches(alt, d)]
    if alt.all_devices:
        if node.incomplete or not candidates:
            return None
        if any(d.id in node.busy for d in node.all if device_matches(alt, d)):
            return None
        count = len(candidates)
    else:
        count = alt.count
        if len(candidates) < count:
            return None
        candidates = _order(candidates, group, need)
    return [_Slot(claim_index, alt, candidates, first=i == 0) for i in range(count)]


def _group_attribute(claim: Claim, alt: RequestAlternative, island: str | None) -> str | None:
    for c in claim.constraints:
        if c.kind is ConstraintKind.MATCH and c.covers(alt.name):
            return c.attribute
    return island


def _choices(claims: Sequence[Claim]) -> Iterator[list[tuple[int, RequestAlternative]]]:
    """Every combination of alternatives, first alternatives first (firstAvailable order)."""
    flat = [(ci, r) for ci, c in enumerate(claims) for r in c.requests]

    def rec(i: int) -> Iterator[list[tuple[int, RequestAlternative]]]:
        if i == len(flat):
            yield []
            return
        ci, req = flat[i]
        for alt in req.alternatives:
            for rest in rec(i + 1):
                yield [(ci, alt), *rest]

    return rec(0)


def _need(
    claim: Claim, alt: RequestAlternative, picked: list[tuple[int, RequestAlternative]]
) -> int:
    """Devices that must share alt's match group: the counts of every covered request."""
    for c in claim.constraints:
        if c.kind is ConstraintKind.MATCH and c.covers(alt.name):
            return sum(a.count for _, a in picked if c.covers(a.name))
    return alt.count


def allocate(
    claims: Sequence[Claim], node: NodeDevices, island: str | None, *, best_fit: bool = True
) -> tuple[DeviceAllocation, ...] | None:
    """Devices for all of one pod's claims on one node, or None when they don't fit.

    Best fit orders candidates by island (or matchAttribute group) size; without it devices
    are tried in listing order, as kube-scheduler's allocator does. Raises
    DeviceSelectorError when a selector fails, as the scheduler's Filter does."""
    if not claims:
        return ()
    for picked in _choices(claims):
        slots: list[_Slot] = []
        for ci, alt in picked:
            claim = claims[ci]
            same = [(c, a) for c, a in picked if c == ci]
            group = _group_attribute(claim, alt, island) if best_fit else None
            got = _slots_for(ci, alt, node, _need(claim, alt, same), group)
            if got is None:
                break
            slots.extend(got)
        else:
            found = _Search(slots, [list(c.constraints) for c in claims]).run()
            if found is not None:
                return tuple(
                    DeviceAllocation(
                        claim=claims[s.claim].name,
                        request=s.alternative.name,
                        device=d.id,
                        admin_access=s.alternative.admin_access,
                    )
                    for s, d in zip(slots, found, strict=True)
                )
    return None


def device_count(claims: Sequence[Claim]) -> int:
    """The fewest devices one pod's claims take (All requests count as one)."""
    return sum(
        min(a.count if not a.all_devices else 1 for a in r.alternatives)
        for c in claims
        for r in c.requests
    )
