"""Every metric family tells what happened: a scripted story through the real Scheduler,
JobController and QueueStatusReporter on the fakes (admit, PodsReady, preempt, release,
finish, readmit, preempt again, backfill, a Job found running unadmitted), then `/metrics` as
the operator serves it (`generate_latest`), parsed back and checked family by family against
a table of the values the story implies; then the queues are deleted and their series go."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from atoll.api.clusterqueue import ClusterQueue
from atoll.api.core import Job
from atoll.api.localqueue import LocalQueue
from atoll.api.priority import WorkloadPriorityClass
from atoll.control.jobs import JobController, JobSettings, PodsReadySettings
from atoll.control.metrics import Metrics, ReplicaRole
from atoll.control.queue_status import QueueStatusReporter
from atoll.control.scheduler import Scheduler
from atoll.state.cache import Cache
from tests.control.builders import Clock, cache_with_queue, cluster_queue, job
from tests.control.fakes import FakeCluster

T0 = 1_796_000_000.0
GPU = "nvidia.com/gpu"
NOT_IN_THIS_STORY = {
    # set by the API writer (kube layer): checked by tests/kube/test_metrics_cluster.py
    "atoll_api_requests_total",
    "atoll_api_request_duration_seconds",
    # a reservation start moving later: the book's rule (tests/state/test_reserving.py);
    # its series leaving with the queue: tests/control/test_metrics.py
    "atoll_backfill_reservation_slips_total",
}
"""Families this story cannot produce, and where they are checked."""


def _job(name: str, pods: int, *, queue: str = "lq", **labels: str) -> Job:
    raw = job(name, pods=pods).to_dict()
    raw["metadata"]["labels"] |= {"kueue.x-k8s.io/queue-name": queue, **labels}
    return Job.from_dict(raw)


def _cache() -> Cache:
    """cq (4 GPUs, cohort team, preemption of lower priorities) with lq; bf (8 GPUs,
    backfill) with bflq; WorkloadPriorityClasses low (1) and high (100)."""
    cache = cache_with_queue(
        4, cohortName="team", preemption={"withinClusterQueue": "LowerPriority"}
    )
    bf = cluster_queue("bf", 8).to_dict()
    bf["metadata"]["annotations"] = {"atoll.dev/backfill": "true"}
    cache.set_cluster_queue(ClusterQueue.from_dict(bf))
    cache.set_local_queue(
        LocalQueue.from_dict(
            {"metadata": {"name": "bflq", "namespace": "ns"}, "spec": {"clusterQueue": "bf"}}
        )
    )
    for name, value in (("low", 1), ("high", 100)):
        cache.set_workload_class(
            WorkloadPriorityClass.from_dict({"metadata": {"name": name}, "value": value})
        )
    return cache


class Story:
    def __init__(self) -> None:
        self.cache = _cache()
        self.clock = Clock()
        self.fake = FakeCluster(clock=self.clock)
        self.registry = CollectorRegistry()
        self.metrics = Metrics(self.registry, version="9.9.9")
        self.metrics.set_role(ReplicaRole.LEADER)  # as the operator does when elected
        self.scheduler = Scheduler(
            cache=self.cache,
            store=self.fake,
            emit=self.fake.emit,
            clock=self.clock,
            metrics=self.metrics,
        )
        settings = JobSettings(pods_ready=PodsReadySettings(timeout=600))
        self.jobs = JobController(
            self.cache,
            self.fake,
            self.fake,
            self.fake.emit,
            settings=settings,
            clock=self.clock,
            metrics=self.metrics,
        )
        self.queues = QueueStatusReporter(
            self.cache, self.fake, self.clock, self.metrics, fair_sharing=True
        )

    def at(self, seconds: float) -> None:
        self.clock.now = T0 + seconds

    def _sync(self) -> None:
        for j in self.fake.jobs.values():
            self.cache.set_job(j)
        for wl in self.fake.workloads.values():
            self.cache.set_workload(wl)

    async def submit(self, j: Job) -> None:
        self.fake.jobs[f"ns/{j.name}"] = j
        await self.reconcile(j.name)

    async def reconcile(self, name: str, times: int = 1) -> None:
        for _ in range(times):
            self._sync()
            await self.jobs.reconcile(f"ns/{name}")
            self._sync()

    async def cycle(self, times: int = 1) -> None:
        for _ in range(times):
            self._sync()
            await self.scheduler.run_once()
            self._sync()

    def pods(self, name: str, *, active: int, ready: int) -> None:
        j = self.fake.jobs[f"ns/{name}"]
        status = j.status.model_copy(update={"active": active, "ready": ready})
        self.fake.jobs[f"ns/{name}"] = j.model_copy(update={"status": status})

    def complete(self, name: str) -> None:
        raw = self.fake.jobs[f"ns/{name}"].to_dict()
        raw["status"] |= {"active": 0, "conditions": [{"type": "Complete", "status": "True"}]}
        self.fake.jobs[f"ns/{name}"] = Job.from_dict(raw)

    def scrape(self) -> tuple[set[str], dict[str, list[tuple[dict[str, str], float]]]]:
        """`/metrics` as served: the families it declares (`# TYPE`, without the `_created`
        series prometheus_client adds), and its samples parsed back by name."""
        text = generate_latest(self.registry).decode()
        declared = {
            line.split()[2]
            for line in text.splitlines()
            if line.startswith("# TYPE ") and not line.split()[2].endswith("_created")
        }
        samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            for x in family.samples:
                samples.setdefault(x.name, []).append((dict(x.labels), x.value))
        return declared, samples


async def _story() -> Story:
    """cq: a (low, 4 GPUs) is admitted at 5 s, ready at 15 s; b (high, 2 GPUs) preempts it
    at 115 s; a's pods are gone at 118 s (quota released, requeued); b is admitted at 120 s,
    ready at 130 s, finishes at 220 s; a is admitted again at 221 s and preempted by c
    (high) at 230 s before its pods are ready. bf (backfill): run (6 GPUs, 600 s limit) is
    admitted, big (8) waits with a reservation, small (2 GPUs, 300 s limit) is backfilled.
    rogue runs without a Workload and is suspended."""
    s = Story()
    high, low = {"kueue.x-k8s.io/priority-class": "high"}, {"kueue.x-k8s.io/priority-class": "low"}
    await s.submit(_job("a", 4, **low))
    s.at(5)
    await s.cycle()
    await s.reconcile("a", times=2)  # started; PodsReady=False (WaitForStart)
    s.at(15)
    s.pods("a", active=4, ready=4)
    await s.reconcile("a")  # PodsReady=True
    s.at(115)
    await s.submit(_job("b", 2, **high))
    await s.cycle()  # a preempted
    await s.reconcile("a")  # stopped
    s.pods("a", active=0, ready=0)
    s.at(118)
    await s.reconcile("a")  # quota released, requeued
    s.at(120)
    await s.cycle()  # b admitted
    await s.reconcile("b", times=2)
    s.at(130)
    s.pods("b", active=2, ready=2)
    await s.reconcile("b")
    s.at(220)
    s.complete("b")
    await s.reconcile("b")  # finished
    s.at(221)
    await s.cycle()  # a admitted again
    await s.reconcile("a", times=2)
    s.at(230)
    await s.submit(_job("c", 2, **high))
    await s.cycle()  # a preempted again
    limit = {"kueue.x-k8s.io/max-exec-time-seconds": "600"}
    await s.submit(_job("run", 6, queue="bflq", **limit))
    await s.cycle()
    await s.submit(_job("big", 8, queue="bflq"))
    small = {"kueue.x-k8s.io/max-exec-time-seconds": "300"}
    await s.submit(_job("small", 2, queue="bflq", **small))
    await s.cycle(times=3)
    rogue = _job("rogue", 2).to_dict()
    rogue["spec"]["suspend"] = False
    rogue["status"] = {"active": 2}
    await s.submit(Job.from_dict(rogue))
    await s.queues.report()
    return s


L = {"replica_role": "leader"}
CQ = {"cluster_queue": "cq", **L}
BF = {"cluster_queue": "bf", **L}
LQ = {"name": "lq", "namespace": "ns", **L}
BFLQ = {"name": "bflq", "namespace": "ns", **L}
LOW, HIGH, NONE = {"priority_class": "low"}, {"priority_class": "high"}, {"priority_class": ""}
PREEMPTED = {"reason": "Preempted", "underlying_cause": ""}
CQ_GPU = {"cohort": "team", "cluster_queue": "cq", "flavor": "rf", "resource": GPU, **L}
BF_GPU = {"cohort": "", "cluster_queue": "bf", "flavor": "rf", "resource": GPU, **L}

EXPECTED: dict[str, list[tuple[str, Mapping[str, str], float]]] = {
    # family: [(sample name, labels, value)]; histograms by _count and _sum
    "kueue_admission_attempts_total": [
        ("kueue_admission_attempts_total", {"result": "success", **L}, 5),
        ("kueue_admission_attempts_total", {"result": "inadmissible", **L}, 4),
    ],
    "kueue_admission_attempt_duration_seconds": [  # wall-clock durations: counted only
        ("kueue_admission_attempt_duration_seconds_count", {"result": "success", **L}, 5),
    ],
    "kueue_pending_workloads": [
        ("kueue_pending_workloads", {"status": "active", **CQ}, 1),  # a
        ("kueue_pending_workloads", {"status": "inadmissible", **CQ}, 0),
        ("kueue_pending_workloads", {"status": "inadmissible", **BF}, 1),  # big
    ],
    "kueue_reserving_active_workloads": [
        ("kueue_reserving_active_workloads", CQ, 1),  # a, evicted, pods not gone yet
        ("kueue_reserving_active_workloads", BF, 2),  # run, small
    ],
    "kueue_admitted_active_workloads": [("kueue_admitted_active_workloads", CQ, 1)],
    "kueue_finished_workloads": [("kueue_finished_workloads", CQ, 1)],  # b
    "kueue_quota_reserved_workloads_total": [
        ("kueue_quota_reserved_workloads_total", {**CQ, **LOW}, 2),
        ("kueue_quota_reserved_workloads_total", {**CQ, **HIGH}, 1),
        ("kueue_quota_reserved_workloads_total", {**BF, **NONE}, 2),
    ],
    "kueue_quota_reserved_wait_time_seconds": [
        # a: 5 s after creation, then 103 s after its requeue (118 s); b: 5 s
        ("kueue_quota_reserved_wait_time_seconds_count", {**CQ, **LOW}, 2),
        ("kueue_quota_reserved_wait_time_seconds_sum", {**CQ, **LOW}, 5 + 103),
        ("kueue_quota_reserved_wait_time_seconds_sum", {**CQ, **HIGH}, 5),
    ],
    "kueue_admitted_workloads_total": [
        ("kueue_admitted_workloads_total", {**CQ, **LOW}, 2),
        ("kueue_admitted_workloads_total", {**BF, **NONE}, 2),
    ],
    "kueue_admission_wait_time_seconds": [
        ("kueue_admission_wait_time_seconds_sum", {**CQ, **LOW}, 5 + 103),
        ("kueue_admission_wait_time_seconds_count", {**CQ, **HIGH}, 1),
    ],
    "kueue_admission_checks_wait_time_seconds": [  # no checks: 0 per admission, as Kueue
        ("kueue_admission_checks_wait_time_seconds_count", {**CQ, **LOW}, 2),
        ("kueue_admission_checks_wait_time_seconds_sum", {**CQ, **LOW}, 0),
    ],
    "kueue_ready_wait_time_seconds": [
        ("kueue_ready_wait_time_seconds_sum", {**CQ, **LOW}, 15),  # created 0, ready 15
        ("kueue_ready_wait_time_seconds_sum", {**CQ, **HIGH}, 15),  # created 115, ready 130
    ],
    "kueue_admitted_until_ready_wait_time_seconds": [
        ("kueue_admitted_until_ready_wait_time_seconds_sum", {**CQ, **LOW}, 10),
        ("kueue_admitted_until_ready_wait_time_seconds_sum", {**CQ, **HIGH}, 10),
    ],
    "kueue_evicted_workloads_total": [
        ("kueue_evicted_workloads_total", {**CQ, **LOW, **PREEMPTED}, 2),
    ],
    "kueue_evicted_workloads_once_total": [  # a was preempted twice: its first eviction only
        ("kueue_evicted_workloads_once_total", {**CQ, **LOW, **PREEMPTED}, 1),
    ],
    "kueue_preempted_workloads_total": [
        (
            "kueue_preempted_workloads_total",
            {"preempting_cluster_queue": "cq", "reason": "InClusterQueue", **L},
            2,
        ),
    ],
    "kueue_pods_ready_to_evicted_time_seconds": [
        # the first preemption only: ready at 15 s, evicted at 115 s; the second came before
        # its pods were ready again
        ("kueue_pods_ready_to_evicted_time_seconds_count", {**CQ, **PREEMPTED}, 1),
        ("kueue_pods_ready_to_evicted_time_seconds_sum", {**CQ, **PREEMPTED}, 100),
    ],
    "kueue_workload_eviction_latency_seconds": [
        ("kueue_workload_eviction_latency_seconds_sum", {"reason": "Preempted", **CQ}, 3),
    ],
    "kueue_finished_workloads_total": [
        ("kueue_finished_workloads_total", {**CQ, **HIGH}, 1),
    ],
    "kueue_execution_time_seconds": [  # b: admitted 120 s, finished 220 s
        ("kueue_execution_time_seconds_count", {**CQ, **HIGH}, 1),
        ("kueue_execution_time_seconds_sum", {**CQ, **HIGH}, 100),
    ],
    "kueue_cluster_queue_status": [
        ("kueue_cluster_queue_status", {"status": "active", **CQ}, 1),
        ("kueue_cluster_queue_status", {"status": "pending", **BF}, 0),
    ],
    "kueue_cluster_queue_info": [
        ("kueue_cluster_queue_info", {"parent_cohort": "team", "root_cohort": "team", **CQ}, 1),
        ("kueue_cluster_queue_info", {"parent_cohort": "", "root_cohort": "", **BF}, 1),
    ],
    "kueue_cluster_queue_resource_pending": [
        ("kueue_cluster_queue_resource_pending", {"resource": GPU, **CQ}, 2),  # c
        ("kueue_cluster_queue_resource_pending", {"resource": GPU, **BF}, 8),  # big
    ],
    "kueue_cluster_queue_weighted_share": [  # within its nominal quota: 0
        ("kueue_cluster_queue_weighted_share", {"cohort": "team", **CQ}, 0),
    ],
    "kueue_cluster_queue_resource_usage": [
        ("kueue_cluster_queue_resource_usage", CQ_GPU, 4),
        ("kueue_cluster_queue_resource_usage", BF_GPU, 8),
    ],
    "kueue_cluster_queue_resource_reservation": [
        ("kueue_cluster_queue_resource_reservation", CQ_GPU, 4),
    ],
    "kueue_cluster_queue_nominal_quota": [
        ("kueue_cluster_queue_nominal_quota", CQ_GPU, 4),
        ("kueue_cluster_queue_nominal_quota", BF_GPU, 8),
    ],
    "kueue_cluster_queue_borrowing_limit": [
        ("kueue_cluster_queue_borrowing_limit", CQ_GPU, float("inf")),
    ],
    "kueue_cluster_queue_lending_limit": [
        ("kueue_cluster_queue_lending_limit", CQ_GPU, float("inf")),
    ],
    "kueue_local_queue_pending_workloads": [
        ("kueue_local_queue_pending_workloads", {"status": "active", **LQ}, 1),
        ("kueue_local_queue_pending_workloads", {"status": "inadmissible", **BFLQ}, 1),
    ],
    "kueue_local_queue_reserving_active_workloads": [
        ("kueue_local_queue_reserving_active_workloads", BFLQ, 2),
    ],
    "kueue_local_queue_admitted_active_workloads": [
        ("kueue_local_queue_admitted_active_workloads", LQ, 1),
    ],
    "kueue_local_queue_status": [
        ("kueue_local_queue_status", {"active": "True", **LQ}, 1),
        ("kueue_local_queue_status", {"active": "False", **LQ}, 0),
    ],
    "kueue_local_queue_quota_reserved_workloads_total": [
        ("kueue_local_queue_quota_reserved_workloads_total", {**LQ, **LOW}, 2),
    ],
    "kueue_local_queue_admitted_workloads_total": [
        ("kueue_local_queue_admitted_workloads_total", {**LQ, **HIGH}, 1),
        ("kueue_local_queue_admitted_workloads_total", {**BFLQ, **NONE}, 2),
    ],
    "kueue_local_queue_evicted_workloads_total": [
        ("kueue_local_queue_evicted_workloads_total", {**LQ, **LOW, **PREEMPTED}, 2),
    ],
    "kueue_local_queue_finished_workloads_total": [
        ("kueue_local_queue_finished_workloads_total", {**LQ, **HIGH}, 1),
    ],
    "kueue_local_queue_admission_wait_time_seconds": [
        ("kueue_local_queue_admission_wait_time_seconds_sum", {**LQ, **LOW}, 108),
    ],
    "kueue_local_queue_admission_checks_wait_time_seconds": [
        ("kueue_local_queue_admission_checks_wait_time_seconds_count", {**LQ, **LOW}, 2),
    ],
    "kueue_local_queue_quota_reserved_wait_time_seconds": [
        ("kueue_local_queue_quota_reserved_wait_time_seconds_count", {**LQ, **LOW}, 2),
    ],
    "kueue_local_queue_ready_wait_time_seconds": [
        ("kueue_local_queue_ready_wait_time_seconds_sum", {**LQ, **LOW}, 15),
        ("kueue_local_queue_ready_wait_time_seconds_sum", {**LQ, **HIGH}, 15),
    ],
    "kueue_local_queue_admitted_until_ready_wait_time_seconds": [
        ("kueue_local_queue_admitted_until_ready_wait_time_seconds_sum", {**LQ, **LOW}, 10),
        ("kueue_local_queue_admitted_until_ready_wait_time_seconds_sum", {**LQ, **HIGH}, 10),
    ],
    "atoll_scheduling_cycle_duration_seconds": [  # wall-clock durations: counted only
        ("atoll_scheduling_cycle_duration_seconds_count", {}, 9),
    ],
    "atoll_scheduling_cycle_heads": [("atoll_scheduling_cycle_heads_count", {}, 9)],
    "atoll_unadmitted_jobs_stopped_total": [("atoll_unadmitted_jobs_stopped_total", {}, 1)],
    "atoll_unadmitted_pods_stopped_total": [("atoll_unadmitted_pods_stopped_total", {}, 2)],
    "atoll_gangs_partially_running": [("atoll_gangs_partially_running", {}, 1)],  # a
    "atoll_backfill_reserved_quota": [
        (
            "atoll_backfill_reserved_quota",
            {"cluster_queue": "bf", "flavor": "rf", "resource": GPU},
            8,
        ),
    ],
    "atoll_backfill_reservation_start_seconds": [
        # run's end: admitted at 230 s + its 600 s limit + 15 s grace
        ("atoll_backfill_reservation_start_seconds", {"cluster_queue": "bf"}, T0 + 845),
    ],
    "atoll_backfill_admissions_total": [
        ("atoll_backfill_admissions_total", {"cluster_queue": "bf"}, 1)
    ],
    "atoll_leader": [("atoll_leader", {}, 1)],
    "atoll_build_info": [("atoll_build_info", {"version": "9.9.9"}, 1)],
}


def _value(
    samples: dict[str, list[tuple[dict[str, str], float]]], name: str, labels: Mapping[str, str]
) -> float | None:
    found = [v for have, v in samples.get(name, []) if have == labels]
    assert len(found) <= 1
    return found[0] if found else None


async def test_every_family_has_the_value_the_story_implies() -> None:
    s = await _story()
    declared, samples = s.scrape()

    assert set(EXPECTED) | NOT_IN_THIS_STORY == declared  # no family left unchecked
    wrong = {
        (name, tuple(sorted(labels.items()))): (_value(samples, name, labels), want)
        for rows in EXPECTED.values()
        for name, labels, want in rows
        if _value(samples, name, labels) != want
    }
    assert wrong == {}


def _of_deleted_queues(samples: dict[str, list[tuple[dict[str, str], float]]]) -> set[str]:
    """Names of the samples labelled with cq, bf, lq or bflq."""
    return {
        name
        for name, rows in samples.items()
        for labels, _ in rows
        if labels.get("cluster_queue") in {"cq", "bf"}
        or labels.get("preempting_cluster_queue") == "cq"
        or (labels.get("namespace"), labels.get("name")) in {("ns", "lq"), ("ns", "bflq")}
    }


async def test_the_series_of_deleted_queues_disappear() -> None:
    s = await _story()
    before = _of_deleted_queues(s.scrape()[1])
    assert {
        "atoll_backfill_admissions_total",
        "kueue_evicted_workloads_once_total",
        "kueue_execution_time_seconds_sum",
        "kueue_local_queue_finished_workloads_total",
    } <= before
    for kind, key in (("lq", "ns/lq"), ("lq", "ns/bflq"), ("cq", "cq"), ("cq", "bf")):
        s.cache.delete(kind, key)
    await s.queues.report()
    await s.cycle()  # the operator keeps cycling: nothing of theirs comes back

    assert _of_deleted_queues(s.scrape()[1]) == set()
