"""Kueue's rules for failed, replaced and excess pods of a pod group: the group keeps its
Workload; a replacement pod joins it (as an owner) and is ungated while it is admitted; the
failed pod it stands in for loses its finalizer; pods beyond a pod set's count are deleted;
pods the Workload misses make it `WaitingForReplacementPods`."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from atoll.api.core import Pod
from atoll.api.meta import ObjectMeta
from atoll.api.workload import PodSet, Workload, WorkloadSpec
from atoll.control import podgroups as pg
from atoll.control.jobs import JobController
from atoll.state import lifecycle as lc
from atoll.state import workloads as wls
from tests.control.fakes import FakePods
from tests.control.test_podgroups import NOW, _add, _round, _running, _setup, _sync, pod


def _with(p: Pod, *, phase: str | None = None, deleted: bool = False) -> Pod:
    meta = p.metadata.model_copy(update={"deletion_timestamp": NOW if deleted else None})
    status = p.status.model_copy(update={"phase": phase}) if phase else p.status
    return p.model_copy(update={"metadata": meta, "status": status})


def _waiting(wl: Workload) -> tuple[str, str, str] | None:
    """The Workload's WaitingForReplacementPods condition: (status, reason, message)."""
    c = wls.condition(wl, lc.WAITING_FOR_REPLACEMENT_PODS)
    return None if c is None else (c.status.value, c.reason, c.message)


def _group(*pods: Pod) -> pg.PodGroup:
    group = pg.group_of("ns/g", {p.name: p for p in pods})
    assert group is not None
    return group


def _workload(*pod_sets: PodSet) -> Workload:
    return Workload(
        metadata=ObjectMeta(name="g", namespace="ns"), spec=WorkloadSpec(pod_sets=pod_sets)
    )


async def _admitted_group() -> tuple[JobController, FakePods, list[Pod], str]:
    ctl, fake = _setup()
    pods = [pod(n) for n in "abcd"]
    _add(ctl, *pods)
    await _round(ctl, fake)
    (wl,) = fake.workloads.values()
    assert wls.is_admitted(wl)
    running = [_running(p) for p in pods]
    _add(ctl, *running)
    return ctl, fake, running, wls.wl_key(wl)


async def test_a_replacement_pod_joins_the_groups_workload_and_its_failed_pod_is_released() -> None:
    ctl, fake, running, key = await _admitted_group()
    _add(ctl, _with(running[3], phase="Failed"))
    await ctl.reconcile("ns/g")
    wl = fake.workloads[key]
    assert not wls.is_finished(wl)
    assert _waiting(wl) == ("True", "PodsFailed", "Some Failed pods need replacement")
    assert fake.released == []  # the failed pod is kept until a replacement stands in for it
    before = len(fake.ungated)
    _add(ctl, pod("e"))  # the replacement, gated, same group name
    _sync(ctl, fake)
    await ctl.reconcile("ns/g")
    _sync(ctl, fake)
    assert len(fake.workloads) == 1  # no new Workload
    assert fake.owners_added == [(key, ("e",))]
    assert fake.released == ["ns/d"]
    assert [k for k, _ in fake.ungated[before:]] == ["ns/e"]  # admitted: ungated at once
    wl = fake.workloads[key]
    assert _waiting(wl) == ("False", "PodsReady", "No pods need replacement")
    assert wls.is_admitted(wl)


async def test_a_pod_beyond_the_groups_count_is_deleted() -> None:
    ctl, fake, _running_pods, key = await _admitted_group()
    _add(ctl, pod("e"))  # a fifth pod, gated: excess
    await ctl.reconcile("ns/g")
    assert fake.deleted == ["ns/e"]
    assert fake.released == ["ns/e"]
    assert fake.owners_added == []
    assert len(fake.workloads[key].spec.pod_sets) == 1


async def test_a_group_finishes_once_all_its_pods_succeeded_and_releases_them() -> None:
    ctl, fake, running, key = await _admitted_group()
    _add(ctl, *(_with(p, phase="Succeeded") for p in running))
    await ctl.reconcile("ns/g")
    wl = fake.workloads[key]
    assert wls.is_finished(wl)
    assert sorted(fake.released) == ["ns/a", "ns/b", "ns/c", "ns/d"]


async def test_an_evicted_groups_failed_pods_wait_with_the_evictions_reason() -> None:
    ctl, fake, running, key = await _admitted_group()
    fake.workloads[key] = lc.applied(
        fake.workloads[key], lc.evict("Preempted", "Preempted to fit x", NOW)
    )
    _sync(ctl, fake)
    await ctl.reconcile("ns/g")
    assert sorted(fake.deleted) == ["ns/a", "ns/b", "ns/c", "ns/d"]
    assert sorted(fake.marked) == [  # each marked TerminationTarget before its deletion
        (f"ns/{n}", "WorkloadEvictedDueToPreempted", "Preempted to fit x") for n in "abcd"
    ]
    _add(ctl, *(_with(p, phase="Failed", deleted=True) for p in running))  # kept by finalizer
    _sync(ctl, fake)
    await ctl.reconcile("ns/g")
    _sync(ctl, fake)
    await ctl.reconcile("ns/g")
    wl = fake.workloads[key]
    assert not wls.has_quota(wl)
    assert not wls.is_finished(wl)
    assert _waiting(wl) == ("True", "Preempted", "Preempted to fit x")
    assert fake.released == []


