"""`atoll explain` on a cache: position, reason, counterfactuals checked by the engine, and
the start estimate from running the loop forward."""

from __future__ import annotations

import datetime as dt
from typing import Any

from atoll.api.clusterqueue import ClusterQueue
from atoll.api.core import Job
from atoll.api.localqueue import LocalQueue
from atoll.api.resourceflavor import ResourceFlavor
from atoll.api.workload import Workload
from atoll.control.explain import explain
from atoll.engine import decisions as d
from atoll.state import lifecycle as adm
from atoll.state import workloads as wls
from atoll.state.cache import Cache
from atoll.state.decide import Decider
from atoll.state.whatif import ask
from tests.control import builders as b

T0 = dt.datetime(2026, 12, 1, 0, 10, tzinfo=dt.UTC)
NOW = T0.timestamp()


def _job(name: str, *, pods: int, run: str | None = None, **kw: Any) -> Job:
    j = b.job(name, pods=pods, **kw)
    if run is not None:
        raw = j.to_dict()
        raw["metadata"]["annotations"] = {"atoll.dev/run-duration": run}
        j = Job.from_dict(raw)
    return j


def _submit(cache: Cache, j: Job, *, created: str = "2026-12-01T00:00:00Z") -> str:
    cache.set_job(j)
    wl = b.workload_for(j, created=created)
    cache.set_workload(wl)
    return wls.wl_key(wl)


def _admit(cache: Cache, key: str, at: dt.datetime = T0) -> None:
    """Admit `key` as the scheduler would, and write its status."""
    dec = ask(Decider(cache), key, at.timestamp()).decision
    assert isinstance(dec, d.Admit), dec
    wl = cache.workloads[key]
    status = adm.admit(dec, at)(wl)
    assert status is not None
    raw = wl.model_copy(update={"status": status}).to_dict()
    raw["metadata"]["resourceVersion"] = str(int(raw["metadata"]["resourceVersion"]) + 1)
    cache.set_workload(Workload.from_dict(raw))


def _running(cache: Cache, name: str, pods: int, run: str | None) -> str:
    key = _submit(cache, _job(name, pods=pods, run=run))
    _admit(cache, key)
    return key


def test_pending_for_quota_says_position_quota_finish_and_estimate() -> None:
    cache = b.cache_with_queue(gpus=8)
    short = _running(cache, "short", 4, "60s")
    _running(cache, "long", 4, "1h")
    key = _submit(cache, _job("next", pods=4, run="5m"), created="2026-12-01T00:05:00Z")
    ex = explain(cache, key, NOW)
    assert ex.state == "Pending"
    assert (ex.cluster_queue, ex.position, ex.queue_length, ex.ahead) == ("cq", 1, 1, ())
    assert isinstance(ex.decision, d.Pending)
    assert ex.decision.reason is d.PendingReason.WAITING_FOR_QUOTA
    kinds = {c.kind: c for c in ex.counterfactuals}
    assert kinds["quota"].detail["nominalQuota"] == [
        {"flavor": "rf", "resource": "nvidia.com/gpu", "now": "8", "needed": "12"}
    ]
    assert "nominalQuota of nvidia.com/gpu in flavor rf were 12 (now 8)" in kinds["quota"].text
    # the shorter of the two running Jobs is enough, and is the one named
    assert [w["workload"] for w in kinds["finish"].detail["workloads"]] == [short]
    assert kinds["finish"].text == f"would fit after {short} finishes"
    # admitted at T0, runs 60 s: the estimate is T0 + 60 s
    assert ex.estimate is not None
    assert ex.estimate.at == NOW + 60
    text = ex.describe()
    assert "position: 1 of 1 pending" in text
    assert "start estimate: in about 60s" in text
    assert ex.to_json()["estimate"]["inSeconds"] == 60


def test_the_workloads_ahead_and_an_estimate_through_them() -> None:
    cache = b.cache_with_queue(gpus=4)
    _running(cache, "a", 4, "2m")
    first = _submit(cache, _job("first", pods=4, run="3m"), created="2026-12-01T00:01:00Z")
    key = _submit(cache, _job("second", pods=4, run="1m"), created="2026-12-01T00:02:00Z")
    ex = explain(cache, key, NOW)
    assert (ex.position, ex.queue_length, ex.ahead) == (2, 2, (first,))
    # the same shape as first: the step parks first and tells second first's failure at once
    assert ex.is_head
    assert isinstance(ex.decision, d.Pending)
    # a ends at +2 min, then first runs 3 min: second starts at +5 min
    assert ex.estimate is not None
    assert ex.estimate.at == NOW + 300
    assert "ahead of it: ns/job-first" in ex.describe()


