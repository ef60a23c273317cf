"""Reading `nvidia-smi topo -m`: the text matrix of how GPUs (and NICs) are connected.

The output is a header naming the device columns (`GPU0 … GPUn`, then `NIC#` or `mlx5_#` on
machines with NICs) followed by `CPU Affinity`, `NUMA Affinity` and, on recent drivers,
`GPU NUMA ID`; then one row per device whose cells are `X` (itself), `NV#` (# bonded NVLinks),
`PIX`, `PXB`, `PHB`, `NODE` or `SYS` (`SOC` on old drivers); then a legend. Cells are
separated by tabs or spaces and the header may carry terminal escape codes; both are
accepted. Anything else is an error naming the line and the rule it breaks, so that nothing
is published from output atoll did not understand.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence

from atoll.agent.gputopology import Gpu, GpuTopology, Link, LinkKind

_ESCAPES = re.compile(r"\x1b\[[0-9;]*m")
_GPU = re.compile(r"^GPU(\d+)$")
_NVLINK = re.compile(r"^NV(\d+)$")
_KINDS = {k.value: k for k in LinkKind if k is not LinkKind.NVLINK} | {"SOC": LinkKind.SYS}
_ACCEPTED = "X, NV<n>, PIX, PXB, PHB, NODE, SYS or SOC"


class TopologyParseError(ValueError):
    """The text is not `nvidia-smi topo -m` output atoll understands; names line and rule."""


def _cell(text: str, where: str) -> Link:
    kind = _KINDS.get(text)
    if kind is not None:
        return Link(kind)
    m = _NVLINK.match(text)
    if m is None or int(m.group(1)) < 1:
        raise TopologyParseError(f"{where}: link {text!r} is not one of {_ACCEPTED}")
    return Link(LinkKind.NVLINK, int(m.group(1)))


def _header(lines: Sequence[str]) -> tuple[int, list[str]]:
    """The header's line index and its device columns (those before `CPU Affinity`)."""
    for i, line in enumerate(lines):
        tokens = line.split()
        if not tokens:
            continue
        if tokens[0] != "GPU0":
            raise TopologyParseError(
                f"line {i + 1}: expected the header of `nvidia-smi topo -m` (columns GPU0,"
                f" GPU1, …), found {line.strip()[:60]!r}"
            )
        cut = tokens.index("CPU") if "CPU" in tokens else len(tokens)
        return i, tokens[:cut]
    raise TopologyParseError("line 1: empty input, expected `nvidia-smi topo -m` output")


def _gpu_columns(columns: Sequence[str], line: int) -> int:
    count = 0
    for col in columns:
        m = _GPU.match(col)
        if m is None:
            break
        if int(m.group(1)) != count:
            raise TopologyParseError(
                f"line {line}: header column {col} out of order, expected GPU{count}"
            )
        count += 1
    if any(_GPU.match(c) for c in columns[count:]):
        raise TopologyParseError(f"line {line}: GPU columns must come before the NIC columns")
    return count


def parse(text: str, *, source: str = "nvidia-smi") -> GpuTopology:
    """The GPUs and their links; raises TopologyParseError naming the line."""
    lines = [_ESCAPES.sub("", raw).replace("\r", "") for raw in text.splitlines()]
    start, columns = _header(lines)
    n = _gpu_columns(columns, start + 1)
    gpus: list[Gpu] = []
    links: dict[tuple[int, int], Link] = {}
    for i in range(start + 1, len(lines)):
        tokens = lines[i].split()
        if not tokens or tokens[0].startswith("Legend"):
            break
        where = f"line {i + 1}"
        name = tokens[0]
        cells = tokens[1 : 1 + len(columns)]
        if len(cells) < len(columns):
            raise TopologyParseError(
                f"{where}: row {name} has {len(cells)} link cells, the header names"
                f" {len(columns)} devices"
            )
        if not _GPU.match(name):
            for col, cell in zip(columns, cells, strict=True):
                _cell(cell, f"{where}, column {col}")
            continue
        row = len(gpus)
        if name != f"GPU{row}":
            raise TopologyParseError(f"{where}: row {name} out of order, expected GPU{row}")
        if row >= n:
            raise TopologyParseError(f"{where}: row {name} has no column in the header")
        for j, (col, cell) in enumerate(zip(columns, cells, strict=True)):
            link = _cell(cell, f"{where}, column {col}")
            if j == row and link.kind is not LinkKind.SELF:
                raise TopologyParseError(f"{where}: {name} to itself must be X, found {cell}")
            if j != row and link.kind is LinkKind.SELF:
                raise TopologyParseError(f"{where}: {name} to {col} is X, only the diagonal is")
            if j < n and j != row:
                other = links.get((j, row))
                if other is not None and other != link:
                    raise TopologyParseError(
                        f"{where}: {name} to {col} is {link} but {col} to {name} is {other}"
                    )
                links[(row, j)] = link
        rest = tokens[1 + len(columns) :]
        gpus.append(
            Gpu(
                index=row,
                cpu_affinity=rest[0] if rest else None,
                numa_affinity=rest[1] if len(rest) > 1 and rest[1] != "N/A" else None,
            )
        )
    if len(gpus) != n:
        raise TopologyParseError(
            f"line {start + 1}: the header names {n} GPUs but {len(gpus)} GPU rows follow"
        )
    if n == 0:
        raise TopologyParseError(f"line {start + 1}: no GPU columns in the header")
    return GpuTopology(gpus=tuple(gpus), links=links, source=source)


_QUERY = ("--query-gpu=index,pci.bus_id,uuid", "--format=csv,noheader")


def parse_ids(text: str, topology: GpuTopology) -> GpuTopology:
    """Adds bus IDs and UUIDs from `nvidia-smi --query-gpu=index,pci.bus_id,uuid
    --format=csv,noheader` (one `index, bus id, uuid` line per GPU)."""
    ids: dict[int, tuple[str, str]] = {}
    for i, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or not parts[0].isdigit():
            raise TopologyParseError(
                f"line {i + 1}: expected `index, pci.bus_id, uuid`, found {line.strip()[:60]!r}"
            )
        ids[int(parts[0])] = (parts[1], parts[2])
    gpus = []
    for g in topology.gpus:
        bus, uuid = ids.get(g.index, (None, None))
        gpus.append(
            Gpu(
                index=g.index,
                bus_id=bus,
                uuid=uuid,
                cpu_affinity=g.cpu_affinity,
                numa_affinity=g.numa_affinity,
            )
        )
    return GpuTopology(gpus=tuple(gpus), links=topology.links, source=topology.source)


class SmiError(RuntimeError):
    """nvidia-smi could not be run."""


def _run(*args: str) -> str:
    try:
        done = subprocess.run(
            ["nvidia-smi", *args], capture_output=True, text=True, check=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as e:
        raise SmiError(f"nvidia-smi {' '.join(args)}: {e}") from e
    return done.stdout


def read() -> GpuTopology:
    """This node's topology from the `nvidia-smi` on the PATH (with bus IDs and UUIDs)."""
    topology = parse(_run("topo", "-m"))
    return parse_ids(_run(*_QUERY), topology)
