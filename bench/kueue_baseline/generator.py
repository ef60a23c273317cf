"""The Kueue scheduler-benchmark shape and its generator (mirrors Kueue's
test/performance/scheduler/runner/generator and configs/baseline/generator.yaml).

Baseline: 5 cohorts x 6 ClusterQueues (nominal 20 CPU, borrowingLimit 100, reclaimWithinCohort
Any, withinClusterQueue LowerPriority); per ClusterQueue 350 small (1 CPU, 200 ms, priority 50,
one every 100 ms), 100 medium (5 CPU, 500 ms, priority 100, every 500 ms) and 50 large (20 CPU,
1000 ms, priority 200, every 1200 ms): 15,000 Workloads. `--scale` multiplies the per-queue
counts (the number of queues and the rates stay). The large-scale shape is 10 cohorts x 100
ClusterQueues with 35/11/4 Workloads per queue (150/350/700 ms, every 60/300/700 ms): 50,000.

Everything is created with plain HTTP against the API server (no kubectl), like Kueue's
generator: the queues first, then, concurrently for every ClusterQueue and class, one Workload
per creation interval. Workloads are kueue.x-k8s.io/v1beta2 objects with one podSet (a plain
pod template with a cpu request), a WorkloadPriorityClass reference and its priority value
(set explicitly, since neither controller runs a defaulting webhook here).

    python bench/kueue_baseline/generator.py --kubeconfig K [--scale 0.1] [--large-scale]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kubeclient import KubeClient

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
API = f"{GROUP}/{VERSION}"
FLAVOR = "rf"
CLASS_LABEL = "kueue.x-k8s.io/performance-scheduler-class"
RUNTIME_LABEL = "kueue.x-k8s.io/performance-scheduler-running-ms"
BENCH_LABEL = "atoll.dev/bench"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadClass:
    """One workloads set of the generator config: `count` per ClusterQueue."""

    name: str
    count: int
    cpu: int
    runtime_ms: int
    priority: int
    interval_ms: int

    @property
    def priority_class(self) -> str:
        return f"bench-{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Shape:
    name: str
    cohorts: int
    queues_per_cohort: int
    nominal_cpu: int = 20
    borrowing_limit_cpu: int = 100
    reclaim_within_cohort: str = "Any"
    within_cluster_queue: str = "LowerPriority"
    classes: tuple[WorkloadClass, ...]

    @property
    def cluster_queues(self) -> list[str]:
        return [
            f"cq-0-{q}-cohort-{c}"
            for c in range(self.cohorts)
            for q in range(self.queues_per_cohort)
        ]

    @property
    def total_workloads(self) -> int:
        return len(self.cluster_queues) * sum(c.count for c in self.classes)

    @property
    def generation_seconds(self) -> float:
        """How long the slowest workloads set takes to create its last Workload."""
        return max(c.count * c.interval_ms for c in self.classes) / 1000


def _scaled(count: int, scale: float) -> int:
    return max(1, math.ceil(count * scale))


def baseline(scale: float = 1.0) -> Shape:
    return Shape(
        name="baseline" if scale == 1 else f"baseline x{scale:g}",
        cohorts=5,
        queues_per_cohort=6,
        classes=(
            WorkloadClass(
                name="small",
                count=_scaled(350, scale),
                cpu=1,
                runtime_ms=200,
                priority=50,
                interval_ms=100,
            ),
            WorkloadClass(
                name="medium",
                count=_scaled(100, scale),
                cpu=5,
                runtime_ms=500,
                priority=100,
                interval_ms=500,
            ),
            WorkloadClass(
                name="large",
                count=_scaled(50, scale),
                cpu=20,
                runtime_ms=1000,
                priority=200,
                interval_ms=1200,
            ),
        ),
    )


def large_scale(scale: float = 1.0) -> Shape:
    """Kueue's configs/large-scale: 1,000 ClusterQueues, 50,000 Workloads."""
    return Shape(
        name="large-scale" if scale == 1 else f"large-scale x{scale:g}",
        cohorts=10,
        queues_per_cohort=100,
        classes=(
            WorkloadClass(
                name="small",
                count=_scaled(35, scale),
                cpu=1,
                runtime_ms=150,
                priority=50,
                interval_ms=60,
            ),
            WorkloadClass(
                name="medium",
                count=_scaled(11, scale),
                cpu=5,
                runtime_ms=350,
                priority=100,
                interval_ms=300,
            ),
            WorkloadClass(
                name="large",
                count=_scaled(4, scale),
                cpu=20,
                runtime_ms=700,
                priority=200,
                interval_ms=700,
            ),
        ),
    )


# -- manifests -------------------------------------------------------------------------------
def flavor() -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ResourceFlavor",
        "metadata": {"name": FLAVOR, "labels": {BENCH_LABEL: "true"}},
        "spec": {},
    }


def priority_class(wc: WorkloadClass) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": wc.priority_class, "labels": {BENCH_LABEL: "true"}},
        "value": wc.priority,
        "description": f"bench class {wc.name}",
    }


