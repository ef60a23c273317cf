"""What atoll tells about a pod group's pods, as Kueue does: a pod deleted to stop its group
first gets the `TerminationTarget` condition saying why; an excess pod's deletion and a
replacement pod joining the Workload are Events; pods of one group that disagree on the
total count or the queue name get no Workload, with a Warning naming the key and the rule."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from atoll.api.core import Pod
from atoll.control import podgroups as pg
from atoll.control.integrations import PodGroupIntegration
from atoll.state import lifecycle as lc
from atoll.state import workloads as wls
from tests.control.test_podgroup_replacements import _admitted_group, _with
from tests.control.test_podgroups import NOW, _add, _round, _setup, _sync, pod


def _relabel(p: Pod, **labels: str) -> Pod:
    meta = p.metadata.model_copy(update={"labels": {**(p.metadata.labels or {}), **labels}})
    return p.model_copy(update={"metadata": meta})


def _group(*pods: Pod) -> pg.PodGroup:
    group = pg.group_of("ns/g", {p.name: p for p in pods})
    assert group is not None
    return group


# -- TerminationTarget ---------------------------------------------------------------------


async def test_the_termination_target_says_why_the_group_stops() -> None:
    _ctl, fake, _pods, key = await _admitted_group()
    wl = fake.workloads[key]
    assert pg.termination_target(None) == ("NoMatchingWorkload", "No matching Workload")
    assert pg.termination_target(wl) == ("NoMatchingWorkload", "No matching Workload")
    evicted = lc.applied(wl, lc.evict("Preempted", "Preempted to fit x", NOW))
    assert pg.termination_target(evicted) == (
        "WorkloadEvictedDueToPreempted",
        "Preempted to fit x",
    )
    deactivated = lc.applied(wl, lc.evict("Deactivated", "The workload is deactivated", NOW))
    assert pg.termination_target(deactivated)[0] == "WorkloadEvictedDueToDeactivated"
    meta = wl.metadata.model_copy(update={"deletion_timestamp": NOW})
    deleting = wl.model_copy(update={"metadata": meta})
    assert pg.termination_target(deleting)[0] == "WorkloadDeleted"
    pending = wl.model_copy(update={"status": wl.status.model_copy(update={"conditions": ()})})
    assert not wls.is_admitted(pending)
    assert pg.termination_target(pending) == ("NotAdmitted", "Not admitted by cluster queue")


async def test_a_gated_pod_left_by_a_stop_is_not_marked() -> None:
    ctl, fake, running, key = await _admitted_group()
    gated = pod("a")
    _add(ctl, gated)
    group = _group(gated, *running[1:])
    await PodGroupIntegration(fake).stop(group, fake.workloads[key])
    assert [m[0] for m in fake.marked] == sorted(fake.deleted) == ["ns/b", "ns/c", "ns/d"]


# -- Events --------------------------------------------------------------------------------


async def test_an_excess_pods_deletion_is_an_event_on_the_pod() -> None:
    ctl, fake, _pods, _key = await _admitted_group()
    _add(ctl, pod("e"))
    await ctl.reconcile("ns/g")
    assert fake.deleted == ["ns/e"]
    assert fake.marked == []  # Kueue marks only the pods of a stopped group
    excess = [e for e in fake.events if e[1] == "ExcessPodDeleted"]
    assert [e[0] for e in excess] == ["Pod/ns/e"]


async def test_a_replacement_joining_the_workload_is_an_event_on_the_workload() -> None:
    ctl, fake, running, key = await _admitted_group()
    _add(ctl, _with(running[3], phase="Failed"))
    await ctl.reconcile("ns/g")
    assert not [e for e in fake.events if e[1] == "OwnerReferencesAdded"]
    _add(ctl, pod("e"))
    _sync(ctl, fake)
    await ctl.reconcile("ns/g")
    added = [e for e in fake.events if e[1] == "OwnerReferencesAdded"]
    assert len(added) == 1
    assert added[0][0] == f"Workload/{key}"
    assert "1 pod(s)" in added[0][2]
    assert "e" in added[0][2]


# -- Consistency ---------------------------------------------------------------------------


def test_pods_that_disagree_on_the_total_count_name_the_annotation_and_the_rule() -> None:
    why = pg.inconsistency(_group(pod("a", total=2), pod("b", total=3)))
    assert why is not None
    assert "kueue.x-k8s.io/pod-group-total-count" in why
    assert "'2' != '3'" in why
    assert "same group size" in why


def test_pods_that_disagree_on_the_queue_name_the_label_and_the_rule() -> None:
    other = _relabel(pod("b", total=2), **{"kueue.x-k8s.io/queue-name": "other"})
    why = pg.inconsistency(_group(pod("a", total=2), other))
    assert why is not None
    assert "label kueue.x-k8s.io/queue-name" in why
    assert "same queue" in why


def test_a_failed_pod_does_not_count_against_consistency() -> None:
    failed = _with(pod("a", total=3), phase="Failed")
    assert pg.inconsistency(_group(failed, pod("b", total=2), pod("c", total=2))) is None


@given(st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=5))
def test_a_group_is_consistent_exactly_when_its_live_pods_agree(totals: list[int]) -> None:
    group = _group(*(pod(f"p{i}", total=t) for i, t in enumerate(totals)))
    assert (pg.inconsistency(group) is None) == (len(set(totals)) == 1)


async def test_an_inconsistent_group_gets_no_workload_and_a_warning() -> None:
    ctl, fake = _setup()
    _add(ctl, pod("a", total=2), pod("b", total=3), pod("c", total=3))
    await _round(ctl, fake)
    assert fake.workloads == {}
    assert fake.ungated == []
    warnings = [e for e in fake.events if e[1] == "ErrWorkloadCompose"]
    assert warnings
    assert all("kueue.x-k8s.io/pod-group-total-count" in e[2] for e in warnings)
