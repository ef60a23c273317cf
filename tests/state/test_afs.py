"""Admission Fair Sharing: the LocalQueues' usage (decay, penalties, the scalar that orders
a queue), the cache's queue order, and the simulator's stories."""

from __future__ import annotations

import datetime as dt
import math

from hypothesis import given
from hypothesis import strategies as st

from atoll.api.localqueue import LocalQueue
from atoll.api.resourceflavor import ResourceFlavor
from atoll.api.workload import Workload
from atoll.control.explain import explain
from atoll.control.queue_status import Tally, local_queue_status
from atoll.sim.gang import GangSimulator, Settings
from atoll.sim.results import SimResult
from atoll.sim.scenario import Scenario
from atoll.state import afs
from atoll.state import lifecycle as lc
from atoll.state import workloads as wls
from atoll.state.cache import Cache
from atoll.state.decide import Decider, admission_of
from tests.control.builders import cluster_queue as cq_builder
from tests.control.builders import gpu_admit, workload_for
from tests.control.builders import job as cj
from tests.sim.builders import cluster_queue, flavor, job, local_queue, nodes, scenario

MIN = 60.0
AFS_SCOPE = {"admissionMode": "UsageBasedAdmissionFairSharing"}


def tracker(
    half_life: float = 10 * MIN, sampling: float = 5 * MIN, **weights: float
) -> afs.Tracker:
    return afs.Tracker(afs.Settings(half_life=half_life, sampling=sampling, weights=weights))


def sampled(old_cpu: int, running_cpu: int, half_life: float, elapsed: float) -> dict[str, int]:
    """A LocalQueue that consumed `old_cpu` cores, sampled `elapsed` seconds later with
    `running_cpu` cores admitted (milli-units)."""
    t = tracker(half_life=half_life, sampling=5 * MIN)
    t.seed("ns/a", {"cpu": old_cpu * 1000}, 0.0)
    if running_cpu:
        t.set_admitted("ns/w", "ns/a", {"cpu": running_cpu * 1000})
    t.due(["ns/a"], elapsed)
    return t.consumed["ns/a"]


def test_the_decay_gives_kueues_worked_examples() -> None:
    """Kueue's LocalQueue controller tests: 8 cores consumed, sampled after 5 minutes."""
    assert sampled(8, 0, 5 * MIN, 5 * MIN) == {"cpu": 4000}
    assert sampled(8, 4, 5 * MIN, 5 * MIN) == {"cpu": 6000}
    assert sampled(8, 4, 10 * MIN, 5 * MIN) == {"cpu": 6827}  # truncated per term
    assert sampled(8, 0, 24 * 60 * MIN, 5 * MIN) == {"cpu": 7980}
    assert sampled(8, 4, 0.0, 5 * MIN) == {}  # a half-life of 0 forgets at each sample


def test_a_sample_waits_for_the_sampling_interval() -> None:
    t = tracker(half_life=5 * MIN, sampling=5 * MIN)
    t.seed("ns/a", {"cpu": 8000}, 0.0)
    t.due(["ns/a"], 4 * MIN)
    assert t.consumed["ns/a"] == {"cpu": 8000}
    assert t.next_due() == 5 * MIN
    t.due(["ns/a"], 5 * MIN)
    assert t.consumed["ns/a"] == {"cpu": 4000}
    assert t.written["ns/a"] == ({"cpu": 4000}, 5 * MIN)


def test_a_new_localqueue_starts_from_what_it_holds() -> None:
    t = tracker()
    t.set_admitted("ns/w", "ns/a", {"cpu": 2000, "nvidia.com/gpu": 8000})
    t.due(["ns/a", "ns/b"], 100.0)
    assert t.consumed == {"ns/a": {"cpu": 2000, "nvidia.com/gpu": 8000}, "ns/b": {}}
    assert t.last_update == {"ns/a": 100.0, "ns/b": 100.0}
    assert t.sampled


def test_the_entry_penalty_is_charged_then_settled_or_dropped() -> None:
    """Kueue's scheduler test: 4 cores at a 10 s half-life and 1 s sampling interval give a
    penalty of 4·(1 − 0.5^0.1) ≈ 0.268 cores; it moves into the consumed resources at
    admission, and goes if the workload loses its quota before."""
    t = tracker(half_life=10.0, sampling=1.0)
    t.due(["ns/a"], 0.0)
    t.charge("ns/w1", "ns/a", {"cpu": 4000})
    assert t.penalties == {"ns/a": {"cpu": 267}}
    assert t.amounts("ns/a") == {"cpu": 267}
    t.settle("ns/w1", 0.0)
    assert t.penalties == {}
    assert t.consumed["ns/a"] == {"cpu": 267}
    t.charge("ns/w2", "ns/a", {"cpu": 4000})
    t.drop("ns/w2")
    assert t.penalties == {}
    assert t.charged == {}
    assert t.amounts("ns/a") == {"cpu": 267}


