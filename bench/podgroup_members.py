"""Benchmark: matching a pod group's pods to its Workload (`podgroups.members`), which the
reconciler runs on every pass over a pod group.

    python bench/podgroup_members.py [--sizes 4 64 512 --repeat 20 --json]

A running group of N identical pods and its Workload; `members` is timed with the pods'
role read from the `kueue.x-k8s.io/role-hash` annotation the webhook stamps at creation
("stamped") and computed from each pod's shape ("unstamped": pods created before the webhook
stamped it). Reported: the median over 7 rounds of the mean of `--repeat` calls.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import timeit
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))

from atoll.api.core import Pod
from atoll.api.meta import ObjectMeta
from atoll.api.workload import Workload, WorkloadSpec
from atoll.control import podgroups as pg


def _pod(i: int, total: int, *, stamped: bool) -> Pod:
    raw: dict[str, Any] = {
        "metadata": {
            "name": f"p{i}",
            "namespace": "ns",
            "uid": f"uid-{i}",
            "finalizers": ["kueue.x-k8s.io/managed"],
            "labels": {"kueue.x-k8s.io/queue-name": "q", "kueue.x-k8s.io/pod-group-name": "g"},
            "annotations": {"kueue.x-k8s.io/pod-group-total-count": str(total)},
        },
        "spec": {
            "nodeName": "n1",
            "containers": [
                {"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "1"}}}
            ],
        },
        "status": {"phase": "Running"},
    }
    pod = Pod.from_dict(raw)
    if stamped:
        ann = {**(pod.metadata.annotations or {}), "kueue.x-k8s.io/role-hash": pg.shape_hash(pod)}
        pod = pod.model_copy(
            update={"metadata": pod.metadata.model_copy(update={"annotations": ann})}
        )
    return pod


def measure(size: int, repeat: int, *, stamped: bool) -> float:
    """Median seconds of one `members` call on a running group of `size` pods."""
    pods = {f"p{i}": _pod(i, size, stamped=stamped) for i in range(size)}
    group = pg.group_of("ns/g", pods)
    assert group is not None
    wl = Workload(
        metadata=ObjectMeta(name="g", namespace="ns"),
        spec=WorkloadSpec(pod_sets=pg.pod_sets(group)),
    )
    timer = timeit.Timer(lambda: pg.members(group, wl))
    rounds = [timer.timeit(number=repeat) / repeat for _ in range(7)]
    return statistics.median(rounds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 64, 512])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for size in args.sizes:
        unstamped = measure(size, args.repeat, stamped=False)
        stamped = measure(size, args.repeat, stamped=True)
        rows.append({"pods": size, "stamped_ms": stamped * 1e3, "unstamped_ms": unstamped * 1e3})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print("pods  stamped (ms)  unstamped (ms)  unstamped / stamped")
    for r in rows:
        ratio = r["unstamped_ms"] / r["stamped_ms"]
        cells = f"{r['stamped_ms']:>12.3f}  {r['unstamped_ms']:>14.3f}"
        print(f"{r['pods']:>4}  {cells}  {ratio:>19.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
