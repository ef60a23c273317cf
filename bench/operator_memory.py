"""The operator's memory per Workload, without a cluster: what `atoll run` holds once it has
imported everything and its cache holds N Workloads.

    python bench/operator_memory.py [--workloads 10000] [--top 20] [--json]

Imports the operator as `atoll run` does, then feeds the Kueue baseline's queue objects and N
of its Workloads (as the API server sends them: uid, resourceVersion, generation, creation
time, managedFields) through the operator's own Workload watch handler into a cache and the
status writer's memory, and runs one scheduling step (the engine forms of every Workload).
Then, as on a live cluster, every Workload comes back once more with the pending status the
operator writes (QuotaReserved=False and Admitted=False, `lifecycle.pending`).
Prints the resident memory after the imports, with the Workloads, and per Workload. With
`--top N`, runs under tracemalloc and prints the N biggest live allocation sites (tracemalloc
then adds its own memory to the resident numbers).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import sys
import time
import tracemalloc
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent / "kueue_baseline")]
PENDING_MESSAGE = (
    "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor "
    "default, 1 more needed"
)

import generator as gen  # noqa: E402


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class _Queue:
    def add(self, _key: str) -> None:
        pass


def _served(body: dict[str, Any], version: int) -> dict[str, Any]:
    """`body` as the API server returns it."""
    body["metadata"].update(
        uid=str(uuid.uuid4()),
        resourceVersion=str(version),
        generation=1,
        creationTimestamp="2026-01-01T00:00:00Z",
        managedFields=[
            {
                "manager": "bench",
                "operation": "Update",
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "time": "2026-01-01T00:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:podSets": {}, "f:queueName": {}}},
            }
        ],
    )
    return _decoded(body)


def _decoded(body: dict[str, Any]) -> dict[str, Any]:
    """A fresh decode of `body`'s JSON text by the watch's decoder, as from a watch line."""
    from atoll.kube.rest import decode  # noqa: PLC0415 (imported with the operator)

    loaded: dict[str, Any] = decode(json.dumps(body).encode())
    return loaded


def _pending() -> Callable[[Any], Any]:
    """The status the operator writes on a Workload left pending for quota (Kueue's reason
    `Pending`, the quota message)."""
    from atoll.engine.decisions import PendingReason  # noqa: PLC0415
    from atoll.state import lifecycle  # noqa: PLC0415

    now = datetime.datetime.now(datetime.UTC)
    return lifecycle.pending(PendingReason.WAITING_FOR_QUOTA, PENDING_MESSAGE, now)


def run(workloads: int, top: int) -> dict[str, Any]:
    import atoll.kube.operator  # noqa: F401, PLC0415 (what `atoll run` imports)
    from atoll.kube import handlers  # noqa: PLC0415
    from atoll.kube.watch import Watches  # noqa: PLC0415
    from atoll.kube.writers import KubeWriter  # noqa: PLC0415
    from atoll.state.cache import Cache  # noqa: PLC0415
    from atoll.state.decide import Decider  # noqa: PLC0415

    gc.collect()
    imported = _rss_mib()
    if top:
        tracemalloc.start(1)
    cache = Cache()
    writer = KubeWriter.__new__(KubeWriter)  # only its memory of Workloads is used
    writer._last = OrderedDict()
    wiring = handlers.Wiring(
        cache=cache,
        wake=lambda: None,
        jobs=_Queue(),  # type: ignore[arg-type]
        queues_changed=lambda: None,
        ungater=None,  # type: ignore[arg-type]
        pods=_Queue(),  # type: ignore[arg-type]
        seen_workload=writer.observe_workload,
        gone_workload=writer.forget_workload,
    )
    watches = Watches()
    handlers.register_watches(watches, wiring)
    on: dict[str, Callable[[str | None, Mapping[str, Any]], None]] = {
        w.resource.plural: w.handler for w in watches.watches.values()
    }
    shape = gen.baseline(1.0)
    version = 1000
    on["resourceflavors"](None, _served(gen.flavor(), version))
    for wc in shape.classes:
        on["workloadpriorityclasses"](None, _served(gen.priority_class(wc), version))
    for cq in shape.cluster_queues:
        on["clusterqueues"](None, _served(gen.cluster_queue(shape, cq), version))
        on["localqueues"](None, _served(gen.local_queue(cq), version))
        cache.set_namespace(cq, {})
    for i in range(workloads):
        wc = shape.classes[i % len(shape.classes)]
        cq = shape.cluster_queues[i % len(shape.cluster_queues)]
        version += 1
        on["workloads"]("ADDED", _served(gen.workload(f"{wc.name}-{i}", cq, wc), version))
    started = time.process_time()
    decisions = Decider(cache, None).decide(time.time())
    step_s = time.process_time() - started
    gc.collect()
    added = _rss_mib()
    pending = _pending()
    for key in list(cache.workloads):
        wl = cache.workloads[key]
        status = pending(wl)
        if status is None:
            continue
        version += 1
        body = {**wl.to_dict(), "status": status.to_dict()}
        body["metadata"] = {**body["metadata"], "resourceVersion": str(version)}
        on["workloads"]("MODIFIED", _decoded(body))
    gc.collect()
    loaded = _rss_mib()
    sites: list[tuple[float, int, str]] = []
    if top:
        snapshot = tracemalloc.take_snapshot()
        for stat in snapshot.statistics("lineno")[:top]:
            sites.append((stat.size / 2**20, stat.count, str(stat.traceback[0])))
        tracemalloc.stop()
    return {
        "workloads": workloads,
        "rss_after_imports_mib": imported,
        "rss_with_workloads_mib": added,
        "rss_with_pending_statuses_mib": loaded,
        "kib_per_workload": (loaded - imported) * 1024 / max(1, workloads),
        "first_step_cpu_s": step_s,
        "decisions": len(decisions),
        "top_sites": sites,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=10_000)
    parser.add_argument("--top", type=int, default=0, help="tracemalloc's N biggest sites")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.workloads, args.top)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for key, value in result.items():
        if key != "top_sites":
            print(f"{key}: {value:.1f}" if isinstance(value, float) else f"{key}: {value}")
    for size, count, where in result["top_sites"]:
        print(f"{size:8.2f} MiB {count:8d} blocks  {where}")


if __name__ == "__main__":
    main()
