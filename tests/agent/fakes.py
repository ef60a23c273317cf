"""An NVML fake: the functions of `pynvml` that atoll.agent.nvml calls, over a described
machine (bus IDs, and per GPU the bus IDs its active NVLinks end at)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


class FakeNvmlError(Exception):
    pass


@dataclass
class FakeNvml:
    bus_ids: list[str]
    nvlink_ends: list[list[str]] = field(default_factory=list)
    """Per GPU, the bus ID at the far end of each active link (a switch's for NVSwitch)."""
    switched: bool = False
    """GPUs whose links end at an NVSwitch reach each other over NVLink (P2P status OK)."""
    ancestor: int = 50
    """NVML common-ancestor level for pairs without NVLink (50: SYSTEM)."""
    fail_init: bool = False
    calls: list[str] = field(default_factory=list)

    NVMLError = FakeNvmlError
    NVML_NVLINK_MAX_LINKS = 18
    NVML_FEATURE_ENABLED = 1
    NVML_P2P_CAPS_INDEX_NVLINK = 2
    NVML_P2P_STATUS_OK = 0

    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.fail_init:
            raise FakeNvmlError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.bus_ids)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        return index

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        return SimpleNamespace(busId=self.bus_ids[handle].encode())

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return f"GPU-fake-{handle}"

    def _ends(self, handle: int) -> list[str]:
        return self.nvlink_ends[handle] if self.nvlink_ends else []

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        if link >= len(self._ends(handle)):
            raise FakeNvmlError("Not Supported")
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Any, link: int) -> Any:
        return SimpleNamespace(busId=self._ends(handle)[link])

    def nvmlDeviceGetP2PStatus(self, a: Any, b: Any, index: int) -> int:
        assert index == self.NVML_P2P_CAPS_INDEX_NVLINK
        return 0 if self.switched and self._ends(a) and self._ends(b) else 5

    def nvmlDeviceGetTopologyCommonAncestor(self, a: Any, b: Any) -> int:
        return self.ancestor
