"""Benchmark: gang placement on a large GPU cluster, and fragmentation with and without best fit.

    python bench/placement.py [--nodes 1024 --repeat 200 --fill 0.5 --seed 1 --json]

Latency: a cluster of `--nodes` nodes with 8 GPUs each (one NVSwitch island per node, racks of
8 nodes, blocks of 64, islands also published on each Node as `atoll topology discover` does),
built through atoll.state.inventory from ResourceSlices like the sandbox's, filled to `--fill`
with 1/2/4/8-GPU jobs; then 64-GPU gangs are placed `--repeat` times (warm: compiled
selectors and their per-device results cached, as in the operator).
Reported: p50/p99/max of `place()` per scenario, and the inventory snapshot build time.

Fragmentation: on 64 nodes of 8 GPUs in islands of 4, a seeded stream of DRA jobs (1, 2, 4
GPUs in one island, 8 GPUs on one node) arrives and leaves; after every event the largest free
island and the number of whole free islands are sampled, with best fit and with first fit
(listing order, as kube-scheduler's device allocator picks).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))

from atoll.api.core import Node
from atoll.api.islands import ISLANDS_ANNOTATION, IslandGpu, NodeIslands, PublishedIsland
from atoll.api.resource import DeviceClaim, DeviceClass, ResourceSlice
from atoll.api.topology import Topology
from atoll.engine.devices import Claim, DeviceAllocation, group_sizes
from atoll.engine.inventory import (
    Gang,
    GangPodSet,
    Inventory,
    Placement,
    PlacementPolicy,
    PodPlacement,
    PodSetPlacement,
    TopologyMode,
    TopologyRequest,
)
from atoll.engine.placement import place
from atoll.sandbox.shapes import (
    DRA_DRIVER,
    ISLAND_ATTRIBUTE,
    ClusterShape,
    device_class,
    nodes,
    resource_slices,
)
from atoll.state.cel import SelectorCompiler
from atoll.state.gangs import claim
from atoll.state.inventory import ClusterInventory

RACK = "topology.atoll.dev/rack"
BLOCK = "topology.atoll.dev/block"
HOST = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"


def build_cluster(n: int, island: int) -> ClusterInventory:
    shape = ClusterShape.model_validate(
        {
            "apiVersion": "atoll.dev/v1alpha1",
            "kind": "ClusterShape",
            "metadata": {"name": "bench"},
            "spec": {
                "nodeGroups": [
                    {
                        "name": "gpu",
                        "count": n,
                        "cpu": "224",
                        "memory": "2Ti",
                        "gpus": {"count": 8, "memory": "80Gi", "islandSize": island},
                        "topology": [
                            {"label": BLOCK, "nodesPerDomain": 64, "prefix": "block"},
                            {"label": RACK, "nodesPerDomain": 8, "prefix": "rack"},
                        ],
                    }
                ]
            },
        }
    )
    inv = ClusterInventory(island_attribute=ISLAND_ATTRIBUTE)
    published = NodeIslands(
        source="bench",
        islands=tuple(
            PublishedIsland(
                gpus=tuple(IslandGpu(index=g) for g in range(k, k + island)), nvlinks=18
            )
            for k in range(0, 8, island)
        ),
    ).annotation()
    for raw in nodes(shape):
        raw["metadata"]["annotations"][ISLANDS_ANNOTATION] = published
        inv.upsert_node(Node.from_dict(raw))
    for raw in resource_slices(shape):
        inv.upsert_slice(ResourceSlice.from_dict(raw))
    inv.upsert_device_class(DeviceClass.from_dict(device_class()))
    levels = [{"nodeLabel": lv} for lv in (BLOCK, RACK, HOST)]
    inv.upsert_topology(
        Topology.from_dict({"metadata": {"name": "default"}, "spec": {"levels": levels}})
    )
    return inv


def gpu_claim(inv: ClusterInventory, compiler: SelectorCompiler, count: int) -> Claim:
    spec: dict[str, Any] = {
        "requests": [{"name": "gpu", "exactly": {"deviceClassName": DRA_DRIVER, "count": count}}],
        "constraints": [{"matchAttribute": ISLAND_ATTRIBUTE}] if count > 1 else [],
    }
    return claim("gpus", DeviceClaim.model_validate(spec), compiler=compiler, inventory=inv)


def pod_set(
    count: int,
    *,
    gpus: int = 0,
    claims: tuple[Claim, ...] = (),
    level: str | None = None,
    mode: TopologyMode = TopologyMode.REQUIRED,
) -> GangPodSet:
    topo = None if level is None else TopologyRequest(topology="default", mode=mode, level=level)
    reqs = (("cpu", 1000),) + (((GPU, gpus),) if gpus else ())
    return GangPodSet(name="main", count=count, requests=reqs, claims=claims, topology=topo)


def fill(inv: ClusterInventory, fraction: float, rng: random.Random) -> None:
    """Occupy about `fraction` of the GPUs with 1/2/4/8-GPU pods pinned at random nodes."""
    snap = inv.snapshot()
    pods = []
    for node in snap.nodes:
        free = list(node.devices.free)
        while free and rng.random() < fraction * 1.3:
            k = min(rng.choice((1, 2, 4, 8)), len(free))
            taken, free = free[:k], free[k:]
            pods.append(
                PodPlacement(
                    pod_set="fill",
                    index=len(pods),
                    node=node.name,
                    requests=(("cpu", 1000), (GPU, k)),
                    devices=tuple(
                        DeviceAllocation(claim="gpus", request="gpu", device=d.id) for d in taken
                    ),
                )
            )
            if rng.random() > fraction:
                break
    inv.hold(
        Placement(gang="bench/fill", pod_sets=(PodSetPlacement(name="fill", pods=tuple(pods)),))
    )


@dataclass
class Result:
    scenario: str
    fill: float
    fits: bool
    first_ms: float
    """Cold: selectors never evaluated on these devices, empty snapshot memo."""
    cold_p50_ms: float
    cold_p99_ms: float
    """A fresh snapshot every call (no memo), selector results cached."""
    cold_cpu_p50_ms: float
    cold_cpu_p99_ms: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    """Warm: the same snapshot again (memo filled), as later gangs of one cycle see it."""
    cpu_p50_ms: float
    cpu_p99_ms: float
    """Thread CPU time of the warm calls (less sensitive to a busy machine)."""


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def _timed(snap: Inventory, gang: Gang) -> tuple[float, float, bool]:
    gc.collect()
    c0, t0 = time.thread_time(), time.perf_counter()
    got = place(snap, gang)
    t1, c1 = time.perf_counter(), time.thread_time()
    return (t1 - t0) * 1000, (c1 - c0) * 1000, isinstance(got, Placement)


def _fresh(snap: Inventory) -> Inventory:
    return Inventory(
        nodes=snap.nodes, topologies=snap.topologies, island_attribute=snap.island_attribute
    )


def measure(name: str, fill_: float, snap: Inventory, gang: Gang, repeat: int) -> Result:
    first, _, fits = _timed(snap, gang)
    cold_runs = [_timed(_fresh(snap), gang) for _ in range(repeat)]
    cold = [c[0] for c in cold_runs]
    warm = [_timed(snap, gang) for _ in range(repeat)]
    wall = [w[0] for w in warm]
    cpu = [w[1] for w in warm]
    return Result(
        scenario=name,
        fill=fill_,
        fits=fits,
        first_ms=first,
        cold_p50_ms=statistics.median(cold),
        cold_p99_ms=_pct(cold, 0.99),
        cold_cpu_p50_ms=statistics.median(c[1] for c in cold_runs),
        cold_cpu_p99_ms=_pct([c[1] for c in cold_runs], 0.99),
        p50_ms=statistics.median(wall),
        p99_ms=_pct(wall, 0.99),
        max_ms=max(wall),
        cpu_p50_ms=statistics.median(cpu),
        cpu_p99_ms=_pct(cpu, 0.99),
    )


def _scenarios(inv: ClusterInventory) -> list[tuple[str, GangPodSet]]:
    compiler = SelectorCompiler()
    one, eight = gpu_claim(inv, compiler, 1), gpu_claim(inv, compiler, 8)
    return [
        ("nvidia.com/gpu 8 x 8, rack required", pod_set(8, gpus=8, level=RACK)),
        ("nvidia.com/gpu 64 x 1, no topology", pod_set(64, gpus=1)),
        (
            "nvidia.com/gpu 16 x 4, one published island each",
            replace(pod_set(16, gpus=4), island_resource=GPU),
        ),
        ("DRA 8 x 8 GPUs one island, rack required", pod_set(8, claims=(eight,), level=RACK)),
        (
            "DRA 64 x 1 GPU, block preferred",
            pod_set(64, claims=(one,), level=BLOCK, mode=TopologyMode.PREFERRED),
        ),
        ("DRA 8 x 8 GPUs one island, no topology", pod_set(8, claims=(eight,))),
    ]


def latency(args: argparse.Namespace) -> tuple[list[Result], float]:
    results = []
    build_ms = 0.0
    for fraction in (0.0, args.fill):
        inv = build_cluster(args.nodes, island=8)
        if fraction:
            fill(inv, fraction, random.Random(args.seed))
        t0 = time.perf_counter()
        snap = inv.snapshot()
        build_ms = max(build_ms, (time.perf_counter() - t0) * 1000)
        for name, ps in _scenarios(inv):
            gang = Gang(key="bench/gang", pod_sets=(ps,))
            results.append(measure(name, fraction, snap, gang, args.repeat))
    return results, build_ms


def _islands(snap: Inventory) -> tuple[int, int, int, int]:
    """Largest free island, whole free islands, whole free nodes, GPUs in use."""
    largest = whole = nodes_free = 0
    for n in snap.nodes:
        sizes = group_sizes(n.devices.free, ISLAND_ATTRIBUTE)
        largest = max(largest, *sizes.values(), 0)
        whole += sum(1 for s in sizes.values() if s == 4)
        nodes_free += len(n.devices.free) == len(n.devices.all)
    return (
        largest,
        whole,
        nodes_free,
        sum(len(n.devices.all) - len(n.devices.free) for n in snap.nodes),
    )


def fragmentation(args: argparse.Namespace, policy: PlacementPolicy) -> dict[str, Any]:
    rng = random.Random(args.seed)
    inv = build_cluster(64, island=4)
    compiler = SelectorCompiler()
    claims = {k: gpu_claim(inv, compiler, k) for k in (1, 2, 4)}
    running: list[str] = []
    samples: list[tuple[int, int, int, int]] = []
    rejected = {1: 0, 2: 0, 4: 0, 8: 0}
    for event in range(args.events):
        if running and (rng.random() < 0.40 or len(running) > 320):
            inv.release(running.pop(rng.randrange(len(running))))
        else:
            size = rng.choice((1, 1, 1, 2, 2, 4, 8))
            ps = (
                pod_set(2, claims=(claims[4],), level=HOST)
                if size == 8
                else pod_set(1, claims=(claims[size],))
            )
            key = f"bench/j{event}"
            got = place(inv.snapshot(), Gang(key=key, pod_sets=(ps,)), policy=policy)
            if isinstance(got, Placement):
                inv.hold(got)
                running.append(key)
            else:
                rejected[size] += 1
        samples.append(_islands(inv.snapshot()))
    largest = [s[0] for s in samples]
    whole = [s[1] for s in samples]
    nodes_free = [s[2] for s in samples]
    busy = [s[3] for s in samples]
    return {
        "policy": policy.value,
        "mean_largest_free_island": statistics.fmean(largest),
        "time_below_4": sum(1 for x in largest if x < 4) / len(largest),
        "mean_gpus_in_use": statistics.fmean(busy),
        "mean_whole_free_islands": statistics.fmean(whole),
        "mean_whole_free_nodes": statistics.fmean(nodes_free),
        "time_without_free_node": sum(1 for x in nodes_free if x == 0) / len(nodes_free),
        "rejected": rejected,
        "largest_free_island_series": largest[:: max(1, len(largest) // 50)],
    }


def _print_latency(
    con: Console, args: argparse.Namespace, results: list[Result], build_ms: float, load: float
) -> None:
    t = Table(
        title=f"place(): 64-GPU gangs on {args.nodes} nodes x 8 GPUs (snapshot build"
        f" {build_ms:.0f} ms, load average {load:.1f} on {os.cpu_count()} CPUs)"
    )
    cols = (
        "scenario",
        "used",
        "fits",
        "first",
        "cold p50",
        "cold p99",
        "cold cpu p99",
        "p50",
        "p99",
        "max",
        "cpu p50",
        "cpu p99",
    )
    for col in cols:
        t.add_column(
            col if col in ("scenario", "used", "fits") else f"{col} ms",
            justify="left" if col == "scenario" else "right",
        )
    for r in results:
        t.add_row(
            r.scenario,
            f"{r.fill:.0%}",
            str(r.fits),
            *(
                f"{v:.1f}"
                for v in (
                    r.first_ms,
                    r.cold_p50_ms,
                    r.cold_p99_ms,
                    r.cold_cpu_p99_ms,
                    r.p50_ms,
                    r.p99_ms,
                    r.max_ms,
                    r.cpu_p50_ms,
                    r.cpu_p99_ms,
                )
            ),
        )
    con.print(t)


def _print_fragmentation(
    con: Console, args: argparse.Namespace, frag: list[dict[str, Any]]
) -> None:
    f = Table(title=f"fragmentation: 64 nodes x 2 islands of 4 GPUs, {args.events} events")
    for col in (
        "policy",
        "mean largest free island",
        "time with no whole island",
        "mean GPUs in use (of 512)",
        "mean whole free islands",
        "mean whole free nodes",
        "time with no free node",
        "rejected 1/2/4/8-GPU jobs",
    ):
        f.add_column(col, justify="right")
    for d in frag:
        r = d["rejected"]
        f.add_row(
            d["policy"],
            f"{d['mean_largest_free_island']:.2f}",
            f"{d['time_below_4']:.0%}",
            f"{d['mean_gpus_in_use']:.0f}",
            f"{d['mean_whole_free_islands']:.1f}",
            f"{d['mean_whole_free_nodes']:.1f}",
            f"{d['time_without_free_node']:.0%}",
            f"{r[1]}/{r[2]}/{r[4]}/{r[8]}",
        )
    con.print(f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--fill", type=float, default=0.5)
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    results, build_ms = latency(args)
    frag = [fragmentation(args, p) for p in PlacementPolicy]
    load = os.getloadavg()[0]
    if args.json:
        out = {
            "nodes": args.nodes,
            "load_average_1m": load,
            "snapshot_build_ms": build_ms,
            "placement": [r.__dict__ for r in results],
            "fragmentation": frag,
        }
        print(json.dumps(out, indent=2))
        return
    con = Console(width=200)
    _print_latency(con, args, results, build_ms, load)
    _print_fragmentation(con, args, frag)


if __name__ == "__main__":
    main()
