"""Benchmark: `atoll simulate` at scale — 100,000 Jobs on a 1,000-node shape.

    python bench/simulate_large.py [--jobs 100000 --nodes 1000 --teams 8 --seed 1
                                    --load 0.85 --profile --json-out FILE]

Builds a synthetic scenario: `--nodes` nodes of 8 GPUs in two node groups (H100, A100, one
ResourceFlavor each), `--teams` ClusterQueues sharing one cohort (nominal quota = an equal
share of each flavor, borrowing and reclaim on, preemption of lower priority within a
queue), and `--jobs` Jobs drawn from a mix of gang shapes (1x1 ... 8x8 GPUs) and two
priorities, with exponential run times (mean 30 min) and Poisson arrivals at the rate that
offers `--load` of the GPUs. Then runs the gang simulator (the operator's cache, queues and
engine on a virtual clock) and reports, with rich: wall time of building the scenario and
of the simulation, CPU time (the honest number on a busy machine), engine cycles, simulated
span, and peak memory (max RSS). `--json-out` writes the whole result (every Job's
admission, start, finish, flavor and evictions, the timeline, the cycle count) as JSON, to
check that a change to the engine or the cache leaves the simulation unchanged.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import random
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))

from rich.console import Console
from rich.table import Table

from atoll.api.core import Job
from atoll.sandbox import shapes
from atoll.sim.gang import GangSimulator, Settings
from atoll.sim.scenario import Scenario, SimJob, from_documents

KUEUE = "kueue.x-k8s.io/v1beta2"
PRODUCTS = {"h100": "NVIDIA-H100-80GB-HBM3", "a100": "NVIDIA-A100-SXM4-80GB"}
# (pods, GPUs per pod, weight)
GANGS = ((1, 1, 30), (1, 2, 10), (1, 4, 10), (1, 8, 15), (2, 8, 15), (4, 8, 12), (8, 8, 8))
MEAN_RUN = 1800.0


def _shape(nodes: int) -> dict[str, Any]:
    half = nodes // 2
    return {
        "apiVersion": "atoll.dev/v1alpha1",
        "kind": "ClusterShape",
        "metadata": {"name": f"bench-{nodes}"},
        "spec": {
            "nodeGroups": [
                {
                    "name": name,
                    "count": count,
                    "cpu": "224",
                    "memory": "2Ti",
                    "gpus": {"count": 8, "product": PRODUCTS[name], "islandSize": 8},
                }
                for name, count in (("h100", half), ("a100", nodes - half))
            ]
        },
    }


def _cluster_queue(team: int, share: int) -> dict[str, Any]:
    flavors = [
        {
            "name": f,
            "resources": [
                {"name": "cpu", "nominalQuota": share * 28},
                {"name": "memory", "nominalQuota": f"{share * 256}Gi"},
                {"name": "nvidia.com/gpu", "nominalQuota": share},
            ],
        }
        for f in PRODUCTS
    ]
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": f"team-{team}"},
        "spec": {
            "cohortName": "all",
            "namespaceSelector": {},
            "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
            "resourceGroups": [
                {"coveredResources": ["cpu", "memory", "nvidia.com/gpu"], "flavors": flavors}
            ],
        },
    }


def _queues(teams: int, nodes: int) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": KUEUE,
            "kind": "ResourceFlavor",
            "metadata": {"name": f},
            "spec": {"nodeLabels": {"nvidia.com/gpu.product": p}},
        }
        for f, p in PRODUCTS.items()
    ]
    share = nodes * 8 // 2 // teams
    for t in range(teams):
        docs.append(_cluster_queue(t, share))
        docs.append(
            {
                "apiVersion": KUEUE,
                "kind": "LocalQueue",
                "metadata": {"name": "q", "namespace": f"team-{t}"},
                "spec": {"clusterQueue": f"team-{t}"},
            }
        )
    docs.extend(
        {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": n}, "value": v}
        for n, v in (("low", 100), ("high", 1000))
    )
    return docs


def _template(team: int, pods: int, gpus: int, prio: str) -> Job:
    return Job.model_validate(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "t",
                "namespace": f"team-{team}",
                "labels": {
                    "kueue.x-k8s.io/queue-name": "q",
                    "kueue.x-k8s.io/priority-class": prio,
                },
            },
            "spec": {
                "parallelism": pods,
                "completions": pods,
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "main",
                                "image": "trainer",
                                "resources": {
                                    "requests": {
                                        "cpu": str(4 * gpus),
                                        "memory": f"{32 * gpus}Gi",
                                        "nvidia.com/gpu": str(gpus),
                                    }
                                },
                            }
                        ]
                    }
                },
            },
        }
    )


def build(jobs: int, nodes: int, teams: int, load: float, seed: int) -> Scenario:
    rnd = random.Random(seed)
    scn = from_documents(
        [_shape(nodes), *_queues(teams, nodes)],
        name=f"bench-{jobs}-jobs-{nodes}-nodes",
        base=Path("."),
        expand=lambda doc, _base: shapes.nodes(shapes.ClusterShape.model_validate(doc)),
    )
    templates = {
        (t, p, g, prio): _template(t, p, g, prio)
        for t in range(teams)
        for p, g, _ in GANGS
        for prio in ("low", "high")
    }
    weights = [w for *_, w in GANGS]
    mean_gpus = sum(p * g * w for p, g, w in GANGS) / sum(weights)
    rate = load * nodes * 8 / (mean_gpus * MEAN_RUN)  # arrivals per second
    t = 0.0
    for i in range(jobs):
        t += rnd.expovariate(rate)
        pods, gpus, _ = rnd.choices(GANGS, weights)[0]
        tpl = templates[(rnd.randrange(teams), pods, gpus, "high" if rnd.random() < 0.1 else "low")]
        job = tpl.model_copy(update={"metadata": tpl.metadata.model_copy(update={"name": f"j{i}"})})
        duration = max(60.0, round(rnd.expovariate(1 / MEAN_RUN)))
        scn.jobs.append(SimJob(job=job, arrival=round(t, 1), duration=duration, seq=i))
    scn.namespaces.update(
        {f"team-{t}": {"kubernetes.io/metadata.name": f"team-{t}"} for t in range(teams)}
    )
    return scn


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--teams", type=int, default=8)
    ap.add_argument("--load", type=float, default=0.85)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--profile", action="store_true", help="print the top of a cProfile")
    ap.add_argument("--every", type=int, default=10_000, help="progress line every N Jobs")
    ap.add_argument("--json-out", type=Path, help="write the simulation result as JSON here")
    args = ap.parse_args()
    console = Console()
    started, cpu_started = time.perf_counter(), time.process_time()
    scn = build(args.jobs, args.nodes, args.teams, args.load, args.seed)
    built = time.perf_counter()
    marks = iter(range(args.every, args.jobs + 1, args.every) if args.every > 0 else ())
    mark = [next(marks, None)]

    def progress(done: int, total: int, t: float) -> None:
        if mark[0] is not None and done >= mark[0]:
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            tl = sim.timeline
            waiting = sum(col[-1] for col in tl.column("pending").values()) if tl.times else 0
            console.print(
                f"{done:>7,} / {total:,} finished  t={t / 3600:6.1f}h  "
                f"wall {time.perf_counter() - built:6.1f}s  "
                f"cpu {time.process_time() - cpu_started:6.1f}s  "
                f"cycles {sim.cycles:>7,}  waiting {waiting:>5,}  rss {rss:.0f} MiB"
            )
            mark[0] = next(marks, None)

    sim = GangSimulator(scn, Settings(), progress if args.every else None)
    profiler = cProfile.Profile() if args.profile else None
    if profiler:
        profiler.enable()
    result = sim.run()
    if profiler:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    done = time.perf_counter()
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(result.to_json(), sort_keys=True))
    summary = result.summary()
    peak_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    table = Table(title=f"atoll simulate: {args.jobs:,} Jobs on {args.nodes:,} nodes")
    table.add_column("measure")
    table.add_column("value", justify="right")
    rows = {
        "build scenario (s)": f"{built - started:.1f}",
        "simulate (s)": f"{done - built:.1f}",
        "total wall time (s)": f"{done - started:.1f}",
        "total CPU time (s)": f"{time.process_time() - cpu_started:.1f}",
        "peak memory, max RSS (MiB)": f"{peak_rss_kib / 1024:.0f}",
        "engine cycles": f"{result.cycles:,}",
        "simulated span (h)": f"{result.end / 3600:.1f}",
        "Jobs finished": f"{summary['finished']:,} / {summary['jobs']:,}",
        "evictions": f"{summary['evictions']:,}",
        "mean wait (min)": f"{(summary['meanWait'] or 0) / 60:.1f}",
        "timeline samples": f"{len(result.timeline.times):,}",
        "notes (livelocks...)": f"{len(result.notes)}",
    }
    for k, v in rows.items():
        table.add_row(k, v)
    console.print(table)
    for note in result.notes[:5]:
        console.print(f"note: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