def test_the_usage_weighs_resources_and_divides_by_the_localqueue_weight() -> None:
    """Kueue's queue tests: weights {cpu: 0, gpu: 1} make {cpu 1, gpu 10} the larger usage
    against {cpu 1000, gpu 1}; 10 at weight 1 is more than 6 at weight 2."""
    weights = {"cpu": 0.0, "nvidia.com/gpu": 1.0}
    a = afs.scalar({"cpu": 1000, "nvidia.com/gpu": 10_000}, weights, 1.0)
    b = afs.scalar({"cpu": 1_000_000, "nvidia.com/gpu": 1000}, weights, 1.0)
    assert (a, b) == (10.0, 1.0)
    assert afs.scalar({"cpu": 10_000}, {}, 1.0) > afs.scalar({"cpu": 6000}, {}, 2.0)
    assert afs.scalar({"cpu": 1000}, {}, 0.0) == math.inf
    assert afs.scalar({}, {}, 0.0) == -math.inf  # Go's NaN: before every other value


@given(
    old=st.integers(min_value=0, max_value=10**9),
    running=st.integers(min_value=0, max_value=10**9),
    elapsed=st.floats(min_value=0, max_value=10**6),
    half_life=st.floats(min_value=1, max_value=10**6),
)
def test_a_decayed_usage_lies_between_the_old_and_the_running(
    old: int, running: int, elapsed: float, half_life: float
) -> None:
    """Each sample is a weighted mean of the old usage and what is admitted now (within the
    two truncations to a milli-unit)."""
    new = afs.decayed({"cpu": old}, {"cpu": running}, elapsed, half_life).get("cpu", 0)
    assert min(old, running) - 2 <= new <= max(old, running)


def test_the_localqueue_status_shows_the_last_sample() -> None:
    lq = LocalQueue.from_dict(
        {"metadata": {"name": "a", "namespace": "ns"}, "spec": {"clusterQueue": "cq"}}
    )
    now = dt.datetime(2026, 12, 7, tzinfo=dt.UTC)
    status = local_queue_status(lq, Tally(), True, now, ({"cpu": 6827, "memory": 2000}, 60.0))
    assert status.fair_sharing is not None
    body = status.fair_sharing.admission_fair_sharing_status
    assert body is not None
    assert {r: str(q) for r, q in body.consumed_resources.items()} == {
        "cpu": "6827m",
        "memory": "2",
    }
    assert body.last_update == dt.datetime(1970, 1, 1, 0, 1, tzinfo=dt.UTC)
    assert local_queue_status(lq, Tally(), True, now).fair_sharing is None


# -- the simulator: the operator's step on a virtual clock ------------------------------
def _config(**afs_config: object) -> dict[str, object]:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "admissionFairSharing": afs_config,
    }


def _two_queues(*jobs: dict[str, object], config: dict[str, object] | None = None) -> Scenario:
    docs: list[object] = [
        nodes(2, 4),
        flavor(),
        cluster_queue(gpus=4, admissionScope=AFS_SCOPE),
        local_queue("a"),
        local_queue("b"),
        *jobs,
    ]
    if config is not None:
        docs.append(config)
    return scenario(*docs)  # type: ignore[arg-type]


def _admitted(result: SimResult) -> list[str]:
    """Job names in the order they were first admitted."""
    records = [r for r in result.jobs if r.admitted is not None]
    return [r.name.split("/")[1] for r in sorted(records, key=lambda r: (r.admitted, r.name))]


def _run(scn: Scenario) -> SimResult:
    return GangSimulator(scn, Settings()).run()


