"""NVML reader on a fake NVML: bridges, NVSwitch boards and PCIe-only machines."""

from __future__ import annotations

import pytest

from atoll.agent import nvml
from atoll.agent.gputopology import LinkKind, islands, published
from tests.agent.fakes import FakeNvml

BUS = [f"00000000:{b:02X}:00.0" for b in (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)]


def _island_sets(fake: FakeNvml) -> list[tuple[int, ...]]:
    return [i.gpus for i in islands(nvml.read(fake))]


def test_bridged_pair_counts_the_links_between_the_two_gpus() -> None:
    fake = FakeNvml(bus_ids=BUS[:2], nvlink_ends=[[BUS[1]] * 4, [BUS[0]] * 4])
    topo = nvml.read(fake)
    assert topo.links[(0, 1)].kind is LinkKind.NVLINK
    assert topo.links[(0, 1)].nvlinks == 4
    assert [(i.gpus, i.nvlinks) for i in islands(topo)] == [((0, 1), 4)]


def test_two_bridged_pairs_are_two_islands() -> None:
    ends = [[BUS[1]] * 4, [BUS[0]] * 4, [BUS[3]] * 4, [BUS[2]] * 4]
    fake = FakeNvml(bus_ids=BUS[:4], nvlink_ends=ends)
    assert _island_sets(fake) == [(0, 1), (2, 3)]
    assert nvml.read(fake).links[(1, 2)].kind is LinkKind.SYS


def test_nvswitch_board_is_one_island_with_every_link_of_a_gpu() -> None:
    switch = "0000:c0:00.0"
    fake = FakeNvml(bus_ids=BUS, nvlink_ends=[[switch] * 18] * 8, switched=True)
    got = islands(nvml.read(fake))
    assert [(i.gpus, i.nvlinks, i.all_pairs) for i in got] == [(tuple(range(8)), 18, True)]


def test_pcie_only_gpus_are_islands_of_one_with_their_pcie_level() -> None:
    fake = FakeNvml(bus_ids=BUS, ancestor=40)
    topo = nvml.read(fake)
    assert _island_sets(fake) == [(i,) for i in range(8)]
    assert topo.links[(0, 5)].kind is LinkKind.NODE


def test_bus_ids_are_published_in_the_kubernetes_form() -> None:
    fake = FakeNvml(bus_ids=BUS[:2], nvlink_ends=[[BUS[1]] * 4, [BUS[0]] * 4])
    doc = published(nvml.read(fake))
    assert [g.bus_id for g in doc.islands[0].gpus] == ["0000:18:00.0", "0000:2a:00.0"]
    assert doc.islands[0].gpus[1].uuid == "GPU-fake-1"
    assert doc.source == "nvml"


def test_nvml_failure_is_translated_and_shuts_down() -> None:
    fake = FakeNvml(bus_ids=BUS[:1], fail_init=True)
    with pytest.raises(nvml.NvmlError, match="nvmlInit: Driver Not Loaded"):
        nvml.read(fake)
    ok = FakeNvml(bus_ids=BUS[:1])
    nvml.read(ok)
    assert ok.calls == ["init", "shutdown"]
