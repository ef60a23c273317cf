"""The Workload lifecycle (state/lifecycle.py): the status changes the operator writes and the
simulator applies, with Kueue's conditions, reasons and messages."""

from __future__ import annotations

import datetime as dt

import pytest

from atoll.api.workload import ReclaimablePod, Workload
from atoll.engine import decisions as d
from atoll.engine import model as m
from atoll.engine.snapshot import usage_of
from atoll.state import convert
from atoll.state import lifecycle as lc
from atoll.state import workloads as wls
from tests.control.builders import gpu_admit, job, workload_for

T0 = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def _admitted(at: dt.datetime = T0) -> Workload:
    wl = workload_for(job("a", pods=2))
    return lc.applied(wl, lc.admit(gpu_admit(wls.wl_key(wl)), at))


def _later(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def test_admit_reserves_quota_and_admits_with_kueues_messages() -> None:
    wl = _admitted()
    assert wls.is_admitted(wl)
    reserved, admitted = wls.condition(wl, wls.QUOTA_RESERVED), wls.condition(wl, wls.ADMITTED)
    assert reserved is not None
    assert reserved.message == "Quota reserved in ClusterQueue cq"
    assert admitted is not None
    assert admitted.message == "The workload is admitted"
    assert lc.admit(_decision_of(wl), _later(1))(wl) is None  # admitted once


@pytest.mark.parametrize(
    ("reason", "requeued"),
    [
        pytest.param("Preempted", True, id="preempted-requeued-at-once"),
        pytest.param("NodeFailures", True, id="node-failures-requeued-at-once"),
        pytest.param("ClusterQueueStopped", False, id="stopped-waits-for-the-next-pass"),
        pytest.param("PodsReadyTimeout", False, id="timeout-waits-for-the-backoff"),
    ],
)
def test_release_clears_the_admission_and_requeues_by_the_eviction_reason(
    reason: str, requeued: bool
) -> None:
    wl = lc.applied(_admitted(), lc.evict(reason, f"because {reason}", _later(5)))
    released = lc.applied(wl, lc.release(_later(6)))
    assert not wls.has_quota(released)
    assert released.status.admission is None
    cond = wls.condition(released, wls.REQUEUED)
    assert cond is not None
    assert cond.reason == reason
    assert cond.message == f"because {reason}"
    assert wls.is_true(released, wls.REQUEUED) is requeued
    reserved = wls.condition(released, wls.QUOTA_RESERVED)
    assert reserved is not None
    assert reserved.reason == "Pending"  # Kueue's, as its job reconciler releases quota
    assert reserved.message == f"because {reason}"  # and the eviction's message
    admitted = wls.condition(released, wls.ADMITTED)
    assert admitted is not None
    assert admitted.message == lc.NO_RESERVATION_MESSAGE


def test_readmission_turns_the_eviction_into_previously() -> None:
    wl = lc.applied(_admitted(), lc.evict("Preempted", "by b", _later(5), preempted_reason="X"))
    wl = lc.applied(wl, lc.release(_later(6)))
    dec_wl = _admitted(_later(7))
    again = lc.applied(wl, lc.admit(_decision_of(dec_wl), _later(7)))
    evicted = wls.condition(again, wls.EVICTED)
    assert evicted is not None
    assert not wls.is_true(again, wls.EVICTED)
    assert evicted.message == "Previously: by b"


def _decision_of(wl: Workload) -> d.Admit:
    adm = wl.status.admission
    assert adm is not None
    (ps,) = adm.pod_set_assignments
    return d.Admit(
        workload=m.WorkloadKey(wls.wl_key(wl)),
        cluster_queue=m.ClusterQueueName(adm.cluster_queue),
        pod_sets=(
            d.PodSetAdmission(
                name=m.PodSetName(str(ps.name)),
                flavors=tuple((m.ResourceName(r), m.FlavorName(f)) for r, f in ps.flavors.items()),
                resource_usage=((m.ResourceName("nvidia.com/gpu"), 2),),
                count=ps.count or 0,
            ),
        ),
        borrowing=False,
    )


def test_pods_ready_timeouts_back_off_exponentially_then_requeue() -> None:
    wl = _admitted()
    delays = []
    for n in range(1, 5):
        now = _later(100 * n)
        wl = lc.applied(wl, lc.pods_ready_timeout(now))
        evicted = wls.condition(wl, wls.EVICTED)
        assert evicted is not None
        assert evicted.message == lc.pods_ready_timeout_message(wls.wl_key(wl))
        rs = lc.backoff(wl, now, base=60, cap=300)
        wl = lc.applied(wl, lc.release(now, backoff=rs))
        assert wls.is_false(wl, wls.REQUEUED)
        assert rs.count == n
        assert rs.requeue_at is not None
        delays.append((rs.requeue_at - now).total_seconds())
        wl = lc.applied(wl, lc.requeue(rs.requeue_at))
        cond = wls.condition(wl, wls.REQUEUED)
        assert cond is not None
        assert cond.reason == lc.BACKOFF_FINISHED
        assert wls.is_true(wl, cond.type)
        assert wl.status.requeue_state is not None
        assert wl.status.requeue_state.requeue_at is None
        wl = lc.applied(wl, lc.admit(_decision_of(_admitted()), _later(100 * n + 50)))
    assert delays == [60, 120, 240, 300]


@pytest.mark.parametrize(
    ("timeouts", "limit", "exceeded"),
    [
        pytest.param(2, None, False, id="no-limit"),
        pytest.param(2, 2, False, id="at-the-limit"),
        pytest.param(3, 2, True, id="past-the-limit"),
    ],
)
def test_past_backoff_limit_count_timeouts_the_workload_is_deactivated(
    timeouts: int, limit: int | None, exceeded: bool
) -> None:
    wl = _admitted()
    for n in range(timeouts):
        if n:
            wl = lc.applied(wl, lc.admit(_decision_of(_admitted()), _later(n)))
        wl = lc.applied(wl, lc.pods_ready_timeout(_later(n)))
        wl = lc.applied(wl, lc.release(_later(n), backoff=lc.backoff(wl, _later(n), 1, 10)))
    assert wl.status.requeue_state is not None
    assert wl.status.requeue_state.count == timeouts
    assert lc.requeuing_limit_exceeded(wl, limit) is exceeded
    assert not lc.requeuing_limit_exceeded(lc.deactivated(wl), 0)  # once is enough


def test_a_deactivation_is_evicted_with_its_cause() -> None:
    target = lc.deactivation_target(
        lc.REQUEUING_LIMIT_EXCEEDED, lc.REQUEUING_LIMIT_EXCEEDED_MESSAGE, _later(1)
    )
    wl = lc.deactivated(lc.applied(_admitted(), target))
    reason, message = lc.eviction_cause(wl, "Deactivated", "The workload is deactivated")
    assert reason == "DeactivatedDueToRequeuingLimitExceeded"
    assert message == (
        "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
    )
    evicted = lc.applied(wl, lc.evict(reason, message, _later(2)))
    assert wls.condition(evicted, wls.DEACTIVATION_TARGET) is None
    assert lc.eviction_cause(_admitted(), "Deactivated", "m") == ("Deactivated", "m")


def _stats(wl: Workload) -> set[tuple[str, str, int]]:
    stats = wl.status.scheduling_stats
    return (
        {(e.reason, e.underlying_cause, e.count) for e in (stats.evictions or ())}
        if stats
        else set()
    )


def test_evictions_are_counted_by_kueues_reason_and_cause() -> None:
    """`schedulingStats.evictions` (what `kueue_evicted_workloads_once_total` reads): a
    PodsReady timeout has the PodsReady reason as cause, a deactivation with a cause is
    `Deactivated` with it; a second eviction for the same pair counts 2."""
    wl = _admitted()
    wl = lc.applied(wl, lc.set_condition(wls.PODS_READY, False, "WaitForStart", "m", _later(1)))
    for n in (1, 2):
        wl = lc.applied(wl, lc.pods_ready_timeout(_later(10 * n)))
        assert lc.eviction_labels(wl, lc.PODS_READY_TIMEOUT) == ("PodsReadyTimeout", "WaitForStart")
        assert wls.eviction_count(wl, "PodsReadyTimeout", "WaitForStart") == n
        wl = lc.applied(wl, lc.release(_later(10 * n + 1)))
        wl = lc.applied(wl, lc.admit(_decision_of(_admitted()), _later(10 * n + 2)))
    wl = lc.applied(wl, lc.evict("Preempted", "m", _later(30), preempted_reason="InClusterQueue"))
    wl = lc.applied(wl, lc.release(_later(31)))
    wl = lc.applied(wl, lc.admit(_decision_of(_admitted()), _later(32)))
    target = lc.deactivation_target(lc.REQUEUING_LIMIT_EXCEEDED, "m", _later(33))
    wl = lc.deactivated(lc.applied(wl, target))
    reason, message = lc.eviction_cause(wl, "Deactivated", "The workload is deactivated")
    wl = lc.applied(wl, lc.evict(reason, message, _later(34)))
    assert lc.eviction_labels(wl, reason) == ("Deactivated", "RequeuingLimitExceeded")
    assert _stats(wl) == {
        ("PodsReadyTimeout", "WaitForStart", 2),
        ("Preempted", "", 1),
        ("Deactivated", "RequeuingLimitExceeded", 1),
    }
    assert lc.evict("Preempted", "m", _later(35))(wl) is None  # already evicted: not counted


def test_pods_ready_timeout_cause_without_a_pods_ready_condition_is_wait_for_start() -> None:
    """Kueue's cause of a PodsReady timeout is `WaitForStart` when the Workload has no
    PodsReady condition (the simulator never writes one) or its reason is `PodsReady`;
    `WaitForRecovery` while waiting for recovery."""
    wl = _admitted()
    assert wls.condition(wl, wls.PODS_READY) is None
    assert lc.eviction_labels(wl, lc.PODS_READY_TIMEOUT) == ("PodsReadyTimeout", "WaitForStart")
    evicted = lc.applied(wl, lc.pods_ready_timeout(_later(10)))
    assert _stats(evicted) == {("PodsReadyTimeout", "WaitForStart", 1)}
    old = lc.applied(wl, lc.set_condition(wls.PODS_READY, False, "PodsReady", "m", _later(1)))
    assert lc.eviction_labels(old, lc.PODS_READY_TIMEOUT) == ("PodsReadyTimeout", "WaitForStart")
    rec = lc.applied(wl, lc.set_condition(wls.PODS_READY, False, "WaitForRecovery", "m", _later(1)))
    assert lc.eviction_labels(rec, lc.PODS_READY_TIMEOUT) == (
        "PodsReadyTimeout",
        "WaitForRecovery",
    )


def test_execution_time_adds_every_admission_up_to_the_finish() -> None:
    """`kueue_execution_time_seconds`: 100 s admitted, evicted (Preempted), then 40 s more
    until the Job finished; kept without `maximumExecutionTimeSeconds` too."""
    wl = _admitted()
    assert wl.spec.maximum_execution_time_seconds is None
    wl = lc.applied(wl, lc.evict("Preempted", "m", _later(100), preempted_reason="InClusterQueue"))
    wl = lc.applied(wl, lc.release(_later(103)))
    assert wl.status.accumulated_past_execution_time_seconds == 100
    wl = lc.applied(wl, lc.admit(_decision_of(_admitted()), _later(200)))
    assert wls.execution_time(wl) is None  # not finished
    wl = lc.applied(wl, lc.finish("Succeeded", "Job finished", _later(240)))
    assert wls.execution_time(wl) == 140


def test_finish_is_written_once() -> None:
    wl = lc.applied(_admitted(), lc.finish("Succeeded", "Job finished", _later(1)))
    assert wls.is_finished(wl)
    assert lc.finish(lc.OWNER_NOT_FOUND, lc.OWNER_NOT_FOUND_MESSAGE, _later(2))(wl) is None


SKIPPED = "Workload no longer fits after processing another workload"
QUOTA = d.PendingReason.WAITING_FOR_QUOTA
NO_FIT = (
    "couldn't assign flavors to pod set main: insufficient unused quota for "
    "nvidia.com/gpu in flavor gpu, 2 more needed"
)


def test_pending_writes_exactly_when_the_quota_reserved_condition_changes() -> None:
    """Kueue's requeueAndUpdate patches a not-nominated or skipped entry only when
    UnsetQuotaReservationWithCondition changes the QuotaReserved condition (status, reason
    or message): the same message again writes nothing; a skipped entry's message, or only
    a number in it, is a change and is written."""
    wl = workload_for(job("a", pods=2))
    first = lc.pending(QUOTA, NO_FIT, T0)
    told = lc.applied(wl, first)
    assert lc.pending(QUOTA, NO_FIT, _later(1))(told) is None
    skipped = lc.pending(QUOTA, SKIPPED, _later(1))(told)
    assert skipped is not None
    condition = next(c for c in skipped.conditions or () if c.type == wls.QUOTA_RESERVED)
    assert (condition.reason, condition.message) == ("Pending", SKIPPED)
    fewer = NO_FIT.replace("2 more", "1 more")
    assert lc.pending(QUOTA, fewer, _later(2))(told) is not None


@pytest.mark.parametrize(
    ("reason", "written"),
    [
        # Kueue's scheduler (requeueAndUpdate): every entry it tried and left pending
        (d.PendingReason.PENDING_EVALUATION, "Pending"),
        (d.PendingReason.WAITING_FOR_QUOTA, "Pending"),
        (d.PendingReason.EXCEEDS_MAX_QUOTA, "Pending"),
        (d.PendingReason.NO_MATCHING_FLAVOR, "Pending"),
        (d.PendingReason.WAITING_FOR_PREEMPTED_WORKLOADS, "Pending"),
        (d.PendingReason.TOPOLOGY_PLACEMENT_FAILED, "Pending"),
        (d.PendingReason.NAMESPACE_MISMATCH, "Pending"),
        # Kueue's workload controller (WorkloadInadmissible): kept out of the queues
        (d.PendingReason.MISCONFIGURED, "Inadmissible"),
        (d.PendingReason.SUSPENDED, "Inadmissible"),
        (d.PendingReason.DEACTIVATED, "Inadmissible"),
    ],
    ids=lambda v: v.value if isinstance(v, d.PendingReason) else v,
)
def test_a_pending_workload_is_written_with_kueues_reason_not_atolls(
    reason: d.PendingReason, written: str
) -> None:
    """Dashboards and alerts that match Kueue's QuotaReserved reasons match atoll's: the
    engine's finer reason is atoll's own (explain, what-if), the condition says Kueue's."""
    assert lc.written_reason(reason) == written
    wl = lc.applied(workload_for(job("a", pods=2)), lc.pending(reason, "why", T0))
    cond = wls.condition(wl, wls.QUOTA_RESERVED)
    assert cond is not None
    assert (cond.status.value, cond.reason, cond.message) == ("False", written, "why")


def test_every_pending_reason_has_a_written_reason() -> None:
    assert set(lc.WRITTEN_REASONS) == set(d.PendingReason)
    assert set(lc.WRITTEN_REASONS.values()) == {"Pending", "Inadmissible"}


def test_pending_never_writes_over_a_reservation() -> None:
    wl = _admitted()
    assert lc.pending(QUOTA, SKIPPED, _later(1))(wl) is None


def _reclaimable(wl: Workload, **counts: int) -> Workload:
    pods = tuple(ReclaimablePod(name=name, count=n) for name, n in counts.items())
    return lc.applied(wl, lc.reclaimable(pods))


def test_reclaimable_pods_are_written_limited_to_the_pod_set_and_only_when_they_change() -> None:
    wl = _admitted()  # pod set main: 2 pods
    one = _reclaimable(wl, main=1)
    assert wls.reclaimable_counts(one.status.reclaimable_pods) == {"main": 1}
    assert lc.reclaimable((ReclaimablePod(name="main", count=1),))(one) is None
    capped = _reclaimable(wl, main=5)  # a Job's count beyond a smaller pod set
    assert wls.reclaimable_counts(capped.status.reclaimable_pods) == {"main": 2}
    assert _reclaimable(one).status.reclaimable_pods is None  # none any more: cleared
    # a name that is no pod set of the Workload (a group's role it never counted) is left out
    assert _reclaimable(wl, other=1).status.reclaimable_pods is None
    mixed = _reclaimable(wl, other=1, main=1)
    assert wls.reclaimable_counts(mixed.status.reclaimable_pods) == {"main": 1}


def test_the_admission_charges_only_the_pods_not_reclaimable() -> None:
    # 2 pods × 1 GPU admitted (usage 2): one pod done for good leaves 1 GPU held; Kueue
    # scales the admission's usage by the pods left over the pods admitted
    wl = _admitted()
    adm = convert.admission(wl)
    assert adm is not None
    assert usage_of(adm) == {("gpu", "nvidia.com/gpu"): 2}
    for counts, held in (({"main": 1}, 1), ({"main": 2}, 0), ({"other": 2}, 2)):
        scaled = convert.admission(_reclaimable(wl, **counts))
        assert scaled is not None
        assert usage_of(scaled).get(("gpu", "nvidia.com/gpu"), 0) == held
        assert scaled.pod_sets[0].count == 2  # the pods admitted stay as written
