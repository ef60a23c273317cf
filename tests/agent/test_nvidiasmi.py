"""`nvidia-smi topo -m` parsing: the fixtures in examples/nvidia-smi/ (machine types built from
public descriptions of their topology) and malformed output."""

from __future__ import annotations

import pytest

from atoll.agent.gputopology import LinkKind, islands, published
from atoll.agent.nvidiasmi import TopologyParseError, parse, parse_ids
from tests.conftest import REPO

FIXTURES = REPO / "examples" / "nvidia-smi"


def _read(name: str) -> str:
    return (FIXTURES / name).read_text()


@pytest.mark.parametrize(
    ("fixture", "want", "nvlinks"),
    [
        pytest.param("dgx-h100.txt", [tuple(range(8))], [18], id="hgx-h100-nvswitch"),
        pytest.param("lab-2x3090.txt", [(0, 1)], [4], id="2x3090-bridge"),
        pytest.param("rtx-a6000-2-pairs.txt", [(0, 1), (2, 3)], [4, 4], id="4xa6000-pairs"),
        pytest.param("l40s-pcie.txt", [(i,) for i in range(8)], [0] * 8, id="8xl40s-pcie"),
        pytest.param("gb200-nvl72.txt", [(0, 1, 2, 3)], [18], id="gb200-tray"),
    ],
)
def test_fixture_islands_and_link_counts(
    fixture: str, want: list[tuple[int, ...]], nvlinks: list[int]
) -> None:
    got = islands(parse(_read(fixture)))
    assert [i.gpus for i in got] == want
    assert [i.nvlinks for i in got] == nvlinks
    assert all(i.all_pairs for i in got)


def test_nic_rows_and_affinity_columns_are_read_past() -> None:
    topo = parse(_read("dgx-h100.txt"))
    assert len(topo.gpus) == 8
    assert topo.gpus[0].cpu_affinity == "0-55,112-167"
    assert topo.gpus[4].numa_affinity == "1"
    assert topo.links[(0, 7)].kind is LinkKind.NVLINK
    assert (0, 8) not in topo.links  # NIC columns are not GPU links


def test_pcie_levels_are_kept() -> None:
    topo = parse(_read("l40s-pcie.txt"))
    assert topo.links[(0, 3)].kind is LinkKind.NODE
    assert topo.links[(0, 4)].kind is LinkKind.SYS


def test_space_separated_and_escape_coded_output_parses() -> None:
    text = "\x1b[4m        GPU0    GPU1    CPU Affinity    NUMA Affinity\x1b[0m\n"
    text += "GPU0     X      NV2     0-7     0\nGPU1    NV2      X      0-7     0\n"
    assert [i.gpus for i in islands(parse(text))] == [(0, 1)]


def test_old_soc_is_sys() -> None:
    text = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSOC\t0-7\nGPU1\tSOC\t X \t0-7\n"
    assert parse(text).links[(0, 1)].kind is LinkKind.SYS


def test_ids_add_bus_ids_and_uuids_to_the_islands() -> None:
    topo = parse_ids(_read("dgx-h100.ids.csv"), parse(_read("dgx-h100.txt")))
    doc = published(topo)
    gpus = doc.islands[0].gpus
    assert gpus[0].bus_id == "0000:18:00.0"
    assert gpus[7].bus_id == "0000:db:00.0"
    assert gpus[3].uuid == "GPU-eae0d2c1-1c33-4464-873d-212ba950666d"


def test_published_labels_say_the_sizes() -> None:
    doc = published(parse(_read("rtx-a6000-2-pairs.txt")))
    assert doc.labels() == {
        "atoll.dev/nvlink-island-max": "2",
        "atoll.dev/nvlink-island-sizes": "2.2",
    }
    pcie = published(parse(_read("l40s-pcie.txt"))).labels()
    assert pcie["atoll.dev/nvlink-island-sizes"] == "1.1.1.1.1.1.1.1"


PAIR = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-7\nGPU1\tNV4\t X \t0-7\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", r"line 1: empty input", id="empty"),
        pytest.param("Failed to initialize NVML\n", r"line 1: expected the header", id="no-header"),
        pytest.param(
            PAIR.replace("NV4\t0", "NVX\t0", 1), r"line 2, column GPU1: link 'NVX'", id="bad-cell"
        ),
        pytest.param(
            PAIR.replace("NV4\t X", "PIX\t X"),
            r"line 3: GPU1 to GPU0 is PIX but GPU0 to GPU1 is NV4",
            id="asymmetric",
        ),
        pytest.param(
            PAIR.replace("\tNV4\t0-7\n", "\n", 1),
            r"line 2: row GPU0 has 1 link cells, the header names 2",
            id="short-row",
        ),
        pytest.param(
            PAIR.replace("GPU1\tNV4", "GPU2\tNV4"),
            r"line 3: row GPU2 out of order, expected GPU1",
            id="row-order",
        ),
        pytest.param(
            PAIR.replace(" X \tNV4\t0-7\nGPU1", "NV4\tNV4\t0-7\nGPU1"),
            r"line 2: GPU0 to itself must be X",
            id="diagonal",
        ),
        pytest.param(
            PAIR.split("GPU1\tNV4", maxsplit=1)[0],
            r"line 1: the header names 2 GPUs but 1 GPU rows follow",
            id="missing-row",
        ),
        pytest.param(
            "\tGPU0\tGPU2\nGPU0\n",
            r"line 1: header column GPU2 out of order, expected GPU1",
            id="header-order",
        ),
    ],
)
def test_malformed_output_names_the_line_and_rule(text: str, message: str) -> None:
    with pytest.raises(TopologyParseError, match=message):
        parse(text)


def test_malformed_ids_name_the_line() -> None:
    with pytest.raises(TopologyParseError, match=r"line 2: expected `index, pci.bus_id, uuid`"):
        parse_ids("0, 0000:01:00.0, GPU-a\nbogus\n", parse(PAIR))
