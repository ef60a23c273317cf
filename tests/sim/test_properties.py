"""Gang invariants of the simulator over random job mixes (hypothesis)."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from atoll.engine.decisions import Decision, Preempt
from atoll.sim.gang import GangSimulator, Settings
from atoll.sim.greedy import GreedySimulator
from tests.sim.builders import (
    cluster_queue,
    flavor,
    job,
    local_queue,
    nodes,
    priority_class,
    scenario,
    six_gpus,
)

jobs_strategy = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=6),  # pods of 1 GPU
        st.integers(min_value=0, max_value=600),  # arrival
        st.integers(min_value=1, max_value=30),  # minutes
        st.sampled_from(["low", "high"]),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(jobs_strategy)
def test_no_gang_is_ever_partly_running_and_all_finish(
    specs: list[tuple[int, int, int, str]],
) -> None:
    scn = six_gpus(
        *(
            job(f"j{i}", pods=p, arrival=a, duration=f"{m}m", priority=prio)
            for i, (p, a, m, prio) in enumerate(specs)
        ),
        preemption={"withinClusterQueue": "LowerPriority"},
    )
    result = GangSimulator(scn, Settings()).run()
    tl = result.timeline
    # 1-GPU pods on 2-GPU nodes with quota = capacity: every admitted gang is placed whole
    assert set(tl.series["partial"]) == {0}
    assert all(
        busy == bound for busy, bound in zip(tl.series["busy"], tl.series["bound/g"], strict=True)
    )
    assert max(tl.series["usage/cq"]) <= 6
    minutes = {f"default/j{i}": m for i, (_, _, m, _) in enumerate(specs)}
    for rec in result.jobs:
        assert rec.finished is not None, rec
        assert rec.started is not None
        assert rec.started >= rec.arrival
        # the last run is a whole run: an evicted gang restarts from scratch
        assert rec.finished - rec.started == minutes[rec.name] * 60
    # no gang ever holds GPUs after the run
    assert tl.series["bound/g"][-1] == 0


@settings(max_examples=30, deadline=None)
@given(jobs_strategy)
def test_greedy_books_balance_and_partial_jobs_hold_idle_gpus(
    specs: list[tuple[int, int, int, str]],
) -> None:
    scn = six_gpus(
        *(
            job(f"j{i}", pods=p, arrival=a, duration=f"{m}m", priority=prio)
            for i, (p, a, m, prio) in enumerate(specs)
        )
    )
    result = GreedySimulator(scn).run()
    tl = result.timeline
    for i in range(len(tl.times)):
        bound = tl.series["bound/g"][i]
        assert tl.series["usage/cq"][i] == bound
        assert 0 <= tl.series["busy"][i] <= bound <= 6
        if tl.series["partial"][i] == 0:
            assert tl.series["busy"][i] == bound  # only partly placed Jobs hold idle GPUs
    finished = [j for j in result.jobs if j.finished is not None]
    assert (result.deadlock is None) == (len(finished) == len(result.jobs))


class _Recorder(GangSimulator):
    """The simulator, recording every (instant, preemptor, victim)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.preemptions: list[tuple[float, str, str]] = []

    def _apply(self, decisions: tuple[Decision, ...], t: float) -> bool:
        self.preemptions += [
            (t, dec.workload, v.workload)
            for dec in decisions
            if isinstance(dec, Preempt)
            for v in dec.victims
        ]
        return GangSimulator._apply(self, decisions, t)


def _repeated_without_cause(
    preemptions: list[tuple[float, str, str]],
) -> list[tuple[float, str, str]]:
    """The (instant, preemptor, victim) records that repeat an earlier one although the
    preemptor was not evicted itself in between (a preemptor reclaimed by a third Workload
    may rightly come back and evict the same victim again)."""
    repeats = []
    for i, (t, preemptor, victim) in enumerate(preemptions):
        for j in range(i - 1, -1, -1):
            if preemptions[j][0] == t and preemptions[j][2] == preemptor:
                break  # the preemptor was evicted after its earlier preemption
            if preemptions[j] == (t, preemptor, victim):
                repeats.append((t, preemptor, victim))
                break
    return repeats