def test_no_estimate_when_what_runs_has_no_run_time() -> None:
    cache = b.cache_with_queue(gpus=4)
    blocker = _running(cache, "forever", 4, None)
    key = _submit(cache, _job("next", pods=2, run="1m"))
    ex = explain(cache, key, NOW)
    assert ex.estimate is not None
    assert ex.estimate.at is None
    assert blocker in ex.estimate.note
    assert "run time is unknown" in ex.estimate.note
    assert "cannot estimate" in ex.describe()


def test_a_gang_bigger_than_any_quota_gets_no_finish_hint_and_no_estimate() -> None:
    cache = b.cache_with_queue(gpus=4)
    key = _submit(cache, _job("huge", pods=8, run="1m"))
    ex = explain(cache, key, NOW)
    kinds = {c.kind for c in ex.counterfactuals}
    assert "finish" not in kinds
    assert "quota" in kinds
    assert ex.estimate is not None
    assert ex.estimate.at is None
    assert "never fits" in ex.estimate.note


def test_another_local_queue_that_would_admit_it_now() -> None:
    cache = b.cache_with_queue(gpus=4)
    cache.set_cluster_queue(b.cluster_queue("spare", gpus=8))
    cache.set_local_queue(
        LocalQueue.from_dict(
            {"metadata": {"name": "spare-q", "namespace": "ns"}, "spec": {"clusterQueue": "spare"}}
        )
    )
    _running(cache, "a", 4, "1m")
    key = _submit(cache, _job("next", pods=4, run="1m"))
    ex = explain(cache, key, NOW)
    queue = [c for c in ex.counterfactuals if c.kind == "queue"]
    assert [c.detail["clusterQueue"] for c in queue] == ["spare"]
    assert "through LocalQueue spare-q" in queue[0].text


def test_preemption_is_the_next_cycle_answer_and_estimate_is_now() -> None:
    cache = b.cache_with_queue(gpus=4, preemption={"withinClusterQueue": "LowerPriority"})
    low = _running(cache, "low", 4, None)
    j = _job("vip", pods=4, run="1m")
    cache.set_job(j)
    wl = b.workload_for(j, priority=100)
    cache.set_workload(wl)
    ex = explain(cache, wls.wl_key(wl), NOW)
    assert isinstance(ex.decision, d.Preempt)
    assert [v.workload for v in ex.decision.victims] == [low]
    assert ex.counterfactuals == ()
    # the victim is requeued and the preemptor admitted at once
    assert ex.estimate is not None
    assert ex.estimate.at == NOW


def test_an_admitted_workload_is_described_and_the_cache_is_unchanged() -> None:
    cache = b.cache_with_queue(gpus=8)
    key = _running(cache, "a", 4, "1m")
    pending = _submit(cache, _job("b", pods=8, run="1m"))
    before = (dict(cache.workloads), dict(cache.assumed), set(cache.evicting))
    ex = explain(cache, key, NOW)
    assert (ex.state, ex.cluster_queue, ex.position, ex.decision) == ("Admitted", "cq", None, None)
    explain(cache, pending, NOW)
    assert (dict(cache.workloads), dict(cache.assumed), set(cache.evicting)) == before


def test_what_each_flavor_lacks() -> None:
    cache = b.cache_with_queue(gpus=4)
    cache.set_flavor(ResourceFlavor.from_dict({"metadata": {"name": "spot"}}))
    cq = b.cluster_queue(gpus=4)
    raw = cq.to_dict()
    group = raw["spec"]["resourceGroups"][0]
    group["flavors"].append({"name": "spot", "resources": [{"name": b.GPU, "nominalQuota": 2}]})
    cache.set_cluster_queue(ClusterQueue.from_dict(raw))
    _running(cache, "a", 3, "1m")  # rf: 1 free; spot: 2 free
    key = _submit(cache, _job("next", pods=3, run="1m"))
    ex = explain(cache, key, NOW)
    lacks = {c.detail["flavor"]: c.text for c in ex.counterfactuals if c.kind == "flavor"}
    assert lacks == {
        "rf": "on flavor rf it lacks 2 more nvidia.com/gpu (needs 3, free 1)",
        "spot": "on flavor spot it lacks 1 more nvidia.com/gpu (needs 3, free 2)",
    }


