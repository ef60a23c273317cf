"""`atoll simulate --compare-policies`: one scenario under three queueing policies.

The scenario is run three times by the gang simulator (the operator's own decision step):
with every ClusterQueue BestEffortFIFO, with every ClusterQueue StrictFIFO, and with every
ClusterQueue BestEffortFIFO plus atoll's reservation and backfill (`atoll.dev/backfill:
"true"`, `engine.backfill`). Each run is summed up by Job size (waits) and by GPU
utilisation over the window in which Jobs keep arriving (the same window for all three:
after the last arrival, a policy that left work queued would look busier for longer).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from atoll.api import labels as keys
from atoll.api.clusterqueue import ClusterQueue, QueueingStrategy
from atoll.sim.gang import GangSimulator, Progress, Settings
from atoll.sim.results import SimResult, percentile
from atoll.sim.scenario import Scenario

POLICIES = ("BestEffortFIFO", "StrictFIFO", "Backfill")


def big_gpus(result: SimResult) -> int:
    """Jobs with at least half the GPUs of the largest Job are the big gangs of the
    summaries; the others are the small Jobs."""
    return max(1, (max((j.gpus for j in result.jobs), default=0) + 1) // 2)


def _with_policy(cq: ClusterQueue, policy: str) -> ClusterQueue:
    strategy = (
        QueueingStrategy.STRICT_FIFO
        if policy == "StrictFIFO"
        else (QueueingStrategy.BEST_EFFORT_FIFO)
    )
    ann = {
        k: v for k, v in (cq.metadata.annotations or {}).items() if k != keys.BACKFILL_ANNOTATION
    }
    if policy == "Backfill":
        ann[keys.BACKFILL_ANNOTATION] = "true"
    meta = cq.metadata.model_copy(update={"annotations": ann or None})
    spec = cq.spec.model_copy(update={"queueing_strategy": strategy})
    return cq.model_copy(update={"metadata": meta, "spec": spec})


def variant(scn: Scenario, policy: str) -> Scenario:
    """The scenario with every ClusterQueue set to `policy` (one of `POLICIES`)."""
    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r}: one of {', '.join(POLICIES)}")
    return replace(
        scn,
        name=f"{scn.name} [{policy}]",
        cluster_queues=[_with_policy(cq, policy) for cq in scn.cluster_queues],
    )


def run_policies(
    scn: Scenario, until: float | None, progress: Callable[[str], Progress | None]
) -> dict[str, SimResult]:
    """The gang simulator's result under each policy (`progress(policy)` reports it)."""
    out = {}
    for policy in POLICIES:
        variant_scn = variant(scn, policy)
        settings = Settings.of(variant_scn.config, until)
        out[policy] = GangSimulator(variant_scn, settings, progress(policy)).run()
    return out


def window(scn: Scenario) -> float:
    """Utilisation window: from 0 to the last arrival."""
    return max((sj.arrival for sj in scn.jobs), default=0.0)


def utilisation(result: SimResult, until: float) -> float | None:
    """Busy GPU-seconds over [0, until] divided by all GPU-seconds of that span."""
    capacity = sum(result.gpu_capacity.values())
    if capacity <= 0 or until <= 0:
        return None
    tl = result.timeline
    busy = tl.series.get("busy")
    if busy is None:
        return 0.0
    total = 0.0
    t = tl.times
    for i in range(len(t)):
        start = t[i]
        if start >= until:
            break
        end = t[i + 1] if i + 1 < len(t) else until
        total += busy[i] * (min(end, until) - start)
    return total / (capacity * until)


@dataclass(frozen=True, slots=True, kw_only=True)
class Waits:
    jobs: int
    unstarted: int
    p50: float | None
    p99: float | None
    max: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "unstarted": self.unstarted,
            "p50": self.p50,
            "p99": self.p99,
            "max": self.max,
        }


def waits(result: SimResult, keep: Callable[[int], bool]) -> Waits:
    """Waits (arrival to admission; a Job never admitted waits until the run's end)."""
    chosen = [j for j in result.jobs if keep(j.gpus)]
    values = [j.wait if j.wait is not None else max(0.0, result.end - j.arrival) for j in chosen]
    return Waits(
        jobs=len(chosen),
        unstarted=sum(1 for j in chosen if j.wait is None),
        p50=percentile(values, 0.5),
        p99=percentile(values, 0.99),
        max=max(values, default=None),
    )


