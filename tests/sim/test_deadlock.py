"""The two-jobs-on-six-GPUs story (examples/scenarios/deadlock.yaml), both ways."""

from __future__ import annotations

from pathlib import Path

import pytest

from atoll.cli.simulate_cmd import read_scenario
from atoll.sim.gang import GangSimulator, Settings
from atoll.sim.greedy import GreedySimulator, batch_of, find_cycle
from atoll.sim.results import JobState
from atoll.sim.scenario import Scenario
from tests.sim.builders import job, six_gpus

SCENARIO = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "deadlock.yaml"


@pytest.fixture(scope="module")
def story() -> Scenario:
    return read_scenario(SCENARIO)


def test_scenario_uses_the_six_gpu_shape(story: Scenario) -> None:
    assert [n.name for n in story.nodes] == ["six-0", "six-1", "six-2"]
    assert [j.key for j in story.jobs] == ["default/job-a", "default/job-b"]


def test_greedy_placement_deadlocks_and_names_the_cycle(story: Scenario) -> None:
    result = GreedySimulator(story).run()
    dl = result.deadlock
    assert dl is not None
    assert {h.job for h in dl.cycle} == {"default/job-a", "default/job-b"}
    by_job = {h.job: h for h in dl.cycle}
    assert by_job["default/job-a"].waits_for == ("default/job-b",)
    assert by_job["default/job-b"].waits_for == ("default/job-a",)
    assert sorted(sum(h.holds.values()) for h in dl.cycle) == [3, 3]
    assert all(h.pending_pods == 1 for h in dl.cycle)
    assert dl.free_gpus == 0
    message = dl.describe()
    assert "default/job-a → default/job-b → default/job-a" in message
    assert [j.state for j in result.jobs] == [JobState.DEADLOCKED, JobState.DEADLOCKED]
    assert all(j.finished is None for j in result.jobs)


def test_gang_admission_completes_both_jobs(story: Scenario) -> None:
    result = GangSimulator(story, Settings.of(story.config)).run()
    a, b = result.jobs
    assert (a.admitted, a.started, a.finished) == (0.0, 0.0, 600.0)
    # b was parked while a ran: woken when a ended, since a released what b lacked (Kueue
    # waits for its batched requeue, a second later)
    assert (b.admitted, b.started, b.finished) == (600.0, 600.0, 1200.0)
    assert b.reason is None
    assert b.flavor == "l4"
    assert result.deadlock is None
    assert max(result.timeline.series["partial"]) == 0


def test_greedy_runs_jobs_that_arrive_apart() -> None:
    scn = six_gpus(job("a", arrival=0), job("b", arrival=5))
    result = GreedySimulator(scn).run()
    assert result.deadlock is None
    # the last slow-start batch of 4 pods is created 0.2 s after the Job
    assert [j.finished for j in result.jobs] == pytest.approx([600.2, 1200.2])


def test_greedy_reports_no_cycle_for_a_job_too_big_for_the_cluster() -> None:
    result = GreedySimulator(six_gpus(job("huge", pods=8))).run()
    assert result.deadlock is None
    assert result.jobs[0].reason == "Unschedulable"


@pytest.mark.parametrize(
    ("index", "batch"),
    [pytest.param(0, 0, id="first"), pytest.param(2, 1, id="second"), pytest.param(7, 3, id="8th")],
)
def test_slow_start_batches(index: int, batch: int) -> None:
    assert batch_of(index) == batch


@pytest.mark.parametrize(
    ("graph", "cycle"),
    [
        pytest.param({"a": ["b"], "b": ["a"]}, ["a", "b"], id="two"),
        pytest.param({"a": ["b"], "b": ["c"], "c": []}, [], id="chain"),
        pytest.param({"a": ["b"], "b": ["c"], "c": ["b"]}, ["b", "c"], id="tail"),
    ],
)
def test_find_cycle(graph: dict[str, list[str]], cycle: list[str]) -> None:
    assert find_cycle(graph) == cycle
