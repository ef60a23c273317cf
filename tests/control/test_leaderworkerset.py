"""LeaderWorkerSets on fakes: each replica group is one Workload (Kueue's name, owner and
annotations, pod sets from the LWS spec), queued before its pods exist, admitted whole and its
pods ungated together; a group beyond the quota keeps all its pods gated; a stopped group's
running pods are deleted; a group scaled away loses its Workload."""

from __future__ import annotations

from typing import Any

import pytest

from atoll.api.core import Pod
from atoll.api.leaderworkerset import LeaderWorkerSet
from atoll.control import jobframework as jf
from atoll.control import leaderworkerset as lws
from atoll.control.integrations import LeaderWorkerSetIntegration
from atoll.control.jobs import JobController
from atoll.control.scheduler import Scheduler
from atoll.state import workloads as wls
from tests.control.builders import GPU, controller_for
from tests.control.fakes import FakePods

GATE = "kueue.x-k8s.io/admission"
PARENT = "kueue.x-k8s.io/pod-suspending-parent"


def leaderworkerset(
    name: str = "serve", *, replicas: int = 2, size: int = 4, leader: bool = True, gpus: int = 1
) -> LeaderWorkerSet:
    def template(role: str) -> dict[str, Any]:
        return {
            "metadata": {
                "labels": {"role": role, "leaderworkerset.sigs.k8s.io/worker-index": "0"},
                "annotations": {PARENT: lws.FRAMEWORK},
            },
            "spec": {
                "containers": [
                    {"name": role, "image": "x", "resources": {"requests": {GPU: str(gpus)}}}
                ]
            },
        }

    lwt: dict[str, Any] = {"size": size, "workerTemplate": template("worker")}
    if leader:
        lwt["leaderTemplate"] = template("leader")
    return LeaderWorkerSet.from_dict(
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": f"uid-{name}",
                "labels": {"kueue.x-k8s.io/queue-name": "lq"},
            },
            "spec": {"replicas": replicas, "leaderWorkerTemplate": lwt},
        }
    )


def pod(lws_name: str, group: int, worker: int, *, gated: bool = True, gpus: int = 1) -> Pod:
    name = f"{lws_name}-{group}" if worker == 0 else f"{lws_name}-{group}-{worker}"
    return Pod.from_dict(
        {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": f"uid-{name}",
                "labels": {
                    "kueue.x-k8s.io/queue-name": "lq",
                    "leaderworkerset.sigs.k8s.io/name": lws_name,
                    "leaderworkerset.sigs.k8s.io/group-index": str(group),
                    "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
                },
                "annotations": {PARENT: lws.FRAMEWORK},
            },
            "spec": {
                "schedulingGates": [{"name": GATE}] if gated else None,
                "containers": [
                    {"name": "c", "image": "x", "resources": {"requests": {GPU: str(gpus)}}}
                ],
            },
            "status": {"phase": "Pending" if gated else "Running"},
        }
    )


def _setup(obj: LeaderWorkerSet, *, gpus: int) -> tuple[JobController, FakePods]:
    fake = FakePods()
    ctl = controller_for(LeaderWorkerSetIntegration(fake), fake, gpus=gpus)
    ctl.cache.leaderworkersets[f"ns/{obj.name}"] = obj
    return ctl, fake


def _add(ctl: JobController, *pods: Pod) -> None:
    for p in pods:
        key = lws.pod_group_key(p)
        assert key is not None
        ctl.cache.set_group_pod(key, p, table=ctl.cache.lws_pods)


def _sync(ctl: JobController, fake: FakePods) -> None:
    for wl in fake.workloads.values():
        ctl.cache.set_workload(wl)


async def _round(ctl: JobController, fake: FakePods) -> None:
    """Every group reconciled, one scheduling cycle, every group reconciled again."""
    keys = ctl.kind.keys(ctl.cache)
    for key in keys:
        await ctl.reconcile(key)
        _sync(ctl, fake)
    await Scheduler(cache=ctl.cache, store=fake, emit=fake.emit).run_once()
    _sync(ctl, fake)
    for key in keys:
        await ctl.reconcile(key)
        _sync(ctl, fake)