def test_a_localqueue_that_used_less_goes_first() -> None:
    """LocalQueue `a` ran a 4-GPU gang for 20 minutes; when it ends, `a`'s next Job waits
    behind `b`'s, although created first. Without `admissionFairSharing` in the
    Configuration the older one goes first."""
    jobs = (
        job("a-1", pods=4, arrival=0, duration="20m", queue="a"),
        job("a-2", pods=4, arrival=60, duration="1m", queue="a"),
        job("b-1", pods=4, arrival=120, duration="1m", queue="b"),
    )
    fair = _run(_two_queues(*jobs, config=_config(usageHalfLifeTime="10m")))
    assert _admitted(fair) == ["a-1", "b-1", "a-2"]
    plain = _run(_two_queues(*jobs))
    assert _admitted(plain) == ["a-1", "a-2", "b-1"]


def test_the_entry_penalty_alternates_localqueues_with_equal_usage() -> None:
    """Both LocalQueues start unused; each admission's penalty sends the next turn to the
    other queue (Kueue's "one workload from each LocalQueue"), where FIFO would run all of
    `a`'s first. The whole quota is one Job at a time."""
    jobs = (
        job("a-1", pods=4, arrival=0, duration="1m", queue="a"),
        job("a-2", pods=4, arrival=1, duration="1m", queue="a"),
        job("a-3", pods=4, arrival=2, duration="1m", queue="a"),
        job("b-1", pods=4, arrival=3, duration="1m", queue="b"),
        job("b-2", pods=4, arrival=4, duration="1m", queue="b"),
    )
    fair = _run(
        _two_queues(*jobs, config=_config(usageHalfLifeTime="10m", usageSamplingInterval="1m"))
    )
    assert _admitted(fair) == ["a-1", "b-1", "a-2", "b-2", "a-3"]
    assert _admitted(_run(_two_queues(*jobs))) == ["a-1", "a-2", "a-3", "b-1", "b-2"]


# -- the cache: what the operator's and the simulator's steps read -----------------------
NOW = 1_796_000_000.0


def _afs_cache(**lq_status: dict[str, object]) -> Cache:
    """A ClusterQueue `cq` of 8 GPUs with the admission scope, LocalQueues `lq-a` and `lq-b`
    in `ns` (with the status given for each), Admission Fair Sharing configured."""
    cache = Cache(afs=tracker(half_life=10 * MIN, sampling=MIN))
    cache.set_flavor(ResourceFlavor.from_dict({"metadata": {"name": "rf"}}))
    cache.set_cluster_queue(cq_builder("cq", gpus=8, admissionScope=AFS_SCOPE))
    for name in ("a", "b"):
        raw: dict[str, object] = {
            "metadata": {"name": f"lq-{name}", "namespace": "ns"},
            "spec": {"clusterQueue": "cq"},
        }
        if name in lq_status:
            raw["status"] = lq_status[name]
        cache.set_local_queue(LocalQueue.from_dict(raw))
    cache.set_namespace("ns", {"kubernetes.io/metadata.name": "ns"})
    return cache


def _pending(cache: Cache, name: str, lq: str, created: str) -> Workload:
    raw = workload_for(cj(name, pods=2), created=created).to_dict()
    raw["metadata"]["namespace"] = "ns"
    raw["spec"]["queueName"] = lq
    wl = Workload.from_dict(raw)
    cache.set_workload(wl)
    return wl


def _head(cache: Cache, now: float = NOW) -> str:
    ((_, w),) = cache.queue_heads(now)
    return str(w.key)


def test_after_a_restart_the_usage_is_read_back_from_the_localqueue_status() -> None:
    """`lq-a`'s status says it consumed 8 GPUs one half-life ago: its older Workload waits
    behind `lq-b`'s; the next sample decays from that value."""
    written = dt.datetime.fromtimestamp(NOW - 10 * MIN, dt.UTC)
    status = {
        "fairSharing": {
            "weightedShare": 0,
            "admissionFairSharingStatus": {
                "consumedResources": {"nvidia.com/gpu": "8"},
                "lastUpdate": written.isoformat().replace("+00:00", "Z"),
            },
        }
    }
    cache = _afs_cache(a=status)
    _pending(cache, "old", "lq-a", "2026-11-01T00:00:00Z")
    new = _pending(cache, "new", "lq-b", "2026-11-02T00:00:00Z")
    assert _head(cache) == wls.wl_key(new)
    assert cache.afs is not None
    assert cache.afs.consumed["ns/lq-a"] == {"nvidia.com/gpu": 4000}