def test_members_keep_the_oldest_running_pods_and_cut_gated_newcomers() -> None:
    base = [_running(pod(n)) for n in "abcd"]
    wl_group = _group(*base)
    wl = _workload(*pg.pod_sets(wl_group))
    found = pg.members(_group(*base, pod("e")), wl)
    assert [p.name for p in found.excess] == ["e"]
    assert found.absent == 0
    failed = _with(base[0], phase="Failed")
    found = pg.members(_group(failed, *base[1:]), wl)
    assert (found.absent, found.released) == (1, ())
    found = pg.members(_group(failed, *base[1:], pod("e")), wl)
    assert [p.name for p in found.released] == ["a"]
    assert sorted(p.name for p in found.kept) == ["b", "c", "d", "e"]


_PHASES = st.sampled_from(["Pending", "Running", "Succeeded", "Failed"])


@given(
    count=st.integers(min_value=1, max_value=5),
    phases=st.lists(st.tuples(_PHASES, st.booleans(), st.booleans()), max_size=9),
)
def test_members_partition_the_pods_and_never_keep_more_runnable_pods_than_counted(
    count: int, phases: list[tuple[str, bool, bool]]
) -> None:
    pods = []
    for i, (phase, is_gated, deleted) in enumerate(phases):
        p = _with(pod(f"p{i}", total=count), phase=phase, deleted=deleted)
        if not is_gated:
            p = _running(p).model_copy(update={"status": p.status})
        pods.append(p)
    if not pods:
        return
    group = _group(*pods)
    template = pg.template_of(pods[0])
    wl = _workload(PodSet(name=pg.role_hash(pods[0]), template=template, count=count))
    found = pg.members(group, wl)
    names = [p.name for p in (*found.kept, *found.excess, *found.released)]
    assert sorted(names) == sorted(p.name for p in pods)  # one role: every pod placed once
    runnable = [p for p in pods if pg.runnable(p)]
    assert sum(1 for p in found.kept if pg.runnable(p)) == min(count, len(runnable))
    assert found.absent == max(0, count - len(runnable))
    assert all(pg.runnable(p) for p in found.excess)
    assert not any(pg.runnable(p) for p in found.released)
    # an ended pod is released only as far as runnable pods stand in for it
    ended = len(pods) - len(runnable)
    assert len(found.released) == max(0, min(ended, ended + len(runnable) - count))


def test_the_replacement_condition_follows_the_missing_pods() -> None:
    wl = _workload(*pg.pod_sets(_group(pod("a"))))
    assert lc.replacement_pods(wl, 0, NOW) is None  # never missed a pod: nothing written
    waiting = lc.applied(wl, _must(lc.replacement_pods(wl, 2, NOW)))
    assert _waiting(waiting) == ("True", "PodsFailed", "Some Failed pods need replacement")
    assert lc.replacement_pods(waiting, 1, NOW + dt.timedelta(seconds=1)) is None
    evicted = lc.applied(
        waiting, lc.set_condition(wls.EVICTED, True, "Preempted", "Preempted to fit x", NOW)
    )
    evicted = lc.applied(evicted, _must(lc.replacement_pods(evicted, 2, NOW)))
    assert _waiting(evicted) == ("True", "Preempted", "Preempted to fit x")
    done = lc.applied(evicted, _must(lc.replacement_pods(evicted, 0, NOW)))
    assert _waiting(done) == ("False", "PodsReady", "No pods need replacement")


def _must(m: lc.Mutation | None) -> lc.Mutation:
    assert m is not None
    return m


def test_a_pods_stamped_role_survives_what_its_start_merges_in() -> None:
    plain = pod("a")
    ann = {**(plain.metadata.annotations or {}), "kueue.x-k8s.io/role-hash": pg.shape_hash(plain)}
    stamped = plain.model_copy(
        update={"metadata": plain.metadata.model_copy(update={"annotations": ann})}
    )
    started = _running(stamped)
    spec = started.spec.model_copy(update={"node_selector": {"pool": "a100"}})
    started = started.model_copy(update={"spec": spec})
    assert pg.shape_hash(started) != pg.shape_hash(plain)  # the shape changed at start
    assert pg.role_hash(started) == pg.role_hash(plain)
    wl = _workload(*pg.pod_sets(_group(stamped)))
    assert pg.members(_group(started), wl).kept == (started,)