def test_a_repeat_counts_unless_the_preemptor_was_evicted_in_between() -> None:
    plain = [(10.0, "p", "v"), (10.0, "p", "v")]
    caused = [(10.0, "p", "v"), (10.0, "x", "p"), (10.0, "p", "v")]
    later = [(10.0, "p", "v"), (20.0, "p", "v")]
    assert _repeated_without_cause(plain) == [(10.0, "p", "v")]
    assert _repeated_without_cause(caused) == []
    assert _repeated_without_cause(later) == []


cohort_jobs = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=7),  # pods of 1 GPU
        st.sampled_from([0, 10, 20, 30, 600]),  # arrival: several at once, or later
        st.integers(min_value=1, max_value=30),  # minutes
        st.sampled_from(["la", "lb", "lc"]),
        st.sampled_from(["low", "high"]),
    ),
    min_size=3,
    max_size=10,
)


@settings(max_examples=200, deadline=None)
@given(cohort_jobs, st.sampled_from(["BestEffortFIFO", "StrictFIFO"]))
@example(  # the freed quota went to an older Job of another queue (test_preemption_pingpong)
    [
        *[(1, 0, 1, "la", "low")] * 4,
        (1, 0, 1, "la", "high"),
        (3, 0, 1, "lb", "low"),
        (3, 0, 1, "lc", "high"),
        (3, 10, 1, "la", "high"),
    ],
    "BestEffortFIFO",
)
@example(  # a reclaimed victim comes back once its queue is within nominal again: no loop
    [
        *[(1, 0, 1, "la", "low")] * 4,
        (1, 10, 1, "lc", "low"),
        (3, 0, 1, "lc", "low"),
        (4, 0, 1, "la", "low"),
        (1, 0, 1, "la", "low"),
        (3, 0, 1, "la", "low"),
        (1, 0, 1, "la", "low"),
        (3, 0, 1, "lb", "low"),
    ],
    "BestEffortFIFO",
)
@example(  # the preemptor is reclaimed itself, comes back and evicts its victim again: no loop
    [
        (1, 0, 1, "la", "low"),
        *[(1, 0, 1, "lb", "low")] * 3,
        (1, 0, 1, "lb", "high"),
        (2, 10, 1, "la", "low"),
        (3, 0, 1, "lc", "high"),
        (3, 10, 1, "la", "low"),
        (3, 10, 1, "lb", "high"),
    ],
    "BestEffortFIFO",
)
def test_reclaim_in_a_cohort_never_livelocks(
    specs: list[tuple[int, int, int, str, str]], strategy: str
) -> None:
    """Three ClusterQueues of 3, 3 and 2 GPUs (8 nodes of 1 GPU) lend to each other and
    reclaim: every instant ends (no cycle repeats), no preemptor evicts the same victim
    twice in one instant unless it was evicted itself in between, and every Job that fits
    the cohort finishes."""
    policy = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    scn = scenario(
        nodes(8, 1),
        flavor(),
        *(
            cluster_queue(
                name, gpus, cohortName="all", preemption=policy, queueingStrategy=strategy
            )
            for name, gpus in (("a", 3), ("b", 3), ("c", 2))
        ),
        *(local_queue(f"l{name}", name) for name in "abc"),
        priority_class("low", 10),
        priority_class("high", 1000),
        *(
            job(f"j{i}", pods=p, arrival=a, duration=f"{m}m", queue=lq, priority=prio)
            for i, (p, a, m, lq, prio) in enumerate(specs)
        ),
    )
    sim = _Recorder(scn, Settings())
    result = sim.run()
    assert result.notes == []
    assert _repeated_without_cause(sim.preemptions) == [], sim.preemptions
    assert all(rec.finished is not None for rec in result.jobs)
    usage = [v for k, v in result.timeline.series.items() if k.startswith("usage/")]
    assert max(sum(at) for at in zip(*usage, strict=True)) <= 8
