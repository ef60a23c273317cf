"""The gang simulator: preemption, waitForPodsReady, determinism."""

from __future__ import annotations

import json

from atoll.sim.gang import GangSimulator, Settings
from atoll.sim.results import JobState, SimResult
from atoll.sim.scenario import Scenario
from atoll.state import workloads as wls
from tests.sim.builders import cluster_queue, flavor, job, local_queue, nodes, scenario, six_gpus

PREEMPTING = {"preemption": {"withinClusterQueue": "LowerPriority"}}


def _run(scn: Scenario, **settings: float) -> SimResult:
    return GangSimulator(scn, Settings(**settings)).run()  # type: ignore[arg-type]


def test_preemption_evicts_the_whole_gang_and_requeues_it() -> None:
    scn = six_gpus(
        job("low", pods=4, priority="low", arrival=0, duration="30m"),
        job("high", pods=4, priority="high", arrival=60, duration="10m"),
        **PREEMPTING,
    )
    result = _run(scn)
    low, high = result.jobs
    assert (high.admitted, high.started, high.finished) == (60.0, 60.0, 660.0)
    assert low.evictions == 1
    # requeued at once, readmitted as soon as `high` finished (its GPUs are all `low`
    # lacked: no batch period), restarted from scratch
    back = 660.0
    assert (low.admitted, low.started, low.finished) == (back, back, back + 1800.0)
    tl = result.timeline
    at_preemption = list(tl.times).index(60.0)
    assert tl.series["busy"][at_preemption] == 4  # high's 4 GPUs; none of low's left behind
    assert tl.series["bound/g"][at_preemption] == 4
    assert max(tl.series["partial"]) == 0
    # low ran 60 s on 4 GPUs before it was preempted: that work was thrown away
    summary = result.summary()
    assert summary["gpuHoursLostToEviction"] == 4 * 60 / 3600
    assert summary["gpuHoursUseful"] == (4 * 600 + 4 * 1800) / 3600
    assert summary["gpuHoursProgressing"] == summary["gpuHoursUseful"] + 4 * 60 / 3600


def test_equal_priority_does_not_preempt() -> None:
    scn = six_gpus(job("first", arrival=0), job("second", arrival=60), **PREEMPTING)
    first, second = _run(scn).jobs
    assert first.evictions == 0
    assert second.started == 600.0  # the release covers what it lacked: no batch period
    assert second.reason is None


def test_unplaceable_gang_times_out_and_backs_off() -> None:
    # quota says 6 GPUs, but a pod asking 4 GPUs fits no 2-GPU node
    scn = six_gpus(job("wide", pods=1, gpus=4))
    result = _run(scn, timeout=300.0, backoff_base=60.0, backoff_max=3600.0, until=2000.0)
    (wide,) = result.jobs
    assert wide.started is None
    assert wide.state is JobState.PENDING
    assert wide.reason == "PodsReadyTimeout"
    # admitted at 0, evicted at 300 (backoff 60 s), readmitted at 360, evicted at 660
    # (120 s), 780 → 1080 (240 s), 1320 → 1620 (480 s): the next requeue is past `until`
    assert wide.evictions == 4
    assert wide.admitted == 1320.0


def test_simulated_timeouts_are_counted_with_kueues_cause() -> None:
    """The simulator writes no PodsReady condition; its timeouts still have Kueue's cause
    (`WaitForStart`) in `schedulingStats`, as the operator's do."""
    sim = GangSimulator(six_gpus(job("wide", pods=1, gpus=4)), Settings(timeout=300.0, until=400.0))
    sim.run()
    (wl,) = sim.cache.workloads.values()
    assert wls.eviction_count(wl, "PodsReadyTimeout", "WaitForStart") == 1
    assert wls.eviction_count(wl, "PodsReadyTimeout", "") == 0


def test_pods_ready_off_keeps_waiting_without_eviction() -> None:
    result = _run(six_gpus(job("wide", pods=1, gpus=4)), pods_ready=False, until=5000.0)
    assert result.jobs[0].evictions == 0
    assert result.jobs[0].admitted == 0.0
    assert result.timeline.series["partial"][-1] == 0  # no pod bound at all


def test_flavor_node_labels_steer_placement() -> None:
    scn = scenario(
        nodes(2, 2, group="l4", product="L4"),
        nodes(2, 8, group="h100", product="H100"),
        flavor("h100", **{"nvidia.com/gpu.product": "H100"}),
        cluster_queue(gpus=16, flavor_name="h100"),
        local_queue(),
        job("j", pods=2, gpus=8),
    )
    result = _run(scn)
    assert result.jobs[0].flavor == "h100"
    assert result.timeline.series["bound/h100"][0] == 16
    assert result.timeline.series["bound/l4"][0] == 0


