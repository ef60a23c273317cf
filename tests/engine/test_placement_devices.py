"""The per-node device search: alternatives, constraints, allocation modes, taints, errors."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from atoll.engine.devices import (
    Claim,
    ConstraintKind,
    Device,
    DeviceConstraint,
    DeviceId,
    DeviceRequest,
    DeviceSelectorError,
    NodeDevices,
    RequestAlternative,
    allocate,
)
from atoll.engine.inventory import Gang, GangPodSet, Inventory, NodeInventory, NoFit, NoFitReason
from atoll.engine.model import Taint, TaintEffect, Toleration, TolerationOperator
from atoll.engine.placement import place

ISLAND = "x.dev/island"
ROOT = "x.dev/pcieRoot"


def _dev(k: int, *, island: int, root: int | None = None, taint: bool = False) -> Device:
    attrs: dict[str, int | bool | str] = {ISLAND: island, "x.dev/index": k}
    if root is not None:
        attrs[ROOT] = f"pci{root}"
    return Device(
        id=DeviceId(f"x.dev/n0/d{k}"),
        driver="x.dev",
        pool="n0",
        name=f"d{k}",
        generation=1,
        attributes=attrs,
        capacity={},
        taints=(Taint(key="gpu-lost", effect=TaintEffect.NO_SCHEDULE),) if taint else (),
    )


def _node(devices: tuple[Device, ...], busy: frozenset[DeviceId] = frozenset()) -> NodeDevices:
    return NodeDevices(free=tuple(d for d in devices if d.id not in busy), busy=busy, all=devices)


def _alt(
    name: str = "gpu", count: int = 1, pred: Callable[[Device], bool] = lambda d: True, **kw: object
) -> RequestAlternative:
    return RequestAlternative(name=name, device_class="x", matchers=(pred,), count=count, **kw)  # type: ignore[arg-type]


def _claim(*requests: DeviceRequest, constraints: tuple[DeviceConstraint, ...] = ()) -> Claim:
    return Claim(name="c", requests=requests, constraints=constraints)


def _ids(got: object) -> list[str]:
    assert got is not None
    return [a.device.rsplit("/", 1)[1] for a in got]  # type: ignore[attr-defined]


FOUR = tuple(_dev(k, island=k // 2, root=k % 2) for k in range(4))


def test_match_attribute_picks_devices_of_one_island() -> None:
    match = (DeviceConstraint(kind=ConstraintKind.MATCH, attribute=ISLAND),)
    got = allocate(
        [_claim(DeviceRequest(name="gpu", alternatives=(_alt(count=2),)), constraints=match)],
        _node(FOUR, frozenset({DeviceId("x.dev/n0/d1")})),
        ISLAND,
    )
    assert _ids(got) == ["d2", "d3"]


def test_distinct_attribute_spreads_over_values() -> None:
    distinct = (DeviceConstraint(kind=ConstraintKind.DISTINCT, attribute=ROOT),)
    got = allocate(
        [_claim(DeviceRequest(name="gpu", alternatives=(_alt(count=2),)), constraints=distinct)],
        _node(FOUR),
        None,
    )
    ids = _ids(got)
    roots = {FOUR[int(i[1:])].attributes[ROOT] for i in ids}
    assert len(roots) == 2


def test_first_available_falls_back_in_order() -> None:
    big = _alt("gpu/big", count=3)
    small = _alt("gpu/small", count=1)
    match = (DeviceConstraint(kind=ConstraintKind.MATCH, attribute=ISLAND),)
    got = allocate(
        [_claim(DeviceRequest(name="gpu", alternatives=(big, small)), constraints=match)],
        _node(FOUR),
        ISLAND,
    )
    assert got is not None
    assert [a.request for a in got] == ["gpu/small"]


def test_all_mode_needs_every_matching_device_free() -> None:
    every = _claim(DeviceRequest(name="gpu", alternatives=(_alt(all_devices=True),)))
    assert len(_ids(allocate([every], _node(FOUR), None))) == 4
    assert allocate([every], _node(FOUR, frozenset({DeviceId("x.dev/n0/d3")})), None) is None
    incomplete = NodeDevices(free=FOUR, busy=frozenset(), all=FOUR, incomplete=True)
    assert allocate([every], incomplete, None) is None


@pytest.mark.parametrize(
    ("tolerations", "expected"),
    [
        pytest.param((), ["d1"], id="untolerated-taint-skips-the-device"),
        pytest.param(
            (Toleration(key="gpu-lost", operator=TolerationOperator.EXISTS),),
            ["d0"],
            id="tolerated-taint-allows-it",
        ),
    ],
)
def test_device_taints_follow_request_tolerations(
    tolerations: tuple[Toleration, ...], expected: list[str]
) -> None:
    devices = (_dev(0, island=0, taint=True), _dev(1, island=0))
    claim = _claim(DeviceRequest(name="gpu", alternatives=(_alt(tolerations=tolerations),)))
    assert _ids(allocate([claim], _node(devices), None)) == expected


def test_two_claims_of_one_pod_never_share_a_device() -> None:
    one = _claim(DeviceRequest(name="gpu", alternatives=(_alt(count=2),)))
    got = allocate([one, one], _node(FOUR), None)
    assert sorted(_ids(got)) == ["d0", "d1", "d2", "d3"]
    assert allocate([one, one, one], _node(FOUR), None) is None


def _failing(_: Device) -> bool:
    raise DeviceSelectorError('device.attributes["x.dev"].nope', "no such key: nope")


def test_a_selector_error_makes_the_gang_inadmissible_not_merely_unfit() -> None:
    node = NodeInventory(
        name="n0", labels={}, allocatable={"cpu": 1000}, free={"cpu": 1000}, devices=_node(FOUR)
    )
    claim = _claim(DeviceRequest(name="gpu", alternatives=(_alt(pred=_failing),)))
    got = place(
        Inventory(nodes=(node,)),
        Gang(key="ns/g", pod_sets=(GangPodSet(name="main", count=1, claims=(claim,)),)),
    )
    assert isinstance(got, NoFit)
    assert got.reason is NoFitReason.SELECTOR_ERROR
    assert "no such key" in got.message
