"""The queue gauges tell what the operator wrote into queue statuses: a scripted sequence
on the fakes (admit, pend, finish, delete the queues), then every queue family read back
from the registry."""

from __future__ import annotations

import datetime as dt

from prometheus_client import CollectorRegistry

from atoll.api.cohort import Cohort
from atoll.control.metrics import Metrics
from atoll.control.queue_status import QueueStatusReporter
from atoll.control.scheduler import Scheduler
from atoll.state import workloads as wls
from atoll.state.cache import Cache
from tests.control.builders import cache_with_queue, cluster_queue, job, workload_for
from tests.control.fakes import FakeCluster

NOW = 1_796_000_000.0
GPU = "nvidia.com/gpu"
ROLE = {"replica_role": "standalone"}
CQ = {"cluster_queue": "cq", **ROLE}
LQ = {"name": "lq", "namespace": "ns", **ROLE}


def _with_condition(cache: Cache, fake: FakeCluster, key: str, type_: str, reason: str) -> None:
    wl = fake.workloads[key]
    at = dt.datetime.fromtimestamp(NOW, dt.UTC)
    conds = wls.with_condition(
        wl.status.conditions or (), type_, status=type_ == wls.FINISHED, reason=reason,
        message=reason, now=at,
    )  # fmt: skip
    fake.workloads[key] = wl.model_copy(update={"status": wls.status_with(wl, conditions=conds)})
    cache.set_workload(fake.workloads[key])


async def _scenario() -> tuple[Cache, FakeCluster, QueueStatusReporter, CollectorRegistry]:
    """cq (4 GPUs) and lender (4 GPUs) in cohort team, under org. Job a (6 GPUs) borrows 2
    and is admitted, its pods not ready yet; b (4) waits; c ran earlier and finished."""
    cache = cache_with_queue(4, cohortName="team")
    cache.set_cluster_queue(cluster_queue("lender", 4, cohortName="team"))
    cache.set_cohort(
        Cohort.from_dict({"metadata": {"name": "team"}, "spec": {"parentName": "org"}})
    )
    cache.set_cohort(Cohort.from_dict({"metadata": {"name": "org"}}))
    fake = FakeCluster()
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    sched = Scheduler(cache=cache, store=fake, emit=fake.emit, clock=lambda: NOW, metrics=metrics)
    keys = {}
    for name, pods in (("c", 1), ("a", 6), ("b", 4)):
        created = await fake.create_workload(workload_for(job(name, pods=pods)))
        cache.set_workload(created)
        keys[name] = wls.wl_key(created)
        await sched.run_once()
        if name == "c":
            _with_condition(cache, fake, keys["c"], wls.FINISHED, "Succeeded")
    _with_condition(cache, fake, keys["a"], wls.PODS_READY, "WaitForStart")
    reporter = QueueStatusReporter(cache, fake, lambda: NOW, metrics, fair_sharing=True)
    await reporter.report()
    return cache, fake, reporter, registry


async def test_every_queue_family_reports_what_the_statuses_say() -> None:
    _, fake, _, registry = await _scenario()

    def value(metric: str, /, **labels: str) -> float | None:
        return registry.get_sample_value(metric, labels)

    running = [
        k for k, wl in fake.workloads.items() if wls.is_admitted(wl) and not wls.is_finished(wl)
    ]
    assert [k.split("-")[1] for k in running] == ["a"]
    pending = [value("kueue_pending_workloads", status=s, **CQ) for s in ("active", "inadmissible")]
    assert sum(p or 0 for p in pending) == 1  # b
    assert value("kueue_reserving_active_workloads", **CQ) == 1  # a
    assert value("kueue_admitted_active_workloads", **CQ) == 1
    assert value("kueue_finished_workloads", **CQ) == 1  # c
    info = {"parent_cohort": "team", "root_cohort": "org", **CQ}
    assert value("kueue_cluster_queue_info", **info) == 1
    assert value("kueue_cluster_queue_resource_pending", resource=GPU, **CQ) == 4
    # a uses 6 of cq's 4: 2 borrowed of the 8 the cohort could lend it = 250 per mille
    assert value("kueue_cluster_queue_weighted_share", cohort="team", **CQ) == 250
    assert (
        value("kueue_cluster_queue_weighted_share", cohort="team", cluster_queue="lender", **ROLE)
        == 0
    )
    lq_pending = [
        value("kueue_local_queue_pending_workloads", status=s, **LQ)
        for s in ("active", "inadmissible")
    ]
    assert sum(p or 0 for p in lq_pending) == 1
    assert value("kueue_local_queue_reserving_active_workloads", **LQ) == 1
    assert value("kueue_local_queue_admitted_active_workloads", **LQ) == 1
    assert value("kueue_local_queue_status", active="True", **LQ) == 1
    assert value("kueue_local_queue_status", active="False", **LQ) == 0
    assert value("atoll_gangs_partially_running") == 1  # a: admitted, PodsReady=False


async def test_the_series_of_a_deleted_queue_disappear() -> None:
    cache, _, reporter, registry = await _scenario()
    cache.delete("lq", "ns/lq")
    cache.delete("cq", "cq")
    await reporter.report()
    names = {
        s.name: s.labels
        for family in registry.collect()
        for s in family.samples
        if s.labels.get("cluster_queue") == "cq"
        or (s.labels.get("name"), s.labels.get("namespace")) == ("lq", "ns")
    }
    assert names == {}
    lender = registry.get_sample_value("kueue_cluster_queue_info", {
        "cluster_queue": "lender", "parent_cohort": "team", "root_cohort": "org", **ROLE,
    })  # fmt: skip
    assert lender == 1
