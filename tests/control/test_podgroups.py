"""Plain pods on fakes: a pod group waits, saying how many pods it misses, until all exist;
then it is one Workload named after the group, admitted whole, and all its pods are ungated;
when its Workload is evicted, its running pods are deleted and its quota released."""

from __future__ import annotations

import datetime as dt
from typing import Any

from atoll.api.core import Pod
from atoll.control import podgroups as pg
from atoll.control.integrations import PodGroupIntegration
from atoll.control.jobs import JobController
from atoll.control.scheduler import Scheduler
from atoll.state import convert
from atoll.state import lifecycle as lc
from atoll.state import workloads as wls
from tests.control.builders import GPU, controller_for
from tests.control.fakes import FakePods

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def pod(name: str, *, group: str | None = "g", total: int = 4, gpus: int = 1, **status: Any) -> Pod:
    labels = {"kueue.x-k8s.io/queue-name": "lq", "kueue.x-k8s.io/managed": "true"}
    annotations = {}
    if group:
        labels["kueue.x-k8s.io/pod-group-name"] = group
        annotations["kueue.x-k8s.io/pod-group-total-count"] = str(total)
    return Pod.from_dict(
        {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": f"uid-{name}",
                "finalizers": ["kueue.x-k8s.io/managed"],
                "labels": labels,
                "annotations": annotations,
            },
            "spec": {
                "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}],
                "containers": [
                    {"name": "c", "image": "x", "resources": {"requests": {GPU: str(gpus)}}}
                ],
            },
            "status": status,
        }
    )


def _setup(gpus: int = 8) -> tuple[JobController, FakePods]:
    fake = FakePods()
    return controller_for(PodGroupIntegration(fake), fake, gpus=gpus), fake


async def _round(ctl: JobController, fake: FakePods, key: str = "ns/g") -> None:
    for wl in fake.workloads.values():
        ctl.cache.set_workload(wl)
    await ctl.reconcile(key)
    for wl in fake.workloads.values():
        ctl.cache.set_workload(wl)
    await Scheduler(cache=ctl.cache, store=fake, emit=fake.emit).run_once()
    for wl in fake.workloads.values():
        ctl.cache.set_workload(wl)
    await ctl.reconcile(key)


def _add(ctl: JobController, *pods: Pod) -> None:
    for p in pods:
        ctl.cache.set_group_pod(pg.group_key(p), p)


async def test_an_incomplete_group_waits_and_says_how_many_pods_are_missing() -> None:
    ctl, fake = _setup()
    _add(ctl, pod("a"), pod("b"), pod("c"))
    await _round(ctl, fake)
    assert fake.workloads == {}
    assert fake.ungated == []
    waiting = [e for e in fake.events if e[1] == "WaitingForPods"]
    assert waiting
    assert all("3 of 4 pods exist, 1 missing" in e[2] for e in waiting)


async def test_a_complete_group_is_one_workload_admitted_whole_and_ungated_together() -> None:
    ctl, fake = _setup()
    _add(ctl, pod("a"), pod("b"), pod("c"), pod("d"))
    await _round(ctl, fake)
    (wl,) = fake.workloads.values()
    assert wl.name == "g"
    assert (wl.metadata.annotations or {})["kueue.x-k8s.io/is-group-workload"] == "true"
    assert {r.name for r in wl.metadata.owner_references or ()} == {"a", "b", "c", "d"}
    (ps,) = wl.spec.pod_sets
    assert ps.count == 4
    assert wls.is_admitted(wl)
    assert sorted(k for k, _ in fake.ungated) == ["ns/a", "ns/b", "ns/c", "ns/d"]
    assert all("kueue.x-k8s.io/admission" not in p.scheduling_gates for _, p in fake.ungated)
    assert all(p.labels["kueue.x-k8s.io/podset"] == ps.name for _, p in fake.ungated)


async def test_a_group_beyond_capacity_has_no_pod_ungated() -> None:
    ctl, fake = _setup(gpus=3)
    _add(ctl, pod("a"), pod("b"), pod("c"), pod("d"))
    await _round(ctl, fake)
    (wl,) = fake.workloads.values()
    assert not wls.has_quota(wl)
    assert fake.ungated == []


def test_pods_of_two_shapes_make_two_pod_sets() -> None:
    group = pg.group_of(
        "ns/g", {p.name: p for p in (pod("a"), pod("b"), pod("c", gpus=2), pod("d", gpus=2))}
    )
    assert group is not None
    sets = pg.pod_sets(group)
    assert sorted(s.count for s in sets) == [2, 2]
    assert len({s.name for s in sets}) == 2


