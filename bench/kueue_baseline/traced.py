"""`atoll run` with tracemalloc on (`run.py --tracemalloc`): on SIGUSR1 the operator writes
the 30 biggest allocation sites still alive (10 frames each) to $ATOLL_TRACEMALLOC_OUT.

    python bench/kueue_baseline/traced.py run --kubeconfig … (the arguments of `atoll`)
"""

from __future__ import annotations

import os
import signal
import sys
import tracemalloc
from pathlib import Path
from types import FrameType


def dump(_sig: int, _frame: FrameType | None) -> None:
    out = Path(os.environ.get("ATOLL_TRACEMALLOC_OUT", "atoll.tracemalloc.txt"))
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)]
    )
    current, peak = tracemalloc.get_traced_memory()
    lines = [f"traced now {current / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB"]
    by_file: dict[str, int] = {}
    for stat in snapshot.statistics("filename"):
        by_file[stat.traceback[0].filename] = stat.size
    lines.append("-- by file (top 20)")
    for name, size in sorted(by_file.items(), key=lambda kv: -kv[1])[:20]:
        lines.append(f"{size / 2**20:8.2f} MiB {name}")
    lines.append("-- by site (top 30)")
    for stat in snapshot.statistics("traceback")[:30]:
        lines.append(f"{stat.size / 2**20:8.2f} MiB in {stat.count} blocks")
        lines += [f"    {line}" for line in stat.traceback.format()]
    out.write_text("\n".join(lines) + "\n")


def main() -> None:
    tracemalloc.start(10)
    signal.signal(signal.SIGUSR1, dump)
    from atoll.cli.main import main as atoll_main  # noqa: PLC0415 (after tracemalloc starts)

    sys.exit(atoll_main(sys.argv[1:]))


if __name__ == "__main__":
    main()
