"""A reclaiming preemptor keeps its turn: the victim it evicted can't slip back in.

Two ClusterQueues of 4 GPUs share a cohort; b borrows a's idle quota with `v`. In a, `big`
(6 GPUs) waits: even reclaiming `v` would not make room for it. Then `small` (4 GPUs)
arrives in a and reclaims `v`. Releasing `v`'s quota unparks `big`, which is older than
`small`: were `big` the head of a again, `v` would be admitted back at once (borrowing the
quota freed for `small`), `small` would reclaim it again, and so on forever (Kueue#6929:
BestEffortFIFO keeps a preempting workload at the head of its queue).
"""

from __future__ import annotations

from typing import Any

import pytest

from atoll.engine import decisions as d
from atoll.sim.gang import GangSimulator, Settings
from atoll.sim.results import JobRecord, SimResult
from atoll.sim.workloads import EPOCH
from atoll.state.decide import Decider
from tests.sim.builders import cluster_queue, flavor, job, local_queue, nodes, scenario

RECLAIM = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}


def _run(*jobs: dict[str, Any], strategy: str = "BestEffortFIFO") -> SimResult:
    scn = scenario(
        nodes(4, 2),
        flavor(),
        cluster_queue("a", 4, cohortName="all", preemption=RECLAIM, queueingStrategy=strategy),
        cluster_queue("b", 4, cohortName="all", preemption=RECLAIM, queueingStrategy=strategy),
        local_queue("la", "a"),
        local_queue("lb", "b"),
        *jobs,
    )
    return GangSimulator(scn, Settings()).run()


def _by_name(result: SimResult) -> dict[str, JobRecord]:
    return {r.name.removeprefix("default/"): r for r in result.jobs}


STORY = (
    job("u", pods=4, arrival=0, duration="100m", queue="lb"),
    job("v", pods=4, arrival=1, duration="100m", queue="lb"),
    job("big", pods=6, arrival=10, duration="10m", queue="la"),
    job("small", pods=4, arrival=20, duration="10m", queue="la"),
)


def test_the_reclaimer_is_admitted_and_its_victim_waits() -> None:
    result = _run(*STORY)
    assert result.notes == []
    jobs = _by_name(result)
    assert jobs["small"].admitted == 20.0
    assert jobs["small"].evictions == 0
    # v is preempted once, and readmitted only when small is done (its quota is free again)
    assert jobs["v"].evictions == 1
    assert jobs["v"].admitted == 620.0
    assert all(r.finished is not None for r in result.jobs)


def test_the_victim_is_never_readmitted_while_the_reclaimer_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The same story one cycle at a time: the cycle after small's preemption admits small.
    cycles: list[tuple[float, tuple[d.Decision, ...]]] = []
    real = Decider.decide

    def recording(self: Decider, now: float) -> tuple[d.Decision, ...]:
        decisions = real(self, now)
        cycles.append((now - EPOCH, decisions))
        return decisions

    monkeypatch.setattr(Decider, "decide", recording)
    _run(*STORY)
    at_20 = [
        [(type(dec).__name__, dec.workload) for dec in decs if not isinstance(dec, d.Pending)]
        for t, decs in cycles
        if t == 20.0
    ]
    assert at_20[:2] == [[("Preempt", "default/job-small")], [("Admit", "default/job-small")]]
    assert all(step == [] for step in at_20[2:])


@pytest.mark.parametrize("strategy", ["BestEffortFIFO", "StrictFIFO"])
def test_no_livelock_with_either_queueing_strategy(strategy: str) -> None:
    result = _run(*STORY, strategy=strategy)
    assert result.notes == []
    assert all(r.finished is not None for r in result.jobs)