def test_job_without_queue_name_is_not_simulated() -> None:
    result = _run(six_gpus(job("stray", queue=None), job("ok")))
    assert [j.name for j in result.jobs] == ["default/ok"]
    assert any("default/stray" in n for n in result.notes)


def test_simulation_is_deterministic() -> None:
    def once() -> str:
        scn = six_gpus(
            *(job(f"j{i}", pods=1 + i % 4, arrival=i * 7 % 50, duration="3m") for i in range(30)),
            job("vip", pods=4, priority="high", arrival=100),
            **PREEMPTING,
        )
        return json.dumps(_run(scn).to_json(), sort_keys=True)

    assert once() == once()


def test_backoff_limit_deactivates_the_workload() -> None:
    scn = six_gpus(job("wide", pods=1, gpus=4))
    result = _run(scn, timeout=300.0, backoff_base=60.0, backoff_limit=1)
    (wide,) = result.jobs
    # evicted at 300 (count 1), readmitted at 360, evicted at 660 (count 2 > limit 1)
    assert wide.evictions == 2
    assert wide.reason == "Deactivated"
    assert result.end == 660.0
    assert result.timeline.series["pending/cq"][-1] == 0


def test_a_gang_that_never_fits_a_node_ends_the_run_with_a_note() -> None:
    # a pod asking 4 GPUs fits no 2-GPU node: without a backoff limit Kueue retries forever;
    # the backoff stops doubling at its cap (2^1024 once overflowed) and the run ends
    scn = six_gpus(job("wide", pods=1, gpus=4), job("ok", pods=2, arrival=10))
    result = _run(scn, timeout=1.0, backoff_base=1.0, backoff_max=2.0)
    wide, ok = result.jobs
    assert ok.state is JobState.FINISHED
    assert (wide.started, wide.finished) == (None, None)
    assert wide.evictions > 1
    assert result.end < 620 + 2 * 2 * (1.0 + 2.0) + 10
    assert result.notes[-1].startswith(f"t={result.end:g}s: stopped: nothing runs")
    assert "default/wide keep timing out" in result.notes[-1]


def test_backoff_delay_doubles_up_to_its_cap_without_overflow() -> None:
    assert [wls.backoff_delay(n, 60.0, 3600.0) for n in (1, 2, 3, 7, 8)] == [
        60.0,
        120.0,
        240.0,
        3600.0,
        3600.0,
    ]
    assert wls.backoff_delay(5000, 60.0, 3600.0) == 3600.0


def _limited(doc: dict, seconds: int) -> dict:  # type: ignore[type-arg]
    doc["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] = str(seconds)
    return doc


def test_a_job_is_stopped_at_its_maximum_execution_time() -> None:
    """A Job that would run 30 min with a 10 min limit is deactivated and evicted at 600 s
    (the operator's rule, `execution_time_left`), not requeued, and frees its GPUs for the
    next; a Job within its limit runs to the end."""
    scn = six_gpus(
        _limited(job("over", pods=4, arrival=0, duration="30m"), 600),
        _limited(job("within", pods=4, arrival=10, duration="5m"), 600),
    )
    result = _run(scn)
    over, within = result.jobs
    assert over.finished is None
    assert over.reason == "Deactivated"
    assert over.message is not None
    assert "maximumExecutionTimeSeconds (600s)" in over.message
    assert over.evictions == 1
    assert within.admitted == 600.0  # the GPUs the stopped Job held
    assert (within.state, within.finished) == (JobState.FINISHED, 600.0 + 300.0)
    assert result.timeline.series["pending/cq"][-1] == 0
    assert result.summary()["gpuHoursLostToEviction"] == 4 * 600 / 3600


def test_the_maximum_execution_time_counts_every_admission() -> None:
    """Preempted after 300 s of its 1200 s, `low` has 900 s left when readmitted at 900 s
    (accumulatedPastExecutionTimeSeconds, as the operator keeps it): stopped 900 s later."""
    scn = six_gpus(
        _limited(job("low", pods=4, priority="low", arrival=0, duration="30m"), 1200),
        job("high", pods=4, priority="high", arrival=300, duration="10m"),
        **PREEMPTING,
    )
    result = _run(scn)
    low, high = result.jobs
    assert high.finished == 900.0
    assert low.admitted == 900.0
    assert low.evictions == 2
    assert low.reason == "Deactivated"
    at_stop = list(result.timeline.times).index(1800.0)
    assert result.timeline.series["busy"][at_stop] == 0