def _group_pods(name: str, group: int, size: int = 4) -> list[Pod]:
    return [pod(name, group, w) for w in range(size)]


@pytest.mark.parametrize(
    ("leader", "expected"),
    [
        pytest.param(True, [("leader", 1), ("worker", 3)], id="leader-template"),
        pytest.param(False, [("main", 4)], id="workers-only"),
    ],
)
def test_a_groups_pod_sets_come_from_the_lws_spec(
    leader: bool, expected: list[tuple[str, int]]
) -> None:
    sets = lws.pod_sets(leaderworkerset(leader=leader))
    assert [(s.name, s.count) for s in sets] == expected
    for s in sets:
        labels = (s.template.metadata.labels if s.template.metadata else None) or {}
        assert "leaderworkerset.sigs.k8s.io/worker-index" not in labels
        assert labels["role"] in ("leader", "worker")


def test_a_groups_workload_has_kueues_name_owner_and_annotations() -> None:
    obj = leaderworkerset()
    group = lws.group_of(obj, 1, {})
    wl = lws.build_workload(group, {}, {})
    assert wl.name == jf.workload_name(
        "serve-1", "uid-serve", kind="LeaderWorkerSet", group="leaderworkerset.x-k8s.io"
    )
    assert wl.name.startswith("leaderworkerset-serve-1-")
    (ref,) = wl.metadata.owner_references or ()
    assert (ref.api_version, ref.kind, ref.name, ref.uid) == (
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        "serve",
        "uid-serve",
    )
    assert not ref.controller
    ann = wl.metadata.annotations or {}
    assert ann["kueue.x-k8s.io/component-workload-index"] == "1"
    assert ann["kueue.x-k8s.io/is-group-workload"] == "true"
    assert (wl.metadata.labels or {})["kueue.x-k8s.io/job-uid"] == "uid-serve"
    assert wl.spec.queue_name == "lq"
    assert lws.workload_group_key(wl) == "ns/serve-1"
    assert lws.owns(group, wl)
    assert not lws.owns(lws.group_of(obj, 0, {}), wl)


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        pytest.param("ns/serve-0", ("ns/serve", 0), id="group"),
        pytest.param("ns/my-lws-12", ("ns/my-lws", 12), id="dashed-name"),
        pytest.param("ns/serve", None, id="no-index"),
        pytest.param("serve-1", None, id="no-namespace"),
    ],
)
def test_group_keys_split_into_the_lws_and_the_index(
    key: str, expected: tuple[str, int] | None
) -> None:
    assert lws.split_key(key) == expected


def test_only_pods_of_a_managed_lws_with_a_group_index_belong_to_a_group() -> None:
    assert lws.pod_group_key(pod("serve", 3, 2)) == "ns/serve-3"
    plain = pod("serve", 3, 2).model_copy(update={"metadata": pod("serve", 3, 2).metadata})
    meta = plain.metadata.model_copy(update={"annotations": {}})
    assert lws.pod_group_key(plain.model_copy(update={"metadata": meta})) is None


async def test_groups_queue_before_their_pods_exist_and_only_what_fits_is_admitted() -> None:
    ctl, fake = _setup(leaderworkerset(replicas=2, size=4), gpus=4)
    await _round(ctl, fake)
    assert len(fake.workloads) == 2
    admitted = [w for w in fake.workloads.values() if wls.is_admitted(w)]
    pending = [w for w in fake.workloads.values() if not wls.has_quota(w)]
    assert len(admitted) == 1
    assert len(pending) == 1
    assert fake.ungated == []  # no pod exists yet
    assert [e for e in fake.events if e[1] == "Started"] == []  # nothing to start yet


