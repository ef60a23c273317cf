"""Benchmark: the admission engine's scheduling cycle on a synthetic cluster, on one core.

    python bench/engine_cycle.py [--workloads 10000 --cluster-queues 1000 --cohorts 10
                                  --flavors 3 --seed 1 --json --profile]

Builds ClusterQueues spread over cohorts (three resources per flavor, some borrowing limits,
preemption policies mixed), a running population of low-priority workloads and a pending
population, then acts as the queue manager: heads of every ClusterQueue, one engine cycle,
apply the decisions (admissions start, preemption victims leave, inadmissible workloads are
parked), until no head is left. Reports engine decisions per second (wall time inside
`run_cycle` only; also per CPU second, which a busy machine disturbs less), the p50/p99
wall time of one cycle, and the snapshot build time separately.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))

from atoll.engine.cycle import run_cycle
from atoll.engine.decisions import Admit, Pending, Preempt, Requeue
from atoll.engine.model import (
    Admission,
    AdmittedWorkload,
    BorrowWithinCohort,
    BorrowWithinCohortPolicy,
    ClusterQueue,
    ClusterQueueName,
    Cohort,
    CohortName,
    FairSharing,
    FlavorName,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    PodSet,
    PodSetAssignment,
    PodSetName,
    PreemptionPolicy,
    ReclaimWithinCohort,
    ResourceFlavor,
    ResourceGroup,
    ResourceName,
    ResourceQuota,
    WithinClusterQueue,
    Workload,
    WorkloadKey,
)
from atoll.engine.ordering import select_heads
from atoll.engine.snapshot import build_snapshot

CPU, MEM, GPU = ResourceName("cpu"), ResourceName("memory"), ResourceName("nvidia.com/gpu")
GI = 2**30


@dataclass
class Cluster:
    flavors: list[ResourceFlavor]
    cluster_queues: list[ClusterQueue]
    cohorts: list[Cohort]
    local_queues: list[LocalQueue]
    running: dict[WorkloadKey, AdmittedWorkload]
    pending: dict[WorkloadKey, Workload]
    queue_of: dict[WorkloadKey, ClusterQueueName] = field(default_factory=dict)
    fair_sharing: FairSharing | None = None


def _cluster_queue(
    rnd: random.Random, i: int, cohorts: int, flavors: list[FlavorName]
) -> ClusterQueue:
    limited = rnd.random() < 0.3
    quotas = tuple(
        FlavorQuotas(
            flavor=f,
            resources=(
                ResourceQuota(
                    resource=CPU, nominal=64_000, borrowing_limit=32_000 if limited else None
                ),
                ResourceQuota(
                    resource=MEM, nominal=256 * GI, borrowing_limit=128 * GI if limited else None
                ),
                ResourceQuota(resource=GPU, nominal=8, borrowing_limit=4 if limited else None),
            ),
        )
        for f in flavors
    )
    reclaim = rnd.choice(
        [ReclaimWithinCohort.NEVER, ReclaimWithinCohort.LOWER_PRIORITY, ReclaimWithinCohort.ANY]
    )
    return ClusterQueue(
        name=ClusterQueueName(f"cq-{i}"),
        cohort=CohortName(f"cohort-{i % cohorts}"),
        resource_groups=(ResourceGroup(covered_resources=(CPU, MEM, GPU), flavors=quotas),),
        preemption=PreemptionPolicy(
            within_cluster_queue=rnd.choice(
                [WithinClusterQueue.NEVER, WithinClusterQueue.LOWER_PRIORITY]
            ),
            reclaim_within_cohort=reclaim,
            borrow_within_cohort=BorrowWithinCohort(
                policy=BorrowWithinCohortPolicy.NEVER
                if reclaim is ReclaimWithinCohort.NEVER
                else rnd.choice(list(BorrowWithinCohortPolicy))
            ),
        ),
        namespace_selector=LabelSelector(),
    )


def _workload(rnd: random.Random, name: str, queue: str, priority: int, at: float) -> Workload:
    sets = []
    for j in range(rnd.choice([1, 1, 2])):
        count = rnd.randint(1, 4)
        minimum = rnd.randint(1, count) if j == 0 and rnd.random() < 0.2 else None
        gpus = rnd.choice([0, 1, 1, 2, 4])
        requests = (
            (CPU, rnd.choice([500, 1000, 4000])),
            (MEM, rnd.choice([1, 4, 16]) * GI),
            (GPU, gpus),
        )
        sets.append(
            PodSet(name=PodSetName(f"ps{j}"), count=count, requests=requests, min_count=minimum)
        )
    return Workload(
        namespace="bench",
        name=name,
        queue_name=queue,
        pod_sets=tuple(sets),
        priority=priority,
        queued_at=at,
    )


def _running(w: Workload, cq: ClusterQueueName, flavor: FlavorName, at: float) -> AdmittedWorkload:
    assignments = tuple(
        PodSetAssignment(
            name=ps.name,
            count=ps.count,
            flavors=tuple((r, flavor) for r, _ in ps.requests),
            resource_usage=tuple((r, v * ps.count) for r, v in ps.requests),
        )
        for ps in w.pod_sets
    )
    return AdmittedWorkload(
        workload=w, admission=Admission(cluster_queue=cq, pod_sets=assignments), reserved_at=at
    )


def build_cluster(args: argparse.Namespace) -> Cluster:
    rnd = random.Random(args.seed)
    flavors = [FlavorName(f"flavor-{i}") for i in range(args.flavors)]
    cqs = [_cluster_queue(rnd, i, args.cohorts, flavors) for i in range(args.cluster_queues)]
    cluster = Cluster(
        flavors=[ResourceFlavor(name=f) for f in flavors],
        cluster_queues=cqs,
        cohorts=[Cohort(name=CohortName(f"cohort-{i}")) for i in range(args.cohorts)],
        local_queues=[
            LocalQueue(namespace="bench", name=cq.name, cluster_queue=cq.name) for cq in cqs
        ],
        running={},
        pending={},
        fair_sharing=FairSharing() if args.fair_sharing else None,
    )
    for cq in cqs:  # a low-priority workload already running in the first flavor of each queue
        w = _workload(rnd, f"old-{cq.name}", cq.name, priority=0, at=-1.0)
        cluster.running[w.key] = _running(w, cq.name, flavors[0], at=0.0)
    for i in range(args.workloads):
        cq = cqs[i % len(cqs)]
        w = _workload(rnd, f"wl-{i}", cq.name, priority=rnd.randint(0, 3), at=float(i))
        cluster.pending[w.key] = w
        cluster.queue_of[w.key] = cq.name
    return cluster


@dataclass
class Stats:
    cycle_s: list[float] = field(default_factory=list)
    cycle_cpu_s: float = 0.0
    snapshot_s: list[float] = field(default_factory=list)
    decisions: int = 0
    admitted: int = 0
    preemptions: int = 0
    victims: int = 0
    parked: int = 0


def _apply(
    cluster: Cluster, decisions: tuple[object, ...], parked: set[WorkloadKey], stats: Stats
) -> None:
    for d in decisions:
        if isinstance(d, Admit):
            w = cluster.pending.pop(d.workload)
            assignments = tuple(
                PodSetAssignment(
                    name=ps.name,
                    count=ps.count,
                    flavors=ps.flavors,
                    resource_usage=ps.resource_usage,
                )
                for ps in d.pod_sets
            )
            cluster.running[d.workload] = AdmittedWorkload(
                workload=w, admission=Admission(cluster_queue=d.cluster_queue, pod_sets=assignments)
            )
            stats.admitted += 1
        elif isinstance(d, Preempt):
            stats.preemptions += 1
            for v in d.victims:
                cluster.running.pop(v.workload, None)
                stats.victims += 1
        elif isinstance(d, Pending) and d.requeue is Requeue.INADMISSIBLE:
            parked.add(d.workload)
            stats.parked += 1


def run(cluster: Cluster, max_cycles: int) -> Stats:
    stats = Stats()
    parked: set[WorkloadKey] = set()
    for _ in range(max_cycles):
        by_cq: dict[ClusterQueueName, list[Workload]] = {}
        for key, w in cluster.pending.items():
            if key not in parked:
                by_cq.setdefault(cluster.queue_of[key], []).append(w)
        heads = select_heads(by_cq)
        if not heads:
            break
        t0 = time.perf_counter()
        snap = build_snapshot(
            flavors=cluster.flavors,
            cluster_queues=cluster.cluster_queues,
            cohorts=cluster.cohorts,
            local_queues=cluster.local_queues,
            admitted=cluster.running.values(),
            fair_sharing=cluster.fair_sharing,
        )
        t1 = time.perf_counter()
        c1 = time.process_time()
        decisions = run_cycle(snap, heads)
        t2 = time.perf_counter()
        stats.cycle_cpu_s += time.process_time() - c1
        stats.snapshot_s.append(t1 - t0)
        stats.cycle_s.append(t2 - t1)
        stats.decisions += len(decisions)
        _apply(cluster, decisions, parked, stats)
    return stats


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(args: argparse.Namespace, stats: Stats) -> dict[str, object]:
    engine_s = sum(stats.cycle_s)
    return {
        "workloads": args.workloads,
        "cluster_queues": args.cluster_queues,
        "cohorts": args.cohorts,
        "flavors": args.flavors,
        "fair_sharing": args.fair_sharing,
        "cycles": len(stats.cycle_s),
        "decisions": stats.decisions,
        "admitted": stats.admitted,
        "preemptions": stats.preemptions,
        "victims": stats.victims,
        "parked_inadmissible": stats.parked,
        "decisions_per_s": round(stats.decisions / engine_s, 1) if engine_s else None,
        "decisions_per_cpu_s": round(stats.decisions / stats.cycle_cpu_s, 1)
        if stats.cycle_cpu_s
        else None,
        "cycle_p50_ms": round(_pct(stats.cycle_s, 0.50) * 1000, 2),
        "cycle_p99_ms": round(_pct(stats.cycle_s, 0.99) * 1000, 2),
        "cycle_mean_ms": round(statistics.fmean(stats.cycle_s) * 1000, 2),
        "snapshot_build_p50_ms": round(_pct(stats.snapshot_s, 0.50) * 1000, 2),
        "decisions_per_s_incl_snapshot": round(
            stats.decisions / (engine_s + sum(stats.snapshot_s)), 1
        ),
    }


def _print_table(result: dict[str, object]) -> None:
    table = Table(title="atoll engine: scheduling cycles (one core)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k, v in result.items():
        table.add_row(k, str(v))
    Console().print(table)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workloads", type=int, default=10_000)
    parser.add_argument("--cluster-queues", type=int, default=1_000)
    parser.add_argument("--cohorts", type=int, default=10)
    parser.add_argument("--flavors", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-cycles", type=int, default=500)
    parser.add_argument(
        "--fair-sharing", action="store_true", help="enable fair sharing (DRS order, preemption)"
    )
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    parser.add_argument("--profile", action="store_true", help="print the top cProfile entries")
    args = parser.parse_args()
    cluster = build_cluster(args)
    if args.profile:
        profiler = cProfile.Profile()
        stats = profiler.runcall(run, cluster, args.max_cycles)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    else:
        stats = run(cluster, args.max_cycles)
    result = report(args, stats)
    if args.json:
        print(json.dumps(result))
    else:
        _print_table(result)


if __name__ == "__main__":
    main()