def cluster_queue(shape: Shape, name: str) -> dict[str, Any]:
    cohort = name.split("-", 3)[3]
    return {
        "apiVersion": API,
        "kind": "ClusterQueue",
        "metadata": {"name": name, "labels": {CLASS_LABEL: "cq", BENCH_LABEL: "true"}},
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {
                            "name": FLAVOR,
                            "resources": [
                                {
                                    "name": "cpu",
                                    "nominalQuota": str(shape.nominal_cpu),
                                    "borrowingLimit": str(shape.borrowing_limit_cpu),
                                }
                            ],
                        }
                    ],
                }
            ],
            "preemption": {
                "reclaimWithinCohort": shape.reclaim_within_cohort,
                "withinClusterQueue": shape.within_cluster_queue,
            },
        },
    }


def namespace(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {BENCH_LABEL: "true"}},
    }


def local_queue(name: str) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": name},
        "spec": {"clusterQueue": name},
    }


def workload(name: str, ns: str, wc: WorkloadClass) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {
                CLASS_LABEL: wc.name,
                RUNTIME_LABEL: str(wc.runtime_ms),
                BENCH_LABEL: "true",
            },
        },
        "spec": {
            "queueName": ns,
            "priorityClassRef": {
                "group": GROUP,
                "kind": "WorkloadPriorityClass",
                "name": wc.priority_class,
            },
            "priority": wc.priority,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "c",
                                    "image": "registry.invalid/bench/pause:1",
                                    "resources": {"requests": {"cpu": str(wc.cpu)}},
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }


def _path(obj: dict[str, Any]) -> str:
    api = obj["apiVersion"]
    base = "/api/v1" if api == "v1" else f"/apis/{api}"
    plural = {
        "Namespace": "namespaces",
        "ResourceFlavor": "resourceflavors",
        "WorkloadPriorityClass": "workloadpriorityclasses",
        "ClusterQueue": "clusterqueues",
        "LocalQueue": "localqueues",
        "Workload": "workloads",
    }[obj["kind"]]
    ns = obj["metadata"].get("namespace")
    return f"{base}/namespaces/{ns}/{plural}" if ns else f"{base}/{plural}"


async def create(client: KubeClient, obj: dict[str, Any]) -> dict[str, Any]:
    return await client.request("POST", _path(obj), obj)


# -- generation ------------------------------------------------------------------------------
async def create_queues(client: KubeClient, shape: Shape) -> None:
    """ResourceFlavor, WorkloadPriorityClasses, then per ClusterQueue its namespace and
    LocalQueue (same name, as in Kueue's generator)."""
    await create(client, flavor())
    await asyncio.gather(*(create(client, priority_class(wc)) for wc in shape.classes))
    names = shape.cluster_queues
    await asyncio.gather(*(create(client, cluster_queue(shape, n)) for n in names))
    await asyncio.gather(*(create(client, namespace(n)) for n in names))
    await asyncio.gather(*(create(client, local_queue(n)) for n in names))


async def _workloads_set(
    client: KubeClient,
    *,
    ns: str,
    wc: WorkloadClass,
    set_index: int,
    t0: float,
    on_created: Callable[[str, str], None],
) -> None:
    """One Workload every `interval_ms`, on an absolute schedule (Kueue sleeps the interval
    before each synchronous create; this keeps the same rate without drift)."""
    for i in range(wc.count):
        due = t0 + (i + 1) * wc.interval_ms / 1000
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        name = f"{wc.name}-{set_index}-{i}-0"
        await create(client, workload(name, ns, wc))
        on_created(ns, name)


async def create_workloads(
    client: KubeClient, shape: Shape, on_created: Callable[[str, str], None] = lambda n, w: None
) -> float:
    """Create every Workload at the shape's rates; return the seconds it took."""
    t0 = time.monotonic()
    await asyncio.gather(
        *(
            _workloads_set(client, ns=ns, wc=wc, set_index=i, t0=t0, on_created=on_created)
            for ns in shape.cluster_queues
            for i, wc in enumerate(shape.classes)
        )
    )
    return time.monotonic() - t0


def paced(shape: Shape, pace: float) -> Shape:
    """`shape` with every creation interval multiplied by `pace` (2: Workloads arrive half
    as fast; the same Workloads, runtimes and queues)."""
    if pace == 1:
        return shape
    return replace(
        shape,
        name=f"{shape.name}, paced x{pace:g}",
        classes=tuple(
            replace(c, interval_ms=max(1, round(c.interval_ms * pace))) for c in shape.classes
        ),
    )


def shape_from_args(scale: float, large: bool, pace: float = 1.0) -> Shape:
    return paced(large_scale(scale) if large else baseline(scale), pace)


async def _main(args: argparse.Namespace) -> None:
    shape = shape_from_args(args.scale, args.large_scale, args.pace)
    async with KubeClient.from_kubeconfig(Path(args.kubeconfig)) as client:
        await create_queues(client, shape)
        took = await create_workloads(client, shape)
    print(f"{shape.name}: {shape.total_workloads} Workloads created in {took:.1f}s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--large-scale", action="store_true")
    p.add_argument("--pace", type=float, default=1.0, help="multiply the creation intervals")
    asyncio.run(_main(p.parse_args()))


if __name__ == "__main__":
    main()
