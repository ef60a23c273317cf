"""Gang invariants of the simulator over random job mixes (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from atoll.sim.gang import GangSimulator, Settings
from atoll.sim.greedy import GreedySimulator
from tests.sim.builders import job, six_gpus

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
