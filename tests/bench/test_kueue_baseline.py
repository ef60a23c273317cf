"""bench/kueue_baseline without a cluster: the shape matches Kueue's generator config, the
manifests carry what both controllers need, and the recorder's arithmetic."""

from __future__ import annotations

import asyncio
import importlib.util
import math
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "kueue_baseline"))

import generator as gen
from controllers import Budget, counters, profile_top
from load import BackgroundLoad
from runner import Runner, _pending_message, change_kind

import run


@pytest.mark.parametrize(
    ("shape", "queues", "workloads"),
    [
        pytest.param(gen.baseline(), 30, 15_000, id="baseline"),
        pytest.param(gen.baseline(0.1), 30, 1_500, id="baseline-tenth"),
        pytest.param(gen.large_scale(), 1_000, 50_000, id="large-scale"),
    ],
)
def test_shape_sizes_match_kueue_configs(shape: gen.Shape, queues: int, workloads: int) -> None:
    assert len(shape.cluster_queues) == queues
    assert len(set(shape.cluster_queues)) == queues
    assert shape.total_workloads == workloads


def test_cluster_queue_has_the_baseline_quota_and_preemption() -> None:
    shape = gen.baseline()
    cq = gen.cluster_queue(shape, "cq-0-2-cohort-4")
    quota = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert cq["spec"]["cohortName"] == "cohort-4"
    assert (quota["nominalQuota"], quota["borrowingLimit"]) == ("20", "100")
    assert cq["spec"]["preemption"] == {
        "reclaimWithinCohort": "Any",
        "withinClusterQueue": "LowerPriority",
    }


def test_workload_carries_queue_priority_and_cpu_request() -> None:
    large = gen.baseline().classes[2]
    wl = gen.workload("large-2-0-0", "cq-0-0-cohort-0", large)
    assert wl["spec"]["queueName"] == "cq-0-0-cohort-0"
    assert wl["spec"]["priority"] == 200
    assert wl["spec"]["priorityClassRef"]["name"] == large.priority_class
    container = wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"] == {"cpu": "20"}
    assert wl["metadata"]["labels"][gen.RUNTIME_LABEL] == "1000"


def _obj(uid: str, *conditions: str) -> dict[str, Any]:
    wl = gen.workload(f"small-0-{uid}-0", "cq-0-0-cohort-0", gen.baseline().classes[0])
    wl["metadata"].update(uid=uid, resourceVersion="1")
    wl["status"] = {"conditions": [{"type": c, "status": "True"} for c in conditions]}
    return wl


class _NoWrites:
    async def request(self, *_a: object, **_k: object) -> dict[str, Any]:
        raise AssertionError("the recorder test makes no API call")


def test_summary_time_to_admission_and_usage() -> None:
    async def scenario() -> dict[str, Any]:
        shape = gen.baseline(1 / 350)  # 1 small, 1 medium, 1 large per queue
        runner = Runner(_NoWrites(), shape)  # type: ignore[arg-type]
        runner.started = 100.0
        runner._handle(_obj("a"), now=100.0)
        runner._handle(_obj("a", "QuotaReserved", "Admitted"), now=102.0)
        runner._handle(_obj("a", "QuotaReserved", "Admitted", "Finished"), now=104.0)
        await runner.close()  # cancels the pending finish timer
        return runner.summary(end=110.0)

    s = asyncio.run(scenario())
    assert s["workload_changes"] == {"admit": 1, "finish": 1}
    small = s["classes"]["small"]
    assert (small["admitted"], small["finished"]) == (1, 1)
    assert small["avg_ms"] == pytest.approx(2000)
    # 1 CPU for 2 s over 30 queues x 20 CPU x 10 s
    assert s["usage_pct"] == pytest.approx(100 * 1000 * 2 / (30 * 20_000 * 10))


def test_profile_top_leaves_out_idle_frames(tmp_path: Path) -> None:
    raw = tmp_path / "p.txt"
    raw.write_text(
        "main (a.py:1);select (selectors.py:468) 90\n"
        "main (a.py:1);hot (b.py:2) 8\n"
        "main (a.py:1);warm (c.py:3) 2\n"
    )
    top = profile_top(raw)
    assert top["self"][0] == ("hot (b.py:2)", pytest.approx(80))
    assert top["total"][0] == ("main (a.py:1)", pytest.approx(100))


def test_budget_parses_qps_and_burst() -> None:
    assert Budget.parse("300/500") == Budget(300, 500)


