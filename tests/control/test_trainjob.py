"""The TrainJob integration on fakes: pod sets composed from the runtime's JobSet template,
the Workload named and owned as Kueue does, the admission appended as pod spec overrides at
start and cut back at stop, a missing runtime named, and the TrainJob's JobSet left to it."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from atoll.api.jobset import JobSet, ReplicatedJobStatus
from atoll.api.resourceflavor import ResourceFlavor
from atoll.api.trainjob import ClusterTrainingRuntime, TrainingRuntime, TrainJob
from atoll.api.workload import Admission, PodSetAssignment, Workload
from atoll.control import jobframework as jf
from atoll.control import trainjob as tj
from atoll.control.integrations import TrainJobIntegration, enabled
from atoll.state import workloads as wls
from tests.control.builders import GPU, cache_with_queue, controller_for, preempted
from tests.control.fakes import FakeOwners


def _job(
    name: str, *, parallelism: int = 1, replicas: int = 1, step: str | None = None, gpus: int = 0
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "node", "image": "x"}
    if gpus:
        container["resources"] = {"requests": {GPU: str(gpus)}}
    template: dict[str, Any] = {
        "spec": {"parallelism": parallelism, "template": {"spec": {"containers": [container]}}}
    }
    if step:
        template["metadata"] = {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": step}}
    return {"name": name, "replicas": replicas, "template": template}


def runtime_spec(num_nodes: int | None = 1) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {
            "spec": {
                "replicatedJobs": [
                    _job("dataset-initializer", step="dataset-initializer"),
                    _job("node", step="trainer", gpus=1),
                    _job("helpers", replicas=2, parallelism=3),
                ]
            }
        }
    }
    if num_nodes is not None:
        spec["mlPolicy"] = {"numNodes": num_nodes}
    return spec


def cluster_runtime(name: str = "torch") -> ClusterTrainingRuntime:
    return ClusterTrainingRuntime.from_dict(
        {"metadata": {"name": name}, "spec": runtime_spec(num_nodes=3)}
    )


def trainjob(
    name: str = "llm",
    *,
    num_nodes: int | None = 2,
    gpus: int | None = 8,
    runtime: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    overrides: list[dict[str, Any]] | None = None,
) -> TrainJob:
    trainer: dict[str, Any] = {}
    if num_nodes is not None:
        trainer["numNodes"] = num_nodes
    if gpus is not None:
        trainer["resourcesPerNode"] = {"requests": {GPU: str(gpus)}}
    return TrainJob.from_dict(
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": f"uid-{name}",
                "labels": {"kueue.x-k8s.io/queue-name": "lq"},
                "annotations": annotations or {},
            },
            "spec": {
                "suspend": True,
                "runtimeRef": runtime or {"name": "torch"},
                "trainer": trainer,
                "podSpecOverrides": overrides or [],
            },
        }
    )


def test_pod_sets_follow_the_runtimes_replicated_jobs() -> None:
    runtime = cluster_runtime().spec
    init, node, helpers = tj.pod_sets(trainjob(num_nodes=2, gpus=8), runtime)
    assert [(p.name, p.count) for p in (init, node, helpers)] == [
        ("dataset-initializer", 1),
        ("node", 2),  # spec.trainer.numNodes
        ("helpers", 6),  # replicas × parallelism
    ]
    (container,) = node.template.spec.containers
    assert container.resources is not None
    assert str((container.resources.requests or {})[GPU]) == "8"  # resourcesPerNode wins
    # Without numNodes, the runtime's mlPolicy.numNodes; without resources, the runtime's.
    _, node, _ = tj.pod_sets(trainjob(num_nodes=None, gpus=None), runtime)
    assert node.count == 3
    assert str((node.template.spec.containers[0].resources.requests or {})[GPU]) == "1"  # type: ignore[union-attr]


def flavor_pool_a(node_labels: dict[str, str]) -> ResourceFlavor:
    return ResourceFlavor.from_dict(
        {"metadata": {"name": "pool-a"}, "spec": {"nodeLabels": node_labels}}
    )


def admitted_to_pool_a(wl: Workload) -> Workload:
    """`wl` admitted whole to ClusterQueue `cq`, every pod set on flavor `pool-a`."""
    admission = Admission(
        cluster_queue="cq",
        pod_set_assignments=tuple(
            PodSetAssignment(name=ps.name, flavors={GPU: "pool-a"}, count=ps.count)
            for ps in wl.spec.pod_sets
        ),
    )
    return wl.model_copy(update={"status": wl.status.model_copy(update={"admission": admission})})


SPOT = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}


def test_the_trainjobs_own_overrides_change_the_pod_sets_they_target() -> None:
    overrides = [
        {
            "targetJobs": [{"name": "node"}, {"name": "helpers"}],
            "nodeSelector": {"zone": "a"},
            "tolerations": [SPOT],
            "schedulingGates": [{"name": "mine"}],
            "containers": [{"name": "node", "volumeMounts": [{"name": "d", "mountPath": "/d"}]}],
        },
        {"targetJobs": [{"name": "helpers"}], "nodeSelector": {"zone": "b", "disk": "ssd"}},
    ]
    init, node, helpers = tj.pod_sets(trainjob(overrides=overrides), cluster_runtime().spec)
    assert init.template.spec.node_selector is None  # not a target
    assert node.template.spec.node_selector == {"zone": "a"}
    assert [t.to_dict() for t in node.template.spec.tolerations or ()] == [SPOT]
    assert [g.name for g in node.template.spec.scheduling_gates or ()] == ["mine"]
    mounts = node.template.spec.to_dict()["containers"][0]["volumeMounts"]
    assert mounts == [{"name": "d", "mountPath": "/d"}]
    assert str((node.template.spec.containers[0].resources.requests or {})[GPU]) == "8"  # type: ignore[union-attr]
    # later overrides win key by key, in order
    assert helpers.template.spec.node_selector == {"zone": "b", "disk": "ssd"}


def test_the_admissions_own_overrides_are_not_read_back_into_the_pod_sets() -> None:
    users = [{"targetJobs": [{"name": "node"}], "nodeSelector": {"zone": "a"}}]
    ours = [{"targetJobs": [{"name": "node"}], "nodeSelector": {"pool": "a"}}]
    started = trainjob(
        overrides=[*users, *ours], annotations={"kueue.x-k8s.io/trainjob-override-idx": "1"}
    )
    runtime = cluster_runtime().spec
    _, node, _ = tj.pod_sets(started, runtime)
    assert node.template.spec.node_selector == {"zone": "a"}
    wl = tj.build_workload(trainjob(overrides=users), runtime, {}, {})
    assert tj.workload_mismatch(started, runtime, wl) is None


async def test_start_keeps_the_users_node_selector_and_tolerations_beside_the_flavors() -> None:
    fake = FakeOwners()
    cache = cache_with_queue()
    cache.cluster_training_runtimes["torch"] = cluster_runtime()
    integration = TrainJobIntegration(fake, cache)
    users = [
        {"targetJobs": [{"name": "node"}], "nodeSelector": {"zone": "a"}, "tolerations": [SPOT]}
    ]
    obj = trainjob(overrides=users)
    wl = admitted_to_pool_a(integration.compose(obj, cache))
    pool = flavor_pool_a({"pool": "a"})
    await integration.start(obj, wl, {"pool-a": pool})
    ((_, _, overrides),) = fake.trainjob_writes
    node = next(o for o in overrides if o["targetJobs"] == [{"name": "node"}])
    # the admission's override replaces the tolerations list: the user's must stay in it
    assert node["nodeSelector"] == {"zone": "a", "pool": "a"}
    assert node["tolerations"] == [SPOT]
    # a flavor that contradicts the user's node selector cannot start it
    other = flavor_pool_a({"zone": "b"})
    with pytest.raises(jf.StartConflictError, match="zone"):
        await integration.start(obj, wl, {"pool-a": other})


def test_the_workload_is_named_and_owned_as_kueue_does() -> None:
    wl = tj.build_workload(trainjob(), cluster_runtime().spec, {}, {})
    assert wl.name == jf.workload_name(
        "llm", "uid-llm", kind="TrainJob", group="trainer.kubeflow.org"
    )
    assert wl.name.startswith("trainjob-llm-")
    (owner,) = wl.metadata.owner_references or ()
    assert (owner.api_version, owner.kind, owner.controller) == (
        "trainer.kubeflow.org/v1alpha1",
        "TrainJob",
        True,
    )
    assert wl.spec.queue_name == "lq"


def test_a_missing_runtime_names_spec_runtime_ref() -> None:
    with pytest.raises(jf.ComposeError, match=r"spec\.runtimeRef: ClusterTrainingRuntime 'torch'"):
        tj.build_workload(trainjob(), None, {}, {})
    namespaced = trainjob(runtime={"name": "mine", "kind": "TrainingRuntime"})
    assert tj.runtime_key(namespaced) == ("TrainingRuntime", "ns/mine")


def test_the_runtime_is_found_in_the_cache_by_kind() -> None:
    cache = cache_with_queue()
    integration = TrainJobIntegration(FakeOwners(), cache)
    with pytest.raises(jf.ComposeError, match="waits for it"):
        integration.compose(trainjob(), cache)
    cache.cluster_training_runtimes["torch"] = cluster_runtime()
    assert integration.compose(trainjob(), cache).spec.pod_sets[1].count == 2
    cache.training_runtimes["ns/mine"] = TrainingRuntime.from_dict(
        {"metadata": {"name": "mine", "namespace": "ns"}, "spec": runtime_spec(num_nodes=4)}
    )
    mine = trainjob(num_nodes=None, runtime={"name": "mine", "kind": "TrainingRuntime"})
    assert integration.compose(mine, cache).spec.pod_sets[1].count == 4


def test_reclaimable_pods_need_the_runtime() -> None:
    """Without its runtime atoll cannot size the TrainJob's Jobs: it reports nothing (None,
    the Workload's reclaimable pods stay as they are); with it, the JobSet rule."""
    cache = cache_with_queue()
    integration = TrainJobIntegration(FakeOwners(), cache)
    done = trainjob()
    done = done.model_copy(
        update={
            "status": done.status.model_copy(
                update={"jobs_status": (ReplicatedJobStatus(name="node", succeeded=1),)}
            )
        }
    )
    assert integration.reclaimable(done, cache) is None
    cache.cluster_training_runtimes["torch"] = cluster_runtime()
    got = integration.reclaimable(done, cache) or ()
    assert [(str(p.name), p.count) for p in got] == [("node", 2)]


