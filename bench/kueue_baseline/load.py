"""Background load for the side-by-side benchmark: N busy-looping processes, started before
a controller's run and stopped (by pid) after it, the same for both controllers, so that a
lead measured on an idle machine can be checked on a busy one (`run.py --background-load`)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from types import TracebackType

BUSY = "while True: pass"


def count(text: str) -> int:
    """`--background-load N`: a whole number of processes, 0 or more."""
    try:
        n = int(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from e
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {n}")
    return n


class BackgroundLoad:
    """`with BackgroundLoad(n):` runs n busy loops for the duration of the block."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> BackgroundLoad:
        self.procs = [
            subprocess.Popen([sys.executable, "-c", BUSY], stdin=subprocess.DEVNULL)
            for _ in range(self.n)
        ]
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