@pytest.mark.parametrize(
    ("argv", "loads"),
    [
        pytest.param([], [0], id="default-none"),
        pytest.param(["--background-load", "2"], [2], id="two"),
        pytest.param(["--background-load", "0", "--background-load", "1"], [0, 1], id="both"),
    ],
)
def test_background_load_option(argv: list[str], loads: list[int]) -> None:
    assert run.background_loads(run.parser().parse_args(argv)) == loads


@pytest.mark.parametrize("value", ["-1", "two"])
def test_background_load_rejects_what_is_not_a_count(value: str) -> None:
    with pytest.raises(SystemExit):
        run.parser().parse_args(["--background-load", value])


def test_background_load_runs_busy_loops_only_inside_the_block() -> None:
    with BackgroundLoad(2) as load:
        assert len(load.procs) == 2
        assert all(p.poll() is None for p in load.procs)
    assert all(p.returncode is not None for p in load.procs)


# -- jobs.py: the Job-level benchmark --------------------------------------------------------
import jobs as jobbench  # noqa: E402


def test_job_manifest_is_a_labelled_gang_of_gpu_pods() -> None:
    args = jobbench.parser().parse_args(["--pods", "4", "--gpus-per-pod", "2", "--run", "7"])
    job = jobbench.job("train-000", args)
    assert job["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "team"}
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 4
    pod = job["spec"]["template"]
    assert pod["metadata"]["annotations"] == {"atoll.dev/run-duration": "7s"}
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"


def test_queues_give_the_cluster_gpus_as_quota() -> None:
    objs = {o["kind"]: o for o in jobbench.queues(128)}
    (group,) = objs["ClusterQueue"]["spec"]["resourceGroups"]
    gpu = next(r for r in group["flavors"][0]["resources"] if r["name"] == "nvidia.com/gpu")
    assert gpu["nominalQuota"] == 128
    assert objs["LocalQueue"]["spec"]["clusterQueue"] == "gpus"
    assert [jobbench._collection(o) for o in jobbench.queues(1)] == [
        "/api/v1/namespaces",
        "/apis/kueue.x-k8s.io/v1beta2/resourceflavors",
        "/apis/kueue.x-k8s.io/v1beta2/clusterqueues",
        f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{jobbench.NS}/localqueues",
    ]


def test_pod_watch_keeps_the_first_running_time_and_counts_succeeded() -> None:
    watch = jobbench.PodWatch(client=None)  # type: ignore[arg-type]

    def pod(name: str, phase: str) -> dict[str, Any]:
        labels = {"batch.kubernetes.io/job-name": "j"}
        return {"metadata": {"name": name, "labels": labels}, "status": {"phase": phase}}

    watch._see(pod("a", "Pending"))
    assert watch.running == {}
    watch._see(pod("a", "Running"))
    first = watch.running["j"]["a"]
    watch._see(pod("a", "Succeeded"))
    assert watch.running["j"]["a"] == first
    assert set(watch.ended) == {"j"}
    assert set(watch.ended["j"]) == {"a"}
    ended = watch.ended["j"]["a"]
    watch._see(pod("a", "Succeeded"))
    assert watch.ended["j"]["a"] == ended  # the first time it was seen Succeeded
    watch._see({"metadata": {"name": "x"}, "status": {"phase": "Running"}})  # not a Job's pod
    assert set(watch.running) == {"j"}


def test_pod_watch_keeps_the_first_time_a_job_was_seen_complete() -> None:
    watch = jobbench.PodWatch(client=None)  # type: ignore[arg-type]

    def job(*conditions: tuple[str, str]) -> dict[str, Any]:
        conds = [{"type": t, "status": s} for t, s in conditions]
        return {"metadata": {"name": "j"}, "status": {"conditions": conds}}

    watch._see_job(job(("SuccessCriteriaMet", "True")))
    assert watch.complete == {}
    watch._see_job(job(("Complete", "False")))
    assert watch.complete == {}
    watch._see_job(job(("SuccessCriteriaMet", "True"), ("Complete", "True")))
    first = watch.complete["j"]
    watch._see_job(job(("Complete", "True")))
    assert watch.complete == {"j": first}


def test_handoffs_measure_from_the_last_end_before_a_queued_gang_started() -> None:
    # a and b run at once; c was queued behind a (ended at 10) and started at 11.5; d was
    # created at 20, after every end before its start: not a handoff
    created = {"a": 0.0, "b": 1.0, "c": 2.0, "d": 20.0}
    started = {"a": 0.5, "b": 1.5, "c": 11.5, "d": 20.5}
    ended = {"a": 10.0, "b": 12.0, "c": 21.0}
    assert jobbench.handoffs(created, started, ended) == [pytest.approx(1.5)]
    # e queued behind both a and b: measured from b's end, the later one before its start
    created["e"], started["e"] = 3.0, 12.25
    assert sorted(jobbench.handoffs(created, started, ended)) == [
        pytest.approx(0.25),
        pytest.approx(1.5),
    ]


def test_percentiles() -> None:
    assert jobbench._pct([], 50) != jobbench._pct([], 50)  # NaN
    assert jobbench._pct([3.0], 99) == 3.0
    values = [float(i) for i in range(1, 101)]
    assert jobbench._pct(values, 50) == pytest.approx(50.5)
    assert jobbench._pct(values, 99) == pytest.approx(99.01)


def _pending(reason: str, message: str) -> dict[str, Any]:
    wl = _obj("p")
    wl["status"] = {
        "conditions": [
            {"type": "QuotaReserved", "status": "False", "reason": reason, "message": message}
        ]
    }
    return wl


def test_change_kinds_tell_pending_status_updates_from_admissions_and_evictions() -> None:
    pending = _pending("Pending", "2 more needed")
    assert change_kind(_obj("p"), pending) == "pending-first"
    assert change_kind(pending, _pending("Pending", "1 more needed")) == "pending-update"
    assert change_kind(pending, _pending("Pending", "2 more needed")) == "other"
    admitted = _obj("p", "QuotaReserved", "Admitted")
    assert change_kind(pending, admitted) == "admit"
    evicted = _obj("p", "QuotaReserved", "Admitted", "Evicted")
    assert change_kind(admitted, evicted) == "evict"
    assert change_kind(evicted, _pending("Pending", "Evicted by the test runner")) == "unreserve"
    assert change_kind(admitted, _obj("p", "QuotaReserved", "Admitted", "Finished")) == "finish"


def test_pending_messages_are_counted_with_their_numbers_blanked() -> None:
    assert _pending_message(_pending("Pending", "insufficient quota, 12 more needed")) == (
        "Pending: insufficient quota, N more needed"
    )
    assert _pending_message(_obj("p")) == "None: "


def test_operator_memory_holds_the_workloads_it_was_fed_and_steps_once() -> None:
    path = Path(__file__).resolve().parents[2] / "bench" / "operator_memory.py"
    spec = importlib.util.spec_from_file_location("operator_memory", path)
    assert spec is not None
    assert spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    result = bench.run(60, top=3)
    assert (result["workloads"], result["decisions"]) == (60, 30)  # one head per queue
    assert result["rss_after_imports_mib"] > 0
    assert len(result["top_sites"]) == 3


def test_a_paced_shape_spreads_the_same_workloads_over_a_longer_time() -> None:
    shape = gen.baseline(0.1)
    slow = gen.shape_from_args(0.1, False, pace=2)
    assert slow.total_workloads == shape.total_workloads
    assert slow.cluster_queues == shape.cluster_queues
    assert [c.interval_ms for c in slow.classes] == [2 * c.interval_ms for c in shape.classes]
    assert [c.runtime_ms for c in slow.classes] == [c.runtime_ms for c in shape.classes]
    assert slow.generation_seconds == 2 * shape.generation_seconds
    assert gen.shape_from_args(0.1, False) == shape


def test_counters_read_one_metric_by_labels_and_cycles_per_admission_follow() -> None:
    text = "\n".join(
        [
            "# HELP kueue_admission_attempts_total Admission attempts.",
            'kueue_admission_attempts_total{replica_role="standalone",result="success"} 151.0',
            'kueue_admission_attempts_total{replica_role="standalone",result="inadmissible"} 49',
            'kueue_admission_attempts_created{result="success"} 1.7e9',
            'atoll_api_requests_total{verb="patch"} 3.0',
        ]
    )
    got = counters(text, "kueue_admission_attempts_total")
    assert got == {
        '{replica_role="standalone",result="success"}': 151.0,
        '{replica_role="standalone",result="inadmissible"}': 49.0,
    }
    assert counters(text, "atoll_api_requests_total") == {'{verb="patch"}': 3.0}
    res = {
        "wall_s": 10.0,
        "finished": 100,
        "expected": 100,
        "admitted": 100,
        "admissions_per_s": 10.0,
        "classes": {},
        "usage_pct": 50.0,
        "admission_attempts": {"success": 151.0, "inadmissible": 49.0},
    }
    rows = {label: v for label, v, _ in run.rows(res)}
    assert rows["scheduling cycles / admission"] == pytest.approx(2.0)
    del res["admission_attempts"]
    without = {label: v for label, v, _ in run.rows(res)}
    assert math.isnan(without["scheduling cycles / admission"])