def _size(gpus: int) -> Callable[[int], bool]:
    return lambda x: x == gpus


def summary(result: SimResult, until: float) -> dict[str, Any]:
    sizes = sorted({j.gpus for j in result.jobs})
    big = big_gpus(result)
    return {
        "waitsByGpus": {str(g): waits(result, _size(g)).to_json() for g in sizes},
        "smallJobs": waits(result, lambda x: x < big).to_json(),
        "bigGangs": waits(result, lambda x: x >= big).to_json(),
        "bigGpus": big,
        "gpuUtilisation": utilisation(result, until),
        "window": until,
        "cycles": result.cycles,
    }


def goals(policies: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The issue's three goals for Backfill, each as (value, bound, met)."""
    best, strict, bf = (policies[p] for p in POLICIES)

    def check(value: float | None, bound: float | None) -> dict[str, Any]:
        met = value is not None and bound is not None and value <= bound + 1e-9
        return {"value": value, "bound": bound, "met": met}

    def times(x: float | None, k: float) -> float | None:
        return None if x is None else x * k

    util_bf, util_best = bf["gpuUtilisation"], best["gpuUtilisation"]
    return {
        "bigP99WaitAtMostStrictFIFO": check(bf["bigGangs"]["p99"], strict["bigGangs"]["p99"]),
        "utilisationAtLeast95PercentOfBestEffort": {
            "value": util_bf,
            "bound": times(util_best, 0.95),
            "met": util_bf is not None
            and util_best is not None
            and util_bf >= util_best * 0.95 - 1e-9,
        },
        "smallP50WaitAtMost120PercentOfBestEffort": check(
            bf["smallJobs"]["p50"], times(best["smallJobs"]["p50"], 1.2)
        ),
    }


def as_json(scn: Scenario, results: Mapping[str, SimResult]) -> dict[str, Any]:
    until = window(scn)
    policies = {p: summary(r, until) for p, r in results.items()}
    return {"scenario": scn.name, "policies": policies, "goals": goals(policies)}


def minutes(x: float | None) -> str:
    return "-" if x is None else f"{x / 60:.1f}m"


def percent(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def rows(doc: Mapping[str, Any]) -> Sequence[tuple[str, ...]]:
    """Table rows, one per measure (small Jobs' waits, the big gangs' waits and how many
    never started, GPU utilisation), with a column per policy in `POLICIES` order: three
    narrow columns keep the policy names whole in an 80-column terminal."""
    big = doc["policies"][POLICIES[-1]]["bigGpus"]
    measures: list[tuple[str, Callable[[Mapping[str, Any]], str]]] = [
        (f"small (<{big} GPUs) p50 wait", lambda s: minutes(s["smallJobs"]["p50"])),
        (f"small (<{big} GPUs) p99 wait", lambda s: minutes(s["smallJobs"]["p99"])),
        (f"big ({big}+ GPUs) p50 wait", lambda s: minutes(s["bigGangs"]["p50"])),
        (f"big ({big}+ GPUs) p99 wait", lambda s: minutes(s["bigGangs"]["p99"])),
        (f"big ({big}+ GPUs) max wait", lambda s: minutes(s["bigGangs"]["max"])),
        (f"big ({big}+ GPUs) never admitted", lambda s: str(s["bigGangs"]["unstarted"])),
        ("GPU utilisation", lambda s: percent(s["gpuUtilisation"])),
    ]
    return [(label, *(cell(doc["policies"][p]) for p in POLICIES)) for label, cell in measures]


GOAL_TEXT = {
    "bigP99WaitAtMostStrictFIFO": ("big gangs' p99 wait <= StrictFIFO's", minutes, "<="),
    "utilisationAtLeast95PercentOfBestEffort": (
        "GPU utilisation >= 0.95 x BestEffortFIFO's",
        percent,
        ">=",
    ),
    "smallP50WaitAtMost120PercentOfBestEffort": (
        "small p50 wait <= 1.2 x BestEffortFIFO's",
        minutes,
        "<=",
    ),
}


def goal_lines(doc: Mapping[str, Any]) -> list[str]:
    """One line per goal of Backfill: met or not, what it says, the value and its bound."""
    out = []
    for name, goal in doc["goals"].items():
        text, unit, op = GOAL_TEXT[name]
        mark = "met" if goal["met"] else "NOT met"
        out.append(f"{mark:>7}  {text}: {unit(goal['value'])} {op} {unit(goal['bound'])}")
    return out