def test_explain_shows_the_reservation_of_a_backfill_queue_head() -> None:
    cache = b.cache_with_queue(gpus=8)
    cq = b.cluster_queue(gpus=8)
    meta = cq.metadata.model_copy(update={"annotations": {"atoll.dev/backfill": "true"}})
    cache.set_cluster_queue(cq.model_copy(update={"metadata": meta}))
    _running(cache, "busy", 6, "5m")
    key = _submit(cache, _job("big", pods=8, run="1h"), created="2026-12-01T00:05:00Z")
    ex = explain(cache, key, NOW)
    assert ex.reservation is not None
    assert ex.reservation.start == NOW + 300  # the running Job's run-duration hint
    assert "reservation: reserved 8 nvidia.com/gpu in rf from 00:15Z, in 5m" in ex.describe()
    assert ex.to_json()["reservation"]["start"] == NOW + 300
    plain = b.cache_with_queue(gpus=8)
    _running(plain, "busy", 6, "5m")
    key = _submit(plain, _job("big", pods=8, run="1h"), created="2026-12-01T00:05:00Z")
    assert explain(plain, key, NOW).reservation is None


def test_no_finish_hint_when_a_parked_workload_ahead_takes_the_room_first() -> None:
    """BestEffortFIFO: first (8 GPUs) and then second (4) were tried and parked. When long
    finishes, first is woken and admitted before second: "second would fit after long
    finishes" would be wrong, and the estimate goes through first's run."""
    cache = b.cache_with_queue(gpus=8)
    _running(cache, "long", 8, "1h")
    first = _submit(cache, _job("first", pods=8, run="10m"), created="2026-12-01T00:01:00Z")
    key = _submit(cache, _job("second", pods=4, run="1m"), created="2026-12-01T00:02:00Z")
    step = Decider(cache)
    while step.decide(NOW) and step.parked:
        pass
    assert {first, key} <= set(cache.parked_keys())
    ex = explain(cache, key, NOW)
    assert ex.ahead == ()  # first is parked: not ahead in the next step
    assert isinstance(ex.decision, d.Pending)
    assert "finish" not in {c.kind for c in ex.counterfactuals}
    assert ex.estimate is not None
    assert ex.estimate.at == NOW + 3600 + 600


def _limited(name: str, pods: int, seconds: int) -> Job:
    """A Job whose only run bound is Kueue's max-exec-time-seconds label."""
    raw = b.job(name, pods=pods).to_dict()
    raw["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] = str(seconds)
    return Job.from_dict(raw)


def test_the_estimate_of_a_reserved_workload_goes_through_its_reservation() -> None:
    """The Job in the way has only maximumExecutionTimeSeconds: the estimate counts it (as
    the reservation does) and says from when the quota is reserved; without backfill the
    same estimate has no reservation to name."""
    for backfill in (True, False):
        cache = b.cache_with_queue(gpus=8)
        if backfill:
            cq = b.cluster_queue(gpus=8)
            meta = cq.metadata.model_copy(update={"annotations": {"atoll.dev/backfill": "true"}})
            cache.set_cluster_queue(cq.model_copy(update={"metadata": meta}))
        busy = _submit(cache, _limited("busy", 6, 600))
        _admit(cache, busy)
        key = _submit(cache, _job("big", pods=8), created="2026-12-01T00:05:00Z")
        ex = explain(cache, key, NOW)
        assert ex.estimate is not None
        assert ex.estimate.at == NOW + 600  # busy's limit, from its admission at NOW
        reserved = "its reservation starts from 00:20Z, in 10m (guaranteed" in ex.estimate.note
        assert reserved is backfill
        if backfill:
            assert ex.reservation is not None
            assert ex.reservation.start == NOW + 600 + 15  # plus the default grace
            assert "start estimate: in about 10m00s" in ex.describe()


def test_a_workload_waiting_for_its_admission_checks_says_which_and_how_they_stand() -> None:
    cache = b.cache_with_queue(admissionChecksStrategy={"admissionChecks": [{"name": "capacity"}]})
    cache.set_admission_check(b.admission_check("capacity"))
    key = _submit(cache, _job("a", pods=2))
    dec = ask(Decider(cache), key, NOW).decision
    assert isinstance(dec, d.Admit), dec
    wl = cache.workloads[key]
    status = adm.admit(dec, T0, None, ("capacity",))(wl)
    assert status is not None
    raw = wl.model_copy(update={"status": status}).to_dict()
    raw["metadata"]["resourceVersion"] = "2"
    cache.set_workload(Workload.from_dict(raw))
    told = explain(cache, key, NOW)
    assert told.state == "QuotaReserved"
    assert told.condition == (
        "UnsatisfiedChecks",
        "quota reserved; waiting for admission checks: capacity Pending",
    )
    assert "reason: UnsatisfiedChecks: quota reserved; waiting for admission checks" in (
        told.describe()
    )