def test_a_changed_node_count_no_longer_matches_its_workload() -> None:
    runtime = cluster_runtime().spec
    wl = tj.build_workload(trainjob(num_nodes=2), runtime, {}, {})
    assert tj.workload_mismatch(trainjob(num_nodes=2), runtime, wl) is None
    assert tj.workload_mismatch(trainjob(num_nodes=4), runtime, wl) == (
        "replicated job node has 4 pods, its pod set 2"
    )


def test_start_appends_one_override_per_pod_set_and_stop_cuts_them() -> None:
    users = [{"targetJobs": [{"name": "helpers"}], "nodeSelector": {"mine": "yes"}}]
    added = [{"targetJobs": [{"name": "node"}], "nodeSelector": {"pool": "a"}}]
    merged, index, recorded = tj.started_overrides(users, None, added)
    assert (merged, index, recorded) == ([*users, *added], 1, None)
    assert tj.stopped_overrides(merged, index) == users
    # A start after a start not cut (a stale index) replaces the admission's overrides.
    again, index, _ = tj.started_overrides(merged, 1, added)
    assert (again, index) == ([*users, *added], 1)
    assert tj.stopped_overrides(users, None) == users


def _targeted(overrides: list[dict[str, Any]]) -> list[str]:
    return [t["name"] for o in overrides for t in o["targetJobs"]]