def test_an_admission_charges_a_penalty_that_a_failed_write_takes_back() -> None:
    cache = _afs_cache()
    first = _pending(cache, "first", "lq-a", "2026-11-01T00:00:00Z")
    _pending(cache, "second", "lq-a", "2026-11-02T00:00:00Z")
    other = _pending(cache, "other", "lq-b", "2026-11-03T00:00:00Z")
    key = wls.wl_key(first)
    assert _head(cache) == key
    admit = gpu_admit(key, gpus=2, flavor="rf")
    cache.assume(key, admission_of(admit))
    assert cache.lq_usage("ns/lq-a") > 0  # 2 GPUs × (1 − 0.5^(1/10))
    assert _head(cache) == wls.wl_key(other)  # lq-b used less now
    cache.forget(key)
    assert cache.lq_usage("ns/lq-a") == 0
    assert _head(cache) == key


def test_the_penalty_settles_into_the_usage_when_the_workload_is_admitted() -> None:
    cache = _afs_cache()
    wl = _pending(cache, "w", "lq-a", "2026-11-01T00:00:00Z")
    _head(cache)
    key = wls.wl_key(wl)
    admit = gpu_admit(key, gpus=2, flavor="rf")
    cache.assume(key, admission_of(admit))
    assert cache.afs is not None
    penalty = cache.afs.penalties["ns/lq-a"]
    at = dt.datetime.fromtimestamp(NOW, dt.UTC)
    status = lc.admit(admit, at)(wl)
    assert status is not None
    cache.set_workload(wl.model_copy(update={"status": status}))
    assert cache.afs.penalties == {}
    assert cache.afs.consumed["ns/lq-a"] == penalty
    assert cache.afs.admitted == {"ns/lq-a": {"nvidia.com/gpu": 2000}}
    # the next sample, a minute on, moves the usage towards the 2 GPUs it holds
    cache.queue_heads(NOW + MIN)
    assert penalty["nvidia.com/gpu"] < cache.afs.consumed["ns/lq-a"]["nvidia.com/gpu"] < 2000


def test_the_snapshot_carries_the_usages_and_changes_with_them() -> None:
    """Preemption orders a ClusterQueue's candidates by their LocalQueue's usage: the
    snapshot has it, and a new usage (a penalty, a sample) makes a new snapshot."""
    cache = _afs_cache()
    wl = _pending(cache, "w", "lq-a", "2026-11-01T00:00:00Z")
    _head(cache)
    first = cache.snapshot()
    assert dict(first.lq_usage) == {"ns/lq-a": 0.0, "ns/lq-b": 0.0}
    assert cache.snapshot() is first
    key = wls.wl_key(wl)
    cache.assume(key, admission_of(gpu_admit(key, gpus=2, flavor="rf")))
    second = cache.snapshot()
    assert second.lq_usage["ns/lq-a"] == cache.lq_usage("ns/lq-a") > 0
    assert second.lq_usage["ns/lq-b"] == 0.0
    assert Cache().snapshot().lq_usage == {}  # without Admission Fair Sharing


def test_explain_shows_the_usage_and_the_order_it_gives() -> None:
    """`lq-a` used 8 GPUs: its older Workload is second, behind `lq-b`'s, and explain says
    why."""
    written = dt.datetime.fromtimestamp(NOW, dt.UTC).isoformat().replace("+00:00", "Z")
    status = {
        "fairSharing": {
            "weightedShare": 0,
            "admissionFairSharingStatus": {
                "consumedResources": {"nvidia.com/gpu": "8"},
                "lastUpdate": written,
            },
        }
    }
    cache = _afs_cache(a=status)
    old = _pending(cache, "old", "lq-a", "2026-11-01T00:00:00Z")
    new = _pending(cache, "new", "lq-b", "2026-11-02T00:00:00Z")
    ex = explain(cache, wls.wl_key(old), NOW)
    assert (ex.position, ex.ahead) == (2, (wls.wl_key(new),))
    assert ex.queue_usage == 8.0
    assert "Admission Fair Sharing, LocalQueue usage 8" in ex.describe()
    assert ex.to_json()["localQueueUsage"] == 8.0
    assert explain(cache, wls.wl_key(new), NOW).queue_usage == 0.0


def test_a_half_life_of_zero_orders_nothing() -> None:
    """Kueue's default `usageHalfLifeTime` of 0: no penalty, and every sample (the first
    one too) resets the usage, so the queue keeps priority and age order."""
    t = tracker(half_life=0.0, sampling=MIN)
    t.set_admitted("ns/w", "ns/a", {"cpu": 4000})
    t.due(["ns/a"], 0.0)
    t.charge("ns/w2", "ns/a", {"cpu": 4000})
    assert t.amounts("ns/a") == {}
    assert t.usage("ns/a", 1.0) == 0.0