async def test_a_single_pod_is_a_gang_of_one() -> None:
    ctl, fake = _setup()
    single = pod("solo", group=None)
    _add(ctl, single)
    await _round(ctl, fake, "ns/solo")
    (wl,) = fake.workloads.values()
    assert wl.name.startswith("pod-solo-")
    assert [(k, p.labels["kueue.x-k8s.io/podset"]) for k, p in fake.ungated] == [
        ("ns/solo", "main")
    ]


def test_the_total_count_must_be_a_positive_integer() -> None:
    bad = pod("a", total=0)
    assert "must be a positive integer" in (pg.total_count_error(bad) or "")
    assert pg.total_count_error(pod("a")) is None


def _group(*pods: Pod) -> pg.PodGroup:
    group = pg.group_of("ns/g", {p.name: p for p in pods})
    assert group is not None
    return group


def test_a_group_finishes_when_as_many_pods_succeeded_as_it_counts() -> None:
    done = [pod(n, total=2, phase="Succeeded") for n in ("a", "b")]
    assert pg.finished(_group(*done)) == (True, "Succeeded", "Pods succeeded: 2/2.")


def test_a_failed_pod_leaves_a_retriable_group_unfinished_waiting_for_its_replacement() -> None:
    group = _group(pod("a", total=2, phase="Succeeded"), pod("b", total=2, phase="Failed"))
    assert pg.finished(group) == (False, "", "")


def test_a_group_with_an_unretriable_pod_finishes_once_none_of_its_pods_runs() -> None:
    unretriable = pod("b", total=3, phase="Failed")
    ann = {**(unretriable.metadata.annotations or {}), "kueue.x-k8s.io/retriable-in-group": "false"}
    unretriable = unretriable.model_copy(
        update={"metadata": unretriable.metadata.model_copy(update={"annotations": ann})}
    )
    running = pod("c", total=3, phase="Running")
    succeeded = pod("a", total=3, phase="Succeeded")
    assert pg.finished(_group(succeeded, unretriable, running))[0] is False
    ended = running.model_copy(
        update={"status": running.status.model_copy(update={"phase": "Failed"})}
    )
    assert pg.finished(_group(succeeded, unretriable, ended)) == (
        True,
        "Succeeded",
        "Pods succeeded: 1/3.",
    )


def test_a_single_pod_finishes_when_it_ends_with_its_own_message() -> None:
    single = pod("solo", group=None, phase="Failed", message="OOMKilled")
    group = pg.group_of("ns/solo", {"solo": single})
    assert group is not None
    assert pg.finished(group) == (True, "Failed", "OOMKilled")
    running = pg.group_of("ns/solo", {"solo": pod("solo", group=None, phase="Running")})
    assert running is not None
    assert pg.finished(running) == (False, "", "")


def _running(p: Pod) -> Pod:
    """The pod as it is once ungated and running."""
    spec = p.spec.model_copy(update={"scheduling_gates": None, "node_name": "n1"})
    return p.model_copy(
        update={"spec": spec, "status": p.status.model_copy(update={"phase": "Running"})}
    )


def _sync(ctl: JobController, fake: FakePods) -> None:
    for wl in fake.workloads.values():
        ctl.cache.set_workload(wl)


async def test_an_evicted_group_has_its_running_pods_deleted_and_its_quota_released() -> None:
    ctl, fake = _setup()
    pods = [pod("a"), pod("b"), pod("c"), pod("d")]
    _add(ctl, *pods)
    await _round(ctl, fake)
    (wl,) = fake.workloads.values()
    assert wls.is_admitted(wl)
    done = _running(pods[3]).model_copy(
        update={"status": pods[3].status.model_copy(update={"phase": "Succeeded"})}
    )
    _add(ctl, *(_running(p) for p in pods[:3]), done)
    key = wls.wl_key(wl)
    fake.workloads[key] = lc.applied(wl, lc.evict("Preempted", "Preempted to fit x", NOW))
    _sync(ctl, fake)
    assert await ctl.reconcile("ns/g") == 1.0  # pods deleted; quota held until they go
    assert sorted(fake.deleted) == ["ns/a", "ns/b", "ns/c"]  # not the one that ended
    assert wls.has_quota(fake.workloads[key])
    assert any(e[1] == "Stopped" and "Preempted to fit x" in e[2] for e in fake.events)
    for p in pods[:3]:  # the API server marks them deleted
        meta = p.metadata.model_copy(update={"deletion_timestamp": NOW})
        _add(ctl, _running(p).model_copy(update={"metadata": meta}))
    await ctl.reconcile("ns/g")
    released = fake.workloads[key]
    assert not wls.has_quota(released)
    assert not wls.is_finished(released)
    assert len(fake.deleted) == 3  # nothing deleted twice
    for p in pods:  # all gone: the Workload ends with its owners
        ctl.cache.delete_group_pod("ns/g", p.name)
    await ctl.reconcile("ns/g")
    assert wls.is_finished(fake.workloads[key])


