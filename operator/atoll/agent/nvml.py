"""Reading the GPU topology through NVML (`nvidia-ml-py`, imported as `pynvml`), when it is
installed (`pip install 'atoll[nvml]'`) and the node has NVIDIA's driver.

Per GPU: its PCI bus ID and UUID, and for each active NVLink the bus ID at the other end. Two
GPUs are NVLinked with as many links as point at each other (bridges, direct links); when the
links end at an NVSwitch instead, NVML's NVLink peer-to-peer status says whether the pair is
reachable over NVLink, and the pair counts every active link of the GPU, as `nvidia-smi topo
-m` prints it (NV18 on an H100 board). Other pairs get the PCIe level of their common
ancestor. `NvmlApi` is the part of the `pynvml` module used here, so that a fake can stand in
for it in tests.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol, cast

from atoll.agent.gputopology import Gpu, GpuTopology, Link, LinkKind
from atoll.api.islands import normalize_bus_id

_ANCESTOR = {
    0: LinkKind.PIX,  # NVML_TOPOLOGY_INTERNAL: two GPUs on one board
    10: LinkKind.PIX,  # SINGLE
    20: LinkKind.PXB,  # MULTIPLE
    30: LinkKind.PHB,  # HOSTBRIDGE
    40: LinkKind.NODE,  # NODE
    50: LinkKind.SYS,  # SYSTEM
}


class NvmlApi(Protocol):
    """The functions of `pynvml` this reader calls (pynvml's names and arguments)."""

    NVMLError: type[Exception]
    NVML_NVLINK_MAX_LINKS: int
    NVML_FEATURE_ENABLED: int
    NVML_P2P_CAPS_INDEX_NVLINK: int
    NVML_P2P_STATUS_OK: int

    def nvmlInit(self) -> None: ...  # noqa: N802
    def nvmlShutdown(self) -> None: ...  # noqa: N802
    def nvmlDeviceGetCount(self) -> int: ...  # noqa: N802
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...  # noqa: N802
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any: ...  # noqa: N802
    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes: ...  # noqa: N802
    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int: ...  # noqa: N802
    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Any, link: int) -> Any: ...  # noqa: N802
    def nvmlDeviceGetP2PStatus(self, a: Any, b: Any, index: int) -> int: ...  # noqa: N802
    def nvmlDeviceGetTopologyCommonAncestor(self, a: Any, b: Any) -> int: ...  # noqa: N802


class NvmlError(RuntimeError):
    """NVML is missing or failed; the message says which call."""


def load() -> NvmlApi | None:
    """The `pynvml` module of nvidia-ml-py, or None when it is not installed."""
    try:
        return cast(NvmlApi, importlib.import_module("pynvml"))
    except ImportError:
        return None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _remote_ends(api: NvmlApi, handle: Any) -> list[str]:
    """Bus IDs at the far end of each active NVLink of the GPU."""
    ends = []
    for link in range(api.NVML_NVLINK_MAX_LINKS):
        try:
            if api.nvmlDeviceGetNvLinkState(handle, link) != api.NVML_FEATURE_ENABLED:
                continue
            remote = api.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)
        except api.NVMLError:  # links past the GPU's own count are "not supported"
            continue
        ends.append(normalize_bus_id(_text(remote.busId)))
    return ends


def read(api: NvmlApi) -> GpuTopology:
    """This node's topology through NVML; raises NvmlError."""
    try:
        api.nvmlInit()
    except api.NVMLError as e:
        raise NvmlError(f"nvmlInit: {e}") from e
    try:
        return _read(api)
    except api.NVMLError as e:
        raise NvmlError(f"NVML: {e}") from e
    finally:
        api.nvmlShutdown()


def _read(api: NvmlApi) -> GpuTopology:
    count = api.nvmlDeviceGetCount()
    handles = [api.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    bus = [normalize_bus_id(_text(api.nvmlDeviceGetPciInfo(h).busId)) for h in handles]
    gpus = tuple(
        Gpu(index=i, bus_id=bus[i], uuid=_text(api.nvmlDeviceGetUUID(h)))
        for i, h in enumerate(handles)
    )
    ends = [_remote_ends(api, h) for h in handles]
    links: dict[tuple[int, int], Link] = {}
    for a in range(count):
        for b in range(count):
            if a == b:
                continue
            direct = ends[a].count(bus[b])
            if direct:
                links[(a, b)] = Link(LinkKind.NVLINK, direct)
            elif ends[a] and (
                api.nvmlDeviceGetP2PStatus(handles[a], handles[b], api.NVML_P2P_CAPS_INDEX_NVLINK)
                == api.NVML_P2P_STATUS_OK
            ):
                links[(a, b)] = Link(LinkKind.NVLINK, len(ends[a]))
            else:
                level = api.nvmlDeviceGetTopologyCommonAncestor(handles[a], handles[b])
                links[(a, b)] = Link(_ANCESTOR.get(level, LinkKind.SYS))
    return GpuTopology(gpus=gpus, links=links, source="nvml")