def test_a_job_the_user_targets_is_named_by_one_override_only() -> None:
    # Trainer v2.0 refuses a job in the targetJobs of two overrides: the user's override of
    # `node` gives `node` up to the admission's, which carries the user's fields for it.
    users = [
        {
            "targetJobs": [{"name": "node"}, {"name": "helpers"}],
            "nodeSelector": {"zone": "a"},
            "tolerations": [SPOT],
            "serviceAccountName": "trainer",
            "schedulingGates": [{"name": "mine"}],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
        {"targetJobs": [{"name": "node"}], "nodeSelector": {"disk": "ssd"}},
    ]
    added = [
        {
            "targetJobs": [{"name": "node"}],
            "nodeSelector": {"zone": "a", "disk": "ssd", "pool": "a"},
            "tolerations": [SPOT],
            "schedulingGates": [{"name": "kueue.x-k8s.io/topology"}],
        }
    ]
    merged, index, recorded = tj.started_overrides(users, None, added)
    assert sorted(_targeted(merged)) == ["helpers", "node"]  # each once
    assert recorded == users
    assert index == 1
    assert merged[0] == {**users[0], "targetJobs": [{"name": "helpers"}]}
    ours = merged[1]
    assert ours["nodeSelector"] == {"zone": "a", "disk": "ssd", "pool": "a"}
    assert ours["serviceAccountName"] == "trainer"
    assert ours["volumes"] == [{"name": "data", "emptyDir": {}}]
    assert [g["name"] for g in ours["schedulingGates"]] == ["mine", "kueue.x-k8s.io/topology"]
    # stop puts the user's list back as it was; a second start reads the recorded list
    assert tj.stopped_overrides(merged, index, recorded) == users
    assert tj.started_overrides(merged, index, added, recorded) == (merged, index, recorded)
    # the pod sets of a started TrainJob read the user's overrides as recorded
    started = trainjob(
        overrides=merged,
        annotations={
            "kueue.x-k8s.io/trainjob-override-idx": str(index),
            "atoll.dev/trainjob-user-overrides": json.dumps(recorded),
        },
    )
    _, node, helpers = tj.pod_sets(started, cluster_runtime().spec)
    assert node.template.spec.node_selector == {"zone": "a", "disk": "ssd"}
    assert helpers.template.spec.node_selector == {"zone": "a"}


async def test_start_carries_each_pod_sets_flavor_and_stop_is_written() -> None:
    fake = FakeOwners()
    cache = cache_with_queue()
    cache.cluster_training_runtimes["torch"] = cluster_runtime()
    integration = TrainJobIntegration(fake, cache)
    obj = trainjob()
    wl = admitted_to_pool_a(integration.compose(obj, cache))
    pool = flavor_pool_a({"pool": "a"})
    await integration.start(obj, wl, {"pool-a": pool})
    ((key, what, overrides),) = fake.trainjob_writes
    assert (key, what) == ("ns/llm", "start")
    assert [o["targetJobs"] for o in overrides] == [
        [{"name": "dataset-initializer"}],
        [{"name": "node"}],
        [{"name": "helpers"}],
    ]
    assert all(o["nodeSelector"] == {"pool": "a"} for o in overrides)
    await integration.stop(obj, wl)
    assert fake.trainjob_writes[-1] == ("ns/llm", "stop", ())
    admitted = trainjob(annotations={"kueue.x-k8s.io/trainjob-override-idx": "0"})
    assert integration.carries_admission(admitted)
    assert not integration.carries_admission(obj)


async def test_an_evicted_trainjob_still_carrying_its_overrides_is_restored_once_idle() -> None:
    # Suspended, but its overrides were not cut (Trainer refused while its jobs were active).
    fake = FakeOwners()
    integration = TrainJobIntegration(fake)
    ctl = controller_for(integration, fake, gpus=16)  # type: ignore[arg-type]
    ctl.cache.cluster_training_runtimes["torch"] = cluster_runtime()
    started = trainjob(annotations={"kueue.x-k8s.io/trainjob-override-idx": "0"})
    wl = admitted_to_pool_a(integration.compose(started, ctl.cache))
    now = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    conditions = wls.with_condition(
        (), wls.QUOTA_RESERVED, status=True, reason="QuotaReserved", message="", now=now
    )
    conditions = wls.with_condition(
        conditions, wls.ADMITTED, status=True, reason="Admitted", message="", now=now
    )
    wl = preempted(wl.model_copy(update={"status": wls.status_with(wl, conditions=conditions)}))
    raw = wl.to_dict()
    raw["metadata"] |= {"creationTimestamp": "2026-12-01T00:00:00Z", "resourceVersion": "1"}
    wl = Workload.from_dict(raw)
    fake.workloads[wls.wl_key(wl)] = wl
    ctl.cache.set_workload(wl)
    busy = started.model_copy(
        update={
            "status": started.status.model_copy(
                update={"jobs_status": (ReplicatedJobStatus(name="node", active=1),)}
            )
        }
    )
    ctl.cache.trainjobs["ns/llm"] = busy
    assert await ctl.reconcile("ns/llm") == 1.0  # its jobs still run: it waits for them
    assert fake.trainjob_writes == []
    ctl.cache.trainjobs["ns/llm"] = started
    await ctl.reconcile("ns/llm")
    assert fake.trainjob_writes[0] == ("ns/llm", "stop", ())


async def test_a_trainjob_without_its_runtime_waits_with_a_warning() -> None:
    fake = FakeOwners()
    integration = TrainJobIntegration(fake)
    ctl = controller_for(integration, fake, gpus=16)  # type: ignore[arg-type]
    ctl.cache.trainjobs["ns/llm"] = trainjob()
    await ctl.reconcile("ns/llm")
    assert not fake.workloads
    ((_, reason, message),) = fake.events
    assert reason == "ErrWorkloadCompose"
    assert "spec.runtimeRef" in message


def test_the_jobset_of_a_managed_trainjob_belongs_to_it() -> None:
    fake = FakeOwners()
    owned = JobSet.from_dict(
        {
            "metadata": {
                "name": "llm",
                "namespace": "ns",
                "labels": {"kueue.x-k8s.io/queue-name": "lq"},
                "ownerReferences": [
                    {
                        "apiVersion": "trainer.kubeflow.org/v1alpha1",
                        "kind": "TrainJob",
                        "name": "llm",
                        "uid": "u",
                        "controller": True,
                    }
                ],
            }
        }
    )
    both = enabled(("jobset.x-k8s.io/jobset", "trainer.kubeflow.org/trainjob"), fake)
    assert [i.framework for i in both] == [
        "jobset.x-k8s.io/jobset",
        "trainer.kubeflow.org/trainjob",
    ]
    assert both[0].owned_elsewhere(owned)
    assert not enabled(("jobset.x-k8s.io/jobset",), fake)[0].owned_elsewhere(owned)


def test_succeeded_jobs_of_its_jobset_make_their_pods_reclaimable() -> None:
    """Kueue's reclaimable pods for TrainJobs, by its JobSet's rule: the initializer's one
    Job succeeded gives back its pod, one of the two helper Jobs its three; the trainer's
    Job (numNodes 2 pods in one Job) none until it succeeds, then both."""
    runtime = cluster_runtime().spec
    job = trainjob(num_nodes=2)

    def with_status(**succeeded: int) -> TrainJob:
        statuses = tuple(ReplicatedJobStatus(name=n, succeeded=c) for n, c in succeeded.items())
        return job.model_copy(
            update={"status": job.status.model_copy(update={"jobs_status": statuses})}
        )

    assert tj.reclaimable_pods(job, runtime) == ()  # no status yet
    got = tj.reclaimable_pods(with_status(helpers=1, **{"dataset-initializer": 1}), runtime)
    assert [(str(p.name), p.count) for p in got] == [("dataset-initializer", 1), ("helpers", 3)]
    got = tj.reclaimable_pods(with_status(node=1, helpers=3), runtime)
    assert [(str(p.name), p.count) for p in got] == [("node", 2)]  # 3 helpers > 2 replicas


def _made_jobset(owner_uid: str, **succeeded_ready: tuple[int, int]) -> JobSet:
    """The JobSet Trainer makes for `trainjob("llm", num_nodes=2)` on `cluster_runtime`:
    the trainer step one Job of 2 pods; (succeeded, ready) Jobs per replicated job."""
    return JobSet.from_dict(
        {
            "metadata": {
                "name": "llm",
                "namespace": "ns",
                "ownerReferences": [
                    {
                        "apiVersion": "trainer.kubeflow.org/v1alpha1",
                        "kind": "TrainJob",
                        "name": "llm",
                        "uid": owner_uid,
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "replicatedJobs": [
                    _job("dataset-initializer"),
                    _job("node", parallelism=2),
                    _job("helpers", replicas=2, parallelism=3),
                ]
            },
            "status": {
                "replicatedJobsStatus": [
                    {"name": n, "succeeded": s, "ready": r, "active": r}
                    for n, (s, r) in succeeded_ready.items()
                ]
            },
        }
    )


def test_trainer_v2_0s_jobset_is_read_for_ready_active_and_reclaimable_pods() -> None:
    """Trainer v2.0 leaves the TrainJob's `status.jobsStatus` empty: its JobSet's status is
    read instead, as Kueue does: the JobSet rules of PodsReady (every Job ready or
    succeeded), active Jobs and reclaimable pods; a JobSet of the same name another object
    controls is not its."""
    cache = cache_with_queue()
    cache.cluster_training_runtimes["torch"] = cluster_runtime()
    integration = TrainJobIntegration(FakeOwners(), cache)
    job = trainjob(num_nodes=2)
    wl = integration.compose(job, cache)
    assert not integration.ready(job, wl)
    assert integration.active_pods(job) == 0
    assert integration.reclaimable(job, cache) == ()

    cache.trainjob_jobsets["ns/llm"] = _made_jobset(
        "uid-llm", **{"dataset-initializer": (1, 0)}, node=(0, 1), helpers=(0, 2)
    )
    assert integration.ready(job, wl)  # 1 succeeded + 1 + 2 ready of 4 Jobs
    assert integration.active_pods(job) == 3
    got = integration.reclaimable(job, cache) or ()
    assert [(str(p.name), p.count) for p in got] == [("dataset-initializer", 1)]

    cache.trainjob_jobsets["ns/llm"] = _made_jobset(
        "uid-llm", **{"dataset-initializer": (1, 0)}, node=(0, 1), helpers=(0, 1)
    )
    assert not integration.ready(job, wl)  # a helper Job not ready yet

    cache.trainjob_jobsets["ns/llm"] = _made_jobset("another", node=(1, 0))
    assert tj.child_jobset(job, cache.trainjob_jobsets) is None
    assert integration.reclaimable(job, cache) == ()  # the TrainJob's own status: none


def test_a_later_trainers_jobs_status_is_read_when_its_jobset_is_not_known() -> None:
    """A later Trainer (v2.2) reports its JobSet's Jobs in `status.jobsStatus`: without the JobSet,
    PodsReady is Kueue's count over them, every Job of the runtime's replicated jobs (the
    trainer step one Job) ready or succeeded; without the runtime, not ready."""
    cache = cache_with_queue()
    integration = TrainJobIntegration(FakeOwners(), cache)
    job = trainjob(num_nodes=2)

    def with_status(**succeeded_ready: tuple[int, int]) -> TrainJob:
        statuses = tuple(
            ReplicatedJobStatus(name=n, succeeded=s, ready=r)
            for n, (s, r) in succeeded_ready.items()
        )
        return job.model_copy(
            update={"status": job.status.model_copy(update={"jobs_status": statuses})}
        )

    all_up = with_status(**{"dataset-initializer": (1, 0)}, node=(0, 1), helpers=(0, 2))
    cache.cluster_training_runtimes["torch"] = cluster_runtime()
    wl = integration.compose(job, cache)
    assert integration.ready(all_up, wl)
    one_short = with_status(**{"dataset-initializer": (1, 0)}, node=(0, 1), helpers=(0, 1))
    assert not integration.ready(one_short, wl)
    del cache.cluster_training_runtimes["torch"]
    assert not integration.ready(all_up, wl)  # no runtime: its Jobs cannot be counted
