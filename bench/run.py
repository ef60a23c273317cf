"""`make bench`: every benchmark of bench/, one after the other, each printing its own table.

    python bench/run.py [--quick] [--only NAME ...]

Numbers are measured here and reported in notes; no test asserts a wall-clock limit.
`--quick` scales each benchmark down (for a smoke run); the side-by-side run against Kueue
is separate (`make bench-kueue`) because it builds Kueue and takes much longer.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

BENCHMARKS: dict[str, tuple[list[str], list[str]]] = {
    # name: (full arguments, --quick arguments)
    "engine_cycle": ([], ["--workloads", "1000", "--cluster-queues", "100"]),
    "placement": ([], ["--nodes", "128", "--repeat", "20", "--events", "200"]),
    "simulate_large": ([], ["--jobs", "2000", "--nodes", "100"]),
    "operator_latency": ([], ["--jobs", "10", "--workloads", "200"]),
    "operator_memory": ([], ["--workloads", "500"]),
    "pod_watch": ([], ["--gangs", "20", "--repeat", "5"]),
    "podgroup_members": ([], ["--sizes", "4", "64", "--repeat", "5"]),
    "conversion": ([], ["--queues", "100"]),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="scaled-down smoke run")
    parser.add_argument("--only", nargs="*", choices=sorted(BENCHMARKS), help="run only these")
    args = parser.parse_args()
    failed = []
    for name, (full, quick) in BENCHMARKS.items():
        if args.only and name not in args.only:
            continue
        script = HERE / f"{name}.py"
        if not script.exists():
            print(f"== {name}: {script.name} not present, skipped")
            continue
        cmd = [sys.executable, str(script), *(quick if args.quick else full)]
        print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
        if subprocess.run(cmd, check=False).returncode != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