async def test_a_stopped_group_leaves_its_gated_pods_alone() -> None:
    ctl, fake = _setup()
    pods = [pod("a"), pod("b"), pod("c"), pod("d")]
    _add(ctl, *pods)
    await _round(ctl, fake)
    (wl,) = fake.workloads.values()
    _add(ctl, _running(pods[0]))  # only one was ungated so far
    group = pg.group_of("ns/g", ctl.cache.pod_groups["ns/g"])
    assert group is not None
    await PodGroupIntegration(fake).stop(group, wl)
    assert fake.deleted == ["ns/a"]


def test_start_keeps_the_topology_gate_only_for_a_topology_assignment() -> None:
    gates = ("example.com/other", "kueue.x-k8s.io/admission", "kueue.x-k8s.io/topology")
    assert pg.start_gates(gates, topology=True) == ("example.com/other", "kueue.x-k8s.io/topology")
    assert pg.start_gates(gates, topology=False) == ("example.com/other",)


def test_only_a_pod_that_asks_for_a_topology_is_created_with_the_topology_gate() -> None:
    plain = pod("a")  # already carries the admission gate
    assert pg.creation_gates(plain) == ()
    for key in (
        "kueue.x-k8s.io/podset-required-topology",
        "kueue.x-k8s.io/podset-preferred-topology",
        "kueue.x-k8s.io/podset-unconstrained-topology",
        "kueue.x-k8s.io/podset-slice-required-topology",
    ):
        meta = plain.metadata.model_copy(update={"annotations": {key: "rack"}})
        asking = plain.model_copy(update={"metadata": meta})
        assert pg.creation_gates(asking) == ("kueue.x-k8s.io/topology",), key
        spec = asking.spec.model_copy(update={"scheduling_gates": None})
        bare = asking.model_copy(update={"spec": spec})
        assert pg.creation_gates(bare) == ("kueue.x-k8s.io/admission", "kueue.x-k8s.io/topology")


def _succeeded(p: Pod) -> Pod:
    return _running(p).model_copy(
        update={"status": p.status.model_copy(update={"phase": "Succeeded"})}
    )


def test_succeeded_pods_of_a_group_are_reclaimable_per_role() -> None:
    """Kueue's reclaimable pods of a pod group: its Succeeded pods, counted per role; none
    for a single pod or a serving group."""
    one, two = pod("a"), pod("c", gpus=2)
    group = _group(_succeeded(one), pod("b"), _succeeded(two), _succeeded(pod("d", gpus=2)))
    got = {str(p.name): p.count for p in pg.reclaimable_pods(group)}
    assert got == {pg.role_hash(one): 1, pg.role_hash(two): 2}
    assert pg.reclaimable_pods(_group(pod("a"), pod("b"))) == ()  # none succeeded
    solo = pod("solo", group=None, phase="Succeeded")
    single = pg.group_of("ns/solo", {"solo": solo})
    assert single is not None
    assert pg.reclaimable_pods(single) == ()
    serving = _succeeded(pod("e")).model_copy(deep=True)
    (serving.metadata.annotations or {})["kueue.x-k8s.io/pod-group-serving"] = "true"
    assert pg.reclaimable_pods(_group(serving, pod("f"))) == ()


async def test_a_running_groups_succeeded_pod_gives_its_quota_back() -> None:
    ctl, fake = _setup()
    pods = [pod("a", gpus=2), pod("b", gpus=2), pod("c", gpus=2), pod("d", gpus=2)]
    _add(ctl, *pods)
    await _round(ctl, fake)
    (wl,) = fake.workloads.values()
    assert wls.is_admitted(wl)
    _add(ctl, *(_running(p) for p in pods[1:]), _succeeded(pods[0]))
    await ctl.reconcile("ns/g")
    key = wls.wl_key(wl)
    reclaimable = fake.workloads[key].status.reclaimable_pods
    assert [(p.name, p.count) for p in reclaimable or ()] == [(pg.role_hash(pods[0]), 1)]
    assert not wls.is_finished(fake.workloads[key])
    adm = convert.admission(fake.workloads[key])
    assert adm is not None
    (ps,) = adm.pod_sets
    assert dict(ps.resource_usage)[GPU] == 6  # charged for the 3 pods × 2 GPUs left