def test_a_localqueue_of_weight_zero_goes_first_unused_and_last_used() -> None:
    cache = _afs_cache()
    raw = {
        "metadata": {"name": "lq-a", "namespace": "ns"},
        "spec": {"clusterQueue": "cq", "fairSharing": {"weight": "0"}},
    }
    cache.set_local_queue(LocalQueue.from_dict(raw))
    zero = _pending(cache, "zero", "lq-a", "2026-11-02T00:00:00Z")
    one = _pending(cache, "one", "lq-b", "2026-11-01T00:00:00Z")
    assert _head(cache) == wls.wl_key(zero)  # unused: before everything
    assert cache.afs is not None
    cache.afs.seed("ns/lq-a", {"cpu": 1}, NOW + 1)  # newer than its sample at NOW
    assert cache.lq_usage("ns/lq-a") == math.inf
    assert _head(cache) == wls.wl_key(one)


def test_the_operators_timer_waits_for_the_next_sample_and_a_deleted_queue_is_forgotten() -> None:
    cache = _afs_cache()
    wl = _pending(cache, "w", "lq-a", "2026-11-01T00:00:00Z")
    Decider(cache).decide(NOW)
    assert cache.next_requeue(NOW) == NOW + MIN  # both LocalQueues sampled at NOW
    key = wls.wl_key(wl)
    cache.assume(key, admission_of(gpu_admit(key, gpus=2, flavor="rf")))
    assert cache.afs is not None
    assert cache.afs.charged
    cache.delete("lq", "ns/lq-a")
    assert "ns/lq-a" not in cache.afs.last_update
    assert not cache.afs.charged
    assert cache.lq_usage("ns/lq-a") == 0.0
    Decider(cache).decide(NOW)  # the step the deletion asks for
    assert cache.next_requeue(NOW) == NOW + MIN  # lq-b's
    cache.delete_workload(key)
    assert cache.afs.admitted == {}


def test_the_simulator_samples_on_time_between_events() -> None:
    """The operator's timer samples every interval; so does the simulator, between its
    events: a Job that ran 100 s of a 60 s interval counts in the sample at 60 s."""
    jobs = (
        job("a-1", pods=4, arrival=0, duration="100s", queue="a"),
        job("b-1", pods=4, arrival=200, duration="1m", queue="b"),
    )
    sim = GangSimulator(
        _two_queues(*jobs, config=_config(usageHalfLifeTime="10m", usageSamplingInterval="1m")),
        Settings(),
    )
    sim.run()
    tracker_ = sim.cache.afs
    assert tracker_ is not None
    a = tracker_.consumed["default/a"]["nvidia.com/gpu"]
    # sampled at 60 s with a-1's 4 GPUs admitted (437 milli-GPUs at 200 s), not only after
    # it ended at 100 s: then only its entry penalty (267) would be left, decayed (212)
    assert a > 4000 * afs.alpha(60, 600)


def test_the_simulation_ends_with_a_job_that_never_fits() -> None:
    """Samples are events only while something holds quota: a Job larger than the quota
    waits for good without keeping the simulation going."""
    jobs = (
        job("a-1", pods=2, arrival=0, duration="1m", queue="a"),
        job("b-1", pods=5, arrival=0, duration="1m", queue="b"),
    )
    result = _run(_two_queues(*jobs, config=_config(usageHalfLifeTime="10m")))
    assert _admitted(result) == ["a-1"]
    assert result.end == _run(_two_queues(*jobs)).end == 61.0  # the requeue after a-1


def test_a_configuration_without_an_ordered_clusterqueue_changes_nothing() -> None:
    """`admissionFairSharing` configured, but no ClusterQueue asks for it: the simulation is
    the same as without it (the samples are taken, and are no events)."""
    docs: list[object] = [
        nodes(2, 4),
        flavor(),
        cluster_queue(gpus=4),
        local_queue("a"),
        local_queue("b"),
        job("a-1", pods=4, arrival=0, duration="20m", queue="a"),
        job("a-2", pods=4, arrival=60, duration="1m", queue="a"),
        job("b-1", pods=4, arrival=120, duration="1m", queue="b"),
    ]
    plain = _run(scenario(*docs))  # type: ignore[arg-type]
    configured = _run(scenario(*docs, _config(usageHalfLifeTime="10m")))  # type: ignore[arg-type]
    assert configured.to_json() == plain.to_json()