async def test_an_admitted_group_ungates_all_its_pods_and_the_other_keeps_them_gated() -> None:
    ctl, fake = _setup(leaderworkerset(replicas=2, size=4), gpus=4)
    await _round(ctl, fake)
    _add(ctl, *_group_pods("serve", 0), *_group_pods("serve", 1))
    await _round(ctl, fake)
    (admitted,) = [w for w in fake.workloads.values() if wls.is_admitted(w)]
    index = int((admitted.metadata.annotations or {})["kueue.x-k8s.io/component-workload-index"])
    ungated = sorted({k for k, _ in fake.ungated})  # the fake leaves them gated in the cache
    assert ungated == sorted(f"ns/{p.name}" for p in _group_pods("serve", index))
    for _, plan in fake.ungated:
        assert GATE not in plan.scheduling_gates
        assert plan.labels["kueue.x-k8s.io/pod-group-name"] == admitted.name
        assert plan.labels["kueue.x-k8s.io/podset"] in ("leader", "worker")
        assert plan.annotations["kueue.x-k8s.io/pod-group-total-count"] == "4"
    roles = sorted({k: p.labels["kueue.x-k8s.io/podset"] for k, p in fake.ungated}.values())
    assert roles == ["leader", "worker", "worker", "worker"]


async def test_an_evicted_group_has_its_running_pods_deleted() -> None:
    ctl, fake = _setup(leaderworkerset(replicas=1, size=2), gpus=4)
    await _round(ctl, fake)
    (wl,) = fake.workloads.values()
    _add(ctl, pod("serve", 0, 0, gated=False), pod("serve", 0, 1, gated=False))
    fake.workloads[wls.wl_key(wl)] = wl.model_copy(
        update={"spec": wl.spec.model_copy(update={"active": False})}
    )
    _sync(ctl, fake)
    await Scheduler(cache=ctl.cache, store=fake, emit=fake.emit).run_once()
    _sync(ctl, fake)
    await ctl.reconcile("ns/serve-0")
    assert sorted(fake.deleted) == ["ns/serve-0", "ns/serve-0-1"]


async def test_a_recreated_gated_pod_of_a_running_admitted_group_is_ungated() -> None:
    ctl, fake = _setup(leaderworkerset(replicas=1, size=2), gpus=4)
    await _round(ctl, fake)
    _add(ctl, pod("serve", 0, 0, gated=False), pod("serve", 0, 1))
    await ctl.reconcile("ns/serve-0")
    assert [k for k, _ in fake.ungated] == ["ns/serve-0-1"]
    assert fake.deleted == []


async def test_a_group_scaled_away_loses_its_workload() -> None:
    ctl, fake = _setup(leaderworkerset(replicas=2, size=1), gpus=4)
    await _round(ctl, fake)
    assert len(fake.workloads) == 2
    ctl.cache.leaderworkersets["ns/serve"] = leaderworkerset(replicas=1, size=1)
    keys = lws.reconcile_keys(
        ctl.cache.leaderworkersets["ns/serve"], list(ctl.cache.workloads.values())
    )
    assert keys == ["ns/serve-0", "ns/serve-1"]
    await ctl.reconcile("ns/serve-1")
    assert [lws.workload_group_key(w) for w in fake.workloads.values()] == ["ns/serve-0"]
    ctl.cache.leaderworkersets["ns/serve"] = leaderworkerset(replicas=2, size=1)
    await ctl.reconcile("ns/serve-1")  # scaled up again: a fresh Workload
    assert len(fake.workloads) == 2


def test_the_webhook_defaults_mark_both_templates_once() -> None:
    bare = leaderworkerset()
    lwt = bare.spec.leader_worker_template
    unmarked = [
        t.model_copy(update={"metadata": None}) for t in (lwt.leader_template, lwt.worker_template)
    ]
    assert unmarked[0] is not None
    obj = bare.model_copy(
        update={
            "spec": bare.spec.model_copy(
                update={
                    "leader_worker_template": lwt.model_copy(
                        update={"leader_template": unmarked[0], "worker_template": unmarked[1]}
                    )
                }
            )
        }
    )
    patch = lws.template_defaults(obj)
    for field_name in ("leaderTemplate", "workerTemplate"):
        meta = patch["spec"]["leaderWorkerTemplate"][field_name]["metadata"]  # type: ignore[index]
        assert meta["labels"] == {"kueue.x-k8s.io/queue-name": "lq"}
        assert meta["annotations"][PARENT] == lws.FRAMEWORK
    marked = obj.model_validate(_merge(obj.to_dict(), patch))
    assert lws.template_defaults(marked) == {}


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in patch.items():
        out[k] = _merge(out.get(k) or {}, v) if isinstance(v, dict) else v
    return out
